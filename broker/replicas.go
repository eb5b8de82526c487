package broker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/cluster/meta"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// A partition's data directory belongs to one member of its group: the
// replicaMarker file in it names that member's server id (replicaID; a
// directory without one belongs to the node's initial-placement member).
// When the node opens the partition as another member, because it was
// moved away and given the partition back, the old copy is set aside as
// DIR@OLD-ID (names never hold "@") and the new member starts empty: the
// old copy's Raft state knows a configuration the group has left behind,
// and two such copies could elect each other over a shorter log.
//
// A copy set aside is deleted once the running member's configuration
// shows the group has removed the old member (removeRetiredCopies): until
// then the old copy may hold acknowledged entries a majority counts on.
const replicaMarker = "replica"

// damagedMarker marks a copy found damaged while it served (a read failed
// its checksums): it is never opened again, and its member is renewed
// (damagedCopy).
const damagedMarker = "damaged"

// errStaleMember is claimPartitionDir's answer to a member older than a
// copy on disk: the catalog this node reads is behind (it is replaying
// the metadata log), and the placement it asks for is history.
var errStaleMember = errors.New("broker: a newer member's copy is on disk")

// claimPartitionDir makes dir the data directory of member self, setting
// aside a copy that belongs to an older member. A copy of a newer member,
// here or set aside, means self is history: errStaleMember, nothing
// touched.
func (n *Node) claimPartitionDir(dir, self string, listing *asideListing) error {
	for _, d := range listing.of(dir) {
		if meta.MemberIndex(strings.TrimPrefix(d, dir+"@")) > meta.MemberIndex(self) {
			return fmt.Errorf("%w: %s, asked for %s", errStaleMember, d, self)
		}
	}
	owner, err := dirOwner(dir, n.cfg.NodeID)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case owner == self:
		return nil
	case meta.MemberIndex(owner) > meta.MemberIndex(self):
		return fmt.Errorf("%w: %s belongs to %s, asked for %s", errStaleMember, dir, owner, self)
	default:
		// Each member id names one placement, so no copy of owner can
		// have been set aside before.
		aside := dir + "@" + owner
		if _, err := os.Stat(aside); err == nil {
			return fmt.Errorf("broker: %s holds a copy of member %s, and so does %s", dir, owner, aside)
		}
		if err := os.Rename(dir, aside); err != nil {
			return fmt.Errorf("broker: setting aside the copy of member %s: %w", owner, err)
		}
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return err
		}
		n.logger.Info("partition given back: the old copy is set aside, the new member starts empty", "dir", dir, "old", owner, "new", self)
	}
	// The new copy is made under a name no partition has (names never
	// hold "@"), marked, then renamed into place: a crash leaves either
	// no copy or a marked one.
	tmp := dir + "@new"
	if err := n.removeCopy(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(tmp, replicaMarker), []byte(self+"\n")); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dir))
}

// syncDir makes a directory's entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// dirOwner returns the member a partition directory belongs to.
func dirOwner(dir, node string) (string, error) {
	if _, err := os.Stat(dir); err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(dir, replicaMarker))
	if errors.Is(err, os.ErrNotExist) {
		return node, nil
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// writeFileSync writes a small file and syncs it and its directory.
func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// copiesSetAside returns the copies set aside in a fabric's directory
// (LEAF@MEMBER), by leaf, as paths; none when it cannot be read.
func copiesSetAside(parent string) map[string][]string {
	entries, _ := os.ReadDir(parent)
	out := map[string][]string{}
	for _, e := range entries {
		if leaf, _, ok := strings.Cut(e.Name(), "@"); ok {
			out[leaf] = append(out[leaf], filepath.Join(parent, e.Name()))
		}
	}
	return out
}

// asideListing lists the copies set aside in each parent directory once
// for many partitions looked at together (opened, or swept for copies to
// delete): each partition's own look read the
// whole directory, and a node restarting with a thousand partitions of a
// fabric spent a sixth of its CPU listing it again for each. Safe for
// concurrent use; a nil listing reads the directory at every call.
type asideListing struct {
	mu       sync.Mutex
	byParent map[string]map[string][]string // parent → leaf → copies set aside
}

// of returns the copies of dir set aside (dir@MEMBER).
func (l *asideListing) of(dir string) []string {
	parent, leaf := filepath.Split(dir)
	if l == nil {
		return copiesSetAside(parent)[leaf]
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	byLeaf, ok := l.byParent[parent]
	if !ok {
		if l.byParent == nil {
			l.byParent = map[string]map[string][]string{}
		}
		byLeaf = copiesSetAside(parent)
		l.byParent[parent] = byLeaf
	}
	return byLeaf[leaf]
}

// removeRetiredCopies deletes the copies set aside by claimPartitionDir
// whose member the group has removed, as the committed configuration of
// this node's running member of the group says.
func (n *Node) removeRetiredCopies() {
	n.mu.Lock()
	parts := make([]*localPartition, 0, len(n.partitions))
	for _, lp := range n.partitions {
		parts = append(parts, lp)
	}
	n.mu.Unlock()
	// Each parent directory is read once per pass, not once per
	// partition: a node holds hundreds of partitions of a fabric.
	listing := new(asideListing)
	for _, lp := range parts {
		dir := lp.dir
		aside := listing.of(dir)
		if len(aside) == 0 {
			continue
		}
		// Only a committed configuration: a removal in flight may still
		// fail, and the group would then count the deleted copy.
		st := lp.group.ConfigStatus()
		if !st.Known {
			continue
		}
		ids := st.Committed.IDs()
		if !slices.Contains(ids, lp.replica) {
			continue // not a member yet: the configuration is not the group's
		}
		for _, d := range aside {
			old := strings.TrimPrefix(d, dir+"@")
			if slices.Contains(ids, old) {
				continue
			}
			if err := n.removeCopy(d); err != nil {
				n.logger.Warn("removing a retired copy", "dir", d, "err", err)
				continue
			}
			n.logger.Info("retired copy removed: the group has removed its member", "partition", lp.Name(), "member", old)
		}
	}
}

// renewReplica places a new member on the node of member, whose copy of
// partition is damaged, as the metadata leader (meta.Service.Renew), for a
// node that asks over the client port (transport.RenewReplica, which nodes
// of older versions send): from is the connection's address.
func (n *Node) renewReplica(partition, member string, from net.Addr) error {
	if _, err := geofabric.ParsePartition(partition); err != nil {
		return wire.Errorf(transport.CodeInvalidName, "%v", err)
	}
	ctx, cancel := context.WithTimeout(n.ctx, applyTimeout)
	defer cancel()
	if err := n.control.Renew(ctx, partition, member, from); err != nil {
		return n.metaError(err)
	}
	return nil
}

// askRenewal asks the metadata leader, in the background, to renew this
// node's member of partition: its copy is damaged. One request per
// partition at a time; reconcile asks again while the member is the same.
func (n *Node) askRenewal(partition, member string, cause error) {
	n.mu.Lock()
	if n.closed || n.renewing[partition] {
		n.mu.Unlock()
		return
	}
	n.renewing[partition] = true
	n.wg.Add(1)
	n.mu.Unlock()
	n.logger.Error("partition copy is damaged; asking for a new member with an empty copy", "partition", partition, "member", member, "err", cause)
	go func() {
		defer n.wg.Done()
		defer func() {
			n.mu.Lock()
			delete(n.renewing, partition)
			n.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(n.ctx, applyTimeout)
		defer cancel()
		if err := n.control.AskRenewal(ctx, partition, member); err != nil {
			n.logger.Warn("asking for a new member failed; will ask again", "partition", partition, "err", err)
		}
	}()
}

// removeMovedAwayCopies looks after the copies of partitions this node no
// longer holds. Once their group has removed the member they belong to,
// as the partition's leader tells from its committed configuration (one
// batched call per leading node, meta.Service.LeaderViews), they are
// deleted. Until then they run retired (retirePartition): a node that
// restarts opens them again, since the group may need them for its
// majority, and so does a node that cannot learn whether they are still
// needed.
func (n *Node) removeMovedAwayCopies() {
	if !n.catalogCurrent() {
		return
	}
	// The sweep stops after sweepBudget and goes on at the next round, so
	// reconcile (which runs on the same goroutine) is not held up for
	// long.
	ctx, cancel := context.WithTimeout(n.ctx, sweepBudget)
	defer cancel()
	copies := n.movedAwayCopies()
	names := make([]string, 0, len(copies))
	for _, c := range copies {
		names = append(names, c.pn.String())
	}
	leaders := n.control.LeaderViews(ctx, names)
	for _, c := range copies {
		if ctx.Err() != nil {
			return
		}
		v, told := leaders[c.pn.String()]
		switch {
		case told && len(v.Members) > 0 && !slices.Contains(v.Members, c.owner):
			if c.running != nil {
				n.mu.Lock()
				delete(n.retired, c.pn.String())
				n.mu.Unlock()
				n.closePartition(c.running, false)
			}
			if err := n.removeCopy(c.dir); err != nil {
				n.logger.Warn("removing a moved-away copy", "dir", c.dir, "err", err)
				continue
			}
			n.logger.Info("moved-away copy removed: its group has removed its member", "partition", c.pn.String(), "member", c.owner)
		case c.running == nil:
			// Still a member, or nobody can tell: the group may count it.
			lp, err := n.openPartition(c.pn.String(), c.owner, nil, nil, true, nil, false)
			if err != nil {
				n.logger.Warn("cannot open a moved-away copy its group may still count", "partition", c.pn.String(), "member", c.owner, "err", err)
				continue
			}
			if !n.keep(n.retired, lp) {
				return
			}
			n.logger.Info("moved-away copy opened retired: its group may still count it", "partition", c.pn.String(), "member", c.owner)
		}
	}
}

// movedAwayCopy is a copy on disk of a partition the catalog no longer
// places on this node.
type movedAwayCopy struct {
	dir     string
	pn      geofabric.Partition
	owner   string          // the member it belongs to
	running *localPartition // running retired, or nil
}

// movedAwayCopies lists the copies removeMovedAwayCopies looks after, in
// random order (a sweep cut short by its budget does not always skip the
// same ones).
func (n *Node) movedAwayCopies() []movedAwayCopy {
	dirs, _ := filepath.Glob(filepath.Join(n.cfg.DataDir, partitionsDir, "*", "*", "*"))
	rand.Shuffle(len(dirs), func(i, j int) { dirs[i], dirs[j] = dirs[j], dirs[i] })
	var out []movedAwayCopy
	for _, dir := range dirs {
		if strings.Contains(filepath.Base(dir), "@") {
			continue // set aside: removeRetiredCopies
		}
		pn, err := partitionOfDir(n.cfg.DataDir, dir)
		if err != nil {
			continue // not a partition's directory
		}
		if _, ok := n.partition(pn.String()); ok {
			continue
		}
		n.mu.Lock()
		opening := n.renewing[pn.String()]
		running := n.retired[pn.String()]
		halted := n.halted[pn.String()] != nil
		n.mu.Unlock()
		if halted {
			continue // stopped until the node restarts (haltPartition)
		}
		if opening || slices.Contains(n.placedNodes(pn), n.cfg.NodeID) {
			continue // placed here: reconcile opens it (or is renewing it)
		}
		owner, err := dirOwner(dir, n.cfg.NodeID)
		if err != nil {
			continue
		}
		// A stream the catalog does not know may be one it has not
		// replayed yet: its copy stays.
		if _, ok := n.catalog.Stream(pn.Stream.String()); !ok {
			continue
		}
		out = append(out, movedAwayCopy{dir: dir, pn: pn, owner: owner, running: running})
	}
	return out
}

// sweepBudget bounds one round of removeMovedAwayCopies.
const sweepBudget = 3 * time.Second

// placedNodes returns the nodes the catalog places a partition on.
func (n *Node) placedNodes(pn geofabric.Partition) []string {
	s, ok := n.catalog.Stream(pn.Stream.String())
	if !ok || pn.Number() >= len(s.Placement) {
		return nil
	}
	return s.Placement[pn.Number()]
}

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
	"time"

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
func (n *Node) claimPartitionDir(dir, self string) error {
	aside, _ := filepath.Glob(dir + "@*")
	for _, d := range aside {
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
	for _, lp := range parts {
		dir, err := n.partitionDir(lp.name)
		if err != nil {
			n.logger.Error("partition without a directory", "partition", lp.name, "err", err)
			continue
		}
		aside, _ := filepath.Glob(dir + "@*")
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
			n.logger.Info("retired copy removed: the group has removed its member", "partition", lp.name, "member", old)
		}
	}
}

// renewReplica places a new member on the node of member, whose copy of
// partition is damaged (see transport.RenewReplica). Only the metadata
// leader does it.
func (n *Node) renewReplica(partition, member string, from net.Addr) error {
	pn, err := geofabric.ParsePartition(partition)
	if err != nil {
		return wireError(transport.CodeInvalidName, "%v", err)
	}
	if !n.meta.IsLeader() {
		return n.metaNotLeader()
	}
	// Only the member's own node may ask: a renewal throws its copy
	// away. (Token auth, when it comes, must cover node requests too.)
	if from != nil && !n.fromNode(from, meta.NodeOf(member)) {
		return wireError(transport.CodeNotAllowed, "only node %s may renew its member %s", meta.NodeOf(member), member)
	}
	if s, ok := n.catalog.Stream(pn.Stream.String()); ok {
		if err := n.settled(s, pn.Number(), []string{meta.NodeOf(member)}); err != nil {
			return wireError(transport.CodeServiceNotReady, "partition %s is still changing members (%v); ask again", partition, err)
		}
	}
	data, err := meta.Encode(meta.RenewReplica{Stream: pn.Stream.String(), Partition: pn.Number(), Member: member})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(n.ctx, applyTimeout)
	defer cancel()
	res, err := n.meta.Apply(ctx, data)
	if err != nil {
		return wireError(transport.CodeServiceNotReady, "metadata: %v", err)
	}
	if r, _ := res.(meta.Result); !r.Done {
		return wireError(transport.CodeNotAllowed, "%s is not a member of partition %s", member, partition)
	}
	n.logger.Warn("a replica's copy is damaged: its node starts a new member from an empty copy", "partition", partition, "member", member)
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
		err := n.renewReplica(partition, member, nil)
		var werr *transport.Error
		if errors.As(err, &werr) && werr.Code == transport.CodeNotLeader && werr.LeaderHint != "" {
			err = n.requestRenewal(werr.LeaderHint, partition, member)
		}
		if err != nil {
			n.logger.Warn("asking for a new member failed; will ask again", "partition", partition, "err", err)
		}
	}()
}

// requestRenewal sends RenewReplica to the metadata leader at addr.
func (n *Node) requestRenewal(addr, partition, member string) error {
	_, err := n.ask(addr, &transport.RenewReplica{RequestID: 1, Partition: partition, Member: member})
	return err
}

// ask sends one request to the node whose client address is addr and
// returns its answer (an answered *transport.Error as the error), within
// applyTimeout.
func (n *Node) ask(addr string, req transport.Command) (transport.Command, error) {
	ctx, cancel := context.WithTimeout(n.ctx, applyTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// The connection closes when ctx ends: no read outlives it (the
	// node's Close waits for the goroutines that ask).
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	conn, err := transport.NewConn(nc, transport.DefaultConfig())
	if err != nil {
		nc.Close()
		return nil, err
	}
	defer conn.Close()
	if _, err := transport.Handshake(ctx, conn, &transport.Connect{ClientName: "fabriqd " + n.cfg.NodeID}); err != nil {
		return nil, err
	}
	if err := conn.Send(ctx, req); err != nil {
		return nil, err
	}
	cmd, err := conn.Receive()
	if err != nil {
		return nil, err
	}
	if e, ok := cmd.(*transport.Error); ok {
		return nil, e
	}
	return cmd, nil
}

// removeMovedAwayCopies looks after the copies of partitions this node no
// longer holds. Once their group has removed the member they belong to,
// as the partition's leader answers (a describe of one partition is
// answered by its leader only), they are deleted. Until then they run
// retired (retirePartition): a node that restarts opens them again, since
// the group may need them for its majority, and so does a node that cannot
// learn whether they are still needed.
func (n *Node) removeMovedAwayCopies() {
	if !n.catalogCurrent() {
		return
	}
	// Leaders that cannot be reached cost a timeout each: the sweep
	// stops after sweepBudget and goes on at the next round, so reconcile
	// (which runs on the same goroutine) is not held up for long.
	deadline := time.Now().Add(sweepBudget)
	dirs, _ := filepath.Glob(filepath.Join(n.cfg.DataDir, partitionsDir, "*", "*", "*"))
	rand.Shuffle(len(dirs), func(i, j int) { dirs[i], dirs[j] = dirs[j], dirs[i] })
	for _, dir := range dirs {
		if time.Now().After(deadline) {
			return
		}
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
		s, ok := n.catalog.Stream(pn.Stream.String())
		if !ok {
			continue
		}
		switch members, err := n.committedMembers(s, pn); {
		case err == nil && !slices.Contains(members, owner):
			if running != nil {
				n.mu.Lock()
				delete(n.retired, pn.String())
				n.mu.Unlock()
				n.closePartition(running, false)
			}
			if err := n.removeCopy(dir); err != nil {
				n.logger.Warn("removing a moved-away copy", "dir", dir, "err", err)
				continue
			}
			n.logger.Info("moved-away copy removed: its group has removed its member", "partition", pn.String(), "member", owner)
		case running == nil:
			// Still a member, or nobody can tell: the group may count it.
			lp, err := n.openPartition(pn.String(), owner, nil, nil, true)
			if err != nil {
				n.logger.Warn("cannot open a moved-away copy its group may still count", "partition", pn.String(), "member", owner, "err", err)
				continue
			}
			if !n.keep(n.retired, lp) {
				return
			}
			n.logger.Info("moved-away copy opened retired: its group may still count it", "partition", pn.String(), "member", owner)
		}
	}
}

// committedMembers asks the leader of a partition for the members of its
// committed configuration.
func (n *Node) committedMembers(s meta.Stream, pn geofabric.Partition) ([]string, error) {
	leader, _ := n.leaderOf(pn.String())
	info, known := n.catalog.Node(leader)
	if leader == "" || !known {
		return nil, errors.New("its leader is not known")
	}
	idx := int32(pn.Number())
	ans, err := n.ask(info.ClientAddr, &transport.DescribeStream{RequestID: 1, Stream: s.Name, Partition: &idx})
	if err != nil {
		return nil, fmt.Errorf("asking its leader %s: %w", leader, err)
	}
	res, _ := ans.(*transport.DescribeStreamResult)
	if res == nil || len(res.Info.Partitions) != 1 || len(res.Info.Partitions[0].Members) == 0 {
		return nil, fmt.Errorf("its leader %s told no committed configuration", leader)
	}
	return res.Info.Partitions[0].Members, nil
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

// fromNode reports whether a connection from addr comes from node id: from
// the host of one of the node's advertised addresses.
func (n *Node) fromNode(addr net.Addr, id string) bool {
	info, ok := n.catalog.Node(id)
	if !ok {
		return false
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	for _, a := range []string{info.ClientAddr, info.RaftAddr} {
		if h, _, err := net.SplitHostPort(a); err == nil && h == host {
			return true
		}
	}
	return false
}

// settled reports whether partition i of stream s has finished its last
// membership change: its leader's committed Raft configuration holds
// exactly the members the catalog places, and so does the committed
// configuration of every placed member on a node not in except (the
// nodes whose member is about to be replaced). A move or a renewal waits
// for it, so a group changes one member at a time, and only once every
// member has caught up with the change before: a member that has not
// (one added a moment ago) rejects the votes of members its old
// configuration does not know (hashicorp/raft does), and replacing a
// second member then can leave a majority that never elects a leader.
func (n *Node) settled(s meta.Stream, i int, except []string) error {
	st, err := geofabric.ParseStream(s.Name)
	if err != nil || i >= s.Partitions {
		return fmt.Errorf("no partition %d of %s", i, s.Name)
	}
	pn := st.Partition(i, s.Partitions)
	name := pn.String()
	var members []string
	if lp, ok := n.partition(name); ok && lp.group.IsLeader() {
		if members = n.committedConfig(lp); members == nil {
			return errors.New("its leader's configuration is not committed yet")
		}
	} else {
		members, err = n.committedMembers(s, pn)
		if err != nil {
			return err
		}
	}
	want := s.Members(i)
	slices.Sort(members)
	slices.Sort(want)
	if !slices.Equal(members, want) {
		return fmt.Errorf("its members are %v, the catalog places %v", members, want)
	}
	for _, node := range s.Placement[i] {
		if slices.Contains(except, node) {
			continue
		}
		view, err := n.membersSeenBy(s, pn, node)
		if err != nil {
			return fmt.Errorf("asking node %s: %w", node, err)
		}
		slices.Sort(view)
		if !slices.Equal(view, want) {
			return fmt.Errorf("node %s has not caught up with the group's members (it has %v)", node, view)
		}
	}
	return nil
}

// membersSeenBy returns the members of a partition's Raft configuration as
// the copy on node holds it, when that configuration is committed there
// (empty otherwise, or when the node does not run the partition).
func (n *Node) membersSeenBy(s meta.Stream, pn geofabric.Partition, node string) ([]string, error) {
	if node == n.cfg.NodeID {
		lp, ok := n.partition(pn.String())
		if !ok {
			return nil, nil
		}
		return n.committedConfig(lp), nil
	}
	info, ok := n.catalog.Node(node)
	if !ok {
		return nil, errors.New("not registered")
	}
	// A describe of the whole stream is answered from the node's own view.
	ans, err := n.ask(info.ClientAddr, &transport.DescribeStream{RequestID: 1, Stream: s.Name})
	if err != nil {
		return nil, err
	}
	res, _ := ans.(*transport.DescribeStreamResult)
	if res == nil {
		return nil, errors.New("no describe answer")
	}
	for _, p := range res.Info.Partitions {
		if int(p.Partition) == pn.Number() {
			return p.Members, nil
		}
	}
	return nil, nil
}

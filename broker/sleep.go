package broker

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/cluster"
	"github.com/fabriq-io/fabriq/cluster/meta"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/storage"
	"github.com/fabriq-io/fabriq/transport"
)

// Sleeping partitions (DESIGN.md, "Sleeping partitions"). A partition this
// node leads that has had no proposal for Config.SleepAfter, with no
// producer or consumer attached, is put to sleep on every replica
// (cluster.Group.Sleep): each node closes its copy — Raft group, log,
// state machine — and keeps only its name. A copy asleep wakes when a
// client asks for it here (a lookup, a producer, a consumer), when another
// node asks anything of its group (the mux's SetAsleep), or when the
// catalog changes its replicas; woken for a client, it asks the other
// replicas to wake theirs, and the group elects as after a restart.

// asleepCopy is a partition placed on this node whose copy sleeps.
type asleepCopy struct {
	member  string   // this node's member in the group
	members []string // the catalog's members when it went to sleep
	// waking is set once the copy is being opened again (wakeCopy).
	waking bool
}

// errAsleep is openPartition's answer for a copy that sleeps and is to
// stay closed.
var errAsleep = errors.New("broker: the copy is asleep")

// sleepCheckEvery is how often the node looks for partitions it leads that
// may sleep, at most.
const sleepCheckEvery = 5 * time.Second

// rouseEvery bounds how often a node that holds no copy of a partition
// asks its replicas to wake, for clients looking it up.
const rouseEvery = time.Second

// sleepLoop puts to sleep, now and then, the partitions this node leads
// that have been idle for SleepAfter.
func (n *Node) sleepLoop() {
	defer n.wg.Done()
	t := time.NewTicker(min(sleepCheckEvery, max(n.cfg.SleepAfter/2, 100*time.Millisecond)))
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		n.sleepIdle()
	}
}

// sleepIdle puts to sleep the partitions this node leads that may sleep,
// partitionsAtOnce at a time.
func (n *Node) sleepIdle() {
	n.mu.Lock()
	var idle []*localPartition
	for _, lp := range n.partitions {
		if lp.group.IsLeader() && lp.group.Idle() >= n.cfg.SleepAfter {
			idle = append(idle, lp)
		}
	}
	n.mu.Unlock()
	var g errgroup.Group
	g.SetLimit(partitionsAtOnce)
	for _, lp := range idle {
		g.Go(func() error {
			if n.maySleep(lp) {
				n.sleepCopy(lp)
			}
			return nil
		})
	}
	g.Wait()
}

// maySleep reports whether a partition this node leads may go to sleep: no
// producer or consumer is attached, and its retention has nothing to do
// that time alone would bring while it sleeps (retention runs on open
// copies only). Time matters to a retention time limit once the log has a
// sealed segment (only those are deleted), and to a message TTL once the
// partition holds messages: such a partition stays awake.
func (n *Node) maySleep(lp *localPartition) bool {
	if lp.Attached() || lp.group.Retired() {
		return false
	}
	pn, err := geofabric.ParsePartition(lp.Name())
	if err != nil {
		return false
	}
	s, ok := n.catalog.Stream(pn.Stream.String())
	if !ok {
		return false
	}
	if s.Retention.TimeMs > 0 && slices.ContainsFunc(lp.log.Segments(), func(seg storage.SegmentInfo) bool { return !seg.Active }) {
		return false
	}
	return s.Retention.MessageTTLMs <= 0 || lp.fsm.StartOffset() == lp.fsm.NextOffset()
}

// sleepCopy puts this node's copy of a partition to sleep, if its group
// may sleep now: as its leader, the group's other copies go to sleep too.
func (n *Node) sleepCopy(lp *localPartition) {
	name := lp.Name()
	n.mu.Lock()
	if n.closed || n.partitions[name] != lp {
		n.mu.Unlock()
		return
	}
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(n.ctx, applyTimeout)
	defer cancel()
	if err := lp.group.Sleep(ctx); err != nil {
		if !errors.Is(err, cluster.ErrCannotSleep) && !errors.Is(err, cluster.ErrClosed) {
			n.logger.Warn("a partition could not go to sleep", "partition", name, "err", err)
		}
		n.logger.Debug("partition stays awake", "partition", name, "why", err)
		return
	}
	members := n.replicasOf(name)
	n.mu.Lock()
	if n.partitions[name] == lp {
		delete(n.partitions, name)
		n.asleep[name] = &asleepCopy{member: lp.replica, members: members}
	}
	n.mu.Unlock()
	n.closePartition(lp, false)
	n.logger.Debug("partition asleep", "partition", name)
}

// offerSleep is the partitions' cluster.GroupConfig.OnSleep: the leader
// put the group to sleep, and this node's copy follows it there.
func (n *Node) offerSleep(name string) {
	n.mu.Lock()
	lp := n.partitions[name]
	if n.closed || lp == nil {
		n.mu.Unlock()
		return
	}
	n.wg.Add(1)
	n.mu.Unlock()
	go func() {
		defer n.wg.Done()
		// A leader puts a third of a node's partitions to sleep at once
		// at times: their copies here close partitionsAtOnce at a time,
		// as they open.
		select {
		case n.closing <- struct{}{}:
		case <-n.stop:
			return
		}
		defer func() { <-n.closing }()
		n.sleepCopy(lp)
	}()
}

// wakeCopy opens an asleep copy of a partition again, in the background;
// with rouse, it then asks the group's other members to wake theirs. It
// reports whether the copy was asleep here (it may have been waking
// already).
func (n *Node) wakeCopy(name string, rouse bool) bool {
	n.mu.Lock()
	a := n.asleep[name]
	if n.closed || a == nil || a.waking {
		n.mu.Unlock()
		return a != nil
	}
	a.waking = true
	n.wg.Add(1)
	n.mu.Unlock()
	go func() {
		defer n.wg.Done()
		n.openAsleep(name, a, rouse)
	}()
	return true
}

// openAsleep opens an asleep copy (wakeCopy).
func (n *Node) openAsleep(name string, a *asleepCopy, rouse bool) {
	lp, err := n.openPartition(name, a.member, nil, nil, false, nil, false)
	if err != nil {
		n.mu.Lock()
		delete(n.asleep, name) // reconcile opens it again
		n.mu.Unlock()
		n.openFailed(name, a.member, err)
		n.requestReconcile()
		return
	}
	// Forgotten asleep only once it runs: in between, reconcile would
	// find it neither, and open it a second time.
	kept := n.keep(n.partitions, lp)
	n.mu.Lock()
	delete(n.asleep, name)
	if kept {
		close(n.changed)
		n.changed = make(chan struct{})
	}
	n.mu.Unlock()
	if !kept {
		return
	}
	n.logger.Info("partition woken", "partition", name, "for_a_client", rouse)
	if rouse {
		ctx, cancel := context.WithTimeout(n.ctx, applyTimeout)
		defer cancel()
		if err := lp.group.Rouse(ctx); err != nil {
			n.logger.Debug("cannot ask the other replicas to wake", "partition", name, "err", err)
		}
	}
}

// asleepLocked sorts the partitions reconcile would open: those whose copy
// sleeps stay closed, unless the catalog changed their replicas (the
// group's leader must reconcile them: the copy wakes, and asks the others
// to). The copies asleep that the catalog no longer places here are
// forgotten: a deleted stream's data goes, and a copy moved away is left
// to the sweep of such copies (removeMovedAwayCopies), which opens it
// retired until its group has removed its member. The caller holds n.mu.
func (n *Node) asleepLocked(open []string, placed map[string]meta.Assignment) (keep, wake, gone []string) {
	for _, name := range open {
		a := n.asleep[name]
		switch {
		case a == nil:
			keep = append(keep, name)
		case a.waking:
		case placed[name].Member != a.member:
			delete(n.asleep, name) // a new member: its own copy opens
			keep = append(keep, name)
		case !meta.SameMembers(placed[name].Members, a.members):
			wake = append(wake, name)
		}
	}
	for name, a := range n.asleep {
		if _, ok := placed[name]; ok || a.waking {
			continue
		}
		delete(n.asleep, name)
		if !n.known(name) {
			gone = append(gone, name)
		}
	}
	return keep, wake, gone
}

// asleepHere reports whether this node's copy of a partition sleeps (or is
// waking).
func (n *Node) asleepHere(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.asleep[name] != nil
}

// stayAsleep reports whether the copy in dir went to sleep and has not
// been opened since (cluster.Asleep).
func stayAsleep(dir string) bool { return cluster.Asleep(filepath.Join(dir, "raft")) }

// rousers remembers when this node last asked a partition's replicas to
// wake (rouseReplicas).
type rousers struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// rouseReplicas asks the nodes of a partition's replicas to wake their
// copies, at most once every rouseEvery: a client looks up, on a node
// that holds no copy, a partition whose leader it cannot name (asleep, or
// its last leader's node gone).
func (n *Node) rouseReplicas(name string) {
	now := time.Now()
	n.rouse.mu.Lock()
	if now.Sub(n.rouse.last[name]) < rouseEvery {
		n.rouse.mu.Unlock()
		return
	}
	if n.rouse.last == nil || len(n.rouse.last) > 4096 {
		n.rouse.last = make(map[string]time.Time)
	}
	n.rouse.last[name] = now
	n.rouse.mu.Unlock()
	var addrs []string
	for _, id := range n.replicasOf(name) {
		if info, ok := n.catalog.Node(meta.NodeOf(id)); ok && meta.NodeOf(id) != n.cfg.NodeID {
			addrs = append(addrs, info.RaftAddr)
		}
	}
	n.mux.Rouse(name, addrs...)
}

// asleepError is the answer for a partition whose copy here sleeps: it is
// waking, and the client asks again.
func asleepError(name string) error {
	return wire.Errorf(transport.CodeServiceNotReady, "partition %s was asleep; it is waking", name)
}

package cluster

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// sleepOwner runs a group's members as a node's owner would: it puts a
// member to sleep when its leader asks (unless keepAwake), and opens an
// asleep member again when another node asks for it.
type sleepOwner struct {
	t         *testing.T
	node      *testNode
	keepAwake bool
	// noWake: the owner declines to wake its members when asked.
	noWake bool
	// timings are the Raft timings of the members it opens
	// (heartbeatTimings when nil).
	timings func(*GroupConfig)

	mu      sync.Mutex
	members map[string]*testGroup
	asleep  map[string]bool
	wg      sync.WaitGroup
}

func newSleepOwner(t *testing.T, node *testNode) *sleepOwner {
	o := &sleepOwner{t: t, node: node, members: make(map[string]*testGroup), asleep: make(map[string]bool)}
	node.mux.SetAsleep(o.wake)
	t.Cleanup(o.wg.Wait)
	return o
}

func (o *sleepOwner) config(c *GroupConfig) {
	o.mu.Lock()
	timings, keepAwake := o.timings, o.keepAwake
	o.mu.Unlock()
	if timings != nil {
		timings(c)
	} else {
		heartbeatTimings(c)
	}
	group := c.ID
	if !keepAwake {
		c.OnSleep = func() {
			o.wg.Add(1)
			go func() {
				defer o.wg.Done()
				o.sleep(group)
			}()
		}
	}
}

// sleep puts the member of group to sleep, if it may.
func (o *sleepOwner) sleep(group string) {
	o.mu.Lock()
	g := o.members[group]
	o.mu.Unlock()
	if g == nil {
		return
	}
	if err := g.Sleep(ctxTimeout(o.t, 5*time.Second)); err != nil {
		o.t.Logf("%s: %s cannot sleep: %v", o.node.id, group, err)
		return
	}
	o.mu.Lock()
	o.asleep[group] = true
	o.mu.Unlock()
}

// wake opens an asleep member again (Mux.SetAsleep).
func (o *sleepOwner) wake(group string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.asleep[group] || o.noWake {
		return false
	}
	delete(o.asleep, group)
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		o.open(group)
	}()
	return true
}

// open opens the member of group on the owner's node, with a new FSM that
// replays the group's entries.
func (o *sleepOwner) open(group string) *testGroup {
	cfg := GroupConfig{
		ID:     group,
		NodeID: o.node.id,
		Dir:    filepath.Join(o.node.dir, group),
		FSM:    newTestFSM(filepath.Join(o.node.dir, group+"-stage"), true),
		Mux:    o.node.mux,
		Expand: expandDir,
		Logger: testLogger().With("node", o.node.id),
	}
	fastTimings(&cfg)
	o.config(&cfg)
	g, err := OpenGroup(cfg)
	if err != nil {
		o.t.Errorf("open %s on %s: %v", group, o.node.id, err)
		return nil
	}
	o.t.Cleanup(func() { g.Close() })
	tg := &testGroup{Group: g, node: o.node, fsm: cfg.FSM.(*testFSM)}
	o.mu.Lock()
	o.members[group] = tg
	o.mu.Unlock()
	return tg
}

func (o *sleepOwner) member(group string) *testGroup {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.members[group]
}

func (o *sleepOwner) isAsleep(group string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.asleep[group]
}

// startSleepyGroup opens group on every owner's node and bootstraps it.
func startSleepyGroup(t *testing.T, owners []*sleepOwner, group string) []*testGroup {
	t.Helper()
	var gs []*testGroup
	var servers []Server
	for _, o := range owners {
		gs = append(gs, o.open(group))
		servers = append(servers, Server{ID: o.node.id, Address: o.node.addr(), Voter: true})
	}
	for _, g := range gs {
		if err := g.Bootstrap(ctxTimeout(t, 5*time.Second), servers); err != nil {
			t.Fatalf("bootstrap %s on %s: %v", group, g.node.id, err)
		}
	}
	return gs
}

func membersOf(owners []*sleepOwner, group string) []*testGroup {
	var gs []*testGroup
	for _, o := range owners {
		gs = append(gs, o.member(group))
	}
	return gs
}

// putToSleep waits until the leader of gs may sleep, and puts it to sleep.
func putToSleep(t *testing.T, owners []*sleepOwner, gs []*testGroup) {
	t.Helper()
	leader := waitLeader(t, gs)
	var last error
	eventually(t, 30*time.Second, "the leader to sleep", func() bool {
		last = leader.Sleep(ctxTimeout(t, 5*time.Second))
		return last == nil
	})
	for _, o := range owners {
		if o.node == leader.node {
			o.mu.Lock()
			o.asleep[leader.ID()] = true
			o.mu.Unlock()
		}
	}
}

// sleepyGroup starts three nodes whose groups go quiet after 300 ms, with
// quiet followers given followerTimeout, an owner on each, and group on
// them with entries applied, quiet.
func sleepyGroup(t *testing.T, followerTimeout time.Duration, group string, entries ...string) ([]*testNode, []*sleepOwner, []*testGroup) {
	t.Helper()
	nodes := quietNodes(t, 300*time.Millisecond, followerTimeout)
	var owners []*sleepOwner
	for _, n := range nodes {
		owners = append(owners, newSleepOwner(t, n))
	}
	gs := startSleepyGroup(t, owners, group)
	applyAll(t, gs, entries...)
	waitQuiet(t, nodes, 1)
	return nodes, owners, gs
}

// A quiet group sleeps on every member: each closes, and keeps a mark
// that says so. Asked for on one node, it wakes on all, elects, keeps
// every entry and commits new ones; the marks are gone.
func TestQuietGroupSleepsAndWakes(t *testing.T) {
	const group = "sleepy"
	nodes, owners, gs := sleepyGroup(t, 10*time.Second, group, "a", "b", "c")

	putToSleep(t, owners, gs)
	eventually(t, 10*time.Second, "every member asleep", func() bool {
		for _, o := range owners {
			if !o.isAsleep(group) || !Asleep(filepath.Join(o.node.dir, group)) {
				return false
			}
		}
		return true
	})
	for _, g := range gs {
		if _, err := g.Apply(ctxTimeout(t, time.Second), []byte("x")); !errors.Is(err, ErrClosed) {
			t.Fatalf("apply on an asleep member of %s: %v, want ErrClosed", g.node.id, err)
		}
	}

	// A client's request wakes the group's first member (elect.go), which
	// rouses the others: woken alone, it would wait for another member's
	// notice.
	var ids []raft.ServerID
	for _, n := range nodes {
		ids = append(ids, raft.ServerID(n.id))
	}
	var last *sleepOwner
	for _, o := range owners {
		if raft.ServerID(o.node.id) == first(group, ids) {
			last = o
		}
		// Timeouts long enough that the group elects through the
		// first election's notices only, not on a member's timeout.
		o.mu.Lock()
		o.timings = slowTimings(time.Minute)
		o.mu.Unlock()
	}
	last.mu.Lock()
	delete(last.asleep, group)
	last.mu.Unlock()
	woken := last.open(group)
	if err := woken.Rouse(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "every member awake", func() bool {
		for i, o := range owners {
			if o.isAsleep(group) || o.member(group) == gs[i] {
				return false
			}
		}
		return true
	})
	gs = membersOf(owners, group)
	applyAll(t, gs, "d")
	waitEntries(t, gs, []string{"a", "b", "c", "d"})
	for _, o := range owners {
		if Asleep(filepath.Join(o.node.dir, group)) {
			t.Errorf("%s still holds the sleep mark after it woke", o.node.id)
		}
	}
}

// A follower that does not sleep when its leader does (its owner keeps it
// awake) campaigns once its leader's silence outlasts its timeout: its
// vote requests wake the others, and the group elects and commits.
func TestAwakeFollowerWakesItsGroup(t *testing.T) {
	const group = "restless"
	_, owners, gs := sleepyGroup(t, 2*time.Second, group, "a")
	leader := waitLeader(t, gs)
	var awake *sleepOwner
	for _, o := range owners {
		if o.node != leader.node {
			awake = o
			break
		}
	}
	awake.mu.Lock()
	awake.keepAwake = true // its member opened already: drop its callback instead
	awake.mu.Unlock()
	awake.member(group).gate.onSleep.Store(nil)

	putToSleep(t, owners, gs)
	var slept *sleepOwner
	for _, o := range owners {
		if o != awake && o.node != leader.node {
			slept = o
		}
	}
	eventually(t, 10*time.Second, "the other follower asleep", func() bool { return slept.isAsleep(group) })
	eventually(t, 30*time.Second, "the group awake again", func() bool {
		for i, o := range owners {
			if o.isAsleep(group) || o != awake && o.member(group) == gs[i] {
				return false
			}
		}
		return true
	})
	gs = membersOf(owners, group)
	applyAll(t, gs, "b")
	waitEntries(t, gs, []string{"a", "b"})
}

// A member that is not caught up, or not quiet, does not sleep.
func TestGroupSleepsOnlyWhenQuietAndCaughtUp(t *testing.T) {
	nodes := quietNodes(t, time.Hour, 10*time.Second)
	var owners []*sleepOwner
	for _, n := range nodes {
		owners = append(owners, newSleepOwner(t, n))
	}
	const group = "busy"
	gs := startSleepyGroup(t, owners, group)
	applyAll(t, gs, "a")
	leader := waitLeader(t, gs)
	if err := leader.Sleep(ctxTimeout(t, 5*time.Second)); !errors.Is(err, ErrCannotSleep) {
		t.Fatalf("a leader that is not quiet: Sleep = %v, want ErrCannotSleep", err)
	}
	for _, g := range others(gs, leader) {
		if err := g.Sleep(ctxTimeout(t, 5*time.Second)); !errors.Is(err, ErrCannotSleep) {
			t.Fatalf("a follower not asked: Sleep = %v, want ErrCannotSleep", err)
		}
	}
	applyAll(t, gs, "b")
	waitEntries(t, gs, []string{"a", "b"})
	for _, o := range owners {
		if Asleep(filepath.Join(o.node.dir, group)) {
			t.Errorf("%s holds a sleep mark", o.node.id)
		}
	}
}

// A group woken on two members whose first member's node goes a moment
// later — after they told it they had the group open — elects through
// its first election's notices all the same: once their nodes find that
// node gone, they agree on another first member. Timeouts of a minute
// make the notices the only way to elect.
func TestWokenGroupElectsWhenItsFirstMembersNodeGoes(t *testing.T) {
	const group = "orphaned"
	nodes, owners, gs := sleepyGroup(t, 10*time.Second, group, "a")
	putToSleep(t, owners, gs)
	eventually(t, 10*time.Second, "every member asleep", func() bool {
		for _, o := range owners {
			if !o.isAsleep(group) {
				return false
			}
		}
		return true
	})
	var ids []raft.ServerID
	for _, n := range nodes {
		ids = append(ids, raft.ServerID(n.id))
	}
	var firstOwner *sleepOwner
	var rest []*sleepOwner
	for _, o := range owners {
		o.mu.Lock()
		o.timings = slowTimings(time.Minute)
		o.mu.Unlock()
		if raft.ServerID(o.node.id) == first(group, ids) {
			firstOwner = o
		} else {
			rest = append(rest, o)
		}
	}
	// The first member's node stays up but does not wake it: the others
	// tell it they have the group open, and wait.
	firstOwner.mu.Lock()
	firstOwner.noWake = true
	firstOwner.mu.Unlock()
	var woken []*testGroup
	for _, o := range rest {
		o.mu.Lock()
		delete(o.asleep, group)
		o.mu.Unlock()
		woken = append(woken, o.open(group))
	}
	for _, g := range woken {
		if id, _ := g.Leader(); id != "" {
			t.Fatalf("a leader before the first member's node went: %s", id)
		}
	}
	// Now its process goes: its port refuses.
	if err := firstOwner.node.mux.Close(); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, woken)
	applyAll(t, woken, "b")
	waitEntries(t, woken, []string{"a", "b"})
}

package cluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestGroupConfigValidate(t *testing.T) {
	nodes := newTestNodes(t, 1)
	valid := func() GroupConfig {
		return GroupConfig{ID: "g", NodeID: "n", Dir: t.TempDir(), FSM: newTestFSM("", false), Mux: nodes[0].mux}
	}
	tests := []struct {
		name string
		mod  func(*GroupConfig)
		want string // substring of the error; "" for valid
	}{
		{"defaults", func(*GroupConfig) {}, ""},
		{"fast timings", fastTimings, ""},
		{"no id", func(c *GroupConfig) { c.ID = "" }, "bad group id"},
		{"long id", func(c *GroupConfig) { c.ID = strings.Repeat("x", MaxGroupIDLen+1) }, "bad group id"},
		{"no node id", func(c *GroupConfig) { c.NodeID = "" }, "NodeID"},
		{"no dir", func(c *GroupConfig) { c.Dir = "" }, "Dir"},
		{"no fsm", func(c *GroupConfig) { c.FSM = nil }, "FSM"},
		{"no mux", func(c *GroupConfig) { c.Mux = nil }, "Mux"},
		{"bad addr", func(c *GroupConfig) { c.LocalAddr = "nowhere" }, "LocalAddr"},
		{"heartbeat too low", func(c *GroupConfig) { c.HeartbeatTimeout = time.Millisecond }, "HeartbeatTimeout"},
		{"election below heartbeat", func(c *GroupConfig) { c.ElectionTimeout = 100 * time.Millisecond }, "ElectionTimeout"},
		{"lease above heartbeat", func(c *GroupConfig) { c.LeaderLeaseTimeout = 2 * time.Second }, "LeaderLeaseTimeout"},
		{"negative retain", func(c *GroupConfig) { c.SnapshotRetain = -1 }, "SnapshotRetain"},
		{"derived timings follow heartbeat", func(c *GroupConfig) { c.HeartbeatTimeout = 40 * time.Millisecond }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.mod(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate = %v, want an error about %s", err, tt.want)
			}
		})
	}
}

// TestGroupReplicatesAndFailsOver runs a 3-node group over real TCP: it
// elects a leader, replicates to every FSM, answers NotLeader on followers
// with the leader's name, and elects a new leader that serves applies when
// the old one stops.
func TestGroupReplicatesAndFailsOver(t *testing.T) {
	nodes := newTestNodes(t, 3)
	gs := startGroup(t, nodes, "orders-partition-0", nil)
	waitLeader(t, gs)

	watches := make(map[*testGroup]*LeaderWatch)
	for _, g := range gs {
		watches[g] = g.WatchLeader()
		defer watches[g].Stop()
	}

	first := cmds("a", 20)
	applyAll(t, gs, first...)
	waitEntries(t, gs, first)

	// The FSM's response comes back; an error response is the error.
	resp, err := apply(t, gs, "one-more")
	if err != nil || resp != len(first)+1 {
		t.Fatalf("Apply = %v, %v; want %d, nil", resp, err, len(first)+1)
	}
	first = append(first, "one-more")
	if _, err := apply(t, gs, "fail"); !errors.Is(err, errRefused) {
		t.Fatalf("Apply(fail) error = %v, want the FSM's error", err)
	}

	// A follower refuses and names the leader. Leadership may move between
	// looking it up and asking (on a slow disk it does), so ask until both
	// agree.
	eventually(t, 10*time.Second, "a NotLeaderError naming the leader", func() bool {
		leader := waitLeader(t, gs)
		f := others(gs, leader)[0]
		_, err := f.Apply(ctxTimeout(t, 5*time.Second), []byte("x"))
		var nl *NotLeaderError
		if !errors.Is(err, ErrNotLeader) || !errors.As(err, &nl) {
			t.Fatalf("Apply on follower %s: %v, want a NotLeaderError", f.node.id, err)
		}
		if err := f.Barrier(ctxTimeout(t, time.Second)); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("Barrier on follower: %v, want ErrNotLeader", err)
		}
		return nl.LeaderID == leader.node.id && nl.LeaderAddr == leader.node.addr()
	})

	leader := waitLeader(t, gs)
	if err := leader.Barrier(ctxTimeout(t, 5*time.Second)); err != nil && !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Barrier: %v", err)
	}
	servers, err := leader.Servers(ctxTimeout(t, time.Second))
	if err != nil || len(servers) != 3 {
		t.Fatalf("Servers = %v, %v", servers, err)
	}
	if leader.Term() == 0 {
		t.Fatalf("leader term %d", leader.Term())
	}

	// The leader stops: the other two elect one of themselves.
	oldTerm := leader.Term()
	oldWatch := watches[leader]
	if err := leader.Close(); err != nil {
		t.Fatalf("close leader: %v", err)
	}
	if _, err := leader.Apply(context.Background(), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Apply after Close: %v, want ErrClosed", err)
	}
	for range oldWatch.C { // closed by Close
	}
	rest := others(gs, leader)
	next := waitLeader(t, rest)
	if next.Term() <= oldTerm {
		t.Fatalf("new leader's term %d, old %d", next.Term(), oldTerm)
	}
	second := cmds("b", 5)
	applyAll(t, rest, second...)
	waitEntries(t, rest, append(first, second...))

	// The leader's watch ends on its leadership, with its term.
	next = waitLeader(t, rest)
	w := watches[next]
	eventually(t, 5*time.Second, "the new leader's watch", func() bool {
		select {
		case l := <-w.C:
			return l.IsLeader && l.LeaderID == next.node.id && l.Term == next.Term()
		default:
			return false
		}
	})
	id, err := rest[0].WaitForLeader(ctxTimeout(t, 5*time.Second))
	if err != nil || id == "" {
		t.Fatalf("WaitForLeader = %q, %v", id, err)
	}
}

// TestGroupLeadershipTransfer moves leadership and checks that watches see
// it go and come.
func TestGroupLeadershipTransfer(t *testing.T) {
	nodes := newTestNodes(t, 3)
	gs := startGroup(t, nodes, "transfer", nil)
	leader := waitLeader(t, gs)
	w := leader.WatchLeader()
	defer w.Stop()
	if l := <-w.C; !l.IsLeader || l.LeaderID != leader.node.id || l.Term == 0 {
		t.Fatalf("first value on the leader's watch: %+v", l)
	}
	target := others(gs, leader)[0]
	// Raft gives a transfer one election timeout; retry until it lands.
	eventually(t, 10*time.Second, "the transfer", func() bool {
		l := waitLeader(t, gs)
		if l == target {
			return true
		}
		if err := l.TransferLeadershipTo(ctxTimeout(t, 5*time.Second), target.node.id, target.node.addr()); err != nil {
			t.Logf("TransferLeadershipTo: %v", err)
		}
		return false
	})
	eventually(t, 5*time.Second, "the old leader's watch to report the new leader", func() bool {
		select {
		case l := <-w.C:
			return !l.IsLeader && l.LeaderID == target.node.id
		default:
			return false
		}
	})
	w.Stop()
	w.Stop()
	if _, ok := <-w.C; ok {
		t.Fatal("C still open after Stop")
	}
}

// TestGroupsShareMux runs two groups over the same three muxes: each
// replicates only its own entries, and closing one leaves the other alone.
func TestGroupsShareMux(t *testing.T) {
	nodes := newTestNodes(t, 3)
	g1 := startGroup(t, nodes, "g1", nil)
	g2 := startGroup(t, nodes, "g2", nil)
	applyAll(t, g1, cmds("one", 5)...)
	applyAll(t, g2, cmds("two", 7)...)
	waitEntries(t, g1, cmds("one", 5))
	waitEntries(t, g2, cmds("two", 7))

	for _, g := range g1 {
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	}
	applyAll(t, g2, "after")
	waitEntries(t, g2, append(cmds("two", 7), "after"))
}

// TestApplyTimesOutWithoutMajority: with both followers cut off, the
// leader cannot commit; Apply returns ErrTimeout when the context expires,
// before the leader's lease makes it step down.
func TestApplyTimesOutWithoutMajority(t *testing.T) {
	nodes := newTestNodes(t, 3)
	slowLease := func(c *GroupConfig) {
		c.HeartbeatTimeout = 500 * time.Millisecond
		c.ElectionTimeout = 500 * time.Millisecond
		c.LeaderLeaseTimeout = 500 * time.Millisecond
	}
	gs := startGroup(t, nodes, "lonely", slowLease)
	applyAll(t, gs, "before")
	leader := waitLeader(t, gs)
	// Cut the followers off at once: closing their layers drops their
	// connections and the leader's dials reach no group.
	for _, f := range others(gs, leader) {
		f.layer.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := leader.Apply(ctx, []byte("lost"))
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Apply without majority: %v, want ErrTimeout", err)
	}

	// An expired context fails at once, a cancelled one with its own error.
	if _, err := leader.Apply(ctx, []byte("late")); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Apply with an expired context: %v", err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if err := leader.Barrier(cctx); !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("Barrier with a cancelled context: %v", err)
	}
	// The leader steps down once its lease runs out; its pending apply
	// fails and Close does not hang.
	eventually(t, 10*time.Second, "the leader to step down", func() bool { return !leader.IsLeader() })
	f := others(gs, leader)[0]
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WaitForLeader(ctxTimeout(t, time.Second)); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitForLeader on a closed group: %v", err)
	}
}

// TestFollowerCatchesUpBySnapshot: a follower that is down while the
// others snapshot and compact their logs past its position comes back
// through InstallSnapshot, and its FSM restores the leader's stream: the
// state bytes followed by the expanded adopted directory.
func TestFollowerCatchesUpBySnapshot(t *testing.T) {
	nodes := newTestNodes(t, 3)
	small := func(c *GroupConfig) {
		c.SnapshotThreshold = 1 << 20 // only the user snapshots below
		c.TrailingLogs = 4
	}
	gs := startGroup(t, nodes, "catchup", small)
	first := cmds("a", 10)
	applyAll(t, gs, first...)
	waitEntries(t, gs, first)

	lagging := gs[2]
	if err := lagging.Close(); err != nil {
		t.Fatal(err)
	}
	up := gs[:2]
	more := cmds("b", 30)
	applyAll(t, up, more...)
	all := append(slices.Clone(first), more...)
	waitEntries(t, up, all)
	// Both snapshot, so whichever leads has compacted its log.
	var size int64
	for _, g := range up {
		if err := g.Snapshot(ctxTimeout(t, 5*time.Second)); err != nil {
			t.Fatalf("Snapshot on %s: %v", g.node.id, err)
		}
		metas, err := g.snaps.List()
		if err != nil || len(metas) != 1 {
			t.Fatalf("snapshots of %s: %v, %v", g.node.id, metas, err)
		}
		m, err := g.snaps.readMeta(metas[0].ID)
		if err != nil || !m.Adopted || m.DataSize == 0 {
			t.Fatalf("the snapshot of %s should have adopted its directory: %+v, %v", g.node.id, m, err)
		}
		size = m.Size
	}

	// The follower comes back with a fresh FSM on its old directory.
	fsm := newTestFSM(filepath.Join(lagging.node.dir, "catchup-stage"), true)
	back := openTestGroup(t, lagging.node, "catchup", fsm, small)
	eventually(t, 10*time.Second, "the follower to restore a snapshot", func() bool {
		return fsm.restoreCount() > 0
	})
	now := append([]*testGroup{back}, up...)
	tail := cmds("c", 3)
	applyAll(t, now, tail...)
	all = append(all, tail...)
	waitEntries(t, now, all)

	// What the follower received is a plain snapshot: the whole stream.
	fm, err := back.snaps.List()
	if err != nil || len(fm) == 0 {
		t.Fatalf("follower's snapshots: %v, %v", fm, err)
	}
	got, err := back.snaps.readMeta(fm[0].ID)
	if err != nil || got.Adopted || got.Size != size {
		t.Fatalf("follower's snapshot %+v (%v), want a plain one of %d bytes", got, err, size)
	}
}

// TestGroupMembership grows a one-node group with a voter and a
// non-voter, and shrinks it again.
func TestGroupMembership(t *testing.T) {
	nodes := newTestNodes(t, 3)
	gs := startGroup(t, nodes[:1], "members", nil)
	applyAll(t, gs, "solo")
	var joined []*testGroup
	for _, n := range nodes[1:] {
		joined = append(joined, openTestGroup(t, n, "members", newTestFSM(filepath.Join(n.dir, "members-stage"), true), nil))
	}
	leader := waitLeader(t, gs)
	if err := leader.AddVoter(ctxTimeout(t, 5*time.Second), nodes[1].id, nodes[1].addr()); err != nil {
		t.Fatalf("AddVoter: %v", err)
	}
	if err := leader.AddNonvoter(ctxTimeout(t, 5*time.Second), nodes[2].id, nodes[2].addr()); err != nil {
		t.Fatalf("AddNonvoter: %v", err)
	}
	all := append(slices.Clone(gs), joined...)
	applyAll(t, all[:2], "grown")
	waitEntries(t, all, []string{"solo", "grown"})
	servers, err := joined[1].Servers(ctxTimeout(t, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := []Server{
		{ID: nodes[0].id, Address: nodes[0].addr(), Voter: true},
		{ID: nodes[1].id, Address: nodes[1].addr(), Voter: true},
		{ID: nodes[2].id, Address: nodes[2].addr(), Voter: false},
	}
	if !slices.Equal(servers, want) {
		t.Fatalf("Servers = %+v, want %+v", servers, want)
	}
	if err := joined[1].AddVoter(ctxTimeout(t, time.Second), "x", "127.0.0.1:1"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("AddVoter on a non-voter: %v, want ErrNotLeader", err)
	}

	leader = waitLeader(t, all[:2])
	if err := leader.RemoveServer(ctxTimeout(t, 5*time.Second), nodes[2].id); err != nil {
		t.Fatalf("RemoveServer: %v", err)
	}
	eventually(t, 5*time.Second, "the configuration to shrink", func() bool {
		s, err := all[0].Servers(ctxTimeout(t, time.Second))
		return err == nil && len(s) == 2
	})
}

// TestGroupLifecycle: bootstrapping twice is fine, Close is idempotent,
// and a second Group on the same directory fails instead of hanging.
func TestGroupLifecycle(t *testing.T) {
	nodes := newTestNodes(t, 2)
	gs := startGroup(t, nodes[:1], "solo", nil)
	g := gs[0]
	if err := g.Bootstrap(ctxTimeout(t, time.Second), []Server{{ID: g.node.id, Address: g.node.addr(), Voter: true}}); err != nil {
		t.Fatalf("second Bootstrap: %v", err)
	}
	if err := g.Bootstrap(ctxTimeout(t, time.Second), nil); err == nil {
		t.Fatal("Bootstrap without servers succeeded")
	}
	applyAll(t, gs, "x")

	// Same group id on the same mux: refused by the mux.
	cfg := GroupConfig{ID: "solo", NodeID: "other", Dir: t.TempDir(), FSM: newTestFSM("", false), Mux: nodes[0].mux}
	if _, err := OpenGroup(cfg); !errors.Is(err, ErrGroupExists) {
		t.Fatalf("second group on the same mux: %v, want ErrGroupExists", err)
	}
	// Same directory from another node's mux: the store is locked.
	cfg = GroupConfig{ID: "solo", NodeID: g.node.id, Dir: filepath.Join(g.node.dir, "solo"), FSM: newTestFSM("", false), Mux: nodes[1].mux}
	if _, err := OpenGroup(cfg); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second group on the same directory: %v", err)
	}

	// A group that applied nothing has nothing to snapshot.
	idle := openTestGroup(t, nodes[1], "idle", newTestFSM("", false), nil)
	if err := idle.Snapshot(ctxTimeout(t, time.Second)); !errors.Is(err, ErrNothingToSnapshot) {
		t.Fatalf("Snapshot of an idle group: %v, want ErrNothingToSnapshot", err)
	}

	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := g.Snapshot(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Snapshot after Close: %v", err)
	}
	w := g.WatchLeader()
	if _, ok := <-w.C; ok {
		t.Fatal("a watch on a closed group is open")
	}

	// Reopened on its directory, the group keeps its entries and leads
	// again by itself.
	fsm := newTestFSM(filepath.Join(g.node.dir, "solo-stage"), true)
	again := openTestGroup(t, g.node, "solo", fsm, nil)
	if _, err := again.WaitForLeader(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := again.Barrier(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if e := fsm.entries(); !slices.Equal(e, []string{"x"}) {
		t.Fatalf("reopened fsm holds %v", e)
	}
}

// A server at the address of a member the group has not removed (a new
// member there, never added) votes for no one in that member's name: its
// empty log would otherwise elect any candidate. Between nodes of this
// version the mux refuses the connections addressed to the old member;
// to and from nodes that read only headers naming a group (older
// versions), the vote request names the voter and the gate refuses it.
func TestNewMemberDoesNotVote(t *testing.T) {
	for _, tc := range []struct {
		name    string
		legacy  bool
		refused func(g *testGroup) int64
	}{
		{"member header", false, func(g *testGroup) int64 { return g.layer.refused.Load() }},
		{"group header and voter id", true, func(g *testGroup) int64 { return g.gate.refused.Load() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := newTestNodes(t, 2)
			if tc.legacy {
				for _, n := range nodes {
					n.mux.SetProtocols(func(string) int { return ProtocolGroups })
				}
			}
			a := openTestGroup(t, nodes[0], "g", newTestFSM(filepath.Join(nodes[0].dir, "g-stage"), true), nil)
			// node-1's member of the group is "node-1"; the server now
			// at its address is a new one, never added.
			fresh := openTestGroup(t, nodes[1], "g", newTestFSM(filepath.Join(nodes[1].dir, "g-stage"), true), func(c *GroupConfig) {
				c.NodeID = "node-1@7"
			})
			servers := []Server{{ID: nodes[0].id, Address: nodes[0].addr(), Voter: true}, {ID: nodes[1].id, Address: nodes[1].addr(), Voter: true}}
			if err := a.Bootstrap(ctxTimeout(t, 5*time.Second), servers); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, "the new server to refuse votes", func() bool {
				return tc.refused(fresh) >= 3
			})
			if a.IsLeader() {
				t.Fatal("node-0 was elected with the vote of a server outside the group")
			}
		})
	}
}

// A retired member still counts: it replicates and votes, so the group
// keeps its majority and elects a leader with its vote. It never leads:
// two retired members that are a majority of their configuration do not
// elect each other.
func TestRetiredMemberVotesButNeverCampaigns(t *testing.T) {
	nodes := newTestNodes(t, 3)
	gs := startGroup(t, nodes, "g", nil)
	leader := waitLeader(t, gs)
	rest := others(gs, leader)
	retired, keeper := rest[0], rest[1]
	retired.Retire()
	if err := retired.TransferLeadershipTo(ctxTimeout(t, time.Second), keeper.node.id, keeper.node.addr()); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a follower transferred leadership: %v", err)
	}
	// The keeper leaves: the leader and the retired member are the
	// majority, and writes go on.
	if err := keeper.Close(); err != nil {
		t.Fatal(err)
	}
	applyAll(t, []*testGroup{leader, retired}, cmds("a", 5)...)
	waitEntries(t, []*testGroup{leader, retired}, cmds("a", 5))
	if leader.Retired() || !retired.Retired() {
		t.Fatal("Retired reports the wrong members")
	}

	// A leadership transfer to the retired member is refused.
	if err := leader.TransferLeadershipTo(ctxTimeout(t, 5*time.Second), retired.node.id, retired.node.addr()); err == nil {
		t.Fatal("leadership went to a retired member")
	}
	if retired.IsLeader() {
		t.Fatal("the retired member leads")
	}

	// The leader goes too, and comes back: only the retired member can
	// give it the vote it needs, and does.
	nodes2 := []*testNode{leader.node}
	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	back := openTestGroup(t, nodes2[0], "g", newTestFSM(filepath.Join(nodes2[0].dir, "g-stage-2"), true), nil)
	eventually(t, 20*time.Second, "the returning member to win with the retired member's vote", back.IsLeader)

	// It goes again and comes back retired: the two members left are a
	// majority of their configuration, both retired, and neither leads.
	if err := back.Close(); err != nil {
		t.Fatal(err)
	}
	again := openTestGroup(t, nodes2[0], "g", newTestFSM(filepath.Join(nodes2[0].dir, "g-stage-3"), true), func(c *GroupConfig) {
		c.Retired = true
	})
	eventually(t, 20*time.Second, "both retired members to hold back their campaigns", func() bool {
		return retired.gate.campaigns.Load() >= 3 && again.gate.campaigns.Load() >= 3
	})
	if retired.IsLeader() || again.IsLeader() {
		t.Fatal("a retired member was elected")
	}
}

// A member the group added but that has not received anything yet (no
// log, no configuration) votes when asked under its own id: the group
// whose majority needs it elects a leader.
func TestNewMemberVotesAsItself(t *testing.T) {
	nodes := newTestNodes(t, 3)
	gs := startGroup(t, nodes[:2], "g", nil)
	leader := waitLeader(t, gs)
	applyAll(t, gs, "before")
	if err := leader.AddVoter(ctxTimeout(t, 5*time.Second), nodes[2].id, nodes[2].addr()); err != nil {
		t.Fatal(err)
	}
	// Both old members stop before the new one ever ran.
	for _, g := range gs {
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	}
	fresh := openTestGroup(t, nodes[2], "g", newTestFSM(filepath.Join(nodes[2].dir, "g-stage"), true), nil)
	back := openTestGroup(t, nodes[0], "g", newTestFSM(filepath.Join(nodes[0].dir, "g-stage-2"), true), nil)
	eventually(t, 20*time.Second, "a leader elected with the new member's vote", back.IsLeader)
	applyAll(t, []*testGroup{back, fresh}, "after")
	waitEntries(t, []*testGroup{back, fresh}, []string{"before", "after"})
}

// TestConfigStatusReportsOnlyCommitted: a leader cut off from its
// followers appends a removal it cannot commit; every member, the leader
// included, keeps reporting the configuration that is committed, with the
// change pending, and a member that catches up through a snapshot knows
// the configuration the snapshot holds.
func TestConfigStatusReportsOnlyCommitted(t *testing.T) {
	nodes := newTestNodes(t, 3)
	slowLease := func(c *GroupConfig) {
		c.HeartbeatTimeout = 500 * time.Millisecond
		c.ElectionTimeout = 500 * time.Millisecond
		c.LeaderLeaseTimeout = 500 * time.Millisecond
		c.SnapshotThreshold = 1 << 20 // only the user snapshots below
		c.TrailingLogs = 4
	}
	gs := startGroup(t, nodes, "configs", slowLease)
	applyAll(t, gs, "before")
	all := []string{nodes[0].id, nodes[1].id, nodes[2].id}
	for _, g := range gs {
		eventually(t, 5*time.Second, g.node.id+" to know the bootstrap configuration", func() bool {
			st := g.ConfigStatus()
			return st.Known && !st.Pending && slices.Equal(st.Committed.IDs(), all)
		})
	}

	leader := waitLeader(t, gs)
	for _, f := range others(gs, leader) {
		f.layer.Close()
	}
	victim := others(gs, leader)[0].node.id
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := leader.RemoveServer(ctx, victim); !errors.Is(err, ErrTimeout) {
		t.Fatalf("RemoveServer without a majority: %v, want ErrTimeout", err)
	}
	servers, err := leader.Servers(ctxTimeout(t, time.Second))
	if err != nil || len(servers) != 2 {
		t.Fatalf("the leader's latest configuration: %v, %v; want the removal appended", servers, err)
	}
	st := leader.ConfigStatus()
	if !st.Known || !st.Pending || !slices.Equal(st.Committed.IDs(), all) {
		t.Fatalf("ConfigStatus with an uncommitted removal = %+v, want the 3 committed members, pending", st)
	}
}

// TestConfigStatusAfterSnapshotInstall: a member that was down while the
// group changed its members and compacted its log learns the committed
// configuration from the snapshot the leader sends it.
func TestConfigStatusAfterSnapshotInstall(t *testing.T) {
	nodes := newTestNodes(t, 4)
	small := func(c *GroupConfig) {
		c.SnapshotThreshold = 1 << 20
		c.TrailingLogs = 4
	}
	gs := startGroup(t, nodes[:3], "install", small)
	applyAll(t, gs, cmds("a", 5)...)
	lagging := gs[2]
	waitEntries(t, gs, cmds("a", 5))
	if err := lagging.Close(); err != nil {
		t.Fatal(err)
	}
	up := gs[:2]
	extra := openTestGroup(t, nodes[3], "install", newTestFSM(filepath.Join(nodes[3].dir, "install-stage"), true), small)
	leader := waitLeader(t, up)
	if err := leader.AddVoter(ctxTimeout(t, 5*time.Second), nodes[3].id, nodes[3].addr()); err != nil {
		t.Fatalf("AddVoter: %v", err)
	}
	up = append(up, extra)
	applyAll(t, up, cmds("b", 30)...)
	for _, g := range up {
		if err := g.Snapshot(ctxTimeout(t, 5*time.Second)); err != nil {
			t.Fatalf("Snapshot on %s: %v", g.node.id, err)
		}
	}

	fsm := newTestFSM(filepath.Join(lagging.node.dir, "install-stage"), true)
	back := openTestGroup(t, lagging.node, "install", fsm, small)
	eventually(t, 10*time.Second, "the member to restore a snapshot", func() bool { return fsm.restoreCount() > 0 })
	want := []string{nodes[0].id, nodes[1].id, nodes[2].id, nodes[3].id}
	eventually(t, 5*time.Second, "the member to know the committed configuration", func() bool {
		st := back.ConfigStatus()
		return st.Known && !st.Pending && slices.Equal(st.Committed.IDs(), want)
	})
}

// A leader hands its leadership to each voter at most once a term
// (claimTransfer): a second transfer to the same voter is refused with
// ErrTransferTried, the group goes on accepting proposals, and the next
// leader may transfer again.
func TestTransferToEachVoterOnceATerm(t *testing.T) {
	nodes := newTestNodes(t, 3)
	gs := startGroup(t, nodes, "once", nil)
	leader := waitLeader(t, gs)
	target := others(gs, leader)[0]
	id := raft.ServerID(target.node.id)
	if !leader.claimTransfer(id) {
		t.Fatal("the first transfer of the term to a voter was refused")
	}
	err := leader.TransferLeadershipTo(ctxTimeout(t, 5*time.Second), target.node.id, target.node.addr())
	if !errors.Is(err, ErrTransferTried) {
		t.Fatalf("a second transfer to %s in one term: %v, want ErrTransferTried", id, err)
	}
	applyAll(t, gs, "after")
	if err := leader.TransferLeadership(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatalf("a transfer to the voter not tried yet: %v", err)
	}
	next := waitLeader(t, gs)
	if next == leader {
		t.Fatal("the leader kept its leadership after a transfer")
	}
	if !next.claimTransfer(raft.ServerID(leader.node.id)) {
		t.Fatal("a new term's leader could not transfer")
	}
}

// A leadership transfer to a voter whose process is gone is refused at
// once, and the leader goes on taking proposals. hashicorp/raft's own
// transfer would wait for that voter to hold the leader's log, refusing
// every proposal meanwhile, for an election timeout (here 20 s); and
// TransferLeadership picks a voter that can take over instead.
func TestTransferSkipsAGoneVoter(t *testing.T) {
	nodes := quietNodes(t, time.Hour, 5*time.Minute) // awake groups
	gs := startGroup(t, nodes, "gone", slowTimings(20*time.Second))
	leader := waitLeader(t, gs)
	dead, live := others(gs, leader)[0], others(gs, leader)[1]
	if err := dead.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dead.node.mux.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the leader's node finding the dead member's process gone", func() bool {
		return leader.node.mux.Gone(dead.node.addr())
	})
	// An entry the dead member does not hold: a transfer to it would wait
	// for it to catch up.
	if _, err := leader.Apply(ctxTimeout(t, 5*time.Second), []byte("behind")); err != nil {
		t.Fatalf("apply with one member gone: %v", err)
	}
	err := leader.TransferLeadershipTo(ctxTimeout(t, 5*time.Second), dead.node.id, dead.node.addr())
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("transfer to a gone voter: %v, want ErrUnreachable", err)
	}
	if _, err := leader.Apply(ctxTimeout(t, 5*time.Second), []byte("still-leading")); err != nil {
		t.Fatalf("apply after the refused transfer: %v", err)
	}
	if err := leader.TransferLeadership(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatalf("transfer to the live voter: %v", err)
	}
	rest := []*testGroup{leader, live}
	if got := waitLeader(t, rest); got != live {
		t.Fatalf("led by %s after the transfer, want %s", got.node.id, live.node.id)
	}
	waitEntries(t, rest, []string{"behind", "still-leading"})
}

// A hand-over whose preferred voter has not opened its copy of the group
// (its node has just restarted, and opens its groups in the background)
// goes to the next voter: when it returns, that voter leads, and the
// group did not wait for an election.
func TestHandOverPassesOverAVoterWithoutItsCopy(t *testing.T) {
	nodes := quietNodes(t, time.Hour, 5*time.Minute) // awake groups
	gs := startGroup(t, nodes, "handover", slowTimings(20*time.Second))
	leader := waitLeader(t, gs)
	unopened, next := others(gs, leader)[0], others(gs, leader)[1]
	// Every member holds the leader's log, so the transfer sends its
	// TimeoutNow at once rather than waiting for a catch-up that cannot
	// come.
	applyAll(t, gs, "caught-up")
	waitEntries(t, gs, []string{"caught-up"})
	if err := unopened.Close(); err != nil {
		t.Fatal(err)
	}
	if err := leader.HandOver(ctxTimeout(t, 10*time.Second), unopened.node.id); err != nil {
		t.Fatalf("hand-over with the preferred voter's copy closed: %v", err)
	}
	// Election timeouts are 20 s: only the transfer can have made it lead.
	if got := waitLeader(t, []*testGroup{leader, next}); got != next {
		t.Fatalf("led by %s after the hand-over, want %s", got.node.id, next.node.id)
	}
}

// A node whose last heartbeat round failed, with none answered for a
// while, is no transfer target; one answered lately, one whose round is
// only slow to be answered, and one this node sends no rounds to, are.
func TestReachableByRounds(t *testing.T) {
	m := newTestNodes(t, 1)[0].mux
	const addr = "127.0.0.1:1"
	if !m.reachable(addr) {
		t.Fatal("a node without rounds: unreachable")
	}
	// A sender that does not run: its pings, refused, would mark the
	// node gone.
	p := &hbPeer{h: m.hb, addr: addr}
	m.hb.mu.Lock()
	m.hb.peers[addr] = p
	m.hb.mu.Unlock()
	long := time.Now().Add(-2 * transferSilentAfter)
	p.lastOK.Store(long.UnixNano())
	if !m.reachable(addr) {
		t.Fatal("a node whose round is slow to be answered (no failure since its last answer): unreachable")
	}
	p.lastFail.Store(time.Now().UnixNano())
	if m.reachable(addr) {
		t.Fatal("a node whose round failed, none answered for twice transferSilentAfter: reachable")
	}
	p.lastOK.Store(time.Now().UnixNano())
	if !m.reachable(addr) {
		t.Fatal("a node that answered a round just now: unreachable")
	}
	p.lastFail.Store(time.Now().UnixNano())
	if !m.reachable(addr) {
		t.Fatal("a node whose round failed right after one it answered: unreachable")
	}
}

// A vote request whose pooled connection the voter's side closed (its
// group was reopened, as after its node restarted) is asked again on a
// fresh one: it reaches the voter instead of failing, which Raft would
// count as a refused vote.
func TestVoteRequestOutlivesAReopenedVoter(t *testing.T) {
	nodes := newTestNodes(t, 3)
	gs := startGroup(t, nodes, "votes", slowTimings(20*time.Second))
	leader := waitLeader(t, gs)
	asker, voter := others(gs, leader)[0], others(gs, leader)[1]
	ask := func() error {
		req := &raft.RequestVoteRequest{RPCHeader: asker.gate.header(), Term: asker.Term()}
		var resp raft.RequestVoteResponse
		return asker.gate.RequestVote(raft.ServerID(voter.node.id), raft.ServerAddress(voter.node.addr()), req, &resp)
	}
	// The answer: refused, the voter knows its leader.
	if err := ask(); err != nil {
		t.Fatal(err)
	}
	if err := voter.Close(); err != nil {
		t.Fatal(err)
	}
	openTestGroup(t, voter.node, "votes", newTestFSM(filepath.Join(voter.node.dir, "votes-stage-2"), true), slowTimings(20*time.Second))
	if err := ask(); err != nil {
		t.Fatalf("a vote request after the voter's group was reopened: %v", err)
	}
}

// layerConns counts the connections l holds open, dialled and accepted.
func layerConns(l *Layer) (dialed, accepted int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns) - l.accepted, l.accepted
}

// TestVoteRequestsLeaveNoConnectionOpen: a vote or pre-vote request's
// connection closes with its answer, at both ends, so that an election
// leaves neither the candidate's writer nor the voter's reader behind
// (256 KiB each, NetworkTransport's) for as long as the group is idle.
func TestVoteRequestsLeaveNoConnectionOpen(t *testing.T) {
	nodes := newTestNodes(t, 3)
	gs := startGroup(t, nodes, "oneshot", slowTimings(20*time.Second))
	leader := waitLeader(t, gs)
	asker, voter := others(gs, leader)[0], others(gs, leader)[1]
	askerDialed, _ := layerConns(asker.layer)
	_, voterAccepted := layerConns(voter.layer)
	to, addr := raft.ServerID(voter.node.id), raft.ServerAddress(voter.node.addr())
	var vote raft.RequestVoteResponse
	if err := asker.gate.RequestVote(to, addr, &raft.RequestVoteRequest{RPCHeader: asker.gate.header(), Term: asker.Term()}, &vote); err != nil {
		t.Fatal(err)
	}
	var pre raft.RequestPreVoteResponse
	if err := asker.gate.RequestPreVote(to, addr, &raft.RequestPreVoteRequest{RPCHeader: asker.gate.header(), Term: asker.Term() + 1}, &pre); err != nil {
		t.Fatal(err)
	}
	if vote.Granted || pre.Granted || vote.Term != asker.Term() {
		t.Fatalf("a voter that knows its leader answered vote %+v, pre-vote %+v", vote, pre)
	}
	eventually(t, 5*time.Second, "the requests' connections to close at both ends", func() bool {
		d, _ := layerConns(asker.layer)
		_, a := layerConns(voter.layer)
		return d == askerDialed && a == voterAccepted
	})
}

// bigCmds returns n commands of about 4 KiB each.
func bigCmds(prefix string, n int) []string {
	out := cmds(prefix, n)
	for i := range out {
		out[i] += "-" + strings.Repeat("x", 4<<10)
	}
	return out
}

// TestGroupSnapshotsWhenItsLogGrowsBySnapshotBytes: with Raft's count far
// away, every member snapshots once the entries it stored since its last
// snapshot reach SnapshotBytes, and not before.
func TestGroupSnapshotsWhenItsLogGrowsBySnapshotBytes(t *testing.T) {
	nodes := newTestNodes(t, 3)
	bySize := func(c *GroupConfig) {
		c.SnapshotThreshold = 1 << 20 // never by count
		c.SnapshotBytes = 64 << 10
	}
	gs := startGroup(t, nodes, "bysize", bySize)
	below := bigCmds("a", 10) // 40 KiB
	applyAll(t, gs, below...)
	waitEntries(t, gs, below)
	for _, g := range gs {
		if metas, err := g.snaps.List(); err != nil || len(metas) != 0 || g.snapping.Load() {
			t.Fatalf("%s after 40 KiB: snapshots %v (%v), one under way: %v; want none", g.node.id, metas, err, g.snapping.Load())
		}
	}
	above := bigCmds("b", 10) // 80 KiB in all
	applyAll(t, gs, above...)
	all := append(slices.Clone(below), above...)
	waitEntries(t, gs, all)
	for _, g := range gs {
		eventually(t, 10*time.Second, g.node.id+" to snapshot its grown log", func() bool {
			metas, err := g.snaps.List()
			return err == nil && len(metas) == 1 && metas[0].Index > 0
		})
	}
}

// TestReopenedGroupSnapshotsWhatItRead: a member whose log grew by more
// than SnapshotBytes while the threshold was off reads all of it when it
// opens with the threshold on, and snapshots with the next entries it
// stores rather than SnapshotBytes later.
func TestReopenedGroupSnapshotsWhatItRead(t *testing.T) {
	nodes := newTestNodes(t, 3)
	gs := startGroup(t, nodes, "reread", func(c *GroupConfig) {
		c.SnapshotThreshold = 1 << 20
		c.SnapshotBytes = -1
	})
	first := bigCmds("a", 20) // 80 KiB
	applyAll(t, gs, first...)
	waitEntries(t, gs, first)
	back := gs[2]
	if err := back.Close(); err != nil {
		t.Fatal(err)
	}
	if metas, err := back.snaps.List(); err != nil || len(metas) != 0 {
		t.Fatalf("snapshots with the threshold off: %v, %v; want none", metas, err)
	}
	fsm := newTestFSM(filepath.Join(back.node.dir, "reread-stage"), true)
	back = openTestGroup(t, back.node, "reread", fsm, func(c *GroupConfig) {
		c.SnapshotThreshold = 1 << 20
		c.SnapshotBytes = 64 << 10
	})
	now := []*testGroup{gs[0], gs[1], back}
	all := first
	for i := 0; ; i++ {
		if metas, err := back.snaps.List(); err == nil && len(metas) == 1 {
			break
		}
		if i == 20 {
			t.Fatal("the reopened member stored 20 small entries and has not snapshotted what it read on open")
		}
		c := fmt.Sprintf("small-%02d", i)
		applyAll(t, now, c)
		all = append(all, c)
		waitEntries(t, now, all)
		eventually(t, 10*time.Second, "the snapshot asked for to end", func() bool { return !back.snapping.Load() })
	}
}

package cluster

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// heartbeatTimings are test timings that leave the race detector on two
// cores room: a false election would fail the tests below.
func heartbeatTimings(c *GroupConfig) {
	fastTimings(c)
	c.HeartbeatTimeout = 500 * time.Millisecond
	c.ElectionTimeout = 500 * time.Millisecond
	c.LeaderLeaseTimeout = 500 * time.Millisecond
}

// startGroups starts n groups over nodes and waits for their leaders.
func startGroups(t *testing.T, nodes []*testNode, n int) [][]*testGroup {
	t.Helper()
	groups := make([][]*testGroup, n)
	for i := range groups {
		groups[i] = startGroup(t, nodes, fmt.Sprintf("g%02d", i), heartbeatTimings)
	}
	for _, gs := range groups {
		waitLeader(t, gs)
	}
	return groups
}

// termsOf returns every member's term and known leader.
func termsOf(groups [][]*testGroup) []string {
	var out []string
	for _, gs := range groups {
		for _, g := range gs {
			id, _ := g.Leader()
			out = append(out, fmt.Sprintf("%s@%s: term %d, leader %s", g.ID(), g.node.id, g.Term(), id))
		}
	}
	return out
}

func heartbeatTotals(nodes []*testNode) HeartbeatStats {
	var s HeartbeatStats
	for _, n := range nodes {
		h := n.mux.HeartbeatStats()
		s.Sent += h.Sent
		s.Frames += h.Frames
		s.Delivered += h.Delivered
		s.Refused += h.Refused
		s.IdleAppendsSkipped += h.IdleAppendsSkipped
		s.AnsweredLocally += h.AnsweredLocally
		s.QuietLeaders += h.QuietLeaders
		s.QuietFollowers += h.QuietFollowers
		s.StoodFirst += h.StoodFirst
		s.StoodAhead += h.StoodAhead
		s.StoodForGone += h.StoodForGone
		s.StoodOverLagging += h.StoodOverLagging
	}

	return s
}

// Every group's followers keep their leader on heartbeats that travel
// together: no election while each follower hears many of them, and the
// frames carry several heartbeats each. Idle leaders send few appends
// besides, so the heartbeats are what keeps the followers.
func TestHeartbeatsTravelTogether(t *testing.T) {
	nodes := newTestNodes(t, 3)
	for _, n := range nodes {
		// A few groups heartbeat a node a few dozen times a second: a
		// longer window than a node's makes each frame carry several.
		n.mux.hb.window = 100 * time.Millisecond
		// Awake groups: quiet ones send few heartbeats (quiet_test.go).
		n.mux.hb.quietAfter = 0
	}
	const groups, followers, each = 8, 2, 40
	gs := startGroups(t, nodes, groups)
	before := termsOf(gs)
	start := heartbeatTotals(nodes)
	eventually(t, 30*time.Second, "every follower to hear forty heartbeats on average (several heartbeat timeouts)", func() bool {
		return heartbeatTotals(nodes).Delivered-start.Delivered >= groups*followers*each
	})
	if after := termsOf(gs); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("terms or leaders changed while idle:\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
	}
	end := heartbeatTotals(nodes)
	sent, frames := end.Sent-start.Sent, end.Frames-start.Frames
	if frames == 0 || sent < 2*frames {
		t.Errorf("%d heartbeats in %d frames: want several per frame", sent, frames)
	}
	if end.IdleAppendsSkipped == 0 {
		t.Errorf("idle leaders sent every empty append")
	}
	if end.Refused != 0 {
		t.Errorf("%d heartbeats refused", end.Refused)
	}
	// The groups still commit.
	for _, g := range gs {
		applyAll(t, g, "after")
	}
}

// Heartbeats to a node that does not speak ProtocolHeartbeats go on each
// group's own connections, as before.
func TestHeartbeatsToOlderNodes(t *testing.T) {
	nodes := newTestNodes(t, 3)
	for _, n := range nodes {
		n.mux.SetProtocols(func(string) int { return ProtocolMembers })
	}
	gs := startGroups(t, nodes, 2)
	for _, g := range gs {
		applyAll(t, g, cmds("e", 3)...)
	}
	if s := heartbeatTotals(nodes); s.Sent != 0 || s.Frames != 0 {
		t.Fatalf("coalesced heartbeats to older nodes: %+v", s)
	}
}

// A heartbeat for a member the node does not run, or a group it does not
// know, is refused, and nothing reaches Raft.
func TestHeartbeatForAnotherMember(t *testing.T) {
	nodes := newTestNodes(t, 2)
	g := singleMember(t, nodes[1])
	term := g.Term()
	args := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("node-0"), Addr: []byte(nodes[0].addr())},
		Term:      term + 5,
	}
	var resp raft.AppendEntriesResponse
	hb := nodes[0].mux.hb
	for _, c := range []struct{ group, member, want string }{
		{"g", "node-9", `heartbeat for member "node-9"`},
		{"nope", nodes[1].id, `unknown group "nope"`},
	} {
		_, err := hb.beat(&voteGate{group: c.group}, nodes[1].addr(), c.member, args, &resp, false, false)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("heartbeat for %s/%s: %v, want an error with %q", c.group, c.member, err, c.want)
		}
	}
	if got := nodes[1].mux.HeartbeatStats(); got.Refused != 2 || got.Delivered != 0 {
		t.Errorf("receiver's stats %+v, want 2 refused, none delivered", got)
	}
	if !g.IsLeader() || g.Term() != term {
		t.Errorf("a refused heartbeat of a higher term reached Raft: leader %v, term %d (was %d)", g.IsLeader(), g.Term(), term)
	}
}

// A follower of an idle group that restarted holds every entry but not
// the commit index, which only an append tells: its heartbeat answers say
// it is behind, and its leader's next append goes, though the leader
// sends no append that tells nothing new for an hour.
func TestIdleFollowerAsksForTheCommitIndex(t *testing.T) {
	nodes := newTestNodes(t, 3)
	for _, n := range nodes {
		n.mux.hb.idleAppendEvery = time.Hour
	}
	gs := startGroup(t, nodes, "g", heartbeatTimings)
	want := cmds("e", 3)
	applyAll(t, gs, want...)
	waitEntries(t, gs, want)
	leader := waitLeader(t, gs)
	follower := others(gs, leader)[0]
	term := leader.Term()
	if err := follower.Close(); err != nil {
		t.Fatal(err)
	}
	// Its state machine starts empty: Raft applies nothing before it
	// learns what is committed.
	fsm := newTestFSM(filepath.Join(follower.node.dir, "g-stage-2"), true)
	back := openTestGroup(t, follower.node, "g", fsm, heartbeatTimings)
	if got := fsm.entries(); len(got) != 0 {
		t.Fatalf("a reopened follower applied %q before hearing its leader", got)
	}
	waitEntries(t, []*testGroup{back}, want)
	// A new leader's first entry would have told it too.
	if !leader.IsLeader() || leader.Term() != term {
		t.Fatalf("the leader changed (term %d, then %d): the test proves nothing", term, leader.Term())
	}
}

// singleMember starts group "g" on node alone and waits until it leads.
func singleMember(t *testing.T, node *testNode) *testGroup {
	t.Helper()
	g := openTestGroup(t, node, "g", newTestFSM(t.TempDir(), true), heartbeatTimings)
	if err := g.Bootstrap(ctxTimeout(t, 5*time.Second), []Server{{ID: node.id, Address: node.addr(), Voter: true}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the single member to lead", g.IsLeader)
	return g
}

// A heartbeat its follower takes later than heartbeatAnswerWithin (it
// writes a new term first) is contact: the leader's heartbeat succeeds,
// and the follower takes it once it can.
func TestLateHeartbeatIsContact(t *testing.T) {
	nodes := newTestNodes(t, 2)
	g := singleMember(t, nodes[1])
	// The member's Raft, as the heartbeats reach it, stands for one that
	// takes a while: it answers once released.
	release := make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let) // before the group closes: it waits for the delivery
	var taken atomic.Int64
	slow := func(rpc raft.RPC) {
		<-release
		taken.Add(1)
		rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
	}
	g.gate.heartbeat.Store(&slow)
	args := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("node-0"), Addr: []byte(nodes[0].addr())},
		Term:      1,
	}
	var resp raft.AppendEntriesResponse
	if _, err := nodes[0].mux.hb.beat(&voteGate{group: "g"}, nodes[1].addr(), nodes[1].id, args, &resp, false, false); err != nil || !resp.Success {
		t.Fatalf("a heartbeat its follower takes late: %v, success %v; want contact", err, resp.Success)
	}
	let()
	eventually(t, 10*time.Second, "the follower to take the late heartbeat", func() bool { return taken.Load() == 1 })
	if got := nodes[0].mux.HeartbeatStats().Late; got != 1 {
		t.Errorf("%d heartbeats counted late, want 1", got)
	}
}

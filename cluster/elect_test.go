package cluster

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// slowElections are test timings under which no member stands before 10 s
// of silence: a leader sooner is the first member's.
func slowElections(c *GroupConfig) {
	heartbeatTimings(c)
	c.HeartbeatTimeout = 10 * time.Second
	c.ElectionTimeout = 10 * time.Second
	c.LeaderLeaseTimeout = 10 * time.Second
}

// firstOn returns the first member of group when every node of nodes
// votes in it.
func firstOn(nodes []*testNode, group string) raft.ServerID {
	var voters []raft.ServerID
	for _, n := range nodes {
		voters = append(voters, raft.ServerID(n.id))
	}
	return first(group, voters)
}

// A new group, and the same group opened again on every node, is led by
// its first member long before any heartbeat timeout: the first member
// stands once another voter has the group open.
func TestFirstMemberStandsAtOnce(t *testing.T) {
	nodes := newTestNodes(t, 3)
	const group = "first"
	gs := startGroup(t, nodes, group, slowElections)
	want := firstOn(nodes, group)
	check := func(gs []*testGroup, when string) {
		t.Helper()
		start := time.Now()
		leader := waitLeader(t, gs) // gives up after 10 s: a heartbeat timeout
		if raft.ServerID(leader.node.id) != want {
			t.Fatalf("%s: led by %s after %v, want the first member %s", when, leader.node.id, time.Since(start), want)
		}
	}
	check(gs, "created")
	applyAll(t, gs, "e")
	waitEntries(t, gs, []string{"e"})

	for _, g := range gs {
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The first member opens last: the others' notices wait for it.
	var again []*testGroup
	var last *testNode
	for _, n := range nodes {
		if raft.ServerID(n.id) == want {
			last = n
			continue
		}
		again = append(again, openTestGroup(t, n, group, newTestFSM(filepath.Join(n.dir, group+"-stage-again"), true), slowElections))
	}
	again = append(again, openTestGroup(t, last, group, newTestFSM(filepath.Join(last.dir, group+"-stage-again"), true), slowElections))
	check(again, "opened again")
	waitEntries(t, again, []string{"e"})
	if n := heartbeatTotals(nodes).StoodFirst; n != 2 {
		t.Errorf("%d members stood first, want 2 (one per election)", n)
	}
}

// A member that opens the group before gossip has told what the first
// member's node speaks (the metadata group opens before its node joins)
// tells that node once gossip has: the first member still stands long
// before any heartbeat timeout.
func TestFirstMemberStandsWhenGossipTellsLate(t *testing.T) {
	nodes := newTestNodes(t, 3)
	const group = "late"
	gs := startGroup(t, nodes, group, slowElections)
	want := firstOn(nodes, group)
	waitLeader(t, gs)
	for _, g := range gs {
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var again []*testGroup
	var others []*testNode
	for _, n := range nodes {
		if raft.ServerID(n.id) != want {
			others = append(others, n)
			n.mux.SetProtocols(func(string) int { return ProtocolUnknown }) // not joined yet
		}
		again = append(again, openTestGroup(t, n, group, newTestFSM(filepath.Join(n.dir, group+"-stage-again"), true), slowElections))
	}
	for _, n := range others {
		n.mux.SetProtocols(nil) // joined: every node speaks this version
	}
	start := time.Now()
	leader := waitLeader(t, again) // gives up after 10 s: a heartbeat timeout
	if raft.ServerID(leader.node.id) != want {
		t.Fatalf("led by %s after %v, want the first member %s", leader.node.id, time.Since(start), want)
	}
}

// A notice that comes once the first member has stood or knows its
// leader is not kept: kept, it made the member stand the moment it opened
// the group again within firstWithin, before the others had, and wait out
// its election timeout. A notice for a group not open there is kept.
func TestLateNoticeIsNotKept(t *testing.T) {
	nodes := newTestNodes(t, 3)
	const group = "stale"
	gs := startGroup(t, nodes, group, slowElections)
	leader := waitLeader(t, gs)
	from := others(gs, leader)[0]
	p := from.node.mux.hb.peer(leader.node.addr())
	p.openedLater(group)    // for the group its first member leads: dropped
	p.openedLater("closed") // for a group not open there: kept
	opens := func(group string) bool {
		h := leader.node.mux.hb
		h.mu.Lock()
		defer h.mu.Unlock()
		_, ok := h.opens[group]
		return ok
	}
	// One round carries both, in order.
	eventually(t, 10*time.Second, "the notice for a group not open to be kept", func() bool { return opens("closed") })
	if opens(group) {
		t.Fatalf("a notice for %s, whose first member leads it, was kept", group)
	}
}

// A first member whose log is behind the others' (it was down while the
// group went on) has its pre-vote refused when every member opens the
// group again; a member that refused it, knowing no leader, stands at once
// and is elected, long before any heartbeat or election timeout.
func TestMemberAheadOfTheFirstStands(t *testing.T) {
	nodes := newTestNodes(t, 3)
	const group = "ahead"
	gs := startGroup(t, nodes, group, heartbeatTimings)
	waitLeader(t, gs)
	lead := firstOn(nodes, group)
	var behind *testGroup
	var rest []*testGroup
	for _, g := range gs {
		if raft.ServerID(g.node.id) == lead {
			behind = g
		} else {
			rest = append(rest, g)
		}
	}
	if err := behind.Close(); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, rest)
	applyAll(t, rest, "late")
	waitEntries(t, rest, []string{"late"})
	var term uint64
	for _, g := range rest {
		term = max(term, g.raft.CurrentTerm())
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	}

	before := heartbeatTotals(nodes).StoodAhead
	var again []*testGroup
	for _, n := range nodes {
		again = append(again, openTestGroup(t, n, group, newTestFSM(filepath.Join(n.dir, group+"-stage-again"), true), slowElections))
	}
	leader := waitLeader(t, again) // gives up after 10 s: a heartbeat timeout
	if raft.ServerID(leader.node.id) == lead {
		t.Fatalf("led by the first member %s, whose log was behind", lead)
	}
	// Both others refused the first member's pre-vote; one of them stood
	// at once and won the next term, and the other, which granted its
	// vote, did not stand. Standing together, they split the vote.
	if n := heartbeatTotals(nodes).StoodAhead - before; n != 1 {
		t.Errorf("%d members stood after refusing a pre-vote, want 1", n)
	}
	if got := leader.raft.CurrentTerm(); got != term+1 {
		t.Errorf("led in term %d after term %d: the members that refused split the vote", got, term)
	}
	waitEntries(t, again, []string{"late"})
}

// The voters that refuse a lagging successor's vote each get a place of
// their own, the group's first over them at 0; the candidate, the leader
// and a non-voter get none.
func TestRefusersAgreeOnAnOrder(t *testing.T) {
	servers := func(n int) []raft.Server {
		var out []raft.Server
		for i := range n {
			out = append(out, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i)), Suffrage: raft.Voter})
		}
		return append(out, raft.Server{ID: "learner", Suffrage: raft.Nonvoter})
	}
	for _, n := range []int{3, 5, 7} {
		for g := range 20 {
			group := fmt.Sprintf("g%d", g)
			ss := servers(n)
			cand, leader := ss[g%n].ID, ss[(g+1)%n].ID
			var rest []raft.ServerID
			seen := map[int]raft.ServerID{}
			for _, s := range ss {
				place, voters := placeAmong(group, ss, s.ID, cand, leader)
				if voters != n {
					t.Fatalf("%s: %d voters, want %d", group, voters, n)
				}
				if s.ID == cand || s.ID == leader || s.Suffrage != raft.Voter {
					if place != -1 {
						t.Errorf("%s: %s has place %d, want none", group, s.ID, place)
					}
					continue
				}
				rest = append(rest, s.ID)
				if other, dup := seen[place]; dup || place < 0 || place >= n-2 {
					t.Fatalf("%s: %s has place %d (taken by %q), want a place of its own below %d", group, s.ID, place, other, n-2)
				}
				seen[place] = s.ID
			}
			if want := first(group, rest); seen[0] != want {
				t.Errorf("%s: %s first, want the group's first %s", group, seen[0], want)
			}
		}
	}
}

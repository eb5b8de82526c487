package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// quietNodes are three nodes whose groups go quiet after idle, and whose
// quiet followers give a dead leader followerTimeout.
func quietNodes(t *testing.T, idle, followerTimeout time.Duration) []*testNode {
	return newTestNodesWith(t, 3, func(m *Mux) {
		m.hb.quietAfter = idle
		m.hb.followerTimeout = followerTimeout
	})
}

// waitQuiet waits until every group leads quietly and each of its
// followers follows quietly.
func waitQuiet(t *testing.T, nodes []*testNode, groups int) {
	t.Helper()
	eventually(t, 30*time.Second, "every group quiet", func() bool {
		s := heartbeatTotals(nodes)
		return s.QuietLeaders == groups && s.QuietFollowers == 2*groups
	})
}

// Quiet groups keep their leaders on the few heartbeats that still leave:
// the leaders answer most of their own, the followers' timeouts are
// stretched, and nobody campaigns.
func TestQuietGroupsStayLed(t *testing.T) {
	nodes := quietNodes(t, 500*time.Millisecond, 10*time.Second)
	const groups = 8
	gs := startGroups(t, nodes, groups)
	waitQuiet(t, nodes, groups)
	before := termsOf(gs)
	start := heartbeatTotals(nodes)
	// Many times a follower's normal timeout (500 ms): each follower's
	// heartbeats answered locally forty times on average.
	eventually(t, 60*time.Second, "forty local answers per follower", func() bool {
		return heartbeatTotals(nodes).AnsweredLocally-start.AnsweredLocally >= groups*2*40
	})
	end := heartbeatTotals(nodes)
	if after := termsOf(gs); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("terms or leaders changed while quiet:\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
	}
	local, real := end.AnsweredLocally-start.AnsweredLocally, end.Sent-start.Sent
	if real*4 > local {
		t.Errorf("%d heartbeats sent and %d answered locally: want most answered locally", real, local)
	}
	if end.QuietLeaders != groups || end.QuietFollowers != 2*groups {
		t.Errorf("%d quiet leaders and %d quiet followers, want %d and %d", end.QuietLeaders, end.QuietFollowers, groups, 2*groups)
	}
}

// A proposal wakes a quiet group: it commits, and every member applies it.
func TestQuietGroupCommits(t *testing.T) {
	nodes := quietNodes(t, 500*time.Millisecond, 10*time.Second)
	gs := startGroups(t, nodes, 2)
	waitQuiet(t, nodes, 2)
	for _, g := range gs {
		applyAll(t, g, "woken")
		waitEntries(t, g, []string{"woken"})
	}
}

// When a quiet leader's node goes silent, its followers elect a new
// leader long before their stretched timeout: their node saw the leader's
// node go, and gave them their normal timeout back.
func TestQuietFollowersElectWhenLeaderNodeGoes(t *testing.T) {
	nodes := quietNodes(t, 500*time.Millisecond, 5*time.Minute)
	const groups = 4
	gs := startGroups(t, nodes, groups)
	waitQuiet(t, nodes, groups)
	// The node leading the first group goes: its listener and every
	// connection close at once; its groups run on, cut off.
	dead := waitLeader(t, gs[0]).node
	terms := map[string]uint64{}
	for _, g := range gs {
		terms[g[0].ID()] = g[0].Term()
	}
	if err := dead.mux.Close(); err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		led := waitLeader(t, membersBut(g, dead))
		if led.node == dead {
			t.Fatalf("%s: still led from the dead node", led.ID())
		}
	}
	// The first group's leader was on the dead node: its followers elected.
	if g := gs[0][0]; g.node != dead && g.Term() == terms[g.ID()] {
		t.Errorf("%s: no election after its leader's node went", g.ID())
	}
}

// A quiet follower that a proposal's wake has not reached yet wakes when
// its leader's copy closes, though the leader's node lives on and its
// own node keeps hearing it: the closing leader tells it, as it tells the
// followers of a group still quiet. Here the follower's node answers the
// woken leader's real heartbeats busy (as when its deliveries are backed
// up), so that it stays quiet while the other follower wakes; then the
// leader's group closes. Before, only a leader still quiet told its
// followers: this one stayed quiet, refusing the other's votes for its
// stretched timeout (five minutes here; 10–20 s in fabriqd, where a copy
// stopping for a full disk right after sends woke its group left a
// partition without a leader that long).
func TestWokenGroupsFollowersWakeWhenItsLeaderCloses(t *testing.T) {
	nodes := quietNodes(t, 2*time.Second, 5*time.Minute)
	gs := startGroups(t, nodes, 1)
	waitQuiet(t, nodes, 1)
	leader := waitLeader(t, gs[0])
	followers := others(gs[0], leader)
	awake, quiet := followers[0], followers[1]
	from := quiet.gate.quietUnder()
	if from == "" {
		t.Fatalf("%s does not follow quietly", quiet.node.id)
	}
	quiet.node.mux.hb.busyFrom.Store(&from)
	applyAll(t, gs[0], "wake")
	eventually(t, 10*time.Second, "the other follower awake", func() bool { return awake.gate.quietUnder() == "" })
	// Within quietAfter of a proposal: the leader stays awake until it
	// closes.
	applyAll(t, gs[0], "still awake")
	if under := quiet.gate.quietUnder(); under != from || leader.gate.quiet.leading.Load() {
		t.Fatalf("want the leader awake and %s quiet under it: leading quietly %v, quiet under %q", quiet.node.id,
			leader.gate.quiet.leading.Load(), under)
	}
	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	if led := waitLeader(t, followers); led == leader {
		t.Fatal("still led by the closed member")
	}
}

// Reading a quiet group's configuration, as the broker does every few
// seconds for every partition, leaves it quiet; a proposal wakes it.
func TestQuietGroupStaysQuietWhenRead(t *testing.T) {
	nodes := quietNodes(t, time.Second, 10*time.Second)
	gs := startGroups(t, nodes, 1)
	waitQuiet(t, nodes, 1)
	leader := waitLeader(t, gs[0])
	for range 20 {
		if _, err := leader.Servers(ctxTimeout(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		// Waking is synchronous; going quiet again takes a second idle.
		if !leader.gate.quiet.leading.Load() {
			t.Fatal("reading the configuration woke the group")
		}
	}
	applyAll(t, gs[0], "wake")
	if leader.gate.quiet.leading.Load() {
		t.Fatal("a proposal left the group quiet")
	}
	// A pipelined proposal (the broker's sends) wakes it too.
	waitQuiet(t, nodes, 1)
	if err := leader.Wait(leader.Propose([]byte("pipelined"), time.Second)); err != nil {
		t.Fatal(err)
	}
	if leader.gate.quiet.leading.Load() {
		t.Fatal("a pipelined proposal left the group quiet")
	}
}

// A quiet follower whose node stops hearing its leader's node for a moment
// wakes, yet does not campaign while its leader is there: its heartbeat
// timeout counts from the wake, and its leader, told, heartbeats it for
// real again. Every node goes deaf to the others for several heartbeat
// timeouts: every follower wakes, and no group elects.
func TestQuietFollowersRideOutAMomentOfSilence(t *testing.T) {
	nodes := quietNodes(t, 500*time.Millisecond, 10*time.Second)
	const groups = 4
	gs := startGroups(t, nodes, groups)
	waitQuiet(t, nodes, groups)
	before := termsOf(gs)
	until := time.Now().Add(1500 * time.Millisecond).UnixNano()
	for _, n := range nodes {
		n.mux.hb.deaf.Store(until)
	}
	eventually(t, 10*time.Second, "every quiet follower awake", func() bool {
		return heartbeatTotals(nodes).QuietFollowers == 0
	})
	// Quiet again once the silence ends: each follower took a quiet
	// heartbeat of its leader's, in its term.
	waitQuiet(t, nodes, groups)
	if after := termsOf(gs); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("a moment of silence made groups elect:\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
	}
}

// When a leader's process is gone — its connections end at once and its
// port refuses — each group it led is taken over by its successor at once,
// the other follower granting the transfer though it still knew the old
// leader: quiet followers, and awake ones. The followers' own heartbeat
// timeout is long (3 s, six times the lease here) so that, without the
// successor, a follower stood only after it, whichever came first, and
// none counted as a successor. An awake group's successor stands as soon
// as its node finds the leader's process gone, not at the next tick: with
// ticks an hour apart, it still stands.
func TestSuccessorStandsWhenLeaderProcessGoes(t *testing.T) {
	t.Run("quiet", func(t *testing.T) { successorStands(t, true, quietTick) })
	t.Run("awake", func(t *testing.T) { successorStands(t, false, quietTick) })
	t.Run("awake between ticks", func(t *testing.T) { successorStands(t, false, time.Hour) })
}

func successorStands(t *testing.T, quiet bool, tickEvery time.Duration) {
	idle := 500 * time.Millisecond
	if !quiet {
		idle = time.Hour // never quiet
	}
	nodes := newTestNodesWith(t, 3, func(m *Mux) {
		m.hb.quietAfter = idle
		m.hb.followerTimeout = 5 * time.Minute
		m.hb.tickEvery = tickEvery
	})
	const groups = 6
	gs := make([][]*testGroup, groups)
	for i := range gs {
		gs[i] = startGroup(t, nodes, fmt.Sprintf("g%02d", i), func(c *GroupConfig) {
			heartbeatTimings(c)
			c.HeartbeatTimeout = 3 * time.Second
			c.ElectionTimeout = 3 * time.Second
			// As fabriqd's: an awake leader heartbeats every 0.3–0.6 s,
			// which a shorter lease would miss, and step down.
			c.LeaderLeaseTimeout = 3 * time.Second
		})
	}
	for _, g := range gs {
		waitLeader(t, g)
	}
	if quiet {
		waitQuiet(t, nodes, groups)
	} else if s := heartbeatTotals(nodes); s.QuietLeaders != 0 || s.QuietFollowers != 0 {
		t.Fatalf("%d quiet leaders and %d quiet followers, want none", s.QuietLeaders, s.QuietFollowers)
	}
	dead := waitLeader(t, gs[0]).node
	// The successor of each group the dead node leads: the other voters'
	// first.
	want := map[string]raft.ServerID{}
	for _, g := range gs {
		if waitLeader(t, g).node != dead {
			continue
		}
		var rest []raft.ServerID
		for _, m := range membersBut(g, dead) {
			rest = append(rest, raft.ServerID(m.node.id))
		}
		want[g[0].ID()] = first(g[0].ID(), rest)
	}
	// The process goes: its listener and every connection close at once,
	// and nothing listens at its port any more; its groups run on, cut off.
	if err := dead.mux.Close(); err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		led := waitLeader(t, membersBut(g, dead))
		if s, ok := want[g[0].ID()]; ok && raft.ServerID(led.node.id) != s {
			t.Errorf("%s: led by %s after its leader's process went, want its successor %s", g[0].ID(), led.node.id, s)
		}
	}
	var alive []*testNode
	for _, n := range nodes {
		if n != dead {
			alive = append(alive, n)
		}
	}
	if got := heartbeatTotals(alive).StoodForGone; got != int64(len(want)) {
		t.Errorf("%d successors stood, want one for each of the %d groups the gone node led", got, len(want))
	}
}

// slowTimings are heartbeatTimings with the heartbeat and election
// timeouts and the lease at d: a follower campaigns on its own only after
// d.
func slowTimings(d time.Duration) func(*GroupConfig) {
	return func(c *GroupConfig) {
		heartbeatTimings(c)
		c.HeartbeatTimeout = d
		c.ElectionTimeout = d
		c.LeaderLeaseTimeout = d
	}
}

// membersBut returns the members of g that are not on node n.
func membersBut(g []*testGroup, n *testNode) []*testGroup {
	var out []*testGroup
	for _, m := range g {
		if m.node != n {
			out = append(out, m)
		}
	}
	return out
}

// A node found gone that is heard from again is not gone any more: its
// process restarted. Here the other nodes still hold the mark of the
// node about to lead (as they would for goneFor after it died and came
// back) when leadership moves to it: its vote requests clear the mark, no
// successor stands against the live leader, and it keeps leading. Before,
// only a heartbeat round from the node cleared it, and a round comes
// hundreds of milliseconds after an election: a stream created right
// after a node's restart had partitions elected, taken over by a
// successor, and leaderless for seconds.
func TestGoneNodeHeardAgainKeepsItsLeadership(t *testing.T) {
	nodes := quietNodes(t, time.Hour, 5*time.Minute) // awake groups
	g := startGroup(t, nodes, "g", slowTimings(3*time.Second))
	leader := waitLeader(t, g)
	next := others(g, leader)[0]
	back := next.node.addr()
	for _, n := range nodes {
		if n != next.node {
			n.mux.hb.markGone(back)
		}
	}
	term := leader.Term()
	// TransferLeadershipTo refuses a node held gone: leadership goes to it
	// here as an election after its restart would bring it, through
	// Raft's transfer itself.
	if !leader.claimTransfer(raft.ServerID(next.node.id)) {
		t.Fatal("a first transfer of the term refused")
	}
	if err := leader.transfer(ctxTimeout(t, 10*time.Second), raft.ServerID(next.node.id), raft.ServerAddress(back)); err != nil {
		t.Fatal(err)
	}
	moved := time.Now()
	applyAll(t, g, "after the restart")
	for _, n := range nodes {
		if _, gone := n.mux.hb.heard(time.Now()); !gone[back].IsZero() {
			t.Errorf("%s still holds %s gone after its vote requests and appends", n.id, next.node.id)
		}
	}
	// The new leader's first heartbeat round comes after several quiet
	// ticks of the followers' nodes: a successor would have stood by then.
	eventually(t, 10*time.Second, "a heartbeat round from the new leader on every other node", func() bool {
		for _, n := range nodes {
			if n == next.node {
				continue
			}
			n.mux.hb.mu.Lock()
			seen := n.mux.hb.seen[back]
			n.mux.hb.mu.Unlock()
			if seen.Before(moved) {
				return false
			}
		}
		return true
	})
	if got := waitLeader(t, g); got != next || got.Term() != term+1 {
		t.Errorf("led by %s in term %d, want %s in term %d", got.node.id, got.Term(), next.node.id, term+1)
	}
	if s := heartbeatTotals(nodes).StoodForGone; s != 0 {
		t.Errorf("%d successors stood against a live leader", s)
	}
}

// A member whose leader's process is gone says so (LeaderGone) while its
// Raft still names that leader: the broker answers lookups with "electing"
// rather than send clients to a closed port. Here the group's successor is
// closed, so that the other follower cannot elect and still knows the old
// leader, its timeouts long.
func TestLeaderGoneWhileStillNamed(t *testing.T) {
	nodes := quietNodes(t, time.Hour, 5*time.Minute) // awake groups
	g := startGroup(t, nodes, "g", slowTimings(20*time.Second))
	leader := waitLeader(t, g)
	var rest []raft.ServerID
	for _, m := range others(g, leader) {
		rest = append(rest, raft.ServerID(m.node.id))
	}
	succ := first("g", rest)
	var stays *testGroup
	for _, m := range others(g, leader) {
		if raft.ServerID(m.node.id) == succ {
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			stays = m
		}
	}
	eventually(t, 10*time.Second, "the follower knowing its leader", func() bool {
		id, _ := stays.Leader()
		return id == leader.node.id
	})
	if stays.LeaderGone() {
		t.Fatal("leader gone while its process runs")
	}
	if err := leader.node.mux.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the follower finding its leader's process gone", stays.LeaderGone)
	if id, _ := stays.Leader(); id != leader.node.id {
		t.Errorf("the follower names leader %q, want %q still (its timeouts are long)", id, leader.node.id)
	}
}

// A killed process may accept on its port for a moment after its
// connections ended, and reset what it accepted as its listener closes:
// the probe counts a reset as gone. A port that accepts and holds the
// connection, as a live node's does until its header comes, is not gone.
func TestProbeFindsAResetPortGone(t *testing.T) {
	nodes := newTestNodes(t, 1)
	h := nodes[0].mux.hb
	held := make(chan net.Conn, 16)
	t.Cleanup(func() {
		for len(held) > 0 {
			(<-held).Close()
		}
	})
	listen := func(reset bool) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				if reset {
					c.(*net.TCPConn).SetLinger(0) // closed with a reset
					c.Close()
					continue
				}
				select {
				case held <- c:
				default:
					c.Close()
				}
			}
		}()
		return ln.Addr().String()
	}
	dying, live := listen(true), listen(false)
	probed := func(addr string) bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		_, probing := h.probing[addr]
		return !probing
	}
	for _, addr := range []string{dying, live} {
		h.maybeGone(addr, io.EOF)
		eventually(t, 5*time.Second, "the probe of "+addr+" done", func() bool { return probed(addr) })
	}
	_, gone := h.heard(time.Now())
	if gone[dying].IsZero() {
		t.Error("a port that resets the connections it accepts: not found gone")
	}
	if !gone[live].IsZero() {
		t.Error("a port that holds the connections it accepts: found gone")
	}
}

// A client's report that it could not reach a node marks the node gone
// only when this node's own probe finds its port refusing (or resetting,
// as TestProbeFindsAResetPortGone checks of the probe they share): a
// refused port is gone; a node's live Raft port is not, and a client
// cannot make it look dead.
func TestProbeReportedTrustsOnlyThePort(t *testing.T) {
	nodes := newTestNodes(t, 2)
	m := nodes[0].mux
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused, live := ln.Addr().String(), nodes[1].addr()
	ln.Close()
	ctx := context.Background()
	if !m.ProbeReported(ctx, refused) || !m.Gone(refused) {
		t.Errorf("a refused port, reported unreachable: not found gone")
	}
	if m.ProbeReported(ctx, live) || m.Gone(live) {
		t.Errorf("a live node's Raft port, reported unreachable: found gone")
	}
}

// A follower that refuses the vote of its group's successor, whose log is
// behind its own (the last append reached only this follower before the
// leader's process died), stands at once and is elected: it does not wait
// out its heartbeat timeout (20 s here, twice what waitLeader waits),
// having heard from the dead leader a moment ago.
func TestFollowerStandsOverALaggingSuccessor(t *testing.T) {
	var held []*groupHold // by node
	nodes := newTestNodesWith(t, 3, func(m *Mux) {
		m.hb.quietAfter = time.Hour // awake groups
		m.hb.followerTimeout = 5 * time.Minute
		h := &groupHold{group: "lagging"}
		m.ln = &holdListener{Listener: m.ln, hold: h}
		held = append(held, h)
	})
	g := startGroup(t, nodes, "lagging", slowTimings(20*time.Second))
	leader := waitLeader(t, g)
	applyAll(t, []*testGroup{leader}, "first")
	waitEntries(t, g, []string{"first"})
	var succ, other *testGroup
	var rest []raft.ServerID
	for _, m := range membersBut(g, leader.node) {
		rest = append(rest, raft.ServerID(m.node.id))
	}
	for _, m := range membersBut(g, leader.node) {
		if raft.ServerID(m.node.id) == first(m.ID(), rest) {
			succ = m
		} else {
			other = m
		}
	}
	// The successor's node takes nothing more of the leader's in the
	// group.
	held[slices.Index(nodes, succ.node)].holdFrom(leader.node.addr())
	if _, err := leader.Apply(ctxTimeout(t, 5*time.Second), []byte("late")); err != nil {
		t.Fatalf("apply with the successor held back: %v", err)
	}
	waitEntries(t, []*testGroup{leader, other}, []string{"first", "late"})
	if s, o := succ.raft.LastIndex(), other.raft.LastIndex(); s >= o {
		t.Fatalf("the successor holds index %d, the other follower %d: not behind", s, o)
	}
	if err := leader.node.mux.Close(); err != nil { // the leader's process goes
		t.Fatal(err)
	}
	pair := []*testGroup{succ, other}
	if got := waitLeader(t, pair); got != other {
		t.Fatalf("led by %s, want %s, whose log the successor's lacked", got.node.id, other.node.id)
	}
	if n := heartbeatTotals([]*testNode{other.node}).StoodOverLagging; n != 1 {
		t.Errorf("the follower stood %d times over the lagging successor, want 1", n)
	}
	if n := heartbeatTotals([]*testNode{succ.node}).StoodForGone; n != 1 {
		t.Errorf("the successor stood %d times, want 1", n)
	}
	waitEntries(t, pair, []string{"first", "late"})
}

// groupHold makes a node's listener drop what one member sends it in one
// group, from when it is set: a member whose appends do not arrive. The
// group's heartbeats travel over the node's own connections, and go on.
type groupHold struct {
	group string
	from  atomic.Pointer[string] // the sender's Raft address
}

// holdFrom drops, from now on, the group's requests from the member at
// Raft address addr.
func (h *groupHold) holdFrom(addr string) { h.from.Store(&addr) }

// holdListener wraps the accepted connections in holdConns.
type holdListener struct {
	net.Listener
	hold *groupHold
}

func (l *holdListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &holdConn{Conn: c, hold: l.hold}, nil
}

// holdConn names the held group when the mux's header it carries does
// (the header comes first, in the connection's first bytes); such a
// connection is closed, for good, at the first read that carries the held
// sender's address: every request carries its sender's in its RPC header,
// and no header names an address.
type holdConn struct {
	net.Conn
	hold    *groupHold
	head    []byte // the first bytes read, where the header is
	tail    []byte // the end of the last read, for an address split between two
	dropped bool
}

func (c *holdConn) Read(p []byte) (int, error) {
	if c.dropped {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := c.Conn.Read(p)
	if len(c.head) < 2*MaxGroupIDLen {
		c.head = append(c.head, p[:n]...)
	}
	from := c.hold.from.Load()
	if from == nil || n == 0 || !bytes.Contains(c.head, []byte(c.hold.group)) {
		return n, err
	}
	seen := append(c.tail, p[:n]...)
	if bytes.Contains(seen, []byte(*from)) {
		c.dropped = true
		c.Conn.Close()
		return 0, io.ErrUnexpectedEOF
	}
	c.tail = append(c.tail[:0], seen[max(0, len(seen)-len(*from)):]...)
	return n, err
}

package cluster

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// tcpTransports returns two real NetworkTransports on loopback, a
// leader's and a follower's, closed when the test ends.
func tcpTransports(t *testing.T) (leader, follower *raft.NetworkTransport) {
	t.Helper()
	for _, tr := range []**raft.NetworkTransport{&leader, &follower} {
		n, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		*tr = n
	}
	return leader, follower
}

// A follower that refuses a pipelined append (its log store failed a
// write) must not wedge the leader's replication to it. Raft's reader
// stops at the first refusal; the sends that follow must fail at once
// instead of waiting for ever on the transport's unbuffered channels
// (hashicorp/raft issue 612), so that Raft falls back to one request at a
// time and the follower catches up. Two real NetworkTransports over TCP;
// the test plays Raft's side of the pipeline as hashicorp/raft 1.8 does.
func TestPipelineNeverBlocksAfterARefusal(t *testing.T) {
	leader, follower := tcpTransports(t)

	// The follower takes the first three appends, then refuses every
	// one, as a follower whose disk is full does.
	const accepted = 3
	stop := make(chan struct{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		n := 0
		for {
			select {
			case rpc := <-follower.Consumer():
				n++
				rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: n <= accepted}, nil)
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-served }()

	p := newPipeline(func() (raft.AppendPipeline, error) { return leader.AppendEntriesPipeline("f", follower.LocalAddr()) })
	defer p.Close()

	// Raft's reader: it stops at the first response that is not a
	// success, as pipelineDecode does.
	var successes int
	decoded := make(chan struct{})
	go func() {
		defer close(decoded)
		for f := range p.Consumer() {
			if f.Error() != nil || !f.Response().Success {
				return
			}
			successes++
		}
	}()

	// Raft's send loop: it goes on sending until a send fails. Each send
	// gets a bounded wait: a send that does not return is the bug.
	send := func(i int) error {
		res := make(chan error, 1)
		go func() {
			req := &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: uint64(i), Entries: []*raft.Log{{Index: uint64(i + 1), Term: 1}}}
			_, err := p.AppendEntries(req, new(raft.AppendEntriesResponse))
			res <- err
		}()
		select {
		case err := <-res:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("pipelined send %d blocked for 10s after the follower refused one", i)
			return nil
		}
	}
	var sendErr error
	for i := 0; i < 64 && sendErr == nil; i++ {
		sendErr = send(i)
		if i == accepted {
			// The refusal has reached Raft's reader, which stopped.
			<-decoded
		}
	}
	if sendErr == nil {
		t.Fatal("64 sends after a refusal all went through; want errPipelineBroken")
	}
	if sendErr != errPipelineBroken {
		t.Fatalf("send after a refusal: %v, want errPipelineBroken", sendErr)
	}
	if successes != accepted {
		t.Errorf("Raft's reader saw %d successes, want %d", successes, accepted)
	}
}

// stuckFuture is a future Raft dropped: its Error never returns until the
// test releases it.
type stuckFuture struct{ release chan struct{} }

func (f stuckFuture) Error() error { <-f.release; return nil }

// A proposal's future that hashicorp/raft dropped at shutdown (an entry
// waiting for the state machine when Raft stopped) never completes on its
// own; Wait gives it up once the group has closed, so a caller's loop
// ends (a partition's commit loop waited on one for ever, and its copy
// was never opened again).
func TestWaitEndsWhenTheGroupCloses(t *testing.T) {
	nodes := newTestNodes(t, 1)
	g := openTestGroup(t, nodes[0], "g", newTestFSM(t.TempDir(), false), nil).Group
	f := stuckFuture{release: make(chan struct{})}
	defer close(f.release) // the watching goroutine ends with the test
	res := make(chan error, 1)
	go func() { res <- g.Wait(f) }()
	select {
	case err := <-res:
		t.Fatalf("Wait returned %v before the group closed", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, raft.ErrRaftShutdown) {
			t.Fatalf("Wait after Close: %v, want raft.ErrRaftShutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait on a dropped future did not return after the group closed")
	}
}

// dialedConns counts the connections g's layer dialled that are open.
func dialedConns(g *testGroup) int {
	g.layer.mu.Lock()
	defer g.layer.mu.Unlock()
	n := 0
	for c := range g.layer.conns {
		if c.dialed {
			n++
		}
	}
	return n
}

// preVote sends a pre-vote request of from's to to, which to refuses,
// through from's NetworkTransport itself rather than its gate: it leaves
// a connection in the transport's pool, as appends sent one at a time do
// (the gate sends votes on connections of their own, oneshot.go).
func preVote(t *testing.T, from, to *testGroup) {
	t.Helper()
	addr, _ := from.gate.to(raft.ServerID(to.node.id), raft.ServerAddress(to.node.addr()))
	req := raft.RequestPreVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(from.node.id), Addr: []byte(from.node.addr())}, Term: from.Term()}
	if err := from.gate.NetworkTransport.RequestPreVote(raft.ServerID(to.node.id), addr, &req, new(raft.RequestPreVoteResponse)); err != nil {
		t.Fatal(err)
	}
}

// applyAfterPause applies cmd and waits until every member applied it.
func applyAfterPause(t *testing.T, gs []*testGroup, cmd string) {
	t.Helper()
	applyAll(t, gs, cmd)
	for _, g := range gs {
		eventually(t, 10*time.Second, "every member applied the entry sent after the pause", func() bool {
			e := g.fsm.entries()
			return len(e) > 0 && e[len(e)-1] == cmd
		})
	}
}

// An idle group's leader closes its pipelines, connections and all, once
// nothing has been sent on them for pipelineIdleClose, and the connections
// its transport pooled: at a thousand idle partitions they were most of a
// node's heap. The next entry opens them again, and every member applies
// it.
func TestIdlePipelineClosesAndOpensAgain(t *testing.T) {
	nodes := newTestNodesWith(t, 3, func(m *Mux) {
		// The appends that tell nothing new, here sent more often than
		// the connection closes (in fabriqd both are 30 s), must not
		// keep it open.
		m.hb.pipelineIdleClose = 300 * time.Millisecond
		m.hb.idleAppendEvery = 100 * time.Millisecond
	})
	gs := startGroup(t, nodes, "g", heartbeatTimings)
	leader := waitLeader(t, gs)
	applyAll(t, gs, "one")
	followers := others(gs, leader)
	conns := func(g *testGroup) int {
		g.layer.mu.Lock()
		defer g.layer.mu.Unlock()
		return len(g.layer.conns)
	}
	eventually(t, 10*time.Second, "both pipelines open", func() bool { return leader.node.mux.HeartbeatStats().PipelinesOpen == 2 })
	// A pre-vote request of the leader's own through its transport, which
	// the follower refuses, leaves a connection in the transport's pool,
	// as appends sent one at a time do (the pipelines may have taken
	// those).
	preVote(t, leader, followers[0])
	if d := dialedConns(leader); d <= 2 {
		t.Fatalf("the leader dialled %d connections, its pipelines' and a pooled one: want more than 2", d)
	}
	before := []int{conns(followers[0]), conns(followers[1])}

	eventually(t, 10*time.Second, "the idle leader's pipelines closed", func() bool {
		return leader.node.mux.HeartbeatStats().PipelinesOpen == 0
	})
	// Their connections end at the followers too.
	for i, f := range followers {
		eventually(t, 10*time.Second, "a follower's end of its pipeline closed", func() bool { return conns(f) < before[i] })
	}
	// And so do the leader's pooled connections.
	eventually(t, 10*time.Second, "every connection the idle leader dialled closed", func() bool { return dialedConns(leader) == 0 })

	applyAfterPause(t, gs, "two")
	if n := leader.node.mux.HeartbeatStats().PipelinesOpen; n == 0 {
		t.Errorf("no pipeline open after an entry was sent; want them opened again")
	}
}

// A follower of a quiet group closes the connections its transport
// pooled for its own requests (here a pre-vote sent through the
// transport; in a node, its appends from when it led) once its leader's
// pipelines have closed: NetworkTransport never closes them, each with
// 256 KiB at both ends, and after the elections and the balancing that
// follow a restart they were most of a node's heap (while votes and
// TimeoutNow were pooled too).
func TestQuietFollowersCloseTheirPooledConnections(t *testing.T) {
	nodes := newTestNodesWith(t, 3, func(m *Mux) {
		m.hb.pipelineIdleClose = 300 * time.Millisecond
		m.hb.quietAfter = 300 * time.Millisecond
	})
	gs := startGroup(t, nodes, "g", heartbeatTimings)
	leader := waitLeader(t, gs)
	fs := others(gs, leader)
	f := fs[0]
	preVote(t, f, fs[1])
	if d := dialedConns(f); d == 0 {
		t.Fatal("the follower's pre-vote left no connection in its pool")
	}
	// The entry wakes the group: the quiet spell at whose end the
	// follower closes its pool starts after the pre-vote.
	applyAll(t, gs, "one")
	eventually(t, 10*time.Second, "the quiet follower's pooled connection closed", func() bool { return dialedConns(f) == 0 })
	applyAfterPause(t, gs, "two")
}

// A quiet follower keeps its pooled connections under a leader whose node
// is older than ProtocolCatchUp: such a leader never closes its pipeline
// and sends an idle append on it every second, and closing would end that
// pipeline's connection after its next append. Under a leader of this
// version it closes them. The quiet spell is driven here by hand (the
// ticks are off), so each close happens, or not, in the call.
func TestQuietFollowerKeepsItsConnectionsUnderAnOlderLeader(t *testing.T) {
	nodes := newTestNodesWith(t, 3, func(m *Mux) {
		m.hb.pipelineIdleClose = 300 * time.Millisecond
		m.hb.tickEvery = time.Hour
	})
	gs := startGroup(t, nodes, "g", heartbeatTimings)
	leader := waitLeader(t, gs)
	fs := others(gs, leader)
	f := fs[0]
	under := leader.node.addr()
	spell := func() {
		now := time.Now()
		f.gate.closeQuietStreams(now, under, true)                  // the spell starts
		f.gate.closeQuietStreams(now.Add(time.Minute), under, true) // and has lasted
		f.gate.closeQuietStreams(now.Add(time.Minute), "", true)    // it ends
	}
	preVote(t, f, fs[1])
	f.node.mux.SetProtocols(func(addr string) int {
		if addr == under {
			return ProtocolHeartbeats
		}
		return RaftProtocol
	})
	spell()
	if dialedConns(f) == 0 {
		t.Fatal("under a leader older than ProtocolCatchUp the quiet follower closed its pooled connections")
	}
	f.node.mux.SetProtocols(nil)
	spell()
	if d := dialedConns(f); d != 0 {
		t.Fatalf("under a leader of this version the quiet follower kept %d pooled connections", d)
	}
}

// An idle group's gates hold no goroutine: once its leader has closed
// the connections of its pipelines and its pool, no member has a
// connection left over which a request could come, and each gate's loop
// ends; the next entry's appends, over new connections, start them again.
// (A thousand idle groups otherwise park a thousand loops per node, which
// the garbage collector scans on every cycle.)
func TestIdleGroupsGatesHoldNoLoop(t *testing.T) {
	nodes := newTestNodesWith(t, 3, func(m *Mux) { m.hb.pipelineIdleClose = 300 * time.Millisecond })
	gs := startGroup(t, nodes, "g", heartbeatTimings)
	leader := waitLeader(t, gs)
	applyAll(t, gs, "one")
	looping := func(g *testGroup) bool {
		g.gate.loopMu.Lock()
		defer g.gate.loopMu.Unlock()
		return g.gate.looping
	}
	for _, f := range others(gs, leader) {
		// The entry committed with one follower's answer: the other's
		// append may still be on its way.
		eventually(t, 10*time.Second, "follower "+f.node.id+"'s gate looping while its leader's appends come", func() bool { return looping(f) })
	}
	for _, g := range gs {
		eventually(t, 3*gateLinger, "the idle group's gates to end their loops", func() bool { return !looping(g) })
	}
	applyAfterPause(t, gs, "two")
}

// A follower whose log was lost (its disk replaced, it came back under the
// same id with nothing) is repaired while its group is idle: its
// heartbeat answers name a last entry below the leader's, and the
// leader's next append goes, though the group sends nothing else and its
// pipelines are closed. (Before the pipelines closed, an append went
// every 30 s regardless, and failed on such a follower.)
func TestIdleGroupRepairsAFollowerThatLostItsLog(t *testing.T) {
	nodes := newTestNodesWith(t, 3, func(m *Mux) { m.hb.pipelineIdleClose = 300 * time.Millisecond })
	gs := startGroup(t, nodes, "g", heartbeatTimings)
	leader := waitLeader(t, gs)
	applyAll(t, gs, "one", "two")
	eventually(t, 10*time.Second, "the idle leader's pipelines closed", func() bool {
		return leader.node.mux.HeartbeatStats().PipelinesOpen == 0
	})
	f := others(gs, leader)[0]
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(f.node.dir, "g")); err != nil {
		t.Fatal(err)
	}
	fsm := newTestFSM(filepath.Join(f.node.dir, "g-stage-again"), true)
	openTestGroup(t, f.node, "g", fsm, heartbeatTimings)
	eventually(t, 20*time.Second, "the emptied follower holding every entry again", func() bool {
		e := fsm.entries()
		return len(e) >= 2 && e[len(e)-1] == "two"
	})
}

// A pipeline whose connection closed for idleness sends no append that
// tells nothing new, not even the one every p.every, while the
// follower's node speaks ProtocolCatchUp (it says when it is behind); if
// the node goes back to an older version, which does not, that append
// goes again. Two real NetworkTransports; the test plays Raft's send loop,
// which offers an append every commit timeout.
func TestClosedPipelineSendsToAnOlderNodeAgain(t *testing.T) {
	leader, follower := tcpTransports(t)
	var received atomic.Int64
	stop := make(chan struct{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		for {
			select {
			case rpc := <-follower.Consumer():
				received.Add(1)
				rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-served }()

	var skipped atomic.Int64
	var speaks atomic.Bool
	speaks.Store(true)
	p := newPipeline(func() (raft.AppendPipeline, error) { return leader.AppendEntriesPipeline("f", follower.LocalAddr()) })
	p.idleClose = 100 * time.Millisecond
	p.skipped, p.every, p.catchUp = &skipped, 200*time.Millisecond, new(atomic.Bool)
	p.speaksCatchUp = speaks.Load
	read := make(chan struct{})
	defer func() { p.Close(); <-read }()
	go func() { // Raft's reader, until the pipeline closes
		defer close(read)
		for {
			select {
			case <-p.Consumer():
			case <-p.stop:
				return
			}
		}
	}()
	send := func(entries bool) {
		t.Helper()
		req := &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: 1, PrevLogTerm: 1, LeaderCommitIndex: 1}
		if entries {
			req.PrevLogEntry, req.Entries = 0, []*raft.Log{{Index: 1, Term: 1}}
		}
		if _, err := p.AppendEntries(req, new(raft.AppendEntriesResponse)); err != nil {
			t.Fatal(err)
		}
	}
	send(true)
	eventually(t, 10*time.Second, "the first append received", func() bool { return received.Load() == 1 })
	// Nothing new for longer than idleClose and every: the connection
	// closes, and no append goes.
	for start := time.Now(); time.Since(start) < time.Second; time.Sleep(10 * time.Millisecond) {
		send(false)
	}
	if p.inner != nil {
		t.Fatal("the pipeline's connection is still open after a second with nothing new")
	}
	if n := received.Load(); n != 1 {
		t.Fatalf("the follower received %d appends, want 1: appends that tell nothing new went while the connection was closed", n)
	}
	speaks.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for received.Load() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("no append went to a follower whose node no longer speaks ProtocolCatchUp")
		}
		send(false)
		time.Sleep(10 * time.Millisecond)
	}
}

// A leader whose group has had no proposal for pipelineInUse (a new
// leadership's first entry, a restarted follower's catch-up) closes its
// pipelines after pipelineUnusedClose; once the group is in use again, they
// stay open through pauses shorter than pipelineIdleClose.
func TestUnusedGroupClosesItsPipelinesSooner(t *testing.T) {
	nodes := newTestNodesWith(t, 3, func(m *Mux) {
		m.hb.pipelineIdleClose = time.Hour
		m.hb.pipelineUnusedClose = 300 * time.Millisecond
		m.hb.pipelineInUse = time.Hour
		m.hb.idleAppendEvery = 100 * time.Millisecond
	})
	gs := startGroup(t, nodes, "g", heartbeatTimings)
	leader := waitLeader(t, gs)
	// The leadership's first entry goes to both followers: it opens the
	// pipelines, and nothing was proposed.
	waitEntries(t, gs, nil)
	eventually(t, 10*time.Second, "the unused group's pipelines to close", func() bool {
		return leader.node.mux.HeartbeatStats().PipelinesOpen == 0
	})
	applyAfterPause(t, gs, "one")
	stats := leader.node.mux.HeartbeatStats
	eventually(t, 10*time.Second, "the pipelines open again", func() bool { return stats().PipelinesOpen == 2 })
	// Each append Raft hands a pipeline looks whether to close it; those
	// that tell nothing new are counted as skipped. 300 of them, every
	// 5 ms to each follower, take well over pipelineUnusedClose.
	skipped := stats().IdleAppendsSkipped
	eventually(t, 30*time.Second, "300 appends that tell nothing new", func() bool { return stats().IdleAppendsSkipped >= skipped+300 })
	if n := stats().PipelinesOpen; n != 2 {
		t.Fatalf("%d pipelines open in a group in use, after more than pipelineUnusedClose idle; want 2", n)
	}
	leader.gate.quiet.lastProposed.Store(time.Now().Add(-2 * time.Hour).UnixNano())
	eventually(t, 10*time.Second, "the pipelines of a group whose last proposal is older than pipelineInUse to close", func() bool {
		return leader.node.mux.HeartbeatStats().PipelinesOpen == 0
	})
}

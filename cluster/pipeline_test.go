package cluster

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A follower that refuses a pipelined append (its log store failed a
// write) must not wedge the leader's replication to it. Raft's reader
// stops at the first refusal; the sends that follow must fail at once
// instead of waiting for ever on the transport's unbuffered channels
// (hashicorp/raft issue 612), so that Raft falls back to one request at a
// time and the follower catches up. Two real NetworkTransports over TCP;
// the test plays Raft's side of the pipeline as hashicorp/raft 1.8 does.
func TestPipelineNeverBlocksAfterARefusal(t *testing.T) {
	leader, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	follower, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()

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

	inner, err := leader.AppendEntriesPipeline("f", follower.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	p := newPipeline(inner)
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

// An idle group's leader closes its pipelines, connections and all, once
// nothing has been sent on them for pipelineIdleClose, and the connections
// its transport pooled: at a thousand idle partitions they were most of a
// node's heap. The next entry opens them again, and every member applies
// it.
func TestIdlePipelineClosesAndOpensAgain(t *testing.T) {
	nodes := newTestNodesWith(t, 3, func(m *Mux) {
		// As in fabriqd, where both are 30 s: the appends that tell
		// nothing new must not keep the connection open.
		m.hb.pipelineIdleClose = 300 * time.Millisecond
		m.hb.idleAppendEvery = 300 * time.Millisecond
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
	// A pre-vote request of the leader's own, which the follower refuses,
	// leaves a connection in its transport's pool, as its election's
	// requests did (the pipelines may have taken those).
	f := followers[0]
	addr, _ := leader.gate.to(raft.ServerID(f.node.id), raft.ServerAddress(f.node.addr()))
	req := raft.RequestPreVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(leader.node.id), Addr: []byte(leader.node.addr())}, Term: leader.Term()}
	if err := leader.gate.NetworkTransport.RequestPreVote(raft.ServerID(f.node.id), addr, &req, new(raft.RequestPreVoteResponse)); err != nil {
		t.Fatal(err)
	}
	dialed := func(g *testGroup) int {
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
	if d := dialed(leader); d <= 2 {
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
	eventually(t, 10*time.Second, "every connection the idle leader dialled closed", func() bool { return dialed(leader) == 0 })

	applyAll(t, gs, "two")
	for _, g := range gs {
		eventually(t, 10*time.Second, "every member applied the entry sent after the pause", func() bool {
			e := g.fsm.entries()
			return len(e) > 0 && e[len(e)-1] == "two"
		})
	}
	if n := leader.node.mux.HeartbeatStats().PipelinesOpen; n == 0 {
		t.Errorf("no pipeline open after an entry was sent; want them opened again")
	}
}

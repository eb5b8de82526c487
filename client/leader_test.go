package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/transport"
)

// fakeNode answers the commands a producer's attach sends: it says it
// leads every partition it is asked about, and answers CreateProducer
// with create (a ProducerReady, or an error). Other commands go to other,
// when set, which answers them or returns nil to leave them unanswered.
type fakeNode struct {
	ln     net.Listener
	create func(*transport.CreateProducer) transport.Command
	other  func(transport.Command) transport.Command
	// lookup, when set, answers Lookup instead of "here".
	lookup  func(*transport.Lookup) transport.Command
	lookups atomic.Int64
	creates atomic.Int64
	wg      sync.WaitGroup
}

func startFakeNode(t *testing.T, create func(*transport.CreateProducer) transport.Command) *fakeNode {
	t.Helper()
	return startFakeNodeWith(t, create, nil)
}

func startFakeNodeWith(t *testing.T, create func(*transport.CreateProducer) transport.Command, other func(transport.Command) transport.Command) *fakeNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &fakeNode{ln: ln, create: create, other: other}
	n.wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			n.wg.Go(func() { n.serve(nc) })
		}
	})
	t.Cleanup(func() { ln.Close(); n.wg.Wait() })
	return n
}

func (n *fakeNode) addr() string { return n.ln.Addr().String() }

func (n *fakeNode) serve(nc net.Conn) {
	c, err := transport.NewConn(nc, transport.Config{})
	if err != nil {
		nc.Close()
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		cmd, err := c.Receive()
		if err != nil {
			return
		}
		var answer transport.Command
		switch cmd := cmd.(type) {
		case *transport.Connect:
			answer = &transport.Connected{ProtocolVersion: transport.ProtocolVersion}
		case *transport.Ping:
			answer = &transport.Pong{}
		case *transport.PartitionedMetadata:
			answer = &transport.PartitionedMetadataResult{RequestID: cmd.RequestID, Partitions: 1}
		case *transport.Lookup:
			n.lookups.Add(1)
			answer = &transport.LookupResult{RequestID: cmd.RequestID, Here: true}
			if n.lookup != nil {
				answer = n.lookup(cmd)
			}
		case *transport.CreateProducer:
			n.creates.Add(1)
			answer = n.create(cmd)
		case *transport.CloseProducer:
			answer = &transport.Success{RequestID: cmd.RequestID}
		default:
			if n.other == nil {
				continue
			}
			if answer = n.other(cmd); answer == nil {
				continue
			}
		}
		if err := c.Send(ctx, answer); err != nil {
			return
		}
	}
}

// attachProducer makes a client of the node at addr and, through it, a
// producer of one stream; both close with the test.
func attachProducer(t *testing.T, addr string) {
	t.Helper()
	c, err := New(Options{URL: "fabriq://" + addr, OperationTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p, err := c.CreateProducer(context.Background(), ProducerOptions{Stream: "persistent://t/f/s"})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	t.Cleanup(func() { p.Close() })
}

// A producer that attaches where a lookup pointed, and is told there that
// another node leads now (the node asked had not heard of the failover
// yet), attaches to that node at once: it does not ask the same stale
// lookup again after a backoff.
func TestProducerFollowsLeaderHint(t *testing.T) {
	leader := startFakeNode(t, func(c *transport.CreateProducer) transport.Command {
		return &transport.ProducerReady{RequestID: c.RequestID, ProducerName: c.ProducerName, LastSequenceID: -1}
	})
	old := startFakeNode(t, func(c *transport.CreateProducer) transport.Command {
		return &transport.Error{RequestID: c.RequestID, Code: transport.CodeNotLeader, Message: "node n2 leads", LeaderHint: leader.addr()}
	})
	attachProducer(t, old.addr())
	if got := leader.creates.Load(); got != 1 {
		t.Errorf("the leader was asked to create the producer %d times, want 1", got)
	}
	if got := old.lookups.Load() + leader.lookups.Load(); got != 1 {
		t.Errorf("%d lookups, want 1: the hint is followed, not looked up again", got)
	}
}

// A lookup that names a leader whose port refuses the client (its process
// was just killed; the node asked has not found out yet) is asked again
// at once, with that leader's address, so that the node can look for
// itself rather than name it again: here the node names the dead leader
// until it is told, and the producer attaches only because it was.
func TestLookupTellsTheNodeOfAnUnreachableLeader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // its port now refuses
	var mu sync.Mutex
	var told []string
	n := startFakeNode(t, func(c *transport.CreateProducer) transport.Command {
		return &transport.ProducerReady{RequestID: c.RequestID, ProducerName: c.ProducerName, LastSequenceID: -1}
	})
	n.lookup = func(l *transport.Lookup) transport.Command {
		mu.Lock()
		told = append(told, l.Unreachable)
		mu.Unlock()
		if l.Unreachable == dead {
			return &transport.LookupResult{RequestID: l.RequestID, Here: true}
		}
		return &transport.LookupResult{RequestID: l.RequestID, Address: dead, NodeID: "n2"}
	}
	attachProducer(t, n.addr())
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 2 || told[0] != "" || told[1] != dead {
		t.Errorf("the lookups said the unreachable leader was %q; want none, then %s", told, dead)
	}
}

// A consumer whose subscribe goes unanswered past its deadline closes the
// consumer id it asked for: a broker that answers later must not keep a
// consumer attached that nobody reads, holding its name and its keys.
func TestAbandonedSubscribeIsClosed(t *testing.T) {
	subscribed := make(chan uint64, 1)
	closed := make(chan uint64, 1)
	n := startFakeNodeWith(t, nil, func(cmd transport.Command) transport.Command {
		switch c := cmd.(type) {
		case *transport.Subscribe:
			select { // and never answered
			case subscribed <- c.ConsumerID:
			default:
			}
		case *transport.CloseConsumer:
			select {
			case closed <- c.ConsumerID:
			default:
			}
		}
		return nil
	})
	c, err := New(Options{URL: "fabriq://" + n.addr(), OperationTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = c.Subscribe(ctx, ConsumerOptions{Stream: "persistent://t/f/s", Subscription: "s", Type: KeyShared, Name: "a"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("subscribe answered by no one returned %v, want the deadline", err)
	}
	id := <-subscribed
	select {
	case got := <-closed:
		if got != id {
			t.Fatalf("closed consumer %d, want the abandoned %d", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the abandoned consumer id was never closed")
	}
}

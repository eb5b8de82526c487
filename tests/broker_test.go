package tests

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/transport"
)

// A 4-partition stream takes 100,000 messages and gives every one back, in
// offset order within each partition.
func TestHundredThousandMessages(t *testing.T) {
	n := startNode(t, "n1", t.TempDir())
	c := newClient(t, n.url())
	ctx := testContext(t, 3*time.Minute)
	const stream = "persistent://acme/prod/bulk"
	const total = 100_000
	if err := createStream(ctx, c, stream, 4, 1); err != nil {
		t.Fatal(err)
	}
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "all", SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sendErr error
	wg.Add(total)
	for i := range total {
		p.SendAsync(ctx, &client.ProducerMessage{Payload: []byte(fmt.Sprintf("%06d", i))}, func(_ client.MessageID, _ *client.ProducerMessage, err error) {
			if err != nil {
				mu.Lock()
				sendErr = err
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if sendErr != nil {
		t.Fatal(sendErr)
	}
	seen := make([]bool, total)
	last := map[int]uint64{}
	for got := 0; got < total; got++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d messages: %v", got, err)
		}
		if prev, ok := last[m.ID.Partition]; ok && m.ID.Offset <= prev {
			t.Fatalf("partition %d: offset %d after %d", m.ID.Partition, m.ID.Offset, prev)
		}
		last[m.ID.Partition] = m.ID.Offset
		var i int
		fmt.Sscanf(string(m.Payload), "%d", &i)
		if seen[i] {
			t.Fatalf("message %d delivered twice", i)
		}
		seen[i] = true
		if err := cons.Ack(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if len(last) != 4 {
		t.Fatalf("messages came from %d partitions, want 4", len(last))
	}
}

// kill -9 and restart: every acknowledged message and every committed ack
// is still there; nothing acked is delivered again.
func TestKillRestart(t *testing.T) {
	t.Parallel() // mostly waiting on failure detection and restarts: see TestMain
	dir := t.TempDir()
	n := startNode(t, "n1", dir)
	c := newClient(t, n.url())
	ctx := testContext(t, 2*time.Minute)
	const stream = "persistent://acme/prod/crash"
	if err := createStream(ctx, c, stream, 2, 1); err != nil {
		t.Fatal(err)
	}
	// Named: the same consumer comes back after the crash (another one
	// would wait out the reconnect grace, SUB-7).
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Name: "crash-reader", SubscriptionInitialPosition: client.Earliest, AckWithReceipt: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]client.MessageID{}
	var ackMu sync.Mutex
	var wg sync.WaitGroup
	for i := range 5000 {
		wg.Add(1)
		p.SendAsync(ctx, &client.ProducerMessage{Payload: []byte(fmt.Sprint("m", i))}, func(id client.MessageID, m *client.ProducerMessage, err error) {
			defer wg.Done()
			if err == nil {
				ackMu.Lock()
				acked[string(m.Payload)] = id
				ackMu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(acked) != 5000 {
		t.Fatalf("%d of 5000 sends acknowledged before the crash", len(acked))
	}
	consumedAcked := map[string]bool{}
	for range 2000 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := cons.Ack(ctx, m); err != nil {
			t.Fatal(err)
		}
		consumedAcked[string(m.Payload)] = true
	}
	n.kill()
	c.Close()

	n2 := startNode(t, "n1", dir)
	c2 := newClient(t, n2.url())
	cons2, err := c2.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Name: "crash-reader"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	want := len(acked) - len(consumedAcked)
	for len(got) < want {
		m, err := cons2.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of %d: %v", len(got), want, err)
		}
		payload := string(m.Payload)
		if consumedAcked[payload] {
			t.Fatalf("%s was acknowledged before the crash and delivered again", payload)
		}
		if id, ok := acked[payload]; !ok || id != m.ID {
			t.Fatalf("%s came back as %v, was acknowledged as %v", payload, m.ID, id)
		}
		got[payload] = true
	}
}

// EX-1: a second exclusive consumer is refused while the first keeps its
// subscription.
func TestSecondExclusiveConsumerRefused(t *testing.T) {
	n := startNode(t, "n1", t.TempDir())
	c := newClient(t, n.url())
	ctx := testContext(t, time.Minute)
	const stream = "persistent://acme/prod/excl"
	if err := createStream(ctx, c, stream, 1, 1); err != nil {
		t.Fatal(err)
	}
	first, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s"})
	if err != nil {
		t.Fatal(err)
	}
	other := newClient(t, n.url())
	_, err = other.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s"})
	if transport.CodeOf(err) != transport.CodeConsumerBusy {
		t.Fatalf("second exclusive consumer: %v, want ConsumerBusy", err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("still mine")}); err != nil {
		t.Fatal(err)
	}
	m, err := first.Receive(ctx)
	if err != nil || string(m.Payload) != "still mine" {
		t.Fatalf("first consumer got %v, %v", m, err)
	}
}

// Bad frames and bad requests get clear errors; the node keeps serving
// everyone else.
func TestBadInputLeavesNodeServing(t *testing.T) {
	n := startNode(t, "n1", t.TempDir())
	c := newClient(t, n.url())
	ctx := testContext(t, time.Minute)
	const stream = "persistent://acme/prod/bad"
	if err := createStream(ctx, c, stream, 1, 1); err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	sendOK := func(what string) {
		t.Helper()
		if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte(what)}); err != nil {
			t.Fatalf("after %s the node does not serve: %v", what, err)
		}
	}

	rawFrames := map[string][]byte{
		"oversized length": binary.BigEndian.AppendUint32(nil, 0xffffffff),
		"garbage body":     append(binary.BigEndian.AppendUint32(nil, 5), 0xc1, 0xc1, 0xc1, 0xc1, 0xc1),
		"zero length":      binary.BigEndian.AppendUint32(nil, 0),
	}
	for name, frame := range rawFrames {
		t.Run(name, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", n.addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := conn.Write(frame); err != nil {
				t.Fatal(err)
			}
			tc, err := transport.NewConn(conn, transport.Config{})
			if err != nil {
				t.Fatal(err)
			}
			cmd, err := tc.Receive()
			if err != nil {
				t.Fatalf("no Error frame before the close: %v", err)
			}
			if e, ok := cmd.(*transport.Error); !ok || (e.Code != transport.CodeTooLarge && e.Code != transport.CodeProtocol) {
				t.Fatalf("answer %#v, want an Error with TooLarge or ProtocolError", cmd)
			}
			if _, err := tc.Receive(); err == nil {
				t.Fatal("the connection stayed open")
			}
			sendOK(name)
		})
	}

	requests := []struct {
		name string
		run  func() error
		code transport.ErrorCode
	}{
		{"stream of a fabric that does not exist", func() error {
			_, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: "persistent://acme/nowhere/nope"})
			return err
		}, transport.CodeFabricNotFound},
		{"bad stream name", func() error { return createStream(ctx, c, "persistent://acme/prod/s-partition-3", 1, 1) }, 0},
		{"too many replicas", func() error { return createStream(ctx, c, "persistent://acme/prod/r3", 1, 3) }, transport.CodeInvalidArgument},
		{"too large message (MSG-6)", func() error {
			_, err := p.Send(ctx, &client.ProducerMessage{Payload: make([]byte, 5<<20+1)})
			return err
		}, transport.CodeTooLarge},
	}
	for _, r := range requests {
		t.Run(r.name, func(t *testing.T) {
			err := r.run()
			if err == nil {
				t.Fatal("accepted")
			}
			if r.code != 0 && transport.CodeOf(err) != r.code {
				t.Fatalf("error %v, want code %v", err, r.code)
			}
			sendOK(r.name)
		})
	}

	t.Run("bad permits and acks", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", n.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		tc, err := transport.NewConn(conn, transport.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		if _, err := transport.Handshake(ctx, tc, &transport.Connect{ClientName: "raw"}); err != nil {
			t.Fatal(err)
		}
		part := stream
		expectError := func(cmd transport.Command, code transport.ErrorCode) {
			t.Helper()
			if err := tc.Send(ctx, cmd); err != nil {
				t.Fatal(err)
			}
			res, err := tc.Receive()
			if err != nil {
				t.Fatal(err)
			}
			if e, ok := res.(*transport.Error); !ok || e.Code != code {
				t.Fatalf("%T answered %#v, want code %v", cmd, res, code)
			}
		}
		if err := tc.Send(ctx, &transport.Subscribe{RequestID: 1, ConsumerID: 7, Stream: part, Subscription: "raw"}); err != nil {
			t.Fatal(err)
		}
		if res, err := tc.Receive(); err != nil {
			t.Fatal(err)
		} else if _, ok := res.(*transport.SubscribeReady); !ok {
			t.Fatalf("subscribe answered %#v", res)
		}
		expectError(&transport.Flow{ConsumerID: 7, Permits: -5}, transport.CodeInvalidArgument)
		expectError(&transport.Flow{ConsumerID: 7, Permits: 1 << 40}, transport.CodeInvalidArgument)
		expectError(&transport.Flow{ConsumerID: 99, Permits: 10}, transport.CodeConsumerNotFound)
		expectError(&transport.Ack{RequestID: 2, ConsumerID: 7, Offsets: []uint64{1 << 50}}, transport.CodeInvalidArgument)
		expectError(&transport.Ack{RequestID: 3, ConsumerID: 99, Offsets: []uint64{0}}, transport.CodeConsumerNotFound)
		sendOK("bad permits and acks")
	})
}

// SIGTERM stops a node cleanly (status 0), and it comes back with its
// messages.
func TestGracefulStop(t *testing.T) {
	t.Parallel() // mostly waiting on failure detection and restarts: see TestMain
	dir := t.TempDir()
	n := startNode(t, "n1", dir)
	c := newClient(t, n.url())
	ctx := testContext(t, time.Minute)
	const stream = "persistent://acme/prod/term"
	if err := createStream(ctx, c, stream, 1, 1); err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("kept")})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	n2 := startNode(t, "n1", dir)
	c2 := newClient(t, n2.url())
	cons, err := c2.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != id || string(m.Payload) != "kept" {
		t.Fatalf("after a clean restart got %v %q, want %v", m.ID, m.Payload, id)
	}
}

// freeAddr returns a loopback address with a port that was free a moment
// ago, for a node that must come back on the same address. Ports come from
// below the kernel's ephemeral range (net.ipv4.ip_local_port_range starts
// at 32768 by default), so that no outgoing connection can take one while
// its node is down.
func freeAddr(t testing.TB) string {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	for range 1000 {
		port := 20000 + portRand.IntN(12000)
		if handedOut[port] {
			continue // given to a node that may not have bound it yet
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		// Gossip also needs the UDP port.
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err != nil {
			continue
		}
		pc.Close()
		handedOut[port] = true
		return addr
	}
	t.Fatal("no free port below the ephemeral range")
	return ""
}

var (
	// portMu guards handedOut and portRand: parallel tests pick ports too.
	portMu sync.Mutex
	// handedOut holds the ports freeAddr returned.
	handedOut = map[int]bool{}
	// portRand spreads the ports tests pick; seeded by the process id so
	// that two test binaries running at once do not walk the same sequence.
	portRand = rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
)

// A producer and a consumer ride through kill -9 and restart of their node:
// the client reconnects, resends in-flight messages with their sequence
// ids, the broker drops the duplicates, and every acknowledged message is
// delivered.
func TestClientsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	clientAddr, raftAddr := freeAddr(t), freeAddr(t)
	args := []string{"--client-addr", clientAddr, "--raft-addr", raftAddr}
	n := startNode(t, "n1", dir, args...)
	c := newClient(t, n.url())
	ctx := testContext(t, 2*time.Minute)
	const stream = "persistent://acme/prod/ride"
	if err := createStream(ctx, c, stream, 2, 1); err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const total = 3000
	var mu sync.Mutex
	acked := map[string]client.MessageID{}
	var failed []error
	var wg sync.WaitGroup
	wg.Add(total)
	for i := range total {
		if i == total/2 {
			n.kill()
			n = startNode(t, "n1", dir, args...)
		}
		p.SendAsync(ctx, &client.ProducerMessage{Payload: []byte(fmt.Sprint("m", i))}, func(id client.MessageID, m *client.ProducerMessage, err error) {
			mu.Lock()
			if err != nil {
				failed = append(failed, err)
			} else {
				acked[string(m.Payload)] = id
			}
			mu.Unlock()
			wg.Done()
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d sends failed across the restart, first: %v", len(failed), failed[0])
	}
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < total {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of %d: %v", len(seen), total, err)
		}
		payload := string(m.Payload)
		if seen[payload] {
			t.Fatalf("%s stored twice: the resend was not deduplicated", payload)
		}
		seen[payload] = true
		if id, ok := acked[payload]; !ok || id != m.ID {
			t.Fatalf("%s read as %v, acknowledged as %v", payload, m.ID, id)
		}
	}
	info, err := c.DescribeStream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	var stored uint64
	for _, part := range info.Partitions {
		stored += part.NextOffset
	}
	if stored != total {
		t.Fatalf("the stream holds %d messages, %d were sent", stored, total)
	}
}

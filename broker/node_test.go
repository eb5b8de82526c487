package broker_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/broker"
	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// startNode runs a one-node cluster on loopback ports the OS picks.
func startNode(t *testing.T, dir string) *broker.Node {
	t.Helper()
	return startNodeWith(t, dir, nil)
}

// startNodeWith is startNode with mod applied to the configuration.
func startNodeWith(t *testing.T, dir string, mod func(*broker.Config)) *broker.Node {
	t.Helper()
	cfg := nodeConfig(dir)
	if mod != nil {
		mod(&cfg)
	}
	n, err := broker.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func newClient(t *testing.T, n *broker.Node) *client.Client {
	t.Helper()
	c, err := client.New(client.Options{URL: "fabriq://" + n.Addr(), OperationTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// EX-4: one exclusive consumer holds every partition of a partitioned
// stream; MSG-1: per partition, ids order by offset.
func TestProduceConsume(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/orders"
	if err := createInFabric(ctx, c, stream, 4, 1); err != nil {
		t.Fatal(err)
	}
	if err := createInFabric(ctx, c, stream, 4, 1); transport.CodeOf(err) != transport.CodeStreamExists {
		t.Fatalf("second create: %v", err)
	}
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	const total = 2000
	errs := make(chan error, total)
	for i := range total {
		p.SendAsync(ctx, &client.ProducerMessage{Key: fmt.Sprint("k", i%37), Payload: []byte(fmt.Sprint(i))}, func(id client.MessageID, _ *client.ProducerMessage, err error) {
			errs <- err
		})
	}
	for range total {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	last := map[int]uint64{}
	for len(seen) < total {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d messages: %v", len(seen), err)
		}
		if prev, ok := last[m.ID.Partition]; ok && m.ID.Offset <= prev {
			t.Fatalf("partition %d went from offset %d to %d", m.ID.Partition, prev, m.ID.Offset)
		}
		last[m.ID.Partition] = m.ID.Offset
		if seen[string(m.Payload)] {
			t.Fatalf("message %s delivered twice", m.Payload)
		}
		seen[string(m.Payload)] = true
		if err := cons.Ack(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// EX-1: a second consumer on the exclusive subscription is refused.
	_, err = c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s"})
	if transport.CodeOf(err) != transport.CodeConsumerBusy {
		t.Fatalf("second exclusive consumer: %v", err)
	}
	var te *transport.Error
	if !errors.As(err, &te) || te.Message != "Exclusive consumer is already connected" {
		t.Fatalf("second exclusive consumer error text: %v", err)
	}
}

// nodeConfig is a one-node cluster's configuration on dir, with fast
// Raft timings.
func nodeConfig(dir string) broker.Config {
	return broker.Config{
		NodeID:     "n1",
		DataDir:    dir,
		ClientAddr: "127.0.0.1:0",
		RaftAddr:   "127.0.0.1:0",
		Raft:       broker.RaftTimings{HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond},
	}
}

// A node started by mistake on a data directory another node runs on
// stops at once with an error that says so, and leaves the running node
// and its data alone; once that node has stopped, a node starts on the
// directory.
func TestDataDirectoryHeldByOneNode(t *testing.T) {
	dir := t.TempDir()
	first := startNode(t, dir)
	c := newClient(t, first)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/held"
	createStream(ctx, t, c, stream, 1)
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	send(ctx, t, p, "", "before")

	second, err := broker.NewNode(nodeConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Start(ctx); !errors.Is(err, broker.ErrDataDirInUse) {
		second.Close()
		t.Fatalf("a second node on the data directory: %v, want ErrDataDirInUse", err)
	}
	second.Close()
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatalf("the first node, after a second one tried its directory: %v", err)
	}

	first.Close()
	// A closed node does not start again, nor take the directory.
	if err := first.Start(ctx); err == nil {
		t.Fatal("a closed node started again")
	}
	again := startNode(t, dir)
	c2 := newClient(t, again)
	r, err := c2.CreateReader(ctx, client.ReaderOptions{Stream: stream, StartPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, want := range []string{"before", "after"} {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload) != want {
			t.Fatalf("read %q, want %q", m.Payload, want)
		}
	}
}

// A restart keeps every acknowledged message and every committed ack:
// the consumer gets exactly what it had not acknowledged (EX-3).
func TestRestartKeepsMessagesAndAcks(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir)
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/restart"
	if err := createInFabric(ctx, c, stream, 2, 1); err != nil {
		t.Fatal(err)
	}
	// A named consumer: after the restart the same one comes back (a
	// different one would wait out the reconnect grace, SUB-7).
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Name: "reader-1", SubscriptionInitialPosition: client.Earliest, AckWithReceipt: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, Name: "restarter"})
	if err != nil {
		t.Fatal(err)
	}
	sent := map[string]bool{}
	for i := range 300 {
		payload := fmt.Sprint("m", i)
		if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte(payload)}); err != nil {
			t.Fatal(err)
		}
		sent[payload] = true
	}
	acked := map[string]bool{}
	for range 120 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := cons.Ack(ctx, m); err != nil {
			t.Fatal(err)
		}
		acked[string(m.Payload)] = true
	}
	c.Close()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	n2 := startNode(t, dir)
	c2 := newClient(t, n2)
	cons2, err := c2.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Name: "reader-1"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for len(got) < len(sent)-len(acked) {
		m, err := cons2.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of %d: %v", len(got), len(sent)-len(acked), err)
		}
		payload := string(m.Payload)
		if acked[payload] {
			t.Fatalf("acknowledged message %s delivered again after restart", payload)
		}
		if got[payload] {
			t.Fatalf("message %s delivered twice", payload)
		}
		got[payload] = true
	}
	// The producer's sequence ids carry on: dedup state survived.
	p2, err := c2.CreateProducer(ctx, client.ProducerOptions{Stream: stream, Name: "restarter"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p2.Send(ctx, &client.ProducerMessage{Payload: []byte("after")})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons2.Receive(ctx)
	if err != nil || string(m.Payload) != "after" || m.ID != id {
		t.Fatalf("after restart got %v %v, want the new message %v", m, err, id)
	}
}

// SUB-5: a reader reads from where it is told, acknowledges nothing and
// leaves no subscription behind.
func TestReader(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/read"
	if err := createInFabric(ctx, c, stream, 1, 1); err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	var ids []client.MessageID
	for i := range 10 {
		id, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	r, err := c.CreateReader(ctx, client.ReaderOptions{Stream: stream, StartPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		m, err := r.Next(ctx)
		if err != nil || m.ID != ids[i] {
			t.Fatalf("reader message %d: %v %v, want %v", i, m, err, ids[i])
		}
	}
	r.Close()
	from := ids[6]
	r2, err := c.CreateReader(ctx, client.ReaderOptions{Stream: stream, StartMessageID: &from})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	m, err := r2.Next(ctx)
	if err != nil || m.ID != from {
		t.Fatalf("reader from %v got %v %v", from, m, err)
	}
	info, err := c.DescribeStream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if subs := info.Partitions[0].Subscriptions; len(subs) != 0 {
		t.Fatalf("readers left subscriptions behind: %+v", subs)
	}
}

// KS-6: with key-based batching interleaved keys go out as one batch per
// key; every message is stored once and each key keeps its order.
func TestKeyBasedBatching(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/keyed"
	if err := createInFabric(ctx, c, stream, 1, 1); err != nil {
		t.Fatal(err)
	}
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, KeyBasedBatching: true, BatchingMaxPublishDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const total = 300
	errs := make(chan error, total)
	for i := range total {
		key := fmt.Sprint("k", i%3)
		if i%10 == 9 {
			key = ""
		}
		p.SendAsync(ctx, &client.ProducerMessage{Key: key, Payload: []byte(fmt.Sprint(i))}, func(_ client.MessageID, _ *client.ProducerMessage, err error) { errs <- err })
	}
	for range total {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	last := map[string]int{}
	for range total {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var i int
		fmt.Sscan(string(m.Payload), &i)
		if prev, ok := last[m.Key]; ok && i <= prev {
			t.Fatalf("key %q: message %d after %d", m.Key, i, prev)
		}
		last[m.Key] = i
	}
	if len(last) != 4 {
		t.Fatalf("keys seen: %v", last)
	}
}

// SH-1, SH-3, SH-5: each message goes to one consumer; a consumer that
// leaves without acknowledging gives its messages to the others.
func TestSharedSubscription(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/shared"
	if err := createInFabric(ctx, c, stream, 1, 1); err != nil {
		t.Fatal(err)
	}
	var consumers []*client.Consumer
	for _, name := range []string{"x", "y", "z"} {
		cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "work", Type: client.Shared, Name: name, ReceiverQueueSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		consumers = append(consumers, cons)
	}
	if err := consumers[0].AckCumulative(ctx, &client.Message{}); !errors.Is(err, client.ErrNotAllowed) {
		t.Fatalf("cumulative ack on shared: %v", err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	const total = 300
	for i := range total {
		p.SendAsync(ctx, &client.ProducerMessage{Payload: []byte(fmt.Sprint(i))}, func(client.MessageID, *client.ProducerMessage, error) {})
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// x takes five messages and leaves without acknowledging them.
	held := map[string]bool{}
	for range 5 {
		m, err := consumers[0].Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held[string(m.Payload)] = true
	}
	consumers[0].Close()
	var mu sync.Mutex
	acked := map[string]string{}
	var wg sync.WaitGroup
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	for _, cons := range consumers[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := cons.Receive(rctx)
				if err != nil {
					return
				}
				mu.Lock()
				if prev, dup := acked[string(m.Payload)]; dup {
					t.Errorf("%s acknowledged by %s and %s", m.Payload, prev, cons.Name())
				}
				acked[string(m.Payload)] = cons.Name()
				done := len(acked) == total
				mu.Unlock()
				cons.Ack(rctx, m)
				if done {
					rcancel()
				}
			}
		}()
	}
	wg.Wait()
	if len(acked) != total {
		t.Fatalf("%d of %d messages acknowledged", len(acked), total)
	}
	byConsumer := map[string]int{}
	for payload, who := range acked {
		byConsumer[who]++
		if held[payload] && who == "x" {
			t.Fatalf("%s stayed with the consumer that left", payload)
		}
	}
	if byConsumer["y"] == 0 || byConsumer["z"] == 0 {
		t.Fatalf("messages per consumer %v: not shared", byConsumer)
	}
}

// FO-1, FO-3: consumers b, a, c on four partitions: one master each, a, b,
// c, a, the others standing by; when a master leaves, the next in line
// gets its partition from the first unacknowledged message (FO-5).
func TestFailoverSubscription(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/failover"
	if err := createInFabric(ctx, c, stream, 4, 1); err != nil {
		t.Fatal(err)
	}
	cons := map[string]*client.Consumer{}
	for _, name := range []string{"b", "a", "c"} {
		cc, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "fo", Type: client.Failover, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		cons[name] = cc
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, MessageRouter: func(m *client.ProducerMessage, n int) int {
		var i int
		fmt.Sscan(m.Key, &i)
		return i % n
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if _, err := p.Send(ctx, &client.ProducerMessage{Key: fmt.Sprint(i), Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[int]string{0: "a", 1: "b", 2: "c", 3: "a"}
	for name, cc := range cons {
		expect := 0
		for _, m := range want {
			if m == name {
				expect += 2
			}
		}
		for range expect {
			m, err := cc.Receive(ctx)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if want[m.ID.Partition] != name {
				t.Fatalf("partition %d delivered to %s, its master is %s", m.ID.Partition, name, want[m.ID.Partition])
			}
			if m.ID.Partition != 1 {
				cc.Ack(ctx, m)
			}
		}
	}
	// b leaves with partition 1's two messages unacknowledged: with a and c
	// left, partition 1 goes to candidate 1 mod 2, c.
	cons["b"].Close()
	for range 2 {
		m, err := cons["c"].Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.ID.Partition != 1 {
			t.Fatalf("c got partition %d, want the unacknowledged messages of partition 1", m.ID.Partition)
		}
	}
}

// EX-2: a holder whose connection went silent (it no longer reads, no FIN
// was sent) is probed and replaced by a newcomer within the probe timeout;
// a live holder keeps its place (EX-1, tested with the other clients).
func TestExclusiveReplacesSilentHolder(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/silent"
	if err := createInFabric(ctx, c, stream, 1, 1); err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	raw, err := transport.NewConn(nc, transport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := transport.Handshake(ctx, raw, &transport.Connect{ClientName: "silent"}); err != nil {
		t.Fatal(err)
	}
	if err := raw.Send(ctx, &transport.Subscribe{RequestID: 1, ConsumerID: 1, Stream: stream, Subscription: "s", ConsumerName: "silent"}); err != nil {
		t.Fatal(err)
	}
	if res, err := raw.Receive(); err != nil {
		t.Fatal(err)
	} else if _, ok := res.(*transport.SubscribeReady); !ok {
		t.Fatalf("subscribe answered %#v", res)
	}
	// From here the silent client reads nothing and answers no ping. The
	// test's context (30 s) ends before the node's read idle timeout
	// (60 s) would free the place: only the probe can.
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Name: "newcomer"})
	if err != nil {
		t.Fatalf("the newcomer was refused: %v", err)
	}
	defer cons.Close()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("to the newcomer")}); err != nil {
		t.Fatal(err)
	}
	if m, err := cons.Receive(ctx); err != nil || string(m.Payload) != "to the newcomer" {
		t.Fatalf("newcomer got %v %v", m, err)
	}
}

// SH-6: a nacked message comes back after the nack delay, with its
// redelivery count.
func TestNackRedelivery(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/nack"
	if err := createInFabric(ctx, c, stream, 1, 1); err != nil {
		t.Fatal(err)
	}
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.Shared, NackRedeliveryDelay: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("again")})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil || m.ID != id || m.RedeliveryCount != 0 {
		t.Fatalf("first delivery %+v %v", m, err)
	}
	nacked := time.Now()
	cons.Nack(m)
	m, err = cons.Receive(ctx)
	if err != nil || m.ID != id {
		t.Fatalf("redelivery %+v %v", m, err)
	}
	if waited := time.Since(nacked); waited < 200*time.Millisecond {
		t.Fatalf("redelivered after %v, before the 200ms nack delay", waited)
	}
	if m.RedeliveryCount != 1 {
		t.Fatalf("redelivery count %d, want 1", m.RedeliveryCount)
	}
	if err := cons.Ack(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// createInFabric creates a stream, and its tenant and fabric first when
// they are missing, as an operator does once per fabric.
func createInFabric(ctx context.Context, c *client.Client, stream string, partitions, replicas int, opts ...client.StreamOption) error {
	st, err := geofabric.ParseStream(stream)
	if err == nil {
		if err := c.CreateTenant(ctx, st.Tenant); err != nil && transport.CodeOf(err) != transport.CodeTenantExists {
			return err
		}
		if err := c.CreateFabric(ctx, st.FabricName(), client.FabricOptions{}); err != nil && transport.CodeOf(err) != transport.CodeFabricExists {
			return err
		}
	}
	return c.CreateStream(ctx, stream, partitions, replicas, opts...)
}

// A negative ReplaceDeadAfter means replicas are never moved off a dead
// node (as --replace-dead-after documents); the node starts with it.
func TestReplaceDeadAfterNever(t *testing.T) {
	n := startNodeWith(t, t.TempDir(), func(c *broker.Config) { c.ReplaceDeadAfter = -time.Second })
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.CreateStream(ctx, "never-moved", 1, 1); err != nil {
		t.Fatal(err)
	}
}

// A synchronous Send does not wait out the batching delay: its batch goes
// at once (the delay here outlasts the test).
func TestSyncSendDoesNotWaitForTheBatchingDelay(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: "sync-send", BatchingMaxPublishDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 3 {
		if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte{byte(i)}}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
}

// Individual acks go in groups, and every one arrives: the group's timer
// sends them while the consumer stays open, and Close sends the rest
// before the consumer goes, so nothing acknowledged comes back.
func TestGroupedAcksArrive(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "grouped-acks"
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	subscribe := func() *client.Consumer {
		cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.Shared, SubscriptionInitialPosition: client.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		return cons
	}
	backlog := func() uint64 {
		info, err := c.DescribeStream(ctx, stream)
		if err != nil || len(info.Partitions) != 1 {
			return math.MaxUint64
		}
		for _, s := range info.Partitions[0].Subscriptions {
			if s.Name == "s" {
				return s.Backlog
			}
		}
		return math.MaxUint64
	}
	cons := subscribe()
	for i := range 20 {
		if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	receiveAndAck := func(cons *client.Consumer, n int) {
		for range n {
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := cons.Ack(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	receiveAndAck(cons, 10)
	waitFor(t, ctx, "the first 10 acks, sent by the group's timer", func() bool { return backlog() == 10 })
	receiveAndAck(cons, 10)
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the last 10 acks, sent by Close", func() bool { return backlog() == 0 })
	again := subscribe()
	defer again.Close()
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("last")}); err != nil {
		t.Fatal(err)
	}
	if m, err := again.Receive(ctx); err != nil || string(m.Payload) != "last" {
		t.Fatalf("after the acks a new consumer got %v, %v: an acknowledged message came back", m, err)
	}
}

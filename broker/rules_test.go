package broker_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/transport"
)

// rawConn is a protocol connection without the client library, for rules
// the library hides.
func rawConn(ctx context.Context, t *testing.T, addr string) *transport.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	conn, err := transport.NewConn(nc, transport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := transport.Handshake(ctx, conn, &transport.Connect{ClientName: "raw"}); err != nil {
		t.Fatal(err)
	}
	return conn
}

// SUB-6: Subscribe is idempotent on one connection for one consumer id.
// SH-2: a consumer gets nothing before it grants permits, then exactly as
// many messages as it granted.
func TestSubscribeIdempotentAndPermits(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/permits"
	createStream(ctx, t, c, stream, 1)
	conn := rawConn(ctx, t, n.Addr())
	sub := &transport.Subscribe{RequestID: 1, ConsumerID: 7, Stream: stream, Subscription: "s", Mode: transport.Shared, ConsumerName: "raw"}
	for rid := range uint64(2) {
		sub.RequestID = rid + 1
		if err := conn.Send(ctx, sub); err != nil {
			t.Fatal(err)
		}
		if r, ok := nextFrame(ctx, t, conn).(*transport.SubscribeReady); !ok || r.RequestID != rid+1 {
			t.Fatalf("subscribe %d answered %#v", rid+1, r)
		}
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		send(ctx, t, p, "", "m")
	}
	si := describeSub(ctx, t, c, stream, "s")
	if len(si.Consumers) != 1 || si.Consumers[0].Unacked != 0 {
		t.Fatalf("before any permit: %+v", si.Consumers)
	}
	if err := conn.Send(ctx, &transport.Flow{ConsumerID: 7, Permits: 2}); err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < 2 {
		m, ok := nextFrame(ctx, t, conn).(*transport.Message)
		if !ok {
			t.Fatalf("expected messages, got %#v", m)
		}
		got += len(m.Messages)
	}
	si = describeSub(ctx, t, c, stream, "s")
	if got != 2 || si.Consumers[0].Unacked != 2 || si.Consumers[0].Permits != 0 {
		t.Fatalf("2 permits granted: %d received, %+v", got, si.Consumers[0])
	}
}

// SUB-4: unsubscribe is refused while another consumer is attached, and
// deletes the subscription for the sole one. CUR-2: with ack receipts,
// an ack has returned only once it is committed.
func TestUnsubscribeAndAckReceipts(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/unsub"
	createStream(ctx, t, c, stream, 1)
	opts := client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.Shared, AckWithReceipt: true}
	one, err := c.Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	two, err := c.Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	send(ctx, t, p, "", "m")
	m, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "other", SubscriptionInitialPosition: client.Earliest, AckWithReceipt: true})
	if err != nil {
		t.Fatal(err)
	}
	got := receive(ctx, t, m)
	if err := m.Ack(ctx, got); err != nil {
		t.Fatal(err)
	}
	if b := describeSub(ctx, t, c, stream, "other").Backlog; b != 0 {
		t.Fatalf("CUR-2: the ack returned but the backlog is %d", b)
	}
	if err := one.Unsubscribe(ctx); transport.CodeOf(err) != transport.CodeNotAllowed || !strings.Contains(err.Error(), "Unsubscribe is allowed only for the sole attached consumer") {
		t.Fatalf("unsubscribe with two consumers: %v", err)
	}
	one.Close()
	if err := two.Unsubscribe(ctx); err != nil {
		t.Fatalf("unsubscribe of the sole consumer: %v", err)
	}
	info, err := c.DescribeStream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range info.Partitions[0].Subscriptions {
		if s.Name == "s" {
			t.Fatalf("subscription s outlived its unsubscribe: %+v", s)
		}
	}
}

// EX-5: an exclusive consumer may ack individually and cumulatively.
// MSG-5: one producer's send receipts arrive in send order.
func TestExclusiveAcksAndReceiptOrder(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/receipts"
	createStream(ctx, t, c, stream, 1)
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", AckWithReceipt: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	const total = 1000
	order := make(chan uint64, total)
	for range total {
		p.SendAsync(ctx, &client.ProducerMessage{Payload: []byte("m")}, func(id client.MessageID, _ *client.ProducerMessage, err error) {
			if err != nil {
				t.Error(err)
			}
			order <- id.Offset
		})
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for want := range uint64(total) {
		if got := <-order; got != want {
			t.Fatalf("receipt %d carried offset %d: receipts out of send order", want, got)
		}
	}
	var ms []*client.Message
	for range total {
		ms = append(ms, receive(ctx, t, cons))
	}
	if err := cons.Ack(ctx, ms[total-1]); err != nil {
		t.Fatal(err)
	}
	if err := cons.AckCumulative(ctx, ms[total-2]); err != nil {
		t.Fatal(err)
	}
	if b := describeSub(ctx, t, c, stream, "s").Backlog; b != 0 {
		t.Fatalf("backlog %d after an individual and a cumulative ack", b)
	}
}

// SH-7: a consumer that goes away with a message unacked (it crashed on
// it) counts as a delivery: after MaxDeliveries such losses the message
// goes to the dead-letter stream, even though every consumer was the
// subscription's only one and its dispatcher closed each time.
func TestCrashingConsumersReachDeadLetter(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/crashy"
	createStream(ctx, t, c, stream, 1)
	opts := client.ConsumerOptions{Stream: stream, Subscription: "work", Type: client.Shared, DLQ: &client.DLQPolicy{MaxDeliveries: 3}}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	id := send(ctx, t, p, "", "poison")
	cons := first
	for want := range uint32(3) {
		m := receive(ctx, t, cons)
		if m.ID != id || m.RedeliveryCount != want {
			t.Fatalf("delivery %d: %v count %d", want+1, m.ID, m.RedeliveryCount)
		}
		cons.Close() // "crashes" holding it
		if cons, err = c.Subscribe(ctx, opts); err != nil {
			t.Fatal(err)
		}
	}
	defer cons.Close()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go cons.Receive(rctx) // the 4th delivery goes to the dead-letter stream
	var dlq *client.Consumer
	waitFor(t, ctx, "the dead-letter stream", func() bool {
		dlq, err = c.Subscribe(ctx, client.ConsumerOptions{Stream: stream + "-work-DLQ", Subscription: "inspect", SubscriptionInitialPosition: client.Earliest})
		return err == nil
	})
	defer dlq.Close()
	if m := receive(ctx, t, dlq); string(m.Payload) != "poison" {
		t.Fatalf("dead letter %q", m.Payload)
	}
}

package broker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/broker"
	"github.com/fabriq-io/fabriq/transport"
)

// Requests that wait do not stall their connection: while subscribes
// wait for the exclusive holders they probe (EX-2: silent ones, which the
// probes wait for until the test lets them go), the same connection's
// Ping is answered and its other requests — sends, a listing, a
// subscribe that does not wait — are served. And a busy holder with such
// requests in flight answers its own probe: a newcomer to what it holds
// is refused, not given its place.
func TestSlowRequestsDoNotStallConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The probes outlast the test: the slow subscribes can only be
	// answered once the silent holders' connections close, which the
	// test does after it has every other answer.
	n := startNodeWith(t, t.TempDir(), func(c *broker.Config) { c.Subscriptions.ProbeTimeout = 10 * time.Minute })
	busy, err := dialRaw(ctx, t, n)
	if err != nil {
		t.Fatal(err)
	}
	const stream = "persistent://public/default/waits"
	part := func(i int) string { return fmt.Sprintf("%s-partition-%d", stream, i) }
	if res := request(ctx, t, busy, &transport.CreateStream{RequestID: 1, Stream: stream, Partitions: 4, Replicas: 1}); fmt.Sprintf("%T", res) != "*transport.Success" {
		t.Fatalf("create stream: %#v", res)
	}
	// Three silent clients hold the exclusive subscriptions of
	// partitions 0 to 2, then read nothing and answer no ping.
	var silent []*transport.Conn
	for i := range 3 {
		c, err := dialRaw(ctx, t, n)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
		if res := request(ctx, t, c, &transport.Subscribe{RequestID: uint64(2 + i), ConsumerID: uint64(1 + i), Stream: part(i), Subscription: "held", ConsumerName: "silent"}); fmt.Sprintf("%T", res) != "*transport.SubscribeReady" {
			t.Fatalf("silent subscribe: %#v", res)
		}
	}
	// The busy client holds partition 3's and has a producer there.
	if res := request(ctx, t, busy, &transport.Subscribe{RequestID: 5, ConsumerID: 1, Stream: part(3), Subscription: "mine", ConsumerName: "busy"}); fmt.Sprintf("%T", res) != "*transport.SubscribeReady" {
		t.Fatalf("busy subscribe: %#v", res)
	}
	if res := request(ctx, t, busy, &transport.CreateProducer{RequestID: 6, ProducerID: 1, Stream: part(3)}); fmt.Sprintf("%T", res) != "*transport.ProducerReady" {
		t.Fatalf("create producer: %#v", res)
	}

	// The slow requests: subscribes that probe the silent holders. Then
	// the rest, with 16 MiB of sends (the connection's whole byte bound).
	got := answers(ctx, busy)
	cmds := []transport.Command{&transport.Ping{}}
	for i := range 3 {
		cmds = append(cmds, &transport.Subscribe{RequestID: uint64(10 + i), ConsumerID: uint64(2 + i), Stream: part(i), Subscription: "held", ConsumerName: "newcomer"})
	}
	const sends = 4
	for i := range sends {
		cmds = append(cmds, &transport.Send{ProducerID: 1, Messages: []transport.MessageData{{SequenceID: uint64(i), Payload: make([]byte, 4<<20)}}})
	}
	cmds = append(cmds,
		&transport.ListStreams{RequestID: 20, Fabric: "public/default"},
		&transport.Subscribe{RequestID: 21, ConsumerID: 9, Stream: part(0), Subscription: "other", Mode: transport.Shared},
	)
	for _, cmd := range cmds {
		if err := busy.Send(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	// Meanwhile a newcomer asks for what the busy client holds: the busy
	// client's connection must answer the probe.
	newcomer, err := dialRaw(ctx, t, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := newcomer.Send(ctx, &transport.Subscribe{RequestID: 30, ConsumerID: 1, Stream: part(3), Subscription: "mine", ConsumerName: "intruder"}); err != nil {
		t.Fatal(err)
	}
	newcomerAnswer := answers(ctx, newcomer)

	// Everything but the slow subscribes is answered while they wait;
	// then the silent holders go, and the slow subscribes are answered.
	quick := []string{"pong", "receipt 0", "receipt 1", "receipt 2", "receipt 3", "list", "subscribed 21"}
	var order []string
	for len(order) < len(cmds) {
		if len(order) == len(quick) {
			for _, c := range silent {
				c.Close()
			}
		}
		var res transport.Command
		select {
		case res = <-got:
		case <-ctx.Done():
			t.Fatalf("answers so far: %v", order)
		}
		switch r := res.(type) {
		case *transport.Pong:
			order = append(order, "pong")
		case *transport.SendReceipt:
			order = append(order, fmt.Sprint("receipt ", r.SequenceID))
		case *transport.ListStreamsResult:
			order = append(order, "list")
		case *transport.SubscribeReady:
			order = append(order, fmt.Sprint("subscribed ", r.RequestID))
		case *transport.Error:
			if r.Code == transport.CodeClosed && r.RequestID == 0 {
				t.Fatalf("the busy client's connection was closed after the answers %v (%v): it missed a probe and was dropped", order, r.Message)
			}
			if r.RequestID < 10 || r.RequestID > 12 {
				t.Fatalf("unexpected answer %#v after %v", res, order)
			}
			// A slow subscribe may be refused (the holder away in the
			// reconnect grace): it was answered.
			order = append(order, fmt.Sprint("refused ", r.RequestID))
		default:
			t.Fatalf("unexpected answer %#v after %v", res, order)
		}
	}
	t.Logf("answers %v", order)
	for _, q := range quick {
		if i := slices.Index(order, q); i < 0 || i >= len(quick) {
			t.Fatalf("answers came in the order %v: %s waited for the slow subscribes", order, q)
		}
	}
	select {
	case res := <-newcomerAnswer:
		if e, ok := res.(*transport.Error); !ok || e.Code != transport.CodeConsumerBusy || e.RequestID != 30 {
			t.Fatalf("a newcomer to what the busy client holds got %#v: the busy holder was replaced", res)
		}
	case <-ctx.Done():
		t.Fatal("the newcomer got no answer")
	}
}

// answers reads a connection in a goroutine, answering its Pings, and
// passes on every other frame; a read error ends it, passed on as an
// Error frame of CodeClosed.
func answers(ctx context.Context, c *transport.Conn) <-chan transport.Command {
	out := make(chan transport.Command, 16)
	go func() {
		for {
			res, err := c.Receive()
			if err != nil {
				select {
				case out <- &transport.Error{Code: transport.CodeClosed, Message: err.Error()}:
				case <-ctx.Done():
				}
				return
			}
			if _, ok := res.(*transport.Ping); ok {
				c.Send(ctx, &transport.Pong{})
				continue
			}
			select {
			case out <- res:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// A client that gives up waiting for a subscribe and closes the consumer
// id leaves nothing attached, even when the close is served before the
// subscribe completes: the key_shared consumer name is free for the
// client's next try on the same connection, and that try gets the keys.
// (A consumer the client had abandoned used to stay attached with no
// permits; the client's retries on its connection were refused as busy
// for ever and the consumer's keys were never delivered.)
func TestConsumerClosedWhileSubscribingStaysClosed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The subscribe waits on a probe of a silent holder until the test
	// closes the holder's connection.
	n := startNodeWith(t, t.TempDir(), func(c *broker.Config) { c.Subscriptions.ProbeTimeout = 10 * time.Minute })
	const stream = "persistent://public/default/abandoned"
	const part = stream + "-partition-0"
	silent, err := dialRaw(ctx, t, n)
	if err != nil {
		t.Fatal(err)
	}
	if res := request(ctx, t, silent, &transport.CreateStream{RequestID: 1, Stream: stream, Partitions: 2, Replicas: 1}); fmt.Sprintf("%T", res) != "*transport.Success" {
		t.Fatalf("create stream: %#v", res)
	}
	sub := func(rid, id uint64) *transport.Subscribe {
		return &transport.Subscribe{RequestID: rid, ConsumerID: id, Stream: part, Subscription: "ks", Mode: transport.KeyShared, ConsumerName: "a"}
	}
	if res := request(ctx, t, silent, sub(2, 1)); fmt.Sprintf("%T", res) != "*transport.SubscribeReady" {
		t.Fatalf("silent subscribe: %#v", res)
	}

	c, err := dialRaw(ctx, t, n)
	if err != nil {
		t.Fatal(err)
	}
	if res := request(ctx, t, c, &transport.CreateProducer{RequestID: 1, ProducerID: 1, Stream: part}); fmt.Sprintf("%T", res) != "*transport.ProducerReady" {
		t.Fatalf("create producer: %#v", res)
	}
	got := answers(ctx, c)
	next := func() transport.Command {
		t.Helper()
		select {
		case res := <-got:
			return res
		case <-ctx.Done():
			t.Fatal("no answer")
			return nil
		}
	}
	// The subscribe waits on the silent holder of the name; the close is
	// answered meanwhile.
	for _, cmd := range []transport.Command{sub(10, 1), &transport.CloseConsumer{RequestID: 11, ConsumerID: 1}} {
		if err := c.Send(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	if res, ok := next().(*transport.Success); !ok || res.RequestID != 11 {
		t.Fatalf("got %#v, want the close answered while the subscribe waits", res)
	}
	// The holder goes; the subscribe can complete, and must not attach.
	silent.Close()
	if res, ok := next().(*transport.Error); !ok || res.RequestID != 10 {
		t.Fatalf("the subscribe of a consumer closed meanwhile was answered %#v, want an error", res)
	}
	if err := c.Send(ctx, sub(12, 2)); err != nil {
		t.Fatal(err)
	}
	if res, ok := next().(*transport.SubscribeReady); !ok || res.RequestID != 12 {
		t.Fatalf("the next subscribe of the name was answered %#v: the closed consumer holds it", res)
	}
	for _, cmd := range []transport.Command{
		&transport.Flow{ConsumerID: 2, Permits: 10},
		&transport.Send{ProducerID: 1, Messages: []transport.MessageData{{Key: "k", SequenceID: 0, Payload: []byte("m")}}},
	} {
		if err := c.Send(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	for delivered := false; !delivered; {
		switch res := next().(type) {
		case *transport.SendReceipt:
		case *transport.Message:
			if res.ConsumerID != 2 || len(res.Messages) != 1 || res.Messages[0].Data.Key != "k" {
				t.Fatalf("delivered %#v, want the message to consumer 2", res)
			}
			delivered = true
		default:
			t.Fatalf("got %#v while waiting for the message", res)
		}
	}
}

package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/broker"
	"github.com/fabriq-io/fabriq/transport"
)

// startLimited runs a one-node cluster with limits of its own.
func startLimited(t *testing.T, limits broker.ClientLimits) *broker.Node {
	t.Helper()
	return startNodeWith(t, t.TempDir(), func(c *broker.Config) { c.Limits = limits })
}

// dialRaw opens a protocol connection to the node and does the
// handshake; the error is the handshake's.
func dialRaw(ctx context.Context, t *testing.T, n *broker.Node) (*transport.Conn, error) {
	t.Helper()
	nc, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c, err := transport.NewConn(nc, transport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_, err = transport.Handshake(ctx, c, &transport.Connect{ClientName: "limits"})
	return c, err
}

// request sends a request and returns the next frame that is not a Ping
// (answered).
func request(ctx context.Context, t *testing.T, c *transport.Conn, req transport.Command) transport.Command {
	t.Helper()
	if err := c.Send(ctx, req); err != nil {
		t.Fatal(err)
	}
	return nextFrame(ctx, t, c)
}

// wantLimit fails unless res is a LimitExceeded error whose message says
// which limit.
func wantLimit(t *testing.T, res any, mentions string) {
	t.Helper()
	var e *transport.Error
	switch r := res.(type) {
	case *transport.Error:
		e = r
	case error:
		if !errors.As(r, &e) {
			t.Fatalf("got %v, want a LimitExceeded error", r)
		}
	default:
		t.Fatalf("got %#v, want a LimitExceeded error", res)
	}
	if e.Code != transport.CodeLimitExceeded || !strings.Contains(e.Message, mentions) {
		t.Fatalf("got %v, want LimitExceeded mentioning %q", e, mentions)
	}
}

// A client address over its connection limit is told so, then closed;
// once one of its connections goes, it may connect again.
func TestConnectionsPerAddressLimit(t *testing.T) {
	n := startLimited(t, broker.ClientLimits{MaxConnectionsPerAddress: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var held []*transport.Conn
	for i := range 3 {
		c, err := dialRaw(ctx, t, n)
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		held = append(held, c)
	}
	_, err := dialRaw(ctx, t, n)
	wantLimit(t, err, "per client address")
	held[0].Close()
	for {
		c, err := dialRaw(ctx, t, n)
		if err == nil {
			c.Close()
			break
		}
		wantLimit(t, err, "per client address")
		if ctx.Err() != nil {
			t.Fatal("no connection after one of three went")
		}
	}
	// The others were not disturbed.
	if res := request(ctx, t, held[1], &transport.ListStreams{RequestID: 1, Fabric: "public/default"}); fmt.Sprintf("%T", res) != "*transport.ListStreamsResult" {
		t.Fatalf("a connection within the limit answered %#v", res)
	}
}

// A node over its connection limit refuses more, whatever their address.
func TestConnectionsPerNodeLimit(t *testing.T) {
	n := startLimited(t, broker.ClientLimits{MaxConnections: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 2 {
		if _, err := dialRaw(ctx, t, n); err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
	}
	_, err := dialRaw(ctx, t, n)
	wantLimit(t, err, "(--max-connections)")
}

// A connection holds at most MaxProducersPerConnection producers and
// MaxConsumersPerConnection consumers; others are refused with a clear
// error, and the connection goes on.
func TestProducersAndConsumersPerConnectionLimit(t *testing.T) {
	n := startLimited(t, broker.ClientLimits{MaxProducersPerConnection: 2, MaxConsumersPerConnection: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dialRaw(ctx, t, n)
	if err != nil {
		t.Fatal(err)
	}
	const stream = "persistent://public/default/limits"
	if res := request(ctx, t, c, &transport.CreateStream{RequestID: 1, Stream: stream, Partitions: 3, Replicas: 1}); fmt.Sprintf("%T", res) != "*transport.Success" {
		t.Fatalf("create stream: %#v", res)
	}
	rid := uint64(10)
	for i := range 3 {
		rid++
		res := request(ctx, t, c, &transport.CreateProducer{RequestID: rid, ProducerID: uint64(i + 1), Stream: fmt.Sprintf("%s-partition-%d", stream, i)})
		if i < 2 {
			if _, ok := res.(*transport.ProducerReady); !ok {
				t.Fatalf("producer %d: %#v", i+1, res)
			}
			continue
		}
		wantLimit(t, res, "producers")
	}
	for i := range 3 {
		rid++
		res := request(ctx, t, c, &transport.Subscribe{RequestID: rid, ConsumerID: uint64(i + 1), Stream: fmt.Sprintf("%s-partition-%d", stream, i), Subscription: "s"})
		if i < 2 {
			if _, ok := res.(*transport.SubscribeReady); !ok {
				t.Fatalf("consumer %d: %#v", i+1, res)
			}
			continue
		}
		wantLimit(t, res, "consumers")
	}
	// Closing one makes room.
	rid++
	if res := request(ctx, t, c, &transport.CloseProducer{RequestID: rid, ProducerID: 1}); fmt.Sprintf("%T", res) != "*transport.Success" {
		t.Fatalf("close producer: %#v", res)
	}
	rid++
	if res := request(ctx, t, c, &transport.CreateProducer{RequestID: rid, ProducerID: 3, Stream: stream + "-partition-2"}); fmt.Sprintf("%T", res) != "*transport.ProducerReady" {
		t.Fatalf("a producer after one closed: %#v", res)
	}
}

// A partition has at most MaxSubscriptionsPerPartition durable
// subscriptions: a subscribe that would create one more is refused, one
// to an existing subscription is not.
func TestSubscriptionsPerPartitionLimit(t *testing.T) {
	n := startLimited(t, broker.ClientLimits{MaxSubscriptionsPerPartition: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dialRaw(ctx, t, n)
	if err != nil {
		t.Fatal(err)
	}
	const stream = "persistent://public/default/subs"
	if res := request(ctx, t, c, &transport.CreateStream{RequestID: 1, Stream: stream, Partitions: 1, Replicas: 1}); fmt.Sprintf("%T", res) != "*transport.Success" {
		t.Fatalf("create stream: %#v", res)
	}
	for i, sub := range []string{"a", "b", "c"} {
		res := request(ctx, t, c, &transport.Subscribe{RequestID: uint64(10 + i), ConsumerID: uint64(i + 1), Stream: stream, Subscription: sub, Mode: transport.Shared})
		if sub != "c" {
			if _, ok := res.(*transport.SubscribeReady); !ok {
				t.Fatalf("subscription %s: %#v", sub, res)
			}
			continue
		}
		wantLimit(t, res, "subscriptions")
	}
	if res := request(ctx, t, c, &transport.Subscribe{RequestID: 20, ConsumerID: 9, Stream: stream, Subscription: "a", Mode: transport.Shared, ConsumerName: "second"}); fmt.Sprintf("%T", res) != "*transport.SubscribeReady" {
		t.Fatalf("a second consumer of an existing subscription: %#v", res)
	}
}

// A client that sends its next subscribe on the answer to the last one
// finds the count that answer implies: at the limit, over and over, a
// subscribe is never refused for one still in progress.
func TestConsumerLimitCountsAnsweredSubscribes(t *testing.T) {
	n := startLimited(t, broker.ClientLimits{MaxConsumersPerConnection: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := dialRaw(ctx, t, n)
	if err != nil {
		t.Fatal(err)
	}
	const stream = "persistent://public/default/limit-rounds"
	if res := request(ctx, t, c, &transport.CreateStream{RequestID: 1, Stream: stream, Partitions: 1, Replicas: 1}); fmt.Sprintf("%T", res) != "*transport.Success" {
		t.Fatalf("create stream: %#v", res)
	}
	rid := uint64(10)
	for round := range 200 {
		for id := uint64(1); id <= 2; id++ {
			rid++
			res := request(ctx, t, c, &transport.Subscribe{RequestID: rid, ConsumerID: id, Stream: stream, Subscription: "s", Mode: transport.Shared})
			if _, ok := res.(*transport.SubscribeReady); !ok {
				t.Fatalf("round %d, consumer %d: %#v", round, id, res)
			}
		}
		for id := uint64(1); id <= 2; id++ {
			rid++
			if res := request(ctx, t, c, &transport.CloseConsumer{RequestID: rid, ConsumerID: id}); fmt.Sprintf("%T", res) != "*transport.Success" {
				t.Fatalf("round %d, close consumer %d: %#v", round, id, res)
			}
		}
	}
}

package broker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/transport"
)

// A client that speaks the protocol with short names ("orders", a stream
// of public/default) or names without the scheme reaches the same stream
// as with full names, for every request that names a stream or a
// partition; the node answers with full names.
func TestShortNamesOnTheWire(t *testing.T) {
	n := startNode(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := dialRaw(ctx, t, n)
	if err != nil {
		t.Fatal(err)
	}
	const full = "persistent://public/default/orders"
	want := func(what string, res transport.Command, typ string) {
		t.Helper()
		if got := fmt.Sprintf("%T", res); got != typ {
			t.Fatalf("%s: %#v, want %s", what, res, typ)
		}
	}
	want("create", request(ctx, t, c, &transport.CreateStream{RequestID: 1, Stream: "orders", Partitions: 2, Replicas: 1}), "*transport.Success")
	res := request(ctx, t, c, &transport.PartitionedMetadata{RequestID: 2, Stream: "public/default/orders"})
	if pm, ok := res.(*transport.PartitionedMetadataResult); !ok || pm.Partitions != 2 {
		t.Fatalf("partitioned metadata: %#v", res)
	}
	res = request(ctx, t, c, &transport.Lookup{RequestID: 3, Stream: "orders-partition-1"})
	if lr, ok := res.(*transport.LookupResult); !ok || !lr.Here {
		t.Fatalf("lookup: %#v", res)
	}
	want("producer", request(ctx, t, c, &transport.CreateProducer{RequestID: 4, ProducerID: 1, Stream: "orders-partition-1"}), "*transport.ProducerReady")
	if err := c.Send(ctx, &transport.Send{ProducerID: 1, Messages: []transport.MessageData{{SequenceID: 0, Payload: []byte("hi")}}}); err != nil {
		t.Fatal(err)
	}
	res = nextFrame(ctx, t, c)
	if r, ok := res.(*transport.SendReceipt); !ok || len(r.Offsets) != 1 {
		t.Fatalf("send: %#v", res)
	}
	want("subscribe", request(ctx, t, c, &transport.Subscribe{RequestID: 5, ConsumerID: 1, Stream: full + "-partition-1", Subscription: "s", InitialPosition: transport.Earliest}), "*transport.SubscribeReady")
	if err := c.Send(ctx, &transport.Flow{ConsumerID: 1, Permits: 10}); err != nil {
		t.Fatal(err)
	}
	res = nextFrame(ctx, t, c)
	if m, ok := res.(*transport.Message); !ok || len(m.Messages) != 1 || string(m.Messages[0].Data.Payload) != "hi" {
		t.Fatalf("delivery to the consumer of the full name: %#v", res)
	}
	res = request(ctx, t, c, &transport.DescribeStream{RequestID: 6, Stream: "orders"})
	if d, ok := res.(*transport.DescribeStreamResult); !ok || d.Info.Stream != full || len(d.Info.Partitions) != 2 {
		t.Fatalf("describe: %#v", res)
	}
	res = request(ctx, t, c, &transport.ListStreams{RequestID: 7, Fabric: "public/default"})
	if l, ok := res.(*transport.ListStreamsResult); !ok || !slices.Equal(l.Streams, []string{full}) {
		t.Fatalf("list: %#v", res)
	}
	// The delete closes the producer and the consumer: their frames may
	// come before or after the answers.
	want("delete", answerTo(ctx, t, c, &transport.DeleteStream{RequestID: 8, Stream: "public/default/orders", Force: true}), "*transport.Success")
	res = answerTo(ctx, t, c, &transport.DescribeStream{RequestID: 9, Stream: full})
	if e, ok := res.(*transport.Error); !ok || e.Code != transport.CodeStreamNotFound {
		t.Fatalf("describe after delete: %#v", res)
	}
	res = answerTo(ctx, t, c, &transport.CreateStream{RequestID: 10, Stream: "non-persistent://a/b/c"})
	if e, ok := res.(*transport.Error); !ok || e.Code != transport.CodeInvalidName {
		t.Fatalf("create of another scheme: %#v", res)
	}
}

// nextFrame reads the next frame that is not a Ping (answered).
func nextFrame(ctx context.Context, t *testing.T, c *transport.Conn) transport.Command {
	t.Helper()
	for {
		res, err := c.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := res.(*transport.Ping); ok {
			c.Send(ctx, &transport.Pong{})
			continue
		}
		return res
	}
}

// answerTo sends a request and returns its answer, passing over the
// frames that close producers and consumers.
func answerTo(ctx context.Context, t *testing.T, c *transport.Conn, req transport.Command) transport.Command {
	t.Helper()
	if err := c.Send(ctx, req); err != nil {
		t.Fatal(err)
	}
	for {
		switch res := nextFrame(ctx, t, c).(type) {
		case *transport.CloseConsumer, *transport.CloseProducer:
		default:
			return res
		}
	}
}

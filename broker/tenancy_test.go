package broker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/broker"
	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/transport"
)

// Tenants hold fabrics, fabrics hold streams and give them their
// defaults; neither is deleted while it holds anything, and public with
// public/default is there from the start.
func TestTenantsAndFabrics(t *testing.T) {
	n := startNodeWith(t, t.TempDir(), func(c *broker.Config) { c.Region = "eu-west" })
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitFor(t, ctx, "the default fabric", func() bool {
		f, err := c.DescribeFabric(ctx, "public/default")
		return err == nil && f.Fabric == "public/default"
	})
	code := func(what string, err error, want transport.ErrorCode) {
		t.Helper()
		if got := transport.CodeOf(err); got != want {
			t.Fatalf("%s: %v (code %v), want %v", what, err, got, want)
		}
	}
	code("a fabric of a missing tenant", c.CreateFabric(ctx, "acme/eu", client.FabricOptions{}), transport.CodeTenantNotFound)
	code("a stream of a missing tenant", c.CreateStream(ctx, "persistent://acme/eu/s", 0, 0), transport.CodeTenantNotFound)
	if err := c.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	code("the tenant again", c.CreateTenant(ctx, "acme"), transport.CodeTenantExists)
	code("a stream of a missing fabric", c.CreateStream(ctx, "persistent://acme/eu/s", 0, 0), transport.CodeFabricNotFound)
	retention := client.RetentionPolicy{RetentionTimeMs: 3_600_000, RetentionBytes: -1}
	if err := c.CreateFabric(ctx, "acme/eu", client.FabricOptions{Regions: []string{"eu-west", "eu-central"}, Partitions: 3, Retention: &retention}); err != nil {
		t.Fatal(err)
	}
	code("the fabric again", c.CreateFabric(ctx, "acme/eu", client.FabricOptions{}), transport.CodeFabricExists)
	// A stream that says nothing takes the fabric's defaults.
	if err := c.CreateStream(ctx, "acme/eu/s", 0, 0); err != nil {
		t.Fatal(err)
	}
	info, err := c.DescribeStream(ctx, "persistent://acme/eu/s")
	if err != nil || len(info.Partitions) != 3 || info.Replicas != 1 || info.Retention != retention {
		t.Fatalf("stream %+v (%v): want the fabric's 3 partitions and retention, 1 replica", info, err)
	}
	f, err := c.DescribeFabric(ctx, "acme/eu")
	if err != nil || f.Streams != 1 || !slices.Equal(f.Regions, []string{"eu-central", "eu-west"}) || f.Defaults.Partitions != 3 {
		t.Fatalf("fabric %+v (%v)", f, err)
	}
	code("delete of a fabric with a stream", c.DeleteFabric(ctx, "acme/eu"), transport.CodeNotEmpty)
	code("delete of a tenant with a fabric", c.DeleteTenant(ctx, "acme"), transport.CodeNotEmpty)
	code("delete of public/default", c.DeleteFabric(ctx, "public/default"), transport.CodeNotAllowed)
	if fabrics, err := c.ListFabrics(ctx, "acme"); err != nil || len(fabrics) != 1 || fabrics[0].Fabric != "acme/eu" {
		t.Fatalf("fabrics of acme: %+v %v", fabrics, err)
	}
	if err := c.DeleteStream(ctx, "acme/eu/s", true); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteFabric(ctx, "acme/eu"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if tenants, err := c.ListTenants(ctx); err != nil || !slices.Equal(tenants, []string{"public"}) {
		t.Fatalf("tenants %v (%v), want public alone", tenants, err)
	}
	_, err = c.ListFabrics(ctx, "acme")
	code("fabrics of a deleted tenant", err, transport.CodeTenantNotFound)
	_, err = c.ListStreams(ctx, "acme/eu")
	code("streams of a deleted fabric", err, transport.CodeFabricNotFound)
}

// A produce or subscribe to a stream that does not exist creates it, with
// its fabric's defaults; a short name is a stream of public/default. A
// missing tenant or fabric is not made that way (but in public, or with
// AutoCreateFabrics), and NoAutoCreate refuses with StreamNotFound.
func TestAutoCreateOnFirstUse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newClient(t, startNode(t, t.TempDir()))
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: "my-topic"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: "public/default/my-topic", Subscription: "s", SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	if m := receive(ctx, t, cons); string(m.Payload) != "hi" {
		t.Fatalf("received %q", m.Payload)
	}
	// A consumer first: its stream too.
	if _, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: "persistent://public/events/clicks", Subscription: "s"}); err != nil {
		t.Fatalf("a subscribe to a missing stream of a new fabric of public: %v", err)
	}
	if _, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: "persistent://acme/prod/s"}); transport.CodeOf(err) != transport.CodeTenantNotFound {
		t.Fatalf("a produce to a stream of a missing tenant: %v, want TenantNotFound", err)
	}

	strict := newClient(t, startNodeWith(t, t.TempDir(), func(c *broker.Config) { c.NoAutoCreate = true }))
	if _, err := strict.CreateProducer(ctx, client.ProducerOptions{Stream: "my-topic"}); transport.CodeOf(err) != transport.CodeStreamNotFound {
		t.Fatalf("with NoAutoCreate: %v, want StreamNotFound", err)
	}

	open := newClient(t, startNodeWith(t, t.TempDir(), func(c *broker.Config) { c.AutoCreateFabrics = true }))
	if _, err := open.CreateProducer(ctx, client.ProducerOptions{Stream: "persistent://newco/eu/s"}); err != nil {
		t.Fatalf("with AutoCreateFabrics: %v", err)
	}
	if f, err := open.DescribeFabric(ctx, "newco/eu"); err != nil || f.Streams != 1 {
		t.Fatalf("fabric newco/eu %+v (%v)", f, err)
	}
}

// A stream watch answers the matching streams, then pushes the whole
// matching set after every change of it; bad patterns, missing fabrics
// and unknown watches are refused.
func TestWatchStreamsOnTheWire(t *testing.T) {
	n := startNode(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newClient(t, n)
	if err := createInFabric(ctx, c, "persistent://acme/eu/finance-1", 1, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateStream(ctx, "persistent://acme/eu/hr-1", 1, 1); err != nil {
		t.Fatal(err)
	}
	raw, err := dialRaw(ctx, t, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		req  *transport.WatchStreams
		code transport.ErrorCode
	}{
		{&transport.WatchStreams{RequestID: 1, WatchID: 1, Fabric: "acme/nowhere", Pattern: ".*"}, transport.CodeFabricNotFound},
		{&transport.WatchStreams{RequestID: 2, WatchID: 1, Fabric: "acme/eu", Pattern: "("}, transport.CodeInvalidArgument},
		{&transport.WatchStreams{RequestID: 3, WatchID: 1, Fabric: "acme", Pattern: ".*"}, transport.CodeInvalidName},
	} {
		if e, ok := answerTo(ctx, t, raw, bad.req).(*transport.Error); !ok || e.Code != bad.code {
			t.Fatalf("watch %+v: %v, want %v", bad.req, e, bad.code)
		}
	}
	const pattern = "persistent://acme/eu/finance-.*"
	res := answerTo(ctx, t, raw, &transport.WatchStreams{RequestID: 4, WatchID: 7, Fabric: "acme/eu", Pattern: pattern})
	first := []string{"persistent://acme/eu/finance-1"}
	if r, ok := res.(*transport.WatchStreamsResult); !ok || !slices.Equal(r.Streams, first) || r.Hash != transport.StreamsHash(first) {
		t.Fatalf("watch: %#v", res)
	}
	if err := c.CreateStream(ctx, "persistent://acme/eu/finance-2", 1, 1); err != nil {
		t.Fatal(err)
	}
	both := []string{"persistent://acme/eu/finance-1", "persistent://acme/eu/finance-2"}
	if p, ok := nextFrame(ctx, t, raw).(*transport.StreamsChanged); !ok || p.WatchID != 7 || !slices.Equal(p.Streams, both) || p.Hash != transport.StreamsHash(both) {
		t.Fatalf("push after a create: %#v", p)
	}
	// A stream the pattern does not match changes nothing; the next push
	// is the delete's.
	if err := c.CreateStream(ctx, "persistent://acme/eu/hr-2", 1, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteStream(ctx, "persistent://acme/eu/finance-1", true); err != nil {
		t.Fatal(err)
	}
	if p, ok := nextFrame(ctx, t, raw).(*transport.StreamsChanged); !ok || !slices.Equal(p.Streams, both[1:]) {
		t.Fatalf("push after a delete: %#v", p)
	}
	if _, ok := answerTo(ctx, t, raw, &transport.CloseWatch{RequestID: 5, WatchID: 7}).(*transport.Success); !ok {
		t.Fatal("close watch was not answered Success")
	}
	if e, ok := answerTo(ctx, t, raw, &transport.CloseWatch{RequestID: 6, WatchID: 7}).(*transport.Error); !ok || e.Code != transport.CodeInvalidArgument {
		t.Fatalf("closing a closed watch: %v", e)
	}
}

package tests

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
)

// A pattern consumer started before finance-3 exists receives what is
// produced to finance-3 right after its creation (some of it before the
// consumer's watch can have seen it), and nothing of hr-1; deleting a
// matched stream leaves the others flowing; a pattern across fabrics is
// refused; a list consumer reads streams of two fabrics.
func TestMultiStreamConsumers(t *testing.T) {
	t.Parallel() // mostly waiting on processes: see TestMain
	nodes := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	c := newClient(t, clusterURL(nodes))
	for _, s := range []string{"acme/eu/finance-1", "acme/eu/finance-2", "acme/eu/hr-1", "acme/us/finance-9"} {
		if err := createStream(ctx, c, s, 2, 3); err != nil {
			t.Fatal(err)
		}
	}
	send := func(stream string, n int) {
		t.Helper()
		p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for i := range n {
			if _, err := p.Send(ctx, &client.ProducerMessage{Key: fmt.Sprint(i), Payload: []byte(fmt.Sprint(stream, " ", i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send("acme/eu/finance-1", 3)
	send("acme/eu/finance-2", 3)
	send("acme/eu/hr-1", 3)

	mc, err := c.SubscribeMulti(ctx, client.MultiOptions{Pattern: "persistent://acme/eu/finance-.*"},
		client.ConsumerOptions{Subscription: "fin", Type: client.Shared, SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	got := map[string]int{}
	receive := func(n int) {
		t.Helper()
		for range n {
			m, err := mc.Receive(ctx)
			if err != nil {
				t.Fatalf("after %v: %v", got, err)
			}
			got[m.ID.Stream]++
			if err := mc.Ack(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	receive(6)
	if got["persistent://acme/eu/finance-1"] != 3 || got["persistent://acme/eu/finance-2"] != 3 {
		t.Fatalf("received %v from the streams there at the start", got)
	}

	// finance-3, created while the consumer runs, produced to at once.
	if err := c.CreateStream(ctx, "acme/eu/finance-3", 2, 3); err != nil {
		t.Fatal(err)
	}
	send("acme/eu/finance-3", 5)
	receive(5)
	if got["persistent://acme/eu/finance-3"] != 5 || got["persistent://acme/eu/hr-1"] != 0 {
		t.Fatalf("received %v", got)
	}

	// Deleting finance-1 leaves finance-2 flowing.
	if err := c.DeleteStream(ctx, "acme/eu/finance-1", true); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "finance-1 dropped", func() bool {
		return !slices.Contains(mc.Streams(), "persistent://acme/eu/finance-1")
	})
	send("acme/eu/finance-2", 2)
	receive(2)
	if got["persistent://acme/eu/finance-2"] != 5 || got["persistent://acme/eu/hr-1"] != 0 {
		t.Fatalf("received %v", got)
	}
	if want := []string{"persistent://acme/eu/finance-2", "persistent://acme/eu/finance-3"}; !slices.Equal(mc.Streams(), want) {
		t.Fatalf("the consumer reads %v, want %v", mc.Streams(), want)
	}

	// A pattern whose fabric is not literal is refused.
	if _, err := c.SubscribeMulti(ctx, client.MultiOptions{Pattern: "persistent://acme/.*/finance-.*"}, client.ConsumerOptions{Subscription: "x"}); err == nil {
		t.Fatal("a pattern across fabrics was accepted")
	}

	// A list over two fabrics.
	send("acme/us/finance-9", 2)
	lc, err := c.SubscribeMulti(ctx, client.MultiOptions{Streams: []string{"acme/eu/finance-3", "persistent://acme/us/finance-9"}},
		client.ConsumerOptions{Subscription: "list", SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	fromList := map[string]int{}
	for range 7 {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		m, err := lc.Receive(rctx)
		cancel()
		if err != nil {
			t.Fatalf("list consumer after %v: %v", fromList, err)
		}
		fromList[m.ID.Stream]++
		if err := lc.Ack(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if fromList["persistent://acme/eu/finance-3"] != 5 || fromList["persistent://acme/us/finance-9"] != 2 {
		t.Fatalf("the list consumer received %v", fromList)
	}
}

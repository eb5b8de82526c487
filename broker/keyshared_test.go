package broker_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/subscription"
	"github.com/fabriq-io/fabriq/tests/checker"
	"github.com/fabriq-io/fabriq/transport"
)

// produceKeys sends perKey messages for each of keys, round robin over the
// keys, payload "KEY SEQ".
func produceKeys(ctx context.Context, t *testing.T, p *client.Producer, keys []string, from, to int) {
	t.Helper()
	if _, err := checker.Produce(ctx, p, keys, from, to); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s", what)
		case <-tick.C:
		}
	}
}

// KS-3, KS-7: 300 keys over 3 auto_split consumers: every key on exactly
// one consumer, the one the ring names, and per key in order. KS-6: the
// producer's batches mix keys; the broker routes each message by its own.
func TestKeySharedSpreadsKeysInOrder(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/keys"
	if err := createInFabric(ctx, c, stream, 1, 1); err != nil {
		t.Fatal(err)
	}
	l := checker.NewKeyHistory()
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	names := []string{"c1", "c2", "c3"}
	for _, name := range names {
		cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "ks", Type: client.KeyShared, Name: name, ReceiverQueueSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		wg.Add(1)
		go func() { defer wg.Done(); checker.Consume(rctx, cons, l, nil) }()
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream}) // mixed-key batches
	if err != nil {
		t.Fatal(err)
	}
	keys := checker.Keys(300)
	const each = 10
	produceKeys(ctx, t, p, keys, 0, each)
	waitFor(t, ctx, "every message", func() bool { return l.Len() >= len(keys)*each })
	stop()
	wg.Wait()
	if err := l.CheckOrder(checker.Each(keys, each)); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckSticky(); err != nil {
		t.Fatal(err)
	}
	ring := subscription.NewAutoSplit(names)
	perConsumer := map[string]int{}
	for key, who := range l.Owners() {
		if want := ring.Owner(subscription.Slot(key)); who[0] != want {
			t.Fatalf("key %s went to %s, the ring owner is %s", key, who[0], want)
		}
		perConsumer[who[0]]++
	}
	for _, name := range names {
		if perConsumer[name] == 0 {
			t.Fatalf("keys per consumer %v", perConsumer)
		}
	}
}

// KS-7: a fourth consumer joins while the others hold unacked messages.
// Keys that move to it wait until their old consumer acked them; no key is
// unacked on two consumers at once; keys that do not move keep flowing
// while the moved ones wait.
func TestKeySharedJoinerWaitsForAcks(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/joiner"
	if err := createInFabric(ctx, c, stream, 1, 1); err != nil {
		t.Fatal(err)
	}
	keys := checker.Keys(300)
	names := []string{"c1", "c2", "c3"}
	before := subscription.NewAutoSplit(names)
	after := subscription.NewAutoSplit(append(slices.Clone(names), "c4"))
	moving := map[string]bool{}
	for _, k := range keys {
		if before.Owner(subscription.Slot(k)) != after.Owner(subscription.Slot(k)) {
			moving[k] = true
		}
	}
	if len(moving) == 0 || len(moving) == len(keys) {
		t.Fatalf("%d of %d keys move: the test needs some of each", len(moving), len(keys))
	}
	l := checker.NewKeyHistory()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	// Every consumer holds (does not ack) the first round of messages
	// until released.
	release := make(chan struct{})
	var heldMu sync.Mutex
	held := map[string][]*client.Message{}
	consumers := map[string]*client.Consumer{}
	subscribe := func(name string) {
		cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "ks", Type: client.KeyShared, Name: name, ReceiverQueueSize: 1000})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cons.Close() })
		consumers[name] = cons
		wg.Add(1)
		go func() {
			defer wg.Done()
			checker.Consume(rctx, cons, l, func(m *client.Message) bool {
				select {
				case <-release:
					return false
				default:
				}
				heldMu.Lock()
				defer heldMu.Unlock()
				held[cons.Name()] = append(held[cons.Name()], m)
				return true
			})
		}()
	}
	for _, name := range names {
		subscribe(name)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, KeyBasedBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	produceKeys(ctx, t, p, keys, 0, 1)
	waitFor(t, ctx, "the first round", func() bool { return l.Len() == len(keys) })
	subscribe("c4")
	produceKeys(ctx, t, p, keys, 1, 3)
	// Every key that stays gets its new messages while the moved keys'
	// first messages are still unacked.
	waitFor(t, ctx, "the keys that stay", func() bool {
		got := 0
		for _, d := range l.Deliveries() {
			if !moving[d.Key] && d.Seq > 0 {
				got++
			}
		}
		return got == 2*(len(keys)-len(moving))
	})
	for _, d := range l.Deliveries() {
		if moving[d.Key] && d.Seq > 0 {
			t.Fatalf("moved key %s delivered (message %d to %s) while its first message was unacked", d.Key, d.Seq, d.Consumer)
		}
	}
	si := describeSub(ctx, t, c, stream, "ks")
	if len(si.DrainingKeys) == 0 {
		t.Fatalf("describe shows no draining keys while %d keys wait: %+v", len(moving), si)
	}
	// The old owners ack: the moved keys go to c4, in order.
	close(release)
	heldMu.Lock()
	for name, ms := range held {
		for _, m := range ms {
			l.Released(name, m.Key)
			if err := consumers[name].Ack(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	heldMu.Unlock()
	waitFor(t, ctx, "every message", func() bool { return l.Len() >= 3*len(keys) })
	stop()
	wg.Wait()
	if err := l.CheckOrder(checker.Each(keys, 3)); err != nil {
		t.Fatal(err)
	}
	for _, d := range l.Deliveries() {
		if d.Seq > 0 {
			if want := after.Owner(subscription.Slot(d.Key)); d.Consumer != want {
				t.Fatalf("key %s message %d went to %s after the join, its owner is %s", d.Key, d.Seq, d.Consumer, want)
			}
		}
	}
}

func describeSub(ctx context.Context, t *testing.T, c *client.Client, stream, sub string) transport.SubscriptionInfo {
	t.Helper()
	info, err := c.DescribeStream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range info.Partitions {
		for _, s := range p.Subscriptions {
			if s.Name == sub {
				return s
			}
		}
	}
	t.Fatalf("no subscription %s in %+v", sub, info)
	return transport.SubscriptionInfo{}
}

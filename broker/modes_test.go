package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/broker"
	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/subscription"
	"github.com/fabriq-io/fabriq/tests/checker"
	"github.com/fabriq-io/fabriq/transport"
)

func createStream(ctx context.Context, t *testing.T, c *client.Client, stream string, partitions int) {
	t.Helper()
	if err := createInFabric(ctx, c, stream, partitions, 1); err != nil {
		t.Fatal(err)
	}
}

func send(ctx context.Context, t *testing.T, p *client.Producer, key, payload string) client.MessageID {
	t.Helper()
	id, err := p.Send(ctx, &client.ProducerMessage{Key: key, Payload: []byte(payload)})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func receive(ctx context.Context, t *testing.T, cons *client.Consumer) *client.Message {
	t.Helper()
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatalf("%s: %v", cons.Name(), err)
	}
	return m
}

// SUB-2: while a consumer is attached, another mode or another key_shared
// policy is refused with the contract's text; SUB-1: once they left, the
// subscription (and its cursor) stays and may take another mode.
func TestSubscriptionModeIsFixedWhileAttached(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/modes"
	createStream(ctx, t, c, stream, 1)
	first, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.KeyShared, Name: "one", SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.Shared, Name: "two"})
	if transport.CodeOf(err) != transport.CodeSubscriptionBusy || !contains(err, "Subscription is of different type: active 'key_shared', requested 'shared'") {
		t.Fatalf("another mode: %v", err)
	}
	_, err = c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.KeyShared, Name: "two",
		KeySharedPolicy: &client.KeySharedPolicy{Mode: client.KeySharedSticky, Ranges: []client.HashRange{{Start: 0, End: 100}}}})
	if transport.CodeOf(err) != transport.CodeSubscriptionBusy || !contains(err, "active 'auto_split', requested 'sticky'") {
		t.Fatalf("another key policy: %v", err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	send(ctx, t, p, "k", "acked")
	m := receive(ctx, t, first)
	if err := first.AckCumulative(ctx, m); !errors.Is(err, client.ErrNotAllowed) {
		t.Fatalf("KS-5: cumulative ack on key_shared: %v", err)
	}
	if err := first.Ack(ctx, m); err != nil {
		t.Fatal(err)
	}
	first.Close()
	send(ctx, t, p, "k", "next")
	second, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.Shared, Name: "two"})
	if err != nil {
		t.Fatalf("a new mode once nobody is attached: %v", err)
	}
	defer second.Close()
	if m := receive(ctx, t, second); string(m.Payload) != "next" {
		t.Fatalf("the cursor did not persist: got %q", m.Payload)
	}
}

func contains(err error, text string) bool {
	return err != nil && strings.Contains(err.Error(), text)
}

// KS-4: sticky consumers declare ranges; a conflict is refused with the
// contract's text; slots nobody covers wait until someone does.
func TestKeySharedStickyRanges(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/sticky"
	createStream(ctx, t, c, stream, 1)
	sticky := func(name string, r ...client.HashRange) (*client.Consumer, error) {
		return c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.KeyShared, Name: name,
			KeySharedPolicy: &client.KeySharedPolicy{Mode: client.KeySharedSticky, Ranges: r}})
	}
	low, err := sticky("low", client.HashRange{Start: 0, End: 32767})
	if err != nil {
		t.Fatal(err)
	}
	defer low.Close()
	if _, err := sticky("clash", client.HashRange{Start: 30000, End: 65535}); transport.CodeOf(err) != transport.CodeConsumerAssignError || !contains(err, "Range conflict with consumer low") {
		t.Fatalf("overlapping ranges: %v", err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	var lowKey, highKey string
	for i := 0; lowKey == "" || highKey == ""; i++ {
		k := fmt.Sprint("k", i)
		if subscription.Slot(k) <= 32767 {
			lowKey = k
		} else {
			highKey = k
		}
	}
	send(ctx, t, p, highKey, "high")
	send(ctx, t, p, lowKey, "low")
	// The high key's slot is nobody's: it waits, the low key flows.
	if m := receive(ctx, t, low); m.Key != lowKey {
		t.Fatalf("low got %s", m.Key)
	}
	high, err := sticky("high", client.HashRange{Start: 32768, End: 65535})
	if err != nil {
		t.Fatal(err)
	}
	defer high.Close()
	if m := receive(ctx, t, high); m.Key != highKey {
		t.Fatalf("high got %s", m.Key)
	}
	si := describeSub(ctx, t, c, stream, "s")
	for _, ci := range si.Consumers {
		if len(ci.HashRanges) != 1 || ci.HashShare < 0.49 || ci.HashShare > 0.51 {
			t.Fatalf("describe: %+v", ci)
		}
	}
}

// KS-10: with out-of-order delivery allowed, a key moves to a joiner at
// once, even while its old consumer holds unacked messages of it.
func TestKeySharedOutOfOrderMovesAtOnce(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/ooo"
	createStream(ctx, t, c, stream, 1)
	policy := &client.KeySharedPolicy{AllowOutOfOrderDelivery: true}
	first, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.KeyShared, Name: "c1", KeySharedPolicy: policy})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	ring := subscription.NewAutoSplit([]string{"c1", "c2"})
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("k", i); ring.Owner(subscription.Slot(k)) == "c2" {
			key = k
		}
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	send(ctx, t, p, key, "0")
	receive(ctx, t, first) // held, not acked
	second, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.KeyShared, Name: "c2", KeySharedPolicy: policy})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	send(ctx, t, p, key, "1")
	if m := receive(ctx, t, second); string(m.Payload) != "1" {
		t.Fatalf("c2 got %q", m.Payload)
	}
}

// KS-8, KS-9: a consumer that takes no more messages blocks its keys; the
// broker reads past them only up to the look-ahead limit, and shows it;
// once the consumer takes messages again, each key's held-back messages
// come first, in order.
func TestKeySharedLookAheadIsBounded(t *testing.T) {
	n := startNodeWith(t, t.TempDir(), func(cfg *broker.Config) {
		cfg.Subscriptions.LookAheadPerConsumer = 20
		cfg.Subscriptions.LookAheadPerSubscription = 30
	})
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/lookahead"
	createStream(ctx, t, c, stream, 1)
	names := []string{"slow", "fast"}
	l := checker.NewKeyHistory()
	slow, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.KeyShared, Name: "slow", ReceiverQueueSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fast, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.KeyShared, Name: "fast"})
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); checker.Consume(rctx, fast, l, nil) }()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	keys := checker.Keys(20)
	const each = 20
	produceKeys(ctx, t, p, keys, 0, each)
	// slow took one message and has no permits: its keys are blocked, and
	// the broker stops reading once 30 messages wait.
	waitFor(t, ctx, "the look-ahead to fill", func() bool { return describeSub(ctx, t, c, stream, "s").LookAhead == 30 })
	ring := subscription.NewAutoSplit(names)
	fastTotal := 0
	for _, k := range keys {
		if ring.Owner(subscription.Slot(k)) == "fast" {
			fastTotal += each
		}
	}
	got := l.Len()
	if got >= fastTotal {
		t.Fatalf("fast received all its %d messages: the read did not stop at the look-ahead limit", got)
	}
	wg.Add(1)
	go func() { defer wg.Done(); checker.Consume(rctx, slow, l, nil) }()
	waitFor(t, ctx, "every message", func() bool { return l.Len() >= len(keys)*each })
	stop()
	wg.Wait()
	if err := l.CheckOrder(checker.Each(keys, each)); err != nil {
		t.Fatal(err)
	}
}

// roleEvents records a failover consumer's role changes (FO-6).
type roleEvents struct {
	mu     sync.Mutex
	events []string
	at     map[string]time.Time
	ch     chan string
}

func newRoleEvents() *roleEvents {
	return &roleEvents{at: map[string]time.Time{}, ch: make(chan string, 16)}
}

func (r *roleEvents) add(e string) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.at[e] = time.Now()
	r.mu.Unlock()
	r.ch <- e
}

func (r *roleEvents) BecameActive(c *client.Consumer, partition int) {
	r.add(fmt.Sprintf("%s active %d", c.Name(), partition))
}

func (r *roleEvents) BecameInactive(c *client.Consumer, partition int) {
	r.add(fmt.Sprintf("%s inactive %d", c.Name(), partition))
}

func (r *roleEvents) await(ctx context.Context, t *testing.T, want string) time.Time {
	t.Helper()
	for {
		select {
		case e := <-r.ch:
			if e == want {
				r.mu.Lock()
				defer r.mu.Unlock()
				return r.at[e]
			}
		case <-ctx.Done():
			t.Fatalf("no event %q; saw %v", want, r.events)
		}
	}
}

// FO-3, FO-5, FO-6, FO-7: on partition 0 of two, a better-ranked consumer
// joins while the master holds unacked messages: the old master is told it is inactive and given the
// drain timeout; what it acks then is not delivered again; the new master
// starts at the first unacknowledged message and is told it is active.
func TestFailoverHandOverDrains(t *testing.T) {
	n := startNodeWith(t, t.TempDir(), func(cfg *broker.Config) { cfg.Subscriptions.DrainTimeout = 20 * time.Second })
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/drain"
	createStream(ctx, t, c, stream, 2)
	ev := newRoleEvents()
	b, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.Failover, Name: "b", EventListener: ev, NackRedeliveryDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ev.await(ctx, t, "b active 0")
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, MessageRouter: func(*client.ProducerMessage, int) int { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		send(ctx, t, p, "", fmt.Sprint(i))
	}
	var held []*client.Message
	for range 4 {
		held = append(held, receive(ctx, t, b))
	}
	if err := b.AckCumulative(ctx, held[0]); err != nil { // FO-7
		t.Fatal(err)
	}
	a, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.Failover, Name: "a", EventListener: ev})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ev.await(ctx, t, "b inactive 0")
	// b acks two of the three it holds during the drain; the hand-over
	// waits for the third (or the 20 s timeout, which this test does not
	// reach).
	for _, m := range held[1:3] {
		if err := b.Ack(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	si := describeSub(ctx, t, c, stream, "s")
	for _, ci := range si.Consumers {
		if ci.Role == "master" {
			t.Fatalf("a master during the drain: %+v", si.Consumers)
		}
	}
	b.Nack(held[3]) // gives it up: the drain ends
	ev.await(ctx, t, "a active 0")
	if m := receive(ctx, t, a); string(m.Payload) != "3" {
		t.Fatalf("the new master started at %q, want the first unacked, 3", m.Payload)
	}
}

// FO-8: with a stability window, a returning better-ranked consumer takes
// the master role only once it has stayed connected that long.
func TestFailoverStabilityWindow(t *testing.T) {
	const window = 700 * time.Millisecond
	n := startNodeWith(t, t.TempDir(), func(cfg *broker.Config) { cfg.Subscriptions.FailoverStabilityWindow = window })
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/window"
	createStream(ctx, t, c, stream, 2) // partition 0's master is candidate 0 (FO-3)
	ev := newRoleEvents()
	b, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.Failover, Name: "b", EventListener: ev})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ev.await(ctx, t, "b active 0")
	joined := time.Now()
	a, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.Failover, Name: "a", EventListener: ev})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if at := ev.await(ctx, t, "a active 0"); at.Sub(joined) < window {
		t.Fatalf("a took over %v after joining, inside the %v stability window", at.Sub(joined), window)
	}
}

// SH-4: a consumer at its unacked limit gets nothing more until half is
// acked; describe shows it blocked.
func TestSharedUnackedLimit(t *testing.T) {
	n := startNodeWith(t, t.TempDir(), func(cfg *broker.Config) { cfg.Subscriptions.MaxUnackedPerConsumer = 10 })
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/limit"
	createStream(ctx, t, c, stream, 1)
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.Shared, Name: "only"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		p.SendAsync(ctx, &client.ProducerMessage{Payload: []byte(fmt.Sprint(i))}, func(client.MessageID, *client.ProducerMessage, error) {})
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	consumer := func() transport.ConsumerInfo { return describeSub(ctx, t, c, stream, "s").Consumers[0] }
	waitFor(t, ctx, "the consumer to be blocked", func() bool { return consumer().Blocked })
	if ci := consumer(); ci.Unacked != 10 {
		t.Fatalf("blocked with %d unacked, the limit is 10", ci.Unacked)
	}
	// Acking unblocks it: all 30 arrive, never more than 10 unacked.
	for i := range 30 {
		if err := cons.Ack(ctx, receive(ctx, t, cons)); err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 {
			if ci := consumer(); ci.Unacked > 10 {
				t.Fatalf("%d unacked, the limit is 10", ci.Unacked)
			}
		}
	}
	waitFor(t, ctx, "the consumer to be unblocked", func() bool { return !consumer().Blocked })
}

// SH-7: a message nacked until its count reaches MaxDeliveries goes to
// the dead-letter stream and is acknowledged on the original.
func TestDeadLetterAfterMaxDeliveries(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/poison"
	createStream(ctx, t, c, stream, 1)
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "work", Type: client.Shared,
		NackRedeliveryDelay: 20 * time.Millisecond, DLQ: &client.DLQPolicy{MaxDeliveries: 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	id := send(ctx, t, p, "k", "poison")
	for want := range uint32(3) {
		m := receive(ctx, t, cons)
		if m.ID != id || m.RedeliveryCount != want {
			t.Fatalf("delivery %d: %v count %d", want+1, m.ID, m.RedeliveryCount)
		}
		cons.Nack(m)
	}
	// The fourth delivery happens inside Receive, which hands the message
	// to the dead-letter stream instead of returning it.
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go cons.Receive(rctx)
	dlq, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream + "-work-DLQ", Subscription: "inspect", SubscriptionInitialPosition: client.Earliest})
	for err != nil && transport.CodeOf(err) == transport.CodeStreamNotFound {
		// The consumer creates the stream on the 4th delivery.
		select {
		case <-ctx.Done():
			t.Fatal(err)
		case <-time.After(10 * time.Millisecond):
		}
		dlq, err = c.Subscribe(ctx, client.ConsumerOptions{Stream: stream + "-work-DLQ", Subscription: "inspect", SubscriptionInitialPosition: client.Earliest})
	}
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	m := receive(ctx, t, dlq)
	if string(m.Payload) != "poison" || m.Properties[client.PropertyOriginMessageID] != id.String() {
		t.Fatalf("dead letter %q %v", m.Payload, m.Properties)
	}
	waitFor(t, ctx, "the original to be acked", func() bool { return describeSub(ctx, t, c, stream, "work").Backlog == 0 })
}

// SH-7: the redelivery count is replicated with the cursor: it is still
// there after the node restarts.
func TestRedeliveryCountSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir)
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/count"
	createStream(ctx, t, c, stream, 1)
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.Shared, NackRedeliveryDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	send(ctx, t, p, "", "m")
	cons.Nack(receive(ctx, t, cons))
	cons.Nack(receive(ctx, t, cons))
	if m := receive(ctx, t, cons); m.RedeliveryCount != 2 {
		t.Fatalf("third delivery count %d", m.RedeliveryCount)
	}
	// Closing with the third delivery unacked loses it: the count goes
	// to 3. Close waits for the consumer's acks to commit, and the count
	// goes with them.
	cons.Close()
	c.Close()
	n.Close()
	n = startNode(t, dir)
	c = newClient(t, n)
	cons, err = c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.Shared})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if m := receive(ctx, t, cons); m.RedeliveryCount != 3 {
		t.Fatalf("after the restart the count is %d, want 3", m.RedeliveryCount)
	}
}

// SH-6: a message left unacked longer than AckTimeout is delivered again.
func TestAckTimeoutRedelivers(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "persistent://acme/prod/acktimeout"
	createStream(ctx, t, c, stream, 1)
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.Shared, AckTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	id := send(ctx, t, p, "", "slow")
	m := receive(ctx, t, cons)
	got := time.Now()
	again := receive(ctx, t, cons)
	if again.ID != id || again.RedeliveryCount != 1 {
		t.Fatalf("redelivery %v count %d", again.ID, again.RedeliveryCount)
	}
	if waited := time.Since(got); waited < 200*time.Millisecond {
		t.Fatalf("redelivered %v after receipt, before the ack timeout", waited)
	}
	if err := cons.Ack(ctx, m); err != nil {
		t.Fatal(err)
	}
}

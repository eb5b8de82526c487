package subscription

import (
	"slices"
	"testing"
)

func sharedBench(t *testing.T, l Limits) *bench {
	if l == (Limits{}) {
		l = defaultLimits()
	}
	return newBench(t, Config{Mode: Shared, Durable: true, Limits: l})
}

// SH-1: each message goes to one consumer at a time.
func TestSharedOneConsumerAtATime(t *testing.T) {
	b := sharedBench(t, Limits{})
	for _, n := range []string{"a", "b", "c"} {
		b.attach(n, 0, 1000)
	}
	b.publish(300, "")
	b.pump()
	seen := map[uint64]int{}
	for _, n := range []string{"a", "b", "c"} {
		got := b.received(n)
		if len(got) == 0 {
			t.Fatalf("%s received nothing", n)
		}
		for _, o := range got {
			seen[o]++
		}
	}
	for o := range uint64(300) {
		if seen[o] != 1 {
			t.Fatalf("message %d delivered %d times", o, seen[o])
		}
	}
}

// SH-2: a consumer gets nothing before it grants permits, and no more than
// it granted.
func TestSharedPermits(t *testing.T) {
	b := sharedBench(t, Limits{})
	b.attach("a", 0, 0)
	b.publish(10, "")
	if n := b.pump(); n != 0 {
		t.Fatalf("%d messages delivered without permits", n)
	}
	b.d.Flow(b.ids["a"], 4, 1000)
	b.pump()
	if got := b.received("a"); !slices.Equal(got, span(0, 4)) {
		t.Fatalf("4 permits: received %v", got)
	}
}

// SH-3: round robin among the consumers with permits, SharedBurst at a
// time, best priority level first.
func TestSharedRoundRobinByPriority(t *testing.T) {
	b := sharedBench(t, Limits{})
	b.attach("a", 0, 30)
	b.attach("b", 0, 30)
	b.attach("low", 1, 1000)
	b.publish(100, "")
	b.pump()
	a, bb, low := b.received("a"), b.received("b"), b.received("low")
	if len(a) != 30 || len(bb) != 30 || len(low) != 40 {
		t.Fatalf("a %d, b %d, low %d; want 30, 30 (best level first, up to permits), then 40", len(a), len(bb), len(low))
	}
	if !slices.Equal(bb[:SharedBurst], span(0, SharedBurst)) || !slices.Equal(a[:SharedBurst], span(SharedBurst, 2*SharedBurst)) {
		t.Fatalf("bursts: b first %v, a first %v; want %d at a time, alternating", bb[:SharedBurst], a[:SharedBurst], SharedBurst)
	}
	if low[0] != 60 {
		t.Fatalf("the worse level started at %d, want 60, once the best level ran out of permits", low[0])
	}
}

// SH-4: a consumer with the unacked limit is blocked until it is back to
// half; the subscription likewise.
func TestSharedUnackedLimits(t *testing.T) {
	l := defaultLimits()
	l.MaxUnackedPerConsumer, l.MaxUnackedPerSubscription = 10, 1000
	b := sharedBench(t, l)
	b.attach("a", 0, 1000)
	b.publish(30, "")
	b.pump()
	if got := b.received("a"); len(got) != 10 {
		t.Fatalf("received %d with a limit of 10", len(got))
	}
	b.ack(0, 1, 2, 3)
	if n := b.pump(); n != 0 {
		t.Fatalf("%d delivered at 6 unacked, above half the limit", n)
	}
	b.ack(4)
	b.pump()
	if got := b.received("a"); len(got) != 5 {
		t.Fatalf("back to half (5 unacked): received %d more, want 5", len(got))
	}
	if d := b.d.Describe(b.now); d.Consumers[0].Blocked != true || d.Consumers[0].Unacked != 10 {
		t.Fatalf("describe %+v, want a blocked at 10 unacked", d.Consumers[0])
	}

	l.MaxUnackedPerConsumer, l.MaxUnackedPerSubscription = 1000, 8
	b = sharedBench(t, l)
	b.attach("a", 0, 1000)
	b.attach("b", 0, 1000)
	b.publish(30, "")
	if n := b.pump(); n != 8 {
		t.Fatalf("%d delivered with a subscription limit of 8", n)
	}
	if !b.d.Describe(b.now).Blocked {
		t.Fatal("the subscription at its limit is not described as blocked")
	}
}

// SH-5: a consumer that disconnects: what it held goes to the others
// before any newer message, counted as a redelivery (SH-7).
func TestSharedDisconnectRedeliversFirst(t *testing.T) {
	b := sharedBench(t, Limits{})
	b.attach("a", 0, 5)
	b.publish(5, "")
	b.pump()
	b.attach("b", 0, 100)
	b.publish(5, "")
	b.detach("a")
	b.pump()
	got := b.received("b")
	if !slices.Equal(got[:5], span(0, 5)) {
		t.Fatalf("b received %v, want a's 0..4 first", got)
	}
	for o := range uint64(5) {
		if b.count[o] != 1 || b.st.counts[o] != 1 {
			t.Fatalf("offset %d: delivered with count %d, replicated %d; want 1", o, b.count[o], b.st.counts[o])
		}
	}
}

// SH-6: a redelivery the client asks for (a nack, an ack timeout) goes
// before newer messages, counted; the delay is the client's.
func TestSharedNackRedelivers(t *testing.T) {
	b := sharedBench(t, Limits{})
	b.attach("a", 0, 3)
	b.publish(6, "")
	b.pump()
	b.d.Redeliver(b.ids["a"], []uint64{1})
	b.take()
	b.ack(0, 2)
	b.d.Flow(b.ids["a"], 3, 1000)
	b.pump()
	if got := b.received("a"); !slices.Equal(got, []uint64{0, 1, 2, 1, 3, 4}) {
		t.Fatalf("received %v, want 0 1 2, then 1 again before 3 4", got)
	}
	if b.count[1] != 1 {
		t.Fatalf("redelivered with count %d, want 1", b.count[1])
	}
}

// SH-7: redelivery counts are replicated (TakeCounted) and a new leader's
// dispatcher starts from the replicated ones.
func TestRedeliveryCountsResume(t *testing.T) {
	b := sharedBench(t, Limits{})
	b.st.counts[0] = 3
	b.publish(1, "")
	b.attach("a", 0, 10)
	b.pump()
	if b.count[0] != 3 {
		t.Fatalf("delivered with count %d, want the replicated 3", b.count[0])
	}
	b.detach("a")
	if b.st.counts[0] != 4 {
		t.Fatalf("replicated count %d after a lost delivery, want 4", b.st.counts[0])
	}
}

// SUB-5: a reader keeps no cursor, no unacked limits, and is not rewound.
func TestReaderReadsOn(t *testing.T) {
	b := newBench(t, Config{Mode: Exclusive, Durable: false, Limits: Limits{MaxUnackedPerConsumer: 1, MaxUnackedPerSubscription: 1}})
	b.publish(5, "")
	b.attach("r", 0, 100)
	b.pump()
	if got := b.received("r"); !slices.Equal(got, span(0, 5)) {
		t.Fatalf("a reader received %v", got)
	}
	b.d.SeekReader(2)
	b.pump()
	if got := b.received("r"); !slices.Equal(got, span(2, 5)) {
		t.Fatalf("after a seek to 2 the reader received %v", got)
	}
}

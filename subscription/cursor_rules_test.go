package subscription

import (
	"slices"
	"testing"
)

// CUR-2, EX-3: a delivered message is forgotten only once its ack is
// committed; until then a consumer that reconnects gets it again, and an
// acked one never.
func TestUnackedComeBackAfterReconnect(t *testing.T) {
	b := newBench(t, Config{Mode: Exclusive, Durable: true})
	b.attach("a", 0, 100)
	b.publish(5, "")
	b.pump()
	if got := b.received("a"); !slices.Equal(got, span(0, 5)) {
		t.Fatalf("received %v", got)
	}
	b.st.cursor.Ack(1) // committed
	b.d.Acked([]uint64{1}, false)
	b.detach("a")
	b.attach("a", 0, 100)
	b.pump()
	if got := b.received("a"); !slices.Equal(got, []uint64{0, 2, 3, 4}) {
		t.Fatalf("after reconnecting received %v, want the unacked 0 2 3 4 again", got)
	}
}

// CUR-3: a dispatcher for a subscription that exists starts at its
// cursor, whatever the initial position of the consumer that attaches.
func TestDispatcherStartsAtCursor(t *testing.T) {
	b := newBench(t, Config{Mode: Shared, Durable: true})
	b.publish(10, "")
	b.st.cursor.AckCumulative(5)
	b.st.cursor.Ack(7)
	b.attach("a", 0, 100)
	b.pump()
	if got := b.received("a"); !slices.Equal(got, []uint64{6, 8, 9}) {
		t.Fatalf("received %v, want 6 8 9 (from the cursor, skipping acked 7)", got)
	}
}

// CUR-4: a seek resets the cursor and restarts every consumer from there.
func TestResetRestartsFromCursor(t *testing.T) {
	b := newBench(t, Config{Mode: Failover, Durable: true})
	b.attach("a", 0, 100)
	b.publish(6, "")
	b.pump()
	b.received("a")
	b.st.cursor.Reset(2)
	b.d.Reset()
	b.pump()
	if got := b.received("a"); !slices.Equal(got, span(2, 6)) {
		t.Fatalf("after a seek to 2 received %v", got)
	}
}

// CUR-6: messages that retention removed are not delivered again, and
// reading moves past them.
func TestTrimmedMessagesSkipped(t *testing.T) {
	b := newBench(t, Config{Mode: Shared, Durable: true})
	b.attach("a", 0, 3)
	b.publish(6, "")
	b.pump()
	b.d.Redeliver(b.ids["a"], nil)
	b.take()
	for o := range 4 {
		b.log[o].removed = true
	}
	b.d.Flow(b.ids["a"], 100, 1000)
	b.pump()
	if got := b.received("a"); !slices.Equal(got, []uint64{0, 1, 2, 4, 5}) {
		t.Fatalf("received %v, want 0 1 2, then only 4 5 after 0..3 were trimmed", got)
	}
}

// CUR-5: the backlog is what is after the floor and not acked (the cursor's
// own rule, here as the dispatcher meets it): a new consumer gets exactly
// the backlog.
func TestNewConsumerGetsBacklog(t *testing.T) {
	b := newBench(t, Config{Mode: Shared, Durable: true})
	b.publish(8, "")
	b.st.cursor.Ack(2)
	b.st.cursor.Ack(5)
	if got := b.st.cursor.Backlog(8); got != 6 {
		t.Fatalf("backlog %d, want 6", got)
	}
	b.attach("a", 0, 100)
	b.pump()
	if got := b.received("a"); len(got) != 6 {
		t.Fatalf("received %d, want the backlog of 6", len(got))
	}
}

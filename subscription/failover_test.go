package subscription

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func failoverBench(t *testing.T, partition int, stream string, l Limits) *bench {
	if l == (Limits{}) {
		l = defaultLimits()
	}
	return newBench(t, Config{Mode: Failover, Durable: true, Partition: partition, Stream: stream, Limits: l})
}

// roleOf returns the last role event of a consumer: 1 active, 0 inactive,
// -1 none.
func (b *bench) roleOf(name string) int {
	role := -1
	for _, e := range b.roles {
		if e.Consumer == b.ids[name] {
			role = map[bool]int{true: 1, false: 0}[e.Active]
		}
	}
	return role
}

// FO-1, FO-6: of three consumers one is active and receives everything;
// every consumer is told its role.
func TestFailoverOneActive(t *testing.T) {
	b := failoverBench(t, 0, "s", Limits{})
	for _, n := range []string{"c", "a", "b"} {
		b.attach(n, 0, 1000)
	}
	b.publish(10, "")
	b.pump()
	if got := b.received("a"); !slices.Equal(got, span(0, 10)) {
		t.Fatalf("master a received %v, want 0..9", got)
	}
	for _, n := range []string{"b", "c"} {
		if got := b.received(n); len(got) > 0 {
			t.Fatalf("standby %s received %v", n, got)
		}
		if b.roleOf(n) != 0 {
			t.Fatalf("standby %s was not told it is inactive", n)
		}
	}
	if b.roleOf("a") != 1 {
		t.Fatal("master a was not told it is active")
	}
}

// FO-2, FO-3: candidates rank by priority level, then name; only the best
// level is eligible; partition i's master is candidate i mod n.
func TestFailoverRanking(t *testing.T) {
	for _, tc := range []struct {
		partition int
		want      string
	}{{0, "a"}, {1, "b"}, {2, "a"}, {3, "b"}} {
		b := failoverBench(t, tc.partition, "persistent://t/f/s", Limits{})
		b.attach("z", 1, 100) // a worse level: never master
		b.attach("b", 0, 100)
		b.attach("a", 0, 100)
		b.publish(3, "")
		b.pump()
		if got := b.received(tc.want); len(got) != 3 {
			t.Fatalf("partition %d: %s received %v, want the master to get 3", tc.partition, tc.want, got)
		}
		if got := b.received("z"); len(got) > 0 {
			t.Fatalf("partition %d: a consumer of a worse priority level received %v", tc.partition, got)
		}
	}
}

// FO-4: on an unpartitioned stream the master is the ring owner of the
// stream name, so many streams spread over the consumers.
func TestFailoverUnpartitionedRing(t *testing.T) {
	masters := map[string]int{}
	for i := range 60 {
		stream := "persistent://t/f/s" + string(rune('A'+i))
		b := failoverBench(t, -1, stream, Limits{})
		for _, n := range []string{"a", "b", "c"} {
			b.attach(n, 0, 10)
		}
		b.publish(1, "")
		b.pump()
		want := Master([]Candidate{{Name: "a"}, {Name: "b"}, {Name: "c"}}, -1, stream)
		if got := b.received(want); len(got) != 1 {
			t.Fatalf("%s: the ring owner %s received %v", stream, want, got)
		}
		masters[want]++
	}
	if len(masters) != 3 {
		t.Fatalf("60 streams had masters %v, want all three consumers to lead some", masters)
	}
}

// FO-5: when the master changes, the old one is told inactive at once and
// given the drain timeout to ack what it holds; the new master starts at
// the first unacknowledged message.
func TestFailoverHandOverDrains(t *testing.T) {
	b := failoverBench(t, 0, "s", Limits{})
	b.attach("b", 0, 100)
	b.publish(6, "")
	b.pump()
	b.ack(0, 1, 2)
	b.attach("a", 0, 100) // ranks first: takes over after the drain
	if b.roleOf("b") != 0 {
		t.Fatal("the old master was not told it is inactive when the hand-over began")
	}
	b.publish(2, "")
	b.pump()
	if got := b.received("a"); len(got) > 0 {
		t.Fatalf("the new master received %v during the drain", got)
	}
	if w := b.d.Wake(); !w.Equal(b.now.Add(time.Second)) {
		t.Fatalf("wake at %v, want the end of the drain", w)
	}
	b.now = b.now.Add(time.Second)
	b.pump()
	if got := b.received("a"); !slices.Equal(got, span(3, 8)) {
		t.Fatalf("the new master received %v, want 3..7 (from the first unacked)", got)
	}
	if b.roleOf("a") != 1 {
		t.Fatal("the new master was not told it is active")
	}
}

// FO-5: an old master that acks everything it holds hands over at once.
func TestFailoverHandOverAfterAcks(t *testing.T) {
	b := failoverBench(t, 0, "s", Limits{})
	b.attach("b", 0, 100)
	b.publish(3, "")
	b.pump()
	b.attach("a", 0, 100)
	b.ackAll("b")
	b.publish(1, "")
	b.pump()
	if got := b.received("a"); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("after the old master acked, the new one received %v, want [3]", got)
	}
}

// FO-7: cumulative acks are allowed in failover and release everything up
// to the offset.
func TestFailoverCumulativeAck(t *testing.T) {
	b := failoverBench(t, 0, "s", Limits{})
	b.attach("a", 0, 100)
	b.publish(5, "")
	b.pump()
	b.st.cursor.AckCumulative(3)
	b.d.Acked([]uint64{3}, true)
	if got := b.d.pendingOf(b.d.find(b.ids["a"])); !slices.Equal(got, []uint64{4}) {
		t.Fatalf("after a cumulative ack of 3 the master holds %v, want [4]", got)
	}
}

// FO-8: a returning higher-ranked consumer takes the role back only after
// it stayed for the stability window.
func TestFailoverStabilityWindow(t *testing.T) {
	l := defaultLimits()
	l.StabilityWindow = 700 * time.Millisecond
	b := failoverBench(t, 0, "s", l)
	b.attach("a", 0, 100)
	b.attach("b", 0, 100)
	b.detach("a") // b takes over
	b.publish(1, "")
	b.pump()
	if got := b.received("b"); len(got) != 1 {
		t.Fatalf("b received %v while a was gone", got)
	}
	b.now = b.now.Add(100 * time.Millisecond)
	b.attach("a", 0, 100)
	b.publish(1, "")
	b.pump()
	if got := b.received("b"); len(got) != 1 {
		t.Fatalf("b, the master inside the window, received %v", got)
	}
	if w := b.d.Wake(); !w.Equal(b.now.Add(700 * time.Millisecond)) {
		t.Fatalf("wake at %v, want a's return plus the window", w)
	}
	b.now = b.now.Add(700 * time.Millisecond)
	b.ackAll("b")
	b.publish(1, "")
	b.pump()
	if got := b.received("a"); len(got) != 1 {
		t.Fatalf("after the window a received %v, want the new message", got)
	}
}

// SUB-7: during the reconnect grace a master that has not come back
// keeps its role: what it would receive waits, and nobody else gets it.
func TestFailoverMasterAwayKeepsRole(t *testing.T) {
	b := failoverBench(t, 0, "s", Limits{})
	b.st.join("a", 0) // a member not back after a leader change
	b.d.SetGrace(b.now.Add(10 * time.Second))
	b.attach("b", 0, 100)
	b.publish(2, "")
	b.pump()
	if got := b.received("b"); len(got) > 0 {
		t.Fatalf("b received %v while the master a was away in the grace", got)
	}
	b.attach("a", 0, 100)
	b.pump()
	if got := b.received("a"); !slices.Equal(got, span(0, 2)) {
		t.Fatalf("a back received %v", got)
	}
}

// EX-1, EX-2: one exclusive consumer; a second is refused, and when it
// comes on another connection the holder is named to be probed.
func TestExclusiveAdmission(t *testing.T) {
	b := newBench(t, Config{Mode: Exclusive, Durable: true})
	b.tryAttach("a", 0, 10, 1)
	c := Consumer{ID: 99, Name: "b", Conn: 2}
	holder, err := b.d.Admit(c, b.now)
	var busy *BusyError
	if !errors.As(err, &busy) || !busy.Exclusive || holder != b.ids["a"] {
		t.Fatalf("a second exclusive consumer: holder %d, %v; want a named and refused", holder, err)
	}
	c.Conn = 1
	if holder, err := b.d.Admit(c, b.now); holder != 0 || !errors.Is(err, ErrBusy) {
		t.Fatalf("on the holder's own connection: holder %d, %v; want refused, nobody to probe", holder, err)
	}
}

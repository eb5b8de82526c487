package subscription

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// quarters are the sticky ranges the property test gives each name.
var quarters = map[string]HashRange{
	"a": {0, 16383}, "b": {16384, 32767}, "c": {32768, 49151}, "d": {49152, 65535},
}

// In the spirit of TestCursorMatchesSet: random sequences of publishes,
// attaches, detaches, permits, acks and redelivery requests, on every
// mode. After every pass: a key_shared key is unacknowledged on one
// consumer at most (KS-7) and no message goes out ahead of an older
// unacknowledged one of its key held elsewhere or waiting (KS-7, KS-8);
// every message is unacknowledged on one consumer at most (SH-1). At the
// end, with consumers given permits and acking all they get, every
// message published is acknowledged: nothing unacked is ever lost.
func TestDispatchProperties(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"key_shared", Config{Mode: KeyShared}},
		{"key_shared sticky", Config{Mode: KeyShared, Keys: KeyPolicy{Sticky: true}}},
		{"shared", Config{Mode: Shared}},
		{"failover", Config{Mode: Failover}},
		{"exclusive", Config{Mode: Exclusive}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(40) {
				runProperty(t, tc.cfg, seed)
			}
		})
	}
}

func runProperty(t *testing.T, cfg Config, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1))
	cfg.Durable = true
	cfg.Limits = defaultLimits()
	cfg.Limits.MaxUnackedPerConsumer = 1 + r.IntN(12)
	cfg.Limits.LookAheadPerConsumer, cfg.Limits.LookAheadPerSubscription = 1+r.IntN(6), 1+r.IntN(15)
	cfg.Limits.DrainTimeout = time.Duration(r.IntN(3)) * 100 * time.Millisecond
	b := newBench(t, cfg)
	b.onDeliver = func(c ConsumerID, off uint64) { b.checkOrder(t, seed, c, off) }
	names := []string{"a", "b", "c", "d"}
	attached := map[string]bool{}
	// Acks and permits also land while a pass reads the log.
	b.midPass = func() {
		name := names[r.IntN(len(names))]
		if !attached[name] || r.IntN(3) != 0 {
			return
		}
		if r.IntN(2) == 0 {
			b.d.Flow(b.ids[name], int64(1+r.IntN(20)), 1000)
			return
		}
		for _, o := range b.d.pendingOf(b.d.find(b.ids[name])) {
			if r.IntN(2) == 0 {
				b.ack(o)
			}
		}
	}
	for step := range 400 {
		b.now = b.now.Add(time.Duration(r.IntN(80)) * time.Millisecond)
		name := names[r.IntN(len(names))]
		switch op := r.IntN(10); {
		case op < 3:
			for range 1 + r.IntN(5) {
				b.publishKeys(fmt.Sprint("k", r.IntN(8)))
			}
		case op == 3 && !attached[name]:
			if _, err := b.tryAttach(name, int32(r.IntN(2)), int64(r.IntN(20)), 0, quarters[name]); err == nil {
				attached[name] = true
			}
		case op == 4 && attached[name]:
			b.detach(name)
			delete(attached, name)
		case op == 5 && attached[name]:
			b.d.Flow(b.ids[name], int64(1+r.IntN(20)), 1000)
		case op < 8 && attached[name]:
			for _, o := range b.d.pendingOf(b.d.find(b.ids[name])) {
				if r.IntN(2) == 0 {
					b.ack(o)
				}
			}
		case op == 8 && attached[name]:
			held := b.d.pendingOf(b.d.find(b.ids[name]))
			if len(held) > 0 {
				b.d.Redeliver(b.ids[name], held[:1+r.IntN(len(held))])
				b.take()
			}
		}
		b.pump()
		b.checkHolders(t, seed, step)
	}
	b.settle(t, seed, names, attached)
}

// settle attaches everyone (one, on exclusive) with permits, acking what
// comes, until every message published is acknowledged.
func (b *bench) settle(t *testing.T, seed uint64, names []string, attached map[string]bool) {
	cfg := b.d.cfg
	if cfg.Mode == Exclusive && len(attached) > 0 {
		names = slices.Collect(maps.Keys(attached))
	} else if cfg.Mode == Exclusive {
		names = names[:1]
	}
	for _, n := range names {
		if !attached[n] {
			if _, err := b.tryAttach(n, 0, 0, 0, quarters[n]); err != nil {
				t.Fatalf("seed %d: attach %s at the end: %v", seed, n, err)
			}
		}
	}
	for range 4 * len(b.log) {
		b.now = b.now.Add(time.Second)
		for _, n := range names {
			b.d.Flow(b.ids[n], 100, 1000)
			b.ackAll(n)
		}
		b.pump()
		if b.st.cursor.NextUnacked(0) == uint64(len(b.log)) {
			return
		}
	}
	var cs []string
	for _, c := range b.d.consumers {
		cs = append(cs, fmt.Sprintf("%s(id %d permits %d unacked %d blocked %v active %v)", c.Name, c.ID, c.permits, c.unacked, c.blocked, c.active))
	}
	cur := "none"
	if b.d.current != nil {
		cur = b.d.current.Name
	}
	for o, h := range b.d.pending {
		cs = append(cs, fmt.Sprintf("pending %d held by %s id %d; ids[%s]=%d", o, h.c.Name, h.c.ID, h.c.Name, b.ids[h.c.Name]))
	}
	t.Fatalf("seed %d: messages never acknowledged: the first is %d of %d; readPos %d resend %v skipped %v pending %d current %s drain %v consumers %v",
		seed, b.st.cursor.NextUnacked(0), len(b.log), b.d.readPos, b.d.resend, b.d.skipped, len(b.d.pending), cur, b.d.drainUntil, cs)
}

// checkHolders: on key_shared a key is unacknowledged on one consumer at
// most (KS-7).
func (b *bench) checkHolders(t *testing.T, seed uint64, step int) {
	if b.d.cfg.Mode != KeyShared {
		return
	}
	for key, hs := range b.holdersOf() {
		if len(hs) > 1 {
			t.Fatalf("seed %d step %d: key %s unacknowledged on %d consumers", seed, step, key, len(hs))
		}
	}
}

// checkOrder: on key_shared, when offset off goes to consumer c, every
// older message of its key is acknowledged or held by c (KS-7, KS-8).
func (b *bench) checkOrder(t *testing.T, seed uint64, c ConsumerID, off uint64) {
	if b.d.cfg.Mode != KeyShared {
		return
	}
	key := b.keysOf([]uint64{off})[0]
	for o := range off {
		if b.keysOf([]uint64{o})[0] != key || b.st.cursor.IsAcked(o) {
			continue
		}
		if h, ok := b.d.pending[o]; !ok || h.c.ID != c {
			t.Fatalf("seed %d: offset %d of key %s went to consumer %d while the older %d is not acknowledged nor held by it", seed, off, key, c, o)
		}
	}
	if slices.Contains(b.got[c], off) && b.count[off] == 0 && b.d.redelivered[off] == 0 {
		// A second delivery to the same consumer without a count: it
		// was never given back.
		t.Fatalf("seed %d: offset %d delivered to consumer %d twice without a redelivery", seed, off, c)
	}
}

package subscription

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

func keyBench(t *testing.T, keys KeyPolicy, l Limits) *bench {
	if l == (Limits{}) {
		l = defaultLimits()
	}
	return newBench(t, Config{Mode: KeyShared, Keys: keys, Durable: true, Limits: l})
}

// ownerOf returns the name a key goes to among names (KS-3).
func ownerOf(key string, names ...string) string {
	return NewAutoSplit(names).Owner(Slot(key))
}

// keysFor returns n keys auto_split gives to name among names.
func keysFor(n int, name string, names ...string) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprint("key-", i); ownerOf(k, names...) == name {
			keys = append(keys, k)
		}
	}
	return keys
}

// KS-1, KS-3, KS-6: each message goes, by its own sticky key (ordering
// key, else key, else NONE_KEY), to the consumer owning its slot on the
// ring of 100 points per consumer name.
func TestKeySharedRoutesByStickyKey(t *testing.T) {
	b := keyBench(t, KeyPolicy{}, Limits{})
	b.attach("a", 0, 1000)
	b.attach("b", 0, 1000)
	for i := range 50 {
		b.publishKeys(fmt.Sprint("k", i))
	}
	b.log = append(b.log, msg{key: "ignored", ordKey: "k7"}, msg{})
	b.pump()
	for _, n := range []string{"a", "b"} {
		for i, k := range b.keysOf(b.received(n)) {
			if want := ownerOf(k, "a", "b"); want != n {
				t.Fatalf("message %d with key %s went to %s, its owner is %s", i, k, n, want)
			}
		}
	}
	if got := StickyKey([]byte("k7"), "ignored"); got != "k7" {
		t.Fatalf("sticky key %q, want the ordering key", got)
	}
	if got := StickyKey(nil, ""); got != NoneKey {
		t.Fatalf("sticky key of a keyless message %q, want %s", got, NoneKey)
	}
}

// KS-3: a consumer that leaves and comes back with the same name gets the
// same keys.
func TestKeySharedSameNameSameKeys(t *testing.T) {
	b := keyBench(t, KeyPolicy{}, Limits{})
	b.attach("a", 0, 1000)
	b.attach("b", 0, 1000)
	keys := keysFor(5, "b", "a", "b")
	b.publishKeys(keys...)
	b.pump()
	b.ackAll("b")
	first := b.keysOf(b.received("b"))
	b.detach("b")
	b.attach("b", 0, 1000)
	b.publishKeys(keys...)
	b.pump()
	if again := b.keysOf(b.received("b")); !slices.Equal(first, again) {
		t.Fatalf("b had keys %v, after coming back %v", first, again)
	}
}

// KS-4: sticky consumers get the slots of their ranges; overlapping
// ranges are refused; keys of slots nobody covers wait.
func TestKeySharedStickyRanges(t *testing.T) {
	b := keyBench(t, KeyPolicy{Sticky: true}, Limits{})
	b.attach("a", 0, 1000, HashRange{0, 32767})
	_, err := b.tryAttach("c", 0, 10, 0, HashRange{30000, 40000})
	var ae *AssignError
	if !errors.As(err, &ae) || ae.Error() != "Range conflict with consumer a" {
		t.Fatalf("an overlapping range: %v, want Range conflict with consumer a", err)
	}
	var low, high []string
	for i := 0; len(low) < 3 || len(high) < 3; i++ {
		k := fmt.Sprint("key-", i)
		if Slot(k) <= 32767 {
			low = append(low, k)
		} else {
			high = append(high, k)
		}
	}
	b.publishKeys(low[:3]...)
	b.publishKeys(high[:3]...)
	b.pump()
	if got := b.keysOf(b.received("a")); !slices.Equal(got, low[:3]) {
		t.Fatalf("a received %v, want its keys %v", got, low[:3])
	}
	b.attach("b", 0, 1000, HashRange{32768, 65535})
	b.pump()
	if got := b.keysOf(b.received("b")); !slices.Equal(got, high[:3]) {
		t.Fatalf("uncovered keys, once b covers them: %v, want %v", got, high[:3])
	}
}

// KS-5: the unacked limits hold on key_shared.
func TestKeySharedUnackedLimit(t *testing.T) {
	l := defaultLimits()
	l.MaxUnackedPerConsumer = 4
	b := keyBench(t, KeyPolicy{}, l)
	b.attach("a", 0, 1000)
	b.publish(10, "k")
	b.pump()
	if got := b.received("a"); len(got) != 4 {
		t.Fatalf("received %d with a limit of 4", len(got))
	}
}

// KS-7: when a consumer joins, the keys it takes over move only after the
// old owner acked all it holds of them; every other key keeps flowing.
func TestKeySharedHandOverWaitsForAcks(t *testing.T) {
	b := keyBench(t, KeyPolicy{}, Limits{})
	b.attach("a", 0, 1000)
	moving := keysFor(1, "b", "a", "b")[0]
	staying := keysFor(1, "a", "a", "b")[0]
	b.publishKeys(moving, moving, staying)
	b.pump()
	b.received("a")
	b.attach("b", 0, 1000)
	b.publishKeys(moving, staying)
	b.pump()
	if got := b.keysOf(b.received("a")); !slices.Equal(got, []string{staying}) {
		t.Fatalf("a received %v while it still held %s: want only %s", got, moving, staying)
	}
	if got := b.received("b"); len(got) > 0 {
		t.Fatalf("b received %v before a acked its messages of %s", got, moving)
	}
	if d := b.d.Describe(b.now); !slices.Equal(d.DrainingKeys, []string{moving}) {
		t.Fatalf("draining keys %v, want [%s]", d.DrainingKeys, moving)
	}
	b.ack(0)
	b.pump()
	if got := b.received("b"); len(got) > 0 {
		t.Fatalf("b received %v while a held one message of the key", got)
	}
	b.ack(1)
	b.pump()
	if got := b.received("b"); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("after a acked, b received %v, want [3]", got)
	}
}

// KS-8, KS-11: what a consumer held of a key, given back (it left, or a
// leader change), goes before newer messages of that key; through the
// reconnect grace its slots wait for it rather than move.
func TestKeySharedRedeliversInOrder(t *testing.T) {
	b := keyBench(t, KeyPolicy{}, Limits{})
	b.attach("a", 0, 1000)
	b.attach("b", 0, 1000)
	key := keysFor(1, "b", "a", "b")[0]
	b.publishKeys(key, key)
	b.pump()
	b.received("b")
	// A leader change: b's connection is gone, it stays a member.
	b.d.Detach(b.ids["b"], b.now)
	b.d.SetGrace(b.now.Add(10 * time.Second))
	b.publishKeys(key)
	b.pump()
	if got := b.received("a"); len(got) > 0 {
		t.Fatalf("a received %v of b's key while b was away in the grace", got)
	}
	if d := b.d.Describe(b.now); len(d.Consumers) != 2 || d.Consumers[1].Role != RoleAway {
		t.Fatalf("describe %+v, want b away", d.Consumers)
	}
	id, err := b.tryAttach("b", 0, 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.pump()
	if got := b.got[id]; !slices.Equal(got, []uint64{0, 1, 2}) {
		t.Fatalf("b back received %v, want 0 1 again, then 2", got)
	}
}

// KS-9: reading past a blocked key is bounded; at the bound the
// dispatcher stalls until something changes, and says how much it holds.
func TestKeySharedLookAheadBounded(t *testing.T) {
	l := defaultLimits()
	l.LookAheadPerConsumer, l.LookAheadPerSubscription = 5, 5
	b := keyBench(t, KeyPolicy{}, l)
	b.attach("a", 0, 1000)
	hot := keysFor(1, "b", "a", "b")[0]
	b.publishKeys(hot)
	b.pump()
	b.attach("b", 0, 1000) // hot moves to b once a acked it: until then it blocks
	b.publish(20, hot)
	b.publishKeys(keysFor(1, "a", "a", "b")[0])
	b.pump()
	if d := b.d.Describe(b.now); d.LookAhead != 5 {
		t.Fatalf("look-ahead %d, want the bound 5", d.LookAhead)
	}
	if p := b.d.Plan(b.now); !p.Empty() || !p.Stalled {
		t.Fatalf("plan %+v at the look-ahead bound, want an empty stalled plan", p)
	}
	if got := b.received("a"); !slices.Equal(got, []uint64{0}) {
		t.Fatalf("a received %v; the message after the bound must wait its turn", got)
	}
	b.ack(0)
	b.pump()
	if got := b.received("b"); !slices.Equal(got, span(1, 21)) {
		t.Fatalf("b received %v, want every message of the key in order", got)
	}
	if got := b.received("a"); !slices.Equal(got, []uint64{21}) {
		t.Fatalf("a received %v after the bound was lifted, want [21]", got)
	}
}

// KS-10: with out-of-order delivery allowed a key moves at once.
func TestKeySharedOutOfOrder(t *testing.T) {
	b := keyBench(t, KeyPolicy{OutOfOrder: true}, Limits{})
	b.attach("a", 0, 1000)
	key := keysFor(1, "b", "a", "b")[0]
	b.publishKeys(key)
	b.pump()
	b.attach("b", 0, 1000)
	b.publishKeys(key)
	b.pump()
	if got := b.received("b"); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("b received %v, want the new message at once", got)
	}
}

package subscription

import (
	"fmt"
	"strings"
	"testing"
)

// KS-2: the hash vectors of the contract.
func TestHashVectors(t *testing.T) {
	vectors := []struct {
		key    string
		masked uint32
		slot   int
	}{
		{"Order-3459134", 964695987, 6067},
		{"key-1", 414258592, 5536},
		{"key-2", 1945654540, 21772},
		{"NONE_KEY", 504741539, 48803},
		{"hello", 613153351, 64071},
	}
	for _, v := range vectors {
		if Hash(v.key) != v.masked || Slot(v.key) != v.slot {
			t.Errorf("%q: hash %d slot %d, want %d %d", v.key, Hash(v.key), Slot(v.key), v.masked, v.slot)
		}
	}
}

// KS-1: ordering key first, then key, then NONE_KEY.
func TestStickyKey(t *testing.T) {
	if StickyKey([]byte("ok"), "k") != "ok" || StickyKey(nil, "k") != "k" || StickyKey(nil, "") != NoneKey {
		t.Fatal("sticky key order")
	}
}

// FO-2: priority level first, then name; only the best level is eligible.
func TestRank(t *testing.T) {
	got := Rank([]Candidate{{"c", 1}, {"b", 0}, {"a", 0}, {"z", 2}})
	if fmt.Sprint(got) != "[{a 0} {b 0}]" {
		t.Fatalf("rank %v", got)
	}
}

// FO-3: consumers "b","a","c" on 4 partitions: masters a, b, c, a.
func TestMasterPartitioned(t *testing.T) {
	cands := []Candidate{{"b", 0}, {"a", 0}, {"c", 0}}
	var masters []string
	for p := range 4 {
		masters = append(masters, Master(cands, p, "persistent://t/f/s"))
	}
	if strings.Join(masters, ",") != "a,b,c,a" {
		t.Fatalf("masters %v", masters)
	}
	if Master(nil, 0, "s") != "" {
		t.Fatal("a master without candidates")
	}
}

// FO-4: unpartitioned streams spread over consumers by the stream's hash,
// the same whatever order the consumers joined in.
func TestMasterUnpartitioned(t *testing.T) {
	cands := []Candidate{{"a", 0}, {"b", 0}, {"c", 0}}
	rev := []Candidate{{"c", 0}, {"b", 0}, {"a", 0}}
	count := map[string]int{}
	for i := range 300 {
		s := fmt.Sprintf("persistent://t/f/s%d", i)
		m := Master(cands, -1, s)
		if m != Master(rev, -1, s) {
			t.Fatalf("%s: master depends on join order", s)
		}
		count[m]++
	}
	for _, n := range []string{"a", "b", "c"} {
		if count[n] < 50 {
			t.Fatalf("streams per master %v: not spread", count)
		}
	}
}

// KS-3: every slot has one owner; a consumer that leaves and comes back
// gets the same slots; a leaving consumer's slots move, the others stay.
func TestAutoSplit(t *testing.T) {
	three := NewAutoSplit([]string{"a", "b", "c"})
	two := NewAutoSplit([]string{"a", "c"})
	again := NewAutoSplit([]string{"c", "b", "a"})
	count := map[string]int{}
	for slot := range Slots {
		o := three.Owner(slot)
		count[o]++
		if again.Owner(slot) != o {
			t.Fatalf("slot %d: owner depends on join order", slot)
		}
		if o != "b" && two.Owner(slot) != o {
			t.Fatalf("slot %d moved from %s though %s stayed", slot, o, o)
		}
	}
	for _, n := range []string{"a", "b", "c"} {
		if count[n] < Slots/10 {
			t.Fatalf("slots per consumer %v: not spread", count)
		}
	}
}

// KS-4: sticky ranges are validated and may not overlap another
// consumer's; uncovered slots have no owner.
func TestSticky(t *testing.T) {
	s := NewSticky()
	if err := s.Add("a", []HashRange{{0, 99}, {200, 299}}); err != nil {
		t.Fatal(err)
	}
	bad := [][]HashRange{nil, {{-1, 5}}, {{10, 5}}, {{0, Slots}}, {{300, 400}, {350, 360}}}
	for _, r := range bad {
		if err := s.Add("b", r); err == nil {
			t.Errorf("ranges %v accepted", r)
		}
	}
	err := s.Add("b", []HashRange{{90, 120}})
	if err == nil || err.Error() != "Range conflict with consumer a" {
		t.Fatalf("overlap: %v", err)
	}
	if err := s.Add("b", []HashRange{{100, 199}}); err != nil {
		t.Fatal(err)
	}
	if s.Owner(50) != "a" || s.Owner(150) != "b" || s.Owner(5000) != "" {
		t.Fatalf("owners %q %q %q", s.Owner(50), s.Owner(150), s.Owner(5000))
	}
	s.Remove("a")
	if s.Owner(50) != "" {
		t.Fatal("removed consumer still owns")
	}
}

// EX-5, FO-7, SH-1, KS-5: cumulative acks are taken by exclusive and
// failover subscriptions only; SUB-2's refusals name modes and key
// policies as users write them.
func TestModeRules(t *testing.T) {
	for m, want := range map[Mode]bool{Exclusive: true, Failover: true, Shared: false, KeyShared: false} {
		if m.CumulativeAck() != want {
			t.Errorf("%v: cumulative ack %v, want %v", m, m.CumulativeAck(), want)
		}
	}
	for m, want := range map[Mode]string{Exclusive: "exclusive", Shared: "shared", Failover: "failover", KeyShared: "key_shared", 9: "mode(9)"} {
		if m.String() != want {
			t.Errorf("mode %d is %q, want %q", m, m.String(), want)
		}
	}
	if got := (KeyPolicy{Sticky: true, OutOfOrder: true}).String(); got != "sticky, allow_out_of_order" {
		t.Errorf("key policy %q", got)
	}
	if !Shared.SharedNames() || KeyShared.SharedNames() || Failover.SharedNames() {
		t.Error("only shared consumers may share a name")
	}
}

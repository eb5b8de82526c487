package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// newTestRoutes is a routing table with no cluster around it.
func newTestRoutes(ttl time.Duration) *Routes {
	return newRoutes(testLogger(), ttl, newBroadcastQueue(func() int { return 3 }))
}

// routeOp is one step of a merge scenario: a local Announce or Forget, or
// a route arriving by gossip.
type routeOp struct {
	kind   string // "announce", "forget", "gossip", "gossip-tombstone"
	leader string
	epoch  uint64
	term   uint64
	err    error // expected from announce and forget
}

func (o routeOp) apply(t *testing.T, r *Routes, p string, now time.Time) {
	t.Helper()
	var err error
	switch o.kind {
	case "announce":
		err = r.Announce(p, Route{LeaderID: o.leader, Epoch: o.epoch, Term: o.term})
	case "forget":
		err = r.Forget(p, o.epoch)
	case "gossip":
		r.handleMsg(encodeRouteMsg(p, routeEntry{leader: o.leader, epoch: o.epoch, term: o.term})[1:], now)
	case "gossip-tombstone":
		r.handleMsg(encodeRouteMsg(p, routeEntry{epoch: o.epoch, deleted: now.UnixMilli()})[1:], now)
	}
	if !errors.Is(err, o.err) || (o.err == nil && err != nil) {
		t.Fatalf("%s %+v: %v, want %v", o.kind, o, err, o.err)
	}
}

func TestRoutesMerge(t *testing.T) {
	const p = "persistent://t/f/s-partition-0"
	tests := []struct {
		name string
		ops  []routeOp
		want *Route // nil: no live route
	}{
		{"first announcement", []routeOp{{kind: "announce", leader: "a", term: 1}}, &Route{"a", 0, 1}},
		{"higher term wins", []routeOp{
			{kind: "announce", leader: "a", term: 1},
			{kind: "gossip", leader: "b", term: 2},
		}, &Route{"b", 0, 2}},
		{"older term does not regress", []routeOp{
			{kind: "gossip", leader: "b", term: 2},
			{kind: "announce", leader: "a", term: 1, err: ErrStaleRoute},
			{kind: "gossip", leader: "c", term: 1},
		}, &Route{"b", 0, 2}},
		{"same term keeps the first leader", []routeOp{
			{kind: "gossip", leader: "a", term: 3},
			{kind: "gossip", leader: "b", term: 3},
			{kind: "announce", leader: "c", term: 3, err: ErrStaleRoute},
		}, &Route{"a", 0, 3}},
		{"same announcement twice", []routeOp{
			{kind: "announce", leader: "a", term: 3},
			{kind: "announce", leader: "a", term: 3},
		}, &Route{"a", 0, 3}},
		{"higher epoch beats a higher term", []routeOp{
			{kind: "announce", leader: "a", epoch: 1, term: 9},
			{kind: "gossip", leader: "b", epoch: 2, term: 1},
			{kind: "gossip", leader: "a", epoch: 1, term: 10},
		}, &Route{"b", 2, 1}},
		{"forget", []routeOp{
			{kind: "announce", leader: "a", epoch: 1, term: 4},
			{kind: "forget", epoch: 1},
		}, nil},
		{"forget twice", []routeOp{
			{kind: "announce", leader: "a", epoch: 1, term: 4},
			{kind: "forget", epoch: 1},
			{kind: "forget", epoch: 1},
		}, nil},
		{"forget an unknown partition", []routeOp{{kind: "forget", epoch: 1}}, nil},
		{"a forgotten epoch is not resurrected", []routeOp{
			{kind: "announce", leader: "a", epoch: 1, term: 4},
			{kind: "forget", epoch: 1},
			{kind: "gossip", leader: "b", epoch: 1, term: 5},
			{kind: "announce", leader: "b", epoch: 1, term: 6, err: ErrStaleRoute},
		}, nil},
		{"a tombstone that arrives first blocks its epoch", []routeOp{
			{kind: "gossip-tombstone", epoch: 1},
			{kind: "gossip", leader: "a", epoch: 1, term: 4},
		}, nil},
		{"re-created with a newer epoch", []routeOp{
			{kind: "announce", leader: "a", epoch: 1, term: 4},
			{kind: "forget", epoch: 1},
			{kind: "announce", leader: "b", epoch: 2, term: 1},
		}, &Route{"b", 2, 1}},
		{"forgetting an older epoch", []routeOp{
			{kind: "announce", leader: "b", epoch: 2, term: 1},
			{kind: "forget", epoch: 1, err: ErrStaleRoute},
		}, &Route{"b", 2, 1}},
		{"forgetting a newer epoch", []routeOp{
			{kind: "announce", leader: "b", epoch: 2, term: 1},
			{kind: "forget", epoch: 3},
			{kind: "gossip", leader: "b", epoch: 3, term: 1},
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestRoutes(time.Hour)
			now := time.Now()
			for _, op := range tt.ops {
				op.apply(t, r, p, now)
			}
			got, ok := r.Lookup(p)
			if tt.want == nil {
				if ok {
					t.Fatalf("Lookup = %+v, want none", got)
				}
				return
			}
			if !ok || got != *tt.want {
				t.Fatalf("Lookup = %+v %v, want %+v", got, ok, *tt.want)
			}
		})
	}
}

// TestRoutesArrivalOrder delivers the same announcements in every order:
// the table always ends on the newest.
func TestRoutesArrivalOrder(t *testing.T) {
	const p = "p"
	msgs := []routeEntry{
		{leader: "a", epoch: 1, term: 1},
		{leader: "b", epoch: 1, term: 2},
		{leader: "c", epoch: 1, term: 3},
		{leader: "d", epoch: 1, term: 3}, // a conflicting claim for term 3
		{leader: "z", epoch: 0, term: 99},
	}
	want := map[string]Route{ // the leader of term 3 is whichever came first
		"c": {"c", 1, 3},
		"d": {"d", 1, 3},
	}
	perms := permutations(len(msgs))
	for _, perm := range perms {
		r := newTestRoutes(time.Hour)
		first := ""
		for _, i := range perm {
			if first == "" && msgs[i].term == 3 {
				first = msgs[i].leader
			}
			r.handleMsg(encodeRouteMsg(p, msgs[i])[1:], time.Now())
		}
		if got, _ := r.Lookup(p); got != want[first] {
			t.Fatalf("order %v: Lookup = %+v, want %+v", perm, got, want[first])
		}
	}
	t.Logf("%d orders", len(perms))
}

func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

func TestRoutesTombstoneTTL(t *testing.T) {
	const ttl = time.Minute
	r := newTestRoutes(ttl)
	now := time.Now()
	if err := r.Announce("p", Route{LeaderID: "a", Epoch: 1, Term: 1}); err != nil {
		t.Fatal(err)
	}
	if err := r.Forget("p", 1); err != nil {
		t.Fatal(err)
	}
	if len(r.entries) != 1 {
		t.Fatalf("no tombstone: %v", r.entries)
	}
	// Past the TTL the tombstone is dropped, and not sent in a push-pull.
	later := now.Add(ttl + time.Second)
	if st := r.localState(later); st != nil {
		t.Fatalf("state of %d bytes with only an expired tombstone", len(st))
	}
	if len(r.entries) != 0 {
		t.Fatalf("tombstone kept past its TTL: %v", r.entries)
	}
	// An expired tombstone from a peer still removes the route of its
	// epoch, and is not kept.
	r.handleMsg(encodeRouteMsg("q", routeEntry{leader: "a", epoch: 1, term: 1})[1:], later)
	old := routeEntry{epoch: 1, deleted: now.UnixMilli()}
	r.handleMsg(encodeRouteMsg("q", old)[1:], later)
	r.handleMsg(encodeRouteMsg("x", old)[1:], later)
	if _, ok := r.Lookup("q"); ok || len(r.entries) != 0 {
		t.Fatalf("entries %v after expired tombstones", r.entries)
	}
}

func TestRoutesWatch(t *testing.T) {
	r := newTestRoutes(time.Hour)
	if err := r.Announce("a", Route{LeaderID: "n1", Term: 1}); err != nil {
		t.Fatal(err)
	}
	w := r.Watch()
	defer w.Stop()
	next := func() RouteEvent {
		t.Helper()
		select {
		case ev := <-w.C:
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no route event")
		}
		return RouteEvent{}
	}
	if ev := next(); ev != (RouteEvent{Partition: "a", Route: Route{LeaderID: "n1", Term: 1}}) {
		t.Fatalf("initial event %+v", ev)
	}
	// Nobody reads: b's 50 changes are coalesced into (at most) the one
	// already handed over and the latest.
	for term := uint64(1); term <= 50; term++ {
		if err := r.Announce("b", Route{LeaderID: fmt.Sprintf("n%d", term), Term: term}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Forget("a", 0); err != nil {
		t.Fatal(err)
	}
	r.handleMsg(encodeRouteMsg("a", routeEntry{leader: "n1", term: 2})[1:], time.Now()) // stale: no event
	var bs []RouteEvent
	for {
		ev := next()
		if ev.Partition == "a" {
			if ev != (RouteEvent{Partition: "a", Forgotten: true}) {
				t.Fatalf("event %+v, want a forgotten", ev)
			}
			break
		}
		bs = append(bs, ev)
	}
	if len(bs) == 0 || len(bs) > 2 || bs[len(bs)-1].Route != (Route{LeaderID: "n50", Term: 50}) {
		t.Fatalf("b's events %+v, want at most 2 ending on term 50", bs)
	}
	select {
	case ev := <-w.C:
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(50 * time.Millisecond):
	}
	w.Stop()
	if _, ok := <-w.C; ok {
		t.Fatal("C open after Stop")
	}
}

func TestGossipInvalidates(t *testing.T) {
	r := newTestRoutes(time.Hour)
	for term := uint64(1); term <= 3; term++ {
		if err := r.Announce("p", Route{LeaderID: "a", Term: term}); err != nil {
			t.Fatal(err)
		}
	}
	// q's message has the length of p's: memberlist's queue without its
	// guard would give it p's id and drop p's (hashicorp/memberlist #263).
	if err := r.Announce("q", Route{LeaderID: "a", Term: 1}); err != nil {
		t.Fatal(err)
	}
	got := map[string]routeEntry{}
	for _, b := range r.bcast.GetBroadcasts(0, 1400) {
		p, e, err := decodeRouteMsg(b[1:])
		if err != nil {
			t.Fatal(err)
		}
		got[p] = e
	}
	want := map[string]routeEntry{"p": {leader: "a", term: 3}, "q": {leader: "a", term: 1}}
	if !maps.Equal(got, want) {
		t.Fatalf("sent %v, want the newest route of each partition %v", got, want)
	}
	a := &gossipMsg{name: "route:p"}
	if !a.Invalidates(&gossipMsg{name: "route:p"}) || a.Invalidates(&gossipMsg{name: "route:q"}) {
		t.Fatal("Invalidates does not follow the name")
	}
}

// TestBroadcastQueueBug shows the memberlist bug the queue's guard works
// around, so that it is noticed when a memberlist release fixes it.
func TestBroadcastQueueBug(t *testing.T) {
	bare := &memberlist.TransmitLimitedQueue{NumNodes: func() int { return 3 }, RetransmitMult: mlRetransmitMult}
	for _, term := range []uint64{1, 2, 3} {
		bare.QueueBroadcast(&gossipMsg{name: "route:p", msg: encodeRouteMsg("p", routeEntry{leader: "a", term: term})})
	}
	bare.QueueBroadcast(&gossipMsg{name: "route:q", msg: encodeRouteMsg("q", routeEntry{leader: "a", term: 1})})
	if n := bare.NumQueued(); n != 1 {
		t.Logf("memberlist's queue kept %d messages: the id bug seems fixed; the guard in newBroadcastQueue can go", n)
	}
}

// bigTable is n partitions of realistic names over 5 leaders, a tenth of
// them forgotten.
func bigTable(n int) ([]string, []routeEntry) {
	parts := make([]string, 0, n)
	for i := range n {
		parts = append(parts, fmt.Sprintf("persistent://tenant-%d/fabric-%d/stream-%04d-partition-%d", i%7, i%3, i/8, i%8))
	}
	slices.Sort(parts)
	entries := make([]routeEntry, n)
	for i := range entries {
		if i%10 == 9 {
			entries[i] = routeEntry{epoch: uint64(100000 + i), deleted: time.Now().UnixMilli()}
			continue
		}
		entries[i] = routeEntry{leader: fmt.Sprintf("node-%02d.fabriq.example.com", i%5), epoch: uint64(100000 + i), term: uint64(1 + i%40)}
	}
	return parts, entries
}

func TestRouteStateSize(t *testing.T) {
	for _, n := range []int{1000, 10000} {
		parts, entries := bigTable(n)
		b := encodeRouteState(parts, entries)
		t.Logf("%d partitions: %d bytes, %.1f per partition", n, len(b), float64(len(b))/float64(n))
		if per := len(b) / n; per > 32 {
			t.Fatalf("%d bytes per partition", per)
		}
		if len(b) > maxRouteState {
			t.Fatalf("%d partitions exceed the state limit", n)
		}
		gotP, gotE, err := decodeRouteState(b[1:])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(gotP, parts) || !slices.Equal(gotE, entries) {
			t.Fatal("state does not round-trip")
		}
	}
}

// TestRoutesGarbage feeds the decoders random bytes, and truncated and
// corrupted valid encodings: nothing panics, nothing is applied.
func TestRoutesGarbage(t *testing.T) {
	parts, entries := bigTable(200)
	state := encodeRouteState(parts, entries)
	msg := encodeRouteMsg("p", routeEntry{leader: "a", term: 1})
	rng := rand.New(rand.NewPCG(1, 2))
	var inputs [][]byte
	for i := range 2000 {
		b := make([]byte, rng.IntN(64))
		for j := range b {
			b[j] = byte(rng.UintN(256))
		}
		inputs = append(inputs, b)
		src := state
		if i%2 == 0 {
			src = msg
		}
		trunc := src[:rng.IntN(len(src))]
		inputs = append(inputs, trunc)
		flipped := bytes.Clone(src)
		flipped[rng.IntN(len(flipped))] ^= byte(1 + rng.UintN(255))
		inputs = append(inputs, flipped)
	}
	// A count far larger than the bytes that follow.
	inputs = append(inputs, []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, []byte{0x90, 0xdd, 0x7f, 0xff, 0xff, 0xff})
	r := newTestRoutes(time.Hour)
	for _, b := range inputs {
		r.handleMsg(b, time.Now())
		r.mergeState(b, time.Now())
	}
	// Corrupted encodings may decode to something valid; the table must
	// only ever hold valid entries.
	for p, e := range r.entries {
		if err := checkEntry(p, e); err != nil {
			t.Fatalf("invalid entry %q %+v: %v", p, e, err)
		}
	}
}

func FuzzRouteState(f *testing.F) {
	parts, entries := bigTable(20)
	f.Add(encodeRouteState(parts, entries)[1:])
	f.Add(encodeRouteMsg("p", routeEntry{leader: "a", term: 1})[1:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if parts, entries, err := decodeRouteState(b); err == nil {
			for i, p := range parts {
				if err := checkEntry(p, entries[i]); err != nil {
					t.Fatalf("decoded an invalid entry: %v", err)
				}
			}
		}
		if p, e, err := decodeRouteMsg(b); err == nil {
			if err := checkEntry(p, e); err != nil {
				t.Fatalf("decoded an invalid entry: %v", err)
			}
		}
		_, _, _ = decodeLeaveMsg(b)
		_, _, _ = decodeMeta("n", b)
	})
}

func TestRoutesAnnounceChecks(t *testing.T) {
	r := newTestRoutes(time.Hour)
	long := string(make([]byte, MaxGroupIDLen+1))
	for _, tt := range []struct {
		p, leader string
	}{
		{"", "a"}, {long, "a"}, {"p", ""}, {"p", string(make([]byte, 256))},
	} {
		if err := r.Announce(tt.p, Route{LeaderID: tt.leader, Term: 1}); !errors.Is(err, ErrBadRoute) {
			t.Fatalf("Announce(%d-byte partition, %d-byte leader) = %v, want ErrBadRoute", len(tt.p), len(tt.leader), err)
		}
	}
	if err := r.Forget("", 1); !errors.Is(err, ErrBadRoute) {
		t.Fatalf("Forget(\"\") = %v", err)
	}
}

// TestRoutesGossip runs the table over a real cluster.
func TestRoutesGossip(t *testing.T) {
	t.Parallel()
	ms := startCluster(t, 3, nil)
	const p = "persistent://t/f/orders-partition-0"
	waitRoute := func(want Route, what string) {
		t.Helper()
		for _, m := range ms {
			eventually(t, 5*time.Second, m.cfg.NodeID+" to see "+what, func() bool {
				got, ok := m.Routes().Lookup(p)
				return ok && got == want
			})
		}
	}
	w := ms[2].Routes().Watch()
	defer w.Stop()

	if err := ms[0].Routes().Announce(p, Route{LeaderID: "node-0", Epoch: 7, Term: 2}); err != nil {
		t.Fatal(err)
	}
	waitRoute(Route{"node-0", 7, 2}, "node-0's announcement")
	select {
	case ev := <-w.C:
		if ev.Partition != p || ev.Route != (Route{"node-0", 7, 2}) {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no route event")
	}

	// Leadership moves to node-1 in term 3.
	if err := ms[1].Routes().Announce(p, Route{LeaderID: "node-1", Epoch: 7, Term: 3}); err != nil {
		t.Fatal(err)
	}
	waitRoute(Route{"node-1", 7, 3}, "node-1's announcement")

	// A late announcement of an older term changes nothing anywhere.
	if err := ms[2].Routes().Announce(p, Route{LeaderID: "node-2", Epoch: 7, Term: 2}); !errors.Is(err, ErrStaleRoute) {
		t.Fatalf("stale Announce = %v, want ErrStaleRoute", err)
	}
	ms[0].handleMsg(encodeRouteMsg(p, routeEntry{leader: "node-0", epoch: 7, term: 2}), time.Now())
	waitRoute(Route{"node-1", 7, 3}, "the newer route to stay")

	// Deleted: forgotten everywhere, and an old state does not bring it
	// back.
	oldState := ms[2].Routes().localState(time.Now())
	if err := ms[0].Routes().Forget(p, 7); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		eventually(t, 5*time.Second, m.cfg.NodeID+" to forget the partition", func() bool {
			_, ok := m.Routes().Lookup(p)
			return !ok
		})
	}
	ms[1].Routes().mergeState(oldState[1:], time.Now())
	if got, ok := ms[1].Routes().Lookup(p); ok {
		t.Fatalf("an old state resurrected %+v", got)
	}
}

// TestRoutesLateJoiner: a node that joins later receives the whole table,
// tombstones included, in the join's push-pull (the periodic one is 30s
// away in these tests).
func TestRoutesLateJoiner(t *testing.T) {
	t.Parallel()
	ms := startCluster(t, 2, nil)
	parts, entries := bigTable(3000)
	for _, m := range ms { // a table the cluster agrees on, without gossip
		rt := m.Routes()
		rt.mu.Lock()
		for i, p := range parts {
			rt.applyLocked(p, entries[i], time.Now(), false)
		}
		rt.mu.Unlock()
	}
	want := ms[0].Routes().Snapshot()

	late := newMember(t, "late", []string{ms[1].Addr()}, nil)
	eventually(t, 5*time.Second, "the late joiner's table to fill", func() bool {
		return len(late.Routes().Snapshot()) == len(want)
	})
	if got := late.Routes().Snapshot(); !maps.Equal(got, want) {
		t.Fatal("the late joiner's table differs")
	}
	// The tombstones came along: stale routes of forgotten partitions are
	// refused.
	for i, p := range parts {
		if entries[i].deleted == 0 {
			continue
		}
		stale := entries[i]
		stale.leader, stale.term, stale.deleted = "node-0", 1, 0
		late.handleMsg(encodeRouteMsg(p, stale), time.Now())
		if _, ok := late.Routes().Lookup(p); ok {
			t.Fatalf("a stale route resurrected %s on the late joiner", p)
		}
	}
}

// TestMembershipGarbageInput feeds garbage through memberlist's delegate
// of a running member: it is dropped and the member goes on.
func TestMembershipGarbageInput(t *testing.T) {
	t.Parallel()
	ms := startCluster(t, 2, nil)
	d := mlDelegate{m: ms[0]}
	for _, b := range [][]byte{
		nil, {}, {0}, {msgRoute}, {msgLeave}, {msgRoute, 0xc1}, {msgLeave, 0xa1, 'x'},
		{99, 1, 2, 3}, []byte("garbage"), {stateRoutes, 0xdd, 0xff, 0xff, 0xff, 0xff},
	} {
		d.NotifyMsg(b)
		d.MergeRemoteState(b, false)
		d.MergeRemoteState(b, true)
	}
	// The inbox is handled in order: once this route shows, the garbage
	// before it has been handled.
	d.NotifyMsg(encodeRouteMsg("after", routeEntry{leader: "node-1", term: 1}))
	eventually(t, 5*time.Second, "the valid message after the garbage", func() bool {
		_, ok := ms[0].Routes().Lookup("after")
		return ok
	})
	if got := ms[0].Routes().Snapshot(); len(got) != 1 {
		t.Fatalf("table %v", got)
	}
	waitAlive(t, ms[0], 2, time.Second)
	// And gossip still works both ways.
	if err := ms[1].Routes().Announce("later", Route{LeaderID: "node-1", Term: 1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a route from node-1", func() bool {
		_, ok := ms[0].Routes().Lookup("later")
		return ok
	})
}

package subscription

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// fakeState is a subscription's replicated state for the engine's tests:
// a cursor, redelivery counts, members, joins in progress.
type fakeState struct {
	cursor  *Cursor
	counts  map[uint64]uint32
	members []Member
	joining map[string]bool
	gone    bool
}

func newState() *fakeState {
	return &fakeState{cursor: NewCursor(0), counts: map[uint64]uint32{}, joining: map[string]bool{}}
}

func (s *fakeState) IsAcked(o uint64) bool { return s.cursor.IsAcked(o) }
func (s *fakeState) Resume() (uint64, map[uint64]uint32, bool) {
	return s.cursor.NextUnacked(s.cursor.Floor), s.counts, !s.gone
}
func (s *fakeState) Members() []Member        { return s.members }
func (s *fakeState) Joining(name string) bool { return s.joining[name] }

// join adds a member, as a replicated join does.
func (s *fakeState) join(name string, prio int32, ranges ...HashRange) {
	s.members = slices.DeleteFunc(s.members, func(m Member) bool { return m.Name == name })
	s.members = append(s.members, Member{Name: name, Priority: prio, Ranges: ranges})
}

// msg is a message of the fake log.
type msg struct {
	key     string
	ordKey  string
	removed bool // trimmed by retention
}

// bench runs a dispatcher as the broker's driver does, against a fake log
// and a fake clock, and records what each consumer received.
type bench struct {
	t     *testing.T
	d     *Dispatcher
	st    *fakeState
	log   []msg
	now   time.Time
	got   map[ConsumerID][]uint64 // deliveries, in order
	count map[uint64]uint32       // the redelivery count of each delivery, last seen
	ids   map[string]ConsumerID
	next  ConsumerID
	roles []RoleEvent
	// onDeliver, when set, sees every delivery before it is recorded.
	onDeliver func(c ConsumerID, off uint64)
	// midPass, when set, runs between a pass's plan and its delivery,
	// where the driver reads the log outside its lock.
	midPass func()
}

// defaultLimits are the SEMANTICS defaults.
func defaultLimits() Limits {
	return Limits{
		MaxUnackedPerConsumer: 50_000, MaxUnackedPerSubscription: 200_000,
		LookAheadPerConsumer: 2_000, LookAheadPerSubscription: 20_000,
		DrainTimeout: time.Second,
	}
}

func newBench(t *testing.T, cfg Config) *bench {
	t.Helper()
	st := newState()
	if cfg.Durable {
		cfg.State = st
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = defaultLimits()
	}
	if cfg.Partition == 0 && cfg.Stream == "" {
		cfg.Partition = -1
		cfg.Stream = "persistent://t/f/s"
	}
	return &bench{
		t: t, d: New(cfg, 0), st: st, now: time.Unix(1_000_000, 0),
		got: map[ConsumerID][]uint64{}, count: map[uint64]uint32{}, ids: map[string]ConsumerID{},
	}
}

// publish appends n messages with the given key.
func (b *bench) publish(n int, key string) {
	for range n {
		b.log = append(b.log, msg{key: key})
	}
}

// publishKeys appends one message per key.
func (b *bench) publishKeys(keys ...string) {
	for _, k := range keys {
		b.log = append(b.log, msg{key: k})
	}
}

// attach joins and attaches a consumer with permits; it fails the test
// if it is refused.
func (b *bench) attach(name string, prio int32, permits int64, ranges ...HashRange) ConsumerID {
	b.t.Helper()
	id, err := b.tryAttach(name, prio, permits, 0, ranges...)
	if err != nil {
		b.t.Fatalf("attach %s: %v", name, err)
	}
	return id
}

// tryAttach joins (replicated) and attaches a consumer on connection conn.
func (b *bench) tryAttach(name string, prio int32, permits int64, conn uint64, ranges ...HashRange) (ConsumerID, error) {
	b.next++
	id := b.next
	c := Consumer{ID: id, Name: name, Priority: prio, Ranges: ranges, Conn: conn}
	if _, err := b.d.Admit(c, b.now); err != nil {
		return 0, err
	}
	if b.d.cfg.Durable {
		b.st.join(name, prio, ranges...)
	}
	if err := b.d.Attach(c, b.now); err != nil {
		return 0, err
	}
	b.ids[name] = id
	b.d.Flow(id, permits, 1<<40)
	b.take()
	return id, nil
}

// detach detaches a consumer and, for a durable subscription, removes its
// member, as the broker does.
func (b *bench) detach(name string) {
	b.t.Helper()
	if found, _ := b.d.Detach(b.ids[name], b.now); !found {
		b.t.Fatalf("%s was not attached", name)
	}
	b.st.members = slices.DeleteFunc(b.st.members, func(m Member) bool { return m.Name == name })
	b.take()
}

// take collects role events and replicates counted redeliveries.
func (b *bench) take() {
	b.roles = append(b.roles, b.d.TakeEvents()...)
	for _, o := range b.d.TakeCounted() {
		b.st.counts[o]++
	}
}

// pump makes passes until one makes no progress; it returns how many
// messages were delivered.
func (b *bench) pump() int {
	b.t.Helper()
	n := 0
	for range 10_000 {
		p := b.d.Plan(b.now)
		b.take()
		if p.Empty() {
			return n
		}
		in, trimmed := b.read(p)
		if trimmed {
			continue // the read position moved past what retention removed
		}
		if b.midPass != nil {
			b.midPass() // what the driver's read lets in, outside the lock
		}
		dls, progress := b.d.Deliver(p, in, b.now)
		b.take()
		for _, dl := range dls {
			for i, o := range dl.Offsets {
				b.count[o] = dl.Counts[i]
				if b.onDeliver != nil {
					b.onDeliver(dl.Consumer, o)
				}
			}
			b.got[dl.Consumer] = append(b.got[dl.Consumer], dl.Offsets...)
			n += len(dl.Offsets)
		}
		if !progress {
			return n
		}
	}
	b.t.Fatal("the dispatcher never settled")
	return n
}

// read reads a plan from the fake log, as the driver does: when the new
// messages were trimmed, it tells the dispatcher and reports it.
func (b *bench) read(p Plan) (Read, bool) {
	var in Read
	for _, o := range p.Again {
		if b.log[o].removed {
			in.Gone = append(in.Gone, o)
			continue
		}
		in.Again = append(in.Again, b.msg(o))
	}
	for o := p.From; o < uint64(len(b.log)) && len(in.Fresh) < p.Max; o++ {
		if b.log[o].removed {
			b.d.Trimmed(p, o+1)
			return Read{}, true
		}
		in.Fresh = append(in.Fresh, b.msg(o))
	}
	return in, false
}

func (b *bench) msg(o uint64) Msg {
	m := b.log[o]
	return Msg{Offset: o, Key: m.key, OrderingKey: []byte(m.ordKey)}
}

// ack acknowledges offsets, committed: the cursor first, then the engine.
func (b *bench) ack(offsets ...uint64) {
	for _, o := range offsets {
		b.st.cursor.Ack(o)
	}
	b.d.Acked(offsets, false)
}

// ackAll acks everything a consumer holds.
func (b *bench) ackAll(name string) {
	b.ack(b.d.pendingOf(b.d.find(b.ids[name]))...)
}

// received returns and forgets what a consumer received.
func (b *bench) received(name string) []uint64 {
	id := b.ids[name]
	got := b.got[id]
	delete(b.got, id)
	return got
}

// keysOf returns the keys of offsets.
func (b *bench) keysOf(offs []uint64) []string {
	out := make([]string, len(offs))
	for i, o := range offs {
		out[i] = StickyKey([]byte(b.log[o].ordKey), b.log[o].key)
	}
	return out
}

// span is the offsets lo..hi-1.
func span(lo, hi uint64) []uint64 {
	var out []uint64
	for o := lo; o < hi; o++ {
		out = append(out, o)
	}
	return out
}

// holdersOf returns, per key, the consumers holding it unacknowledged.
func (b *bench) holdersOf() map[string]map[ConsumerID]bool {
	out := map[string]map[ConsumerID]bool{}
	for o, h := range b.d.pending {
		k := h.key
		if k == "" {
			k = fmt.Sprint(o)
		}
		if out[k] == nil {
			out[k] = map[ConsumerID]bool{}
		}
		out[k][h.c.ID] = true
	}
	return out
}

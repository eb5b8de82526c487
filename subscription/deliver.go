package subscription

import (
	"slices"
	"time"
)

// Plan is what a dispatcher wants read from the log before it can deliver:
// the messages it gives back, one by one, then up to Max new ones from
// From. The driver reads them and hands them to Deliver.
type Plan struct {
	// Again are offsets to deliver again (given back, or read past a
	// blocked key), in offset order.
	Again []uint64
	// From and Max: then up to Max new messages from offset From.
	From uint64
	Max  int
	// Stalled: nothing can be sent until an ack, permits or a change of
	// consumers; new messages alone change nothing (KS-9 keeps a stuck
	// key from burning CPU). Set only when the plan is empty.
	Stalled bool

	epoch  uint64
	target *consumer         // the single-target modes' consumer
	room   map[*consumer]int // key_shared: what each consumer may take
}

// Empty reports whether the plan reads nothing.
func (p Plan) Empty() bool { return len(p.Again) == 0 && p.Max == 0 }

// Msg is a message read from the log, as much of it as dispatching needs.
type Msg struct {
	Offset      uint64
	Key         string
	OrderingKey []byte
}

// Read is what the driver read for a plan.
type Read struct {
	// Again holds the plan's Again offsets that were read, in the plan's
	// order; the driver may stop at the first it could not read, which
	// then stays for a later pass.
	Again []Msg
	// Gone are Again offsets the log no longer holds (retention trimmed
	// them): there is nothing to deliver again.
	Gone []uint64
	// Fresh are the new messages read from the plan's From.
	Fresh []Msg
}

// Delivery is messages for one consumer, in offset order, with the
// redelivery count of each (SH-7).
type Delivery struct {
	Consumer ConsumerID
	Offsets  []uint64
	Counts   []uint32
}

// modeRules is what differs between the modes: what to read next, and who
// gets what was read.
type modeRules interface {
	plan(d *Dispatcher, now time.Time) Plan
	deliver(d *Dispatcher, p Plan, in Read, now time.Time) ([]Delivery, bool)
}

// rulesOf returns a mode's rules.
func rulesOf(m Mode) modeRules {
	switch m {
	case Shared:
		return sharedRules{}
	case Failover:
		return failoverRules{}
	case KeyShared:
		return keySharedRules{}
	}
	return exclusiveRules{}
}

// Plan returns what to read for the next delivery; an empty plan means
// there is nothing to send now.
func (d *Dispatcher) Plan(now time.Time) Plan {
	return d.mode.plan(d, now)
}

// Deliver hands out what was read for p and returns the deliveries, and
// whether anything moved (false: ask again only after a change). A plan
// made before a reset or a change of target is dropped: progress is true,
// plan again.
func (d *Dispatcher) Deliver(p Plan, in Read, now time.Time) ([]Delivery, bool) {
	if p.epoch != d.epoch {
		return nil, true
	}
	return d.mode.deliver(d, p, in, now)
}

// exclusiveRules: one consumer gets everything (EX-1).
type exclusiveRules struct{}

func (exclusiveRules) plan(d *Dispatcher, _ time.Time) Plan {
	for _, c := range d.consumers {
		if d.usable(c) {
			return d.planFor(c, d.room(c, MaxFrame))
		}
	}
	return Plan{}
}

func (exclusiveRules) deliver(d *Dispatcher, p Plan, in Read, _ time.Time) ([]Delivery, bool) {
	return d.deliverTo(p, in)
}

// sharedRules: round robin among the consumers with permits, best
// priority level first, SharedBurst messages at a time (SH-3).
type sharedRules struct{}

func (sharedRules) plan(d *Dispatcher, _ time.Time) Plan {
	best := int32(-1)
	for _, c := range d.consumers {
		if d.usable(c) && (best < 0 || c.Priority < best) {
			best = c.Priority
		}
	}
	if best < 0 {
		return Plan{}
	}
	for range d.consumers {
		d.rr = (d.rr + 1) % len(d.consumers)
		if c := d.consumers[d.rr]; d.usable(c) && c.Priority == best {
			return d.planFor(c, d.room(c, SharedBurst))
		}
	}
	return Plan{}
}

func (sharedRules) deliver(d *Dispatcher, p Plan, in Read, _ time.Time) ([]Delivery, bool) {
	return d.deliverTo(p, in)
}

// failoverRules: only the master receives (FO-1), after any hand-over
// has drained (FO-5).
type failoverRules struct{}

func (failoverRules) plan(d *Dispatcher, now time.Time) Plan {
	d.elect(d.roles(now), now)
	if m := d.master(); m != nil {
		return d.planFor(m, d.room(m, MaxFrame))
	}
	return Plan{}
}

func (failoverRules) deliver(d *Dispatcher, p Plan, in Read, _ time.Time) ([]Delivery, bool) {
	if d.current != p.target || !d.drainUntil.IsZero() {
		return nil, true // the master changed while the driver read
	}
	return d.deliverTo(p, in)
}

// planFor plans one delivery of up to limit messages to c: the messages
// given back first, then new ones.
func (d *Dispatcher) planFor(c *consumer, limit int) Plan {
	if limit <= 0 {
		return Plan{}
	}
	p := Plan{epoch: d.epoch, target: c}
	p.Again = slices.Clone(d.resend[:min(len(d.resend), limit)])
	if n := limit - len(p.Again); n > 0 {
		p.From, p.Max = d.readPos, n
	}
	return p
}

// deliverTo hands what was read for a single-target plan to its consumer:
// the messages given back, then the new ones, skipping what is held or
// acked meanwhile.
func (d *Dispatcher) deliverTo(p Plan, in Read) ([]Delivery, bool) {
	c := p.target
	if !d.attached(c) {
		return nil, true
	}
	used := len(in.Again) + len(in.Gone)
	if used == 0 && len(in.Fresh) == 0 {
		return nil, false
	}
	taken := make([]uint64, 0, used)
	for _, m := range in.Again {
		taken = append(taken, m.Offset)
	}
	taken = append(taken, in.Gone...)
	// Remove exactly what was taken: others may have been given back since.
	slices.Sort(taken)
	d.resend = slices.DeleteFunc(d.resend, func(o uint64) bool { _, ok := slices.BinarySearch(taken, o); return ok })
	out := Delivery{Consumer: c.ID}
	take := func(m Msg) {
		if d.cfg.Durable {
			if _, ok := d.pending[m.Offset]; ok || d.acked(m.Offset) {
				return
			}
			d.hold(m.Offset, c, "")
		}
		out.Offsets = append(out.Offsets, m.Offset)
		out.Counts = append(out.Counts, d.redelivered[m.Offset])
	}
	for _, m := range in.Again {
		take(m)
	}
	for _, m := range in.Fresh {
		take(m)
		d.readPos = m.Offset + 1
	}
	c.permits -= int64(len(out.Offsets))
	if len(out.Offsets) == 0 {
		return nil, true
	}
	return []Delivery{out}, true
}

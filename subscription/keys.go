package subscription

import (
	"maps"
	"slices"
	"sort"
	"time"
)

// keySharedRules: each message goes to the owner of its key's slot once
// the key is not pending on another consumer (KS-3..KS-10). In offset
// order a pass takes the messages to deliver again, then the ones read
// past before, then new ones; a message whose key cannot go now blocks
// its key for the rest of the pass, so that per key delivery keeps offset
// order (KS-7, KS-8). New messages of blocked keys are read past, up to
// the look-ahead limit (KS-9); other keys keep flowing.
type keySharedRules struct{}

func (keySharedRules) plan(d *Dispatcher, now time.Time) Plan {
	r := d.roles(now)
	room := map[*consumer]int{}
	total := 0
	for _, c := range d.consumers {
		if d.usable(c) {
			room[c] = d.room(c, MaxFrame)
			total += room[c]
		}
	}
	if total == 0 {
		return Plan{}
	}
	p := Plan{epoch: d.epoch, From: d.readPos, room: room}
	// Which of the waiting messages could go now: only those are read.
	blocked := map[string]bool{}
	left := maps.Clone(room)
	d.eachWaiting(func(off uint64) bool {
		if len(p.Again) >= total {
			return false
		}
		key := d.keys[off]
		if blocked[key] {
			return true
		}
		c := d.keyTarget(r, key, left)
		if c == nil {
			blocked[key] = true
			return true
		}
		left[c]--
		p.Again = append(p.Again, off)
		return true
	})
	if lookAhead := d.lookAheadLimit() - len(d.skipped); lookAhead > 0 {
		p.Max = min(MaxFrame, lookAhead)
	} else if len(p.Again) == 0 {
		return Plan{Stalled: true}
	}
	return p
}

func (keySharedRules) deliver(d *Dispatcher, p Plan, in Read, now time.Time) ([]Delivery, bool) {
	if d.readPos != p.From {
		return nil, true // things moved while the driver read
	}
	k := keyPass{d: d, r: d.roles(now), room: p.room, blocked: map[string]bool{}, out: map[*consumer]*Delivery{}}
	progress := k.again(in)
	limit := d.lookAheadLimit()
	for _, m := range in.Fresh {
		key := StickyKey(m.OrderingKey, m.Key)
		if d.acked(m.Offset) {
			d.readPos = m.Offset + 1
			progress = true
			continue
		}
		// A key with older messages waiting waits too (KS-8).
		if d.waiting[key] > 0 || !k.send(m.Offset, key) {
			if len(d.skipped) >= limit {
				break // look-ahead is full (KS-9)
			}
			d.skipped = append(d.skipped, m.Offset)
			d.wait(m.Offset, key)
		}
		d.readPos = m.Offset + 1
		progress = true
	}
	return k.deliveries(), progress
}

// keyPass is one key_shared delivery pass.
type keyPass struct {
	d       *Dispatcher
	r       *roles
	room    map[*consumer]int
	blocked map[string]bool
	out     map[*consumer]*Delivery
	order   []*consumer // of out, first delivery first
}

// again delivers the waiting messages that were read, in offset order,
// and drops those acked, held or trimmed meanwhile; it reports progress.
// Only the waiting messages up to the last one read are looked at: those
// after it were not read, and their keys wait through d.waiting.
func (k *keyPass) again(in Read) bool {
	d := k.d
	read := make(map[uint64]bool, len(in.Again))
	last, any := uint64(0), false
	for _, m := range in.Again {
		read[m.Offset] = true
		last, any = max(last, m.Offset), true
	}
	gone := make(map[uint64]bool, len(in.Gone))
	for _, o := range in.Gone {
		gone[o] = true
		last, any = max(last, o), true
	}
	if !any {
		return false
	}
	var done []uint64
	d.eachWaiting(func(off uint64) bool {
		if off > last {
			return false
		}
		key := d.keys[off]
		if _, ok := d.pending[off]; ok || d.acked(off) {
			done = append(done, off) // acked meanwhile
			return true
		}
		switch {
		case gone[off]:
			done = append(done, off) // trimmed by retention
		case !read[off]:
			k.blocked[key] = true // not read: its key waits this pass
		case k.send(off, key):
			done = append(done, off)
		}
		return true
	})
	if len(done) == 0 {
		return false
	}
	// done is in offset order.
	drop := func(o uint64) bool { _, ok := slices.BinarySearch(done, o); return ok }
	d.resend = slices.DeleteFunc(d.resend, drop)
	d.skipped = slices.DeleteFunc(d.skipped, drop)
	for _, o := range done {
		d.unwait(o)
	}
	return true
}

// send delivers one message to its key's owner, or blocks the key.
func (k *keyPass) send(off uint64, key string) bool {
	if k.blocked[key] {
		return false
	}
	c := k.d.keyTarget(k.r, key, k.room)
	if c == nil {
		k.blocked[key] = true
		return false
	}
	k.room[c]--
	c.permits--
	k.d.hold(off, c, key)
	dl := k.out[c]
	if dl == nil {
		dl = &Delivery{Consumer: c.ID}
		k.out[c] = dl
		k.order = append(k.order, c)
	}
	dl.Offsets = append(dl.Offsets, off)
	dl.Counts = append(dl.Counts, k.d.redelivered[off])
	return true
}

// deliveries returns the pass's deliveries, each consumer's in offset
// order, consumers in the order they were first given one.
func (k *keyPass) deliveries() []Delivery {
	out := make([]Delivery, 0, len(k.order))
	for _, c := range k.order {
		out = append(out, *k.out[c])
	}
	return out
}

// keyTarget returns the consumer a key goes to now, or nil if the key must
// wait: its owner is away, blocked or out of room, or, unless out of order
// is allowed, another consumer still holds unacknowledged messages of it
// (KS-7, KS-10).
func (d *Dispatcher) keyTarget(r *roles, key string, room map[*consumer]int) *consumer {
	c := r.owner(key)
	if c == nil || !d.usable(c) || room[c] <= 0 {
		return nil
	}
	if h := d.holders[key]; h != nil && h.c != c && !d.cfg.Keys.OutOfOrder {
		return nil
	}
	return c
}

// lookAheadLimit is how many read-past messages a key_shared subscription
// may hold (KS-9).
func (d *Dispatcher) lookAheadLimit() int {
	l := d.cfg.Limits
	return min(l.LookAheadPerConsumer*max(len(d.consumers), 1), l.LookAheadPerSubscription)
}

// eachWaiting calls fn with the offsets given back and read past (each
// list sorted), merged in offset order, once each, until fn returns
// false.
func (d *Dispatcher) eachWaiting(fn func(off uint64) bool) {
	i, j := 0, 0
	for i < len(d.resend) || j < len(d.skipped) {
		var off uint64
		switch {
		case j == len(d.skipped) || i < len(d.resend) && d.resend[i] < d.skipped[j]:
			off = d.resend[i]
			i++
		case i == len(d.resend) || d.skipped[j] < d.resend[i]:
			off = d.skipped[j]
			j++
		default:
			off = d.resend[i]
			i, j = i+1, j+1
		}
		if !fn(off) {
			return
		}
	}
}

// drainingKeys returns the keys held by a consumer that no longer owns
// them, sorted.
func (d *Dispatcher) drainingKeys(r *roles) []string {
	var keys []string
	for key, h := range d.holders {
		if r.owner(key) != h.c {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	return keys
}

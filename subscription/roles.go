package subscription

import (
	"slices"
	"strings"
	"time"
)

// roles is who may receive what: the subscription's replicated members
// and the consumers connected here. During the reconnect grace after a
// leader change, a member not connected (away) keeps its role and what
// the role receives waits for it (SUB-7); afterwards roles are the
// connected consumers'.
type roles struct {
	connected map[string]*consumer
	names     []string // members and connected, sorted
	cands     []Candidate
	ring      *AutoSplit
	sticky    *Sticky
	away      []string
	// awayRanges are the sticky ranges of the members away.
	awayRanges map[string][]HashRange
}

// inGrace reports whether the reconnect grace runs at now.
func (d *Dispatcher) inGrace(now time.Time) bool { return now.Before(d.graceUntil) }

// members returns the replicated members, none for a reader.
func (d *Dispatcher) members() []Member {
	if !d.cfg.Durable || d.cfg.State == nil {
		return nil
	}
	return d.cfg.State.Members()
}

// roles computes the roles from the replicated members and the connected
// consumers.
func (d *Dispatcher) roles(now time.Time) *roles {
	r := &roles{connected: make(map[string]*consumer, len(d.consumers))}
	prio := map[string]int32{}
	ranges := map[string][]HashRange{}
	for _, c := range d.consumers {
		if _, ok := r.connected[c.Name]; !ok {
			r.connected[c.Name] = c
			prio[c.Name], ranges[c.Name] = c.Priority, c.Ranges
		}
	}
	if d.cfg.Mode == Failover || d.cfg.Mode == KeyShared {
		if d.inGrace(now) {
			for _, m := range d.members() {
				if _, ok := prio[m.Name]; !ok && !d.cfg.State.Joining(m.Name) {
					prio[m.Name], ranges[m.Name] = m.Priority, m.Ranges
					r.away = append(r.away, m.Name)
					if r.awayRanges == nil {
						r.awayRanges = map[string][]HashRange{}
					}
					r.awayRanges[m.Name] = m.Ranges
				}
			}
		}
	}
	for name := range prio {
		r.names = append(r.names, name)
	}
	slices.Sort(r.names)
	switch {
	case d.cfg.Mode == Failover:
		for _, n := range r.names {
			r.cands = append(r.cands, Candidate{Name: n, Priority: int(prio[n])})
		}
	case d.cfg.Mode == KeyShared && d.cfg.Keys.Sticky:
		r.sticky = NewSticky()
		for _, n := range r.names {
			// Conflicts were refused at admission; a range that does not
			// fit now (a deposed leader's join) is ignored.
			_ = r.sticky.Add(n, ranges[n])
		}
	case d.cfg.Mode == KeyShared:
		sig := strings.Join(r.names, "\x00")
		if d.ring == nil || d.ringOf != sig {
			d.ring, d.ringOf = NewAutoSplit(r.names), sig
		}
		r.ring = d.ring
	}
	return r
}

// ownerName returns the name that owns a slot (KS-3, KS-4), "" when
// nobody covers it.
func (r *roles) ownerName(slot int) string {
	switch {
	case r.sticky != nil:
		return r.sticky.Owner(slot)
	case r.ring != nil:
		return r.ring.Owner(slot)
	}
	return ""
}

// owner returns the connected consumer a key goes to, nil when its owner
// is away or nobody covers its slot.
func (r *roles) owner(key string) *consumer {
	return r.connected[r.ownerName(Slot(key))]
}

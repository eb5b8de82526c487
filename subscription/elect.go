package subscription

import "time"

// elect keeps a failover subscription's master current (FO-1..FO-8). It
// tells consumers whether they are active (FO-6); gives an old master
// that holds unacknowledged messages the drain timeout before the
// hand-over (FO-5); keeps a returning higher-ranked consumer out until it
// has stayed for the stability window (FO-8); and restarts delivery at
// the first unacknowledged message for a new master (FO-5). A master that
// is away (not back after a leader change) is nobody's yet (SUB-7).
func (d *Dispatcher) elect(r *roles, now time.Time) {
	if d.cfg.Mode != Failover {
		return
	}
	defer d.tellStandbys()
	d.wake = time.Time{}
	m := r.connected[Master(r.cands, d.cfg.Partition, d.cfg.Stream)]
	if w := d.cfg.Limits.StabilityWindow; w > 0 && m != nil && m != d.current && d.current != nil &&
		d.attached(d.current) && now.Sub(m.since) < w {
		// FO-8: the returning consumer takes over once it has stayed
		// connected for the stability window.
		d.wake = m.since.Add(w)
		m = d.current
	}
	if m == d.current {
		if m != nil && !m.active {
			// A drain was under way and the master stayed.
			d.tell(m, true)
		}
		d.drainUntil = time.Time{}
		return
	}
	old := d.current
	if old != nil && d.attached(old) && old.unacked > 0 && d.cfg.Limits.DrainTimeout > 0 {
		if d.drainUntil.IsZero() {
			d.drainUntil = now.Add(d.cfg.Limits.DrainTimeout)
			if old.active {
				d.tell(old, false)
			}
			d.wake = d.drainUntil
			return
		}
		if now.Before(d.drainUntil) {
			d.wake = d.drainUntil
			return
		}
	}
	d.drainUntil = time.Time{}
	if old != nil && old.active {
		d.tell(old, false)
	}
	d.current = m
	if m != nil {
		d.tell(m, true)
		d.rewind()
	}
}

// tell records a role event for c.
func (d *Dispatcher) tell(c *consumer, active bool) {
	c.active, c.told = active, true
	d.events = append(d.events, RoleEvent{Consumer: c.ID, Active: active})
}

// tellStandbys tells consumers that heard nothing yet that they stand by
// (FO-6).
func (d *Dispatcher) tellStandbys() {
	for _, c := range d.consumers {
		if !c.told && !c.active {
			d.tell(c, false)
		}
	}
}

// attached reports whether c is still attached.
func (d *Dispatcher) attached(c *consumer) bool {
	for _, o := range d.consumers {
		if o == c {
			return true
		}
	}
	return false
}

// master returns the failover master if it may be sent messages now (no
// hand-over is draining), nil otherwise.
func (d *Dispatcher) master() *consumer {
	if m := d.current; m != nil && d.drainUntil.IsZero() && d.usable(m) {
		return m
	}
	return nil
}

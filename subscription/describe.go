package subscription

import (
	"slices"
	"time"
)

// Roles a consumer is described with.
const (
	RoleActive  = "active"  // the exclusive subscription's consumer
	RoleMaster  = "master"  // failover: the active consumer (FO-1)
	RoleStandby = "standby" // failover: waiting
	RoleAway    = "away"    // a member not back after a leader change (SUB-7)
)

// ConsumerState describes one consumer of a subscription, attached or
// away.
type ConsumerState struct {
	ID        ConsumerID // 0 for a member away
	Name      string
	Role      string
	Unacked   int
	Permits   int64
	Blocked   bool // SH-4
	Ranges    []HashRange
	HashShare float64 // key_shared: its share of the slots
}

// Description is what a subscription's dispatcher shows.
type Description struct {
	Consumers []ConsumerState
	// Blocked: the subscription has too many unacknowledged (SH-4).
	Blocked bool
	// LookAhead counts the messages read past blocked keys (KS-9).
	LookAhead int
	// DrainingKeys are the keys held by a consumer that no longer owns
	// them, waiting for its acks to move (KS-7), sorted.
	DrainingKeys []string
}

// Describe reports the consumers with their roles, the members away, and
// the keys waiting for a hand-over.
func (d *Dispatcher) Describe(now time.Time) Description {
	r := d.roles(now)
	var share map[string]int
	if r.ring != nil || r.sticky != nil {
		share = map[string]int{}
		for slot := range Slots {
			share[r.ownerName(slot)]++
		}
	}
	state := func(name string) ConsumerState {
		cs := ConsumerState{Name: name}
		if share != nil {
			cs.HashShare = float64(share[name]) / Slots
		}
		return cs
	}
	var desc Description
	for i, c := range d.consumers {
		cs := state(c.Name)
		cs.ID, cs.Unacked, cs.Permits, cs.Blocked = c.ID, c.unacked, c.permits, c.blocked
		cs.Ranges = slices.Clone(c.Ranges)
		switch {
		case d.cfg.Mode == Exclusive && i == 0:
			cs.Role = RoleActive
		case d.cfg.Mode == Failover && c.active:
			cs.Role = RoleMaster
		case d.cfg.Mode == Failover:
			cs.Role = RoleStandby
		}
		desc.Consumers = append(desc.Consumers, cs)
	}
	for _, name := range r.away {
		cs := state(name)
		cs.Role = RoleAway
		cs.Ranges = r.awayRanges[name]
		desc.Consumers = append(desc.Consumers, cs)
	}
	desc.Blocked = d.subBlocked
	desc.LookAhead = len(d.skipped)
	if d.cfg.Mode == KeyShared {
		desc.DrainingKeys = d.drainingKeys(r)
	}
	return desc
}

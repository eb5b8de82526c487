package fsm

import (
	"maps"
	"slices"

	"github.com/fabriq-io/fabriq/subscription"
)

// state is everything the partition state machine holds besides the log
// itself: what a snapshot writes before the log's stream. Every replica
// that applied the same entries holds the same state.
type state struct {
	// Next is the offset the next message gets; after every apply it
	// equals the log's NextOffset.
	Next      uint64                   `msgpack:"n"`
	Producers map[string]*producer     `msgpack:"p"`
	Subs      map[string]*Subscription `msgpack:"s"`
	// Start is the first offset the partition serves, as retain entries
	// set it: every replica serves from here, whatever its own log still
	// holds below it.
	Start uint64 `msgpack:"st,omitempty"`
}

// newState returns the state before the first entry: without a snapshot
// Raft replays its log from the first entry, whose messages went to
// offset 0.
func newState() state {
	return state{Producers: map[string]*producer{}, Subs: map[string]*Subscription{}}
}

// Subscription is a subscription's replicated state.
type Subscription struct {
	Mode   Mode                 `msgpack:"m"`
	Cursor *subscription.Cursor `msgpack:"c"`
	// KeyMode and OutOfOrder are a key_shared subscription's policy.
	KeyMode    KeySharedMode `msgpack:"km,omitempty"`
	OutOfOrder bool          `msgpack:"oo,omitempty"`
	// Members are the consumers in join order (SUB-7).
	Members []Member `msgpack:"ms,omitempty"`
	// Redeliveries counts the deliveries after the first of unacked
	// messages (SH-7).
	Redeliveries map[uint64]uint32 `msgpack:"rd,omitempty"`
}

// newSubscription returns a subscription created by an entry: it starts
// after what is stored (Latest, SUB-3) or at the partition's start.
func (s *state) newSubscription(mode Mode, initial InitialPosition) *Subscription {
	floor := s.Next
	if initial == Earliest {
		floor = s.Start
	}
	return &Subscription{Mode: mode, Cursor: subscription.NewCursor(floor)}
}

// clone returns a deep copy.
func (s *Subscription) clone() *Subscription {
	c := *s
	c.Cursor = s.Cursor.Clone()
	c.Members = cloneMembers(s.Members)
	if s.Redeliveries != nil {
		c.Redeliveries = maps.Clone(s.Redeliveries)
	}
	return &c
}

// cloneMembers returns a deep copy of members.
func cloneMembers(ms []Member) []Member {
	c := slices.Clone(ms)
	for i := range c {
		c[i].Ranges = slices.Clone(c[i].Ranges)
	}
	return c
}

// forgetAcked drops the redelivery counts of acknowledged messages.
func (s *Subscription) forgetAcked() {
	for o := range s.Redeliveries {
		if s.Cursor.IsAcked(o) {
			delete(s.Redeliveries, o)
		}
	}
}

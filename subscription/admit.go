package subscription

import (
	"errors"
	"fmt"
	"time"
)

// ErrBusy is matched by every *BusyError.
var ErrBusy = errors.New("subscription: the role is held")

// BusyError refuses a consumer whose role another consumer holds.
type BusyError struct {
	// Exclusive: the exclusive subscription has its consumer (EX-1).
	// Otherwise a consumer of that name is attached (failover,
	// key_shared).
	Exclusive bool
	// Name is the consumer's name (failover, key_shared), or the
	// exclusive member that keeps its place through the grace.
	Name string
	// Grace: the holder is a member away after a leader change, kept for
	// the reconnect grace (SUB-7).
	Grace bool
}

func (e *BusyError) Error() string {
	switch {
	case e.Grace:
		return fmt.Sprintf("exclusive subscription held by %s for the reconnect grace", e.Name)
	case e.Exclusive:
		return "exclusive subscription has its consumer"
	}
	return fmt.Sprintf("a consumer named %s is attached", e.Name)
}

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// Admission is a consumer asking to join a subscription, and what it
// meets there.
type Admission struct {
	Mode     Mode
	Keys     KeyPolicy
	Consumer Consumer
	// Attached are the consumers attached on this leader, in attach order.
	Attached []Consumer
	// Members are the replicated members.
	Members []Member
	// Grace says the reconnect grace after a leader change runs: members
	// that are away keep their place (SUB-7).
	Grace bool
}

// Admit checks that a consumer may join: one exclusive consumer (EX-1),
// and through the grace the member that held it; one attached consumer
// per name (failover, key_shared); sticky ranges that overlap no one
// else's (KS-4), the away members' included through the grace. When the
// conflict is with a consumer attached on another connection, its id is
// returned as holder, to be probed before the refusal stands (EX-2). The
// mode itself (SUB-2) is the caller's to check against the replicated
// one. The same checks run before the join is replicated and again when
// the consumer attaches, since two joins may pass the first together.
func Admit(a Admission) (holder ConsumerID, err error) {
	c := a.Consumer
	switch a.Mode {
	case Exclusive:
		if len(a.Attached) > 0 {
			if o := a.Attached[0]; o.Conn != c.Conn {
				return o.ID, &BusyError{Exclusive: true}
			}
			return 0, &BusyError{Exclusive: true}
		}
		if a.Grace {
			for _, m := range a.Members {
				if m.Name != c.Name {
					return 0, &BusyError{Exclusive: true, Name: m.Name, Grace: true}
				}
			}
		}
	case Failover, KeyShared:
		for _, o := range a.Attached {
			if o.Name == c.Name {
				if o.Conn == c.Conn {
					return 0, &BusyError{Name: c.Name}
				}
				return o.ID, &BusyError{Name: c.Name}
			}
		}
		if a.Mode == KeyShared && a.Keys.Sticky {
			return 0, stickyConflict(a)
		}
	}
	return 0, nil
}

// stickyConflict checks a sticky consumer's ranges against the others'.
func stickyConflict(a Admission) error {
	others := map[string][]HashRange{}
	if a.Grace {
		for _, m := range a.Members {
			others[m.Name] = m.Ranges
		}
	}
	for _, o := range a.Attached {
		others[o.Name] = o.Ranges
	}
	delete(others, a.Consumer.Name)
	st := NewSticky()
	for name, rs := range others {
		_ = st.Add(name, rs)
	}
	return st.Add(a.Consumer.Name, a.Consumer.Ranges)
}

// Admit runs the admission checks against this dispatcher's consumers and
// members (see the function Admit).
func (d *Dispatcher) Admit(c Consumer, now time.Time) (holder ConsumerID, err error) {
	return d.admit(c, now, true)
}

func (d *Dispatcher) admit(c Consumer, now time.Time, probe bool) (ConsumerID, error) {
	attached := make([]Consumer, len(d.consumers))
	for i, o := range d.consumers {
		attached[i] = o.Consumer
	}
	holder, err := Admit(Admission{
		Mode: d.cfg.Mode, Keys: d.cfg.Keys, Consumer: c,
		Attached: attached, Members: d.members(), Grace: d.inGrace(now),
	})
	if !probe {
		holder = 0
	}
	return holder, err
}

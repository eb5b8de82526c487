package subscription

import "fmt"

// String is the mode as users write it: exclusive, shared, failover,
// key_shared.
func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	case Failover:
		return "failover"
	case KeyShared:
		return "key_shared"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// CumulativeAck reports whether the mode takes cumulative acks: exclusive
// and failover do (EX-5, FO-7); shared and key_shared refuse them, a
// message there being acked by whoever holds it (SH-1, KS-5).
func (m Mode) CumulativeAck() bool { return m == Exclusive || m == Failover }

// SharedNames reports whether consumers of the mode may share a name:
// shared ones may; a failover or key_shared name is a role (its rank, its
// slots), so it is held by one consumer at a time.
func (m Mode) SharedNames() bool { return m == Shared }

// String is the key_shared policy as users write it (SUB-2).
func (k KeyPolicy) String() string {
	name := "auto_split"
	if k.Sticky {
		name = "sticky"
	}
	if k.OutOfOrder {
		name += ", allow_out_of_order"
	}
	return name
}

package fsm

// Mode is a subscription's mode. Its values are in Raft logs and
// snapshots: never renumber (they are the wire's too, which the broker
// maps to these in one place).
type Mode uint8

// Subscription modes.
const (
	Exclusive Mode = iota
	Shared
	Failover
	KeyShared
)

// InitialPosition is where a new subscription starts. Never renumber.
type InitialPosition uint8

// Initial positions.
const (
	// Latest starts after the messages stored so far (SUB-3).
	Latest InitialPosition = iota
	// Earliest starts at the partition's start offset.
	Earliest
)

// KeySharedMode is how a key_shared subscription assigns key hashes.
// Never renumber.
type KeySharedMode uint8

// Key_shared modes.
const (
	AutoSplit KeySharedMode = iota
	Sticky
)

// HashRange is an inclusive range of key hash slots, 0..65535.
type HashRange struct {
	Start int32 `msgpack:"s"`
	End   int32 `msgpack:"e"`
}

// Member is a consumer of a subscription as the replicated state knows
// it: enough for a new leader to give it back its role (SUB-7).
type Member struct {
	Name     string      `msgpack:"n"`
	Priority int32       `msgpack:"p,omitempty"`
	Ranges   []HashRange `msgpack:"r,omitempty"` // sticky key_shared
	// Gen is the Raft index of the member's last join; a leave names it,
	// so that a leave overtaken by the consumer's rejoin removes nothing.
	Gen uint64 `msgpack:"g"`
}

// Policy is a subscription's mode and, for key_shared, its key policy.
type Policy struct {
	Mode       Mode
	KeyMode    KeySharedMode
	OutOfOrder bool
}

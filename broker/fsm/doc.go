// Package fsm is a stream partition's replicated state machine: the Raft
// entries of the partition, the state they build besides the log, and the
// snapshots that carry both.
//
// # What it owns
//
// The commands the broker proposes — Send, Acks, Join, Leave, Seek,
// DeleteSubscription and Retain — are structs of this package, encoded as
// one type byte and a msgpack body (Encode). They and the snapshot state
// are the format of every replica's disk, which the wire's types never
// change: the broker maps transport's types to Mode, InitialPosition,
// KeySharedMode, HashRange and Message; the enums keep the wire's numbers.
//
// The state is the partition's next and start offsets, every producer's
// deduplication state (MSG-4) and every subscription's cursor, members
// (SUB-7) and redelivery counts (SH-7). Applying a send appends its new
// messages to the partition's storage.Log; applying a retain entry moves
// the start offset and deletes the log's segments below it.
// DecideRetention is the leader's pure rule for what a retain entry
// holds.
//
// # What it does not do
//
// It proposes nothing, waits for nothing and has no clock: the broker
// groups sends into entries, proposes them and answers producers, gathers
// acks, decides when retention runs, and dispatches messages on the
// leader. Nothing it applies reads local, non-replicated state, so every
// replica that applies the same entries holds the same state (DESIGN.md
// lists what it does to the log).
//
// # Use
//
// A Machine is the raft.FSM of a partition's cluster.Group, whose
// snapshot store expands adopted log snapshots with ExpandLogSnapshot:
//
//	m := fsm.New(fsm.Config{Log: log, SnapshotDir: dir, Applied: wake, Halted: stop})
//
// A command is proposed as Encode gives it, and the answer read with
// Answer, typed by the command:
//
//	data, err := fsm.Encode(join)
//	res, err := group.Apply(ctx, data)
//	jr, err := fsm.Answer(join, res) // a JoinResult, or ErrHalted
//
// The queries (NextOffset, StartOffset, Cursor, IsAcked, Members,
// AllMembers, Subscription, Subscriptions, Floors) answer copies and may be
// called from any goroutine.
//
// An entry that does not decode, or of a type this version does not know,
// stops the node, unless its type byte carries the ignorable flag (a
// rolling upgrade meeting a newer entry it may skip). A log that cannot
// take a committed batch stops only this Machine: every later entry
// answers ErrHalted until the partition is opened again.
package fsm

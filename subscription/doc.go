// Package subscription holds the pure, deterministic state machines of
// subscriptions: the cursor (which offsets are acknowledged), and the
// dispatch engine that decides which consumer gets which message in each
// mode (exclusive, shared, failover, key_shared), with the helpers the
// modes share: key hashing, the auto_split ring, sticky ranges, failover
// ranking.
//
// Nothing here does I/O, runs a goroutine, takes a lock, reads a clock or
// draws random numbers: the same inputs give the same state and the same
// decisions. The cursor is part of the partition's replicated state; the
// dispatch engine runs on the partition's leader, driven by the broker,
// which reads the log, feeds the engine and pushes what it decides. The
// package knows nothing of the network, Raft or the log's storage.
//
// Main types:
//
//   - Cursor: a subscription's acknowledgement state (CUR-1): a floor and
//     the acknowledged ranges above it.
//   - Dispatcher: one subscription's dispatch engine. Attach, Detach,
//     Flow, Acked, Redeliver, Reset and SeekReader change it; Plan says
//     what to read, Deliver hands out what was read; TakeEvents (failover
//     roles), TakeCounted (redelivery counts to replicate) and Wake (when
//     to ask again) are its other outputs; Describe shows it. State is
//     what it reads of the replicated state.
//   - Admit: the admission rules of a consumer (EX-1, names, KS-4).
//   - AutoSplit, Sticky, Master, Rank, Hash, Slot, StickyKey: key_shared
//     and failover assignment (KS-1..KS-4, FO-2..FO-4).
//
// RULES.md lists the rules by id; tests cite them, and every rule of
// sections 2 to 5 has one here. DESIGN.md explains the engine.
package subscription

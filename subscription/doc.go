// Package subscription holds the pure, deterministic state machines of
// subscriptions: the cursor (which offsets are acknowledged) and, as they
// arrive, the dispatch modes (exclusive, shared, failover, key_shared) that
// decide which consumer gets which message.
//
// Nothing here does I/O, reads a clock or draws random numbers: the same
// inputs give the same state on every replica, so the partition's Raft state
// machine can hold these values and replicate them by replaying entries.
// The package knows stream names (geofabric) and nothing of the network,
// Raft or the log's storage.
package subscription

// Package broker is the node service of fabriq: it serves client sessions
// (producers, consumers, lookups, admin) over the transport protocol and
// runs, for every partition placed on the node, the partition's Raft state
// machine that ties the storage log and the subscriptions together.
//
// A partition's state machine (fsm) appends each committed send entry to
// the partition's storage.Log as one batch, keeps producer deduplication
// state and every subscription's cursor. Its snapshot is the state, then the
// log's hard-linked snapshot, so taking one does not copy the log. Only the
// partition's leader dispatches messages to consumers; acks and
// subscription changes go through Raft. Retention too: the leader applies
// its stream's policy (retention time and size, backlog quota, message
// TTL) and proposes the partition's new start offset, which every replica
// applies by deleting whole segments below it.
//
// The node keeps a free-space reserve on its data directory (MinFreeDisk):
// below it leaders refuse sends with DiskFull before proposing them. A
// replica whose log still cannot append a committed entry stops that
// partition on the node, once, and catches up from Raft when restarted
// with space.
//
// The control plane — the metadata group and its catalog, placement and
// repair, bootstrap and the metadata leader's loops — is cluster/meta's.
// The node starts a meta.Service, runs what it places on the node as the
// member it says, and implements meta.Host for what only the node can do
// with its partition copies.
//
// The package sits above storage, subscription, transport, geofabric,
// cluster and cluster/meta, and below cmd/fabriqd.
package broker

// Package broker is the node service of fabriq: it serves client sessions
// (producers, consumers, lookups, admin) over the transport protocol and
// runs, for every partition placed on the node, the partition's log, its
// Raft group and its state machine (package fsm), which ties the storage
// log and the subscriptions together.
//
// The broker drives each partition: it groups concurrent sends into one
// entry, proposes it and answers the producers; it gathers acks into
// entries; only the partition's leader dispatches messages to consumers;
// joins, leaves and seeks go through Raft. Retention too: the leader
// applies its stream's policy (retention time and size, backlog quota,
// message TTL) and proposes the partition's new start offset, which every
// replica applies by deleting whole segments below it. The state machine
// has types of its own; the broker maps transport's to them in one place.
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

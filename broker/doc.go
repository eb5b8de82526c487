// Package broker is the node service of fabriq: it wires and runs a node
// — its client and Raft listeners, its control plane, its gossip and the
// copy of every partition placed on it — and hands each client connection
// to the protocol's front end.
//
// # What it owns
//
// The node's lifecycle (NewNode, Start, Shutdown, Close) and its Config.
// Its partition copies: for every partition placed on the node it opens
// the copy's log (storage), state machine (broker/fsm) and Raft group
// (cluster), runs the partition driver over them (broker/partition) and
// closes them; it retires, renews, halts and removes copies as the
// catalog, their damage and the disk say. The free-space reserve on its
// data directory (MinFreeDisk): below it leaders refuse sends with
// DiskFull before proposing them; a replica whose log still cannot append
// a committed entry stops that partition on the node, once, and catches up
// from Raft when reopened with space. The gossip glue: leaders announced,
// routes looked up. The accept loop of the client port, with its
// connection limits, and the node side of what sessions ask: the
// partition it leads of a name, lookups and admin operations (the
// session.Node it hands each session).
//
// # What it does not do
//
// It drives no partition itself: grouping sends, gathering acks, joins,
// dispatch and retention are broker/partition's. It speaks no protocol
// but to refuse a connection over a limit: broker/session is fabriq's
// front end. The control plane — the metadata group and its catalog,
// placement and repair, bootstrap and the metadata leader's loops — is
// cluster/meta's: the node starts a meta.Service, runs what it places on
// the node as the member it says, and implements meta.Host for what only
// the node can do with its partition copies.
//
// The package sits above broker/session, broker/partition, broker/fsm,
// broker/wire, storage, subscription, transport, geofabric, cluster and
// cluster/meta, and below cmd/fabriqd. DESIGN.md says which package below
// it owns what.
package broker

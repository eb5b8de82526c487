// Package session is fabriq's wire-protocol front end on a node: one
// Session per client connection of the client port, speaking transport's
// protocol and driving the node's partitions through package partition.
//
// # What it owns
//
// A connection's life after the node accepted it: the handshake, the
// reader (which answers pings itself and never waits for a request), the
// control workers that serve the requests that may wait, in order, and
// the writer, replies before messages. Everything read and not yet
// handled, and every Message frame queued and not yet written, is bounded
// by bytes (Config.MaxQueuedBytes). The producers and consumers the
// connection holds, within its limits (Config.MaxProducers,
// MaxConsumers): it is the partition.Holder of its producers and the
// partition.Outbox of its consumers. The checks of a request that need no
// partition (names, modes, sizes, sequence order) and the order of a
// producer's sends across a DiskFull refusal. The answers of the admin
// requests (lookup, partitioned metadata, create, delete and describe
// stream, set retention, list streams, cluster status, and the replica
// renewal that nodes of older versions still ask over the client port).
//
// # What it does not do
//
// It does not accept connections nor count them (the node's accept loop
// does, with its connection limits), run partitions (package partition
// does) or know the catalog: the admin work is the node's, asked through
// Node, the interface this package declares of what it needs of the node
// (the partition it leads of a name, lookups, admin operations). It never
// imports package broker, which implements Node.
//
// # Use
//
//	s, err := session.New(conn, node, session.Config{NodeID: id, Version: v, Logger: logger})
//	go func() { s.Serve(); forget(s) }() // Serve returns when the connection ends
//	...
//	s.Close() // ends it from outside: Serve returns, and detaches what it held
//
// Errors answered to clients are transport errors with stable codes; the
// texts of the contract are in one table in broker/wire.
package session

// Package meta is fabriq's control plane. It owns the metadata state
// machine (Catalog): the nodes of the cluster and the streams, with the
// placement of every partition's replicas and each replica's member id in
// its partition's Raft group.
//
// Metadata Raft entries are this package's own structs (RegisterNode,
// CreateStream, DeleteStream, ReplaceReplica, RenewReplica, SetRetention),
// one type byte and a msgpack body, in a type space of their own; a
// dispatch table applies each type, and Apply answers a Result. A type
// this version does not know stops the node unless the type carries
// IgnoreUnknownTypeFlag. The bytes match what earlier versions wrote
// (testdata holds them).
package meta

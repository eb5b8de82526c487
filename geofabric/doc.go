// Package geofabric owns the names of fabriq: tenants, fabrics (a tenant's
// geofabric, its set of regions), streams and their partitions.
//
// A stream is named persistent://TENANT/FABRIC/STREAM. A stream with one
// partition is unpartitioned: its only partition has the stream's own name.
// A stream with N > 1 partitions has partitions STREAM-partition-0 …
// STREAM-partition-(N-1), so a stream's own name never ends in
// -partition-K.
//
// The package only parses, validates and formats names. It knows nothing
// about where partitions live, Raft, the network or subscriptions; later it
// will also hold regions, placement policy and stream patterns.
package geofabric

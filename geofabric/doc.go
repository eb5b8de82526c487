// Package geofabric owns the names of fabriq: tenants, fabrics (a tenant's
// geofabric, its set of regions), streams and their partitions.
//
// A stream is named persistent://TENANT/FABRIC/STREAM; TENANT/FABRIC/STREAM
// names it too, and a short name STREAM is a stream of public/default
// (DefaultTenant, DefaultFabric), as in Pulsar. Parsed names always print
// in full form, which is the only form stored or compared. A stream with one
// partition is unpartitioned: its only partition has the stream's own name.
// A stream with N > 1 partitions has partitions STREAM-partition-0 …
// STREAM-partition-(N-1), so a stream's own name never ends in
// -partition-K.
//
// A segment (tenant, fabric, stream) is 1 to 200 bytes of letters, digits
// and - _ . = :, and never "." or "..": those read as "this" and "the
// parent" to file systems and URLs. A whole name is valid UTF-8 and at most
// MaxName bytes. Producer, subscription and consumer names are freer
// (CheckClientName): valid UTF-8, up to MaxClientName bytes, no control
// characters. Every entry point checks names here, in one place; errors
// match ErrInvalidName and quote at most the start of a long name.
//
// The package only parses, validates and formats names. It knows nothing
// about where partitions live, Raft, the network or subscriptions; later it
// will also hold regions, placement policy and stream patterns.
package geofabric

package meta

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Type is the first byte of every metadata Raft entry; the rest is the
// entry's msgpack body. The metadata group's types are their own: a
// partition's entries have another type space.
type Type uint8

// Metadata entry types. Never renumber; a type that goes keeps its number
// reserved here.
const (
	TypeRegisterNode     Type = 1  // RegisterNode
	TypeCreateStream     Type = 2  // CreateStream
	TypeDeleteStream     Type = 3  // DeleteStream
	TypeReplaceReplica   Type = 4  // ReplaceReplica
	TypeRenewReplica     Type = 5  // RenewReplica
	TypeSetRetention     Type = 6  // SetRetention
	TypeCreateTenant     Type = 7  // CreateTenant
	TypeDeleteTenant     Type = 8  // DeleteTenant
	TypeCreateFabric     Type = 9  // CreateFabric
	TypeDeleteFabric     Type = 10 // DeleteFabric
	TypeSetFabricRegions Type = 11 // SetFabricRegions
)

// CatalogFormat is the newest catalog format this version applies: 1 is
// nodes and streams (types 1 to 6), 2 adds tenants and fabrics (types 7
// to 11). Nodes advertise it in gossip (cluster.NodeMeta.Catalog), and
// the metadata leader writes an entry of a newer format only once every
// node reads it, so that a rolling upgrade never stops an older node.
const CatalogFormat = 2

// entryFormat returns the catalog format an entry needs: its type's, or
// more for an entry of an older type that carries newer fields.
func entryFormat(e Entry) int {
	if c, ok := e.(CreateStream); ok && (c.Local != "" || c.LeaderRegion != "") {
		return 2
	}
	return e.entryType().format()
}

// format returns the catalog format that brought type t.
func (t Type) format() int {
	if t&^IgnoreUnknownTypeFlag >= TypeCreateTenant {
		return 2
	}
	return 1
}

// IgnoreUnknownTypeFlag, set in an entry's type, lets a node that does not
// know the type skip the entry instead of stopping (Consul's flag of the
// same name). A new type that older nodes may safely not apply sets it,
// so that a rolling upgrade can write it before every node knows it. A
// type without the flag that a node does not know stops that node: going
// on would let the catalogs diverge.
const IgnoreUnknownTypeFlag Type = 0x80

func (t Type) String() string {
	if h, ok := handlers[t]; ok {
		return h.name
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// RegisterNode records a node's addresses and region, replacing what the
// catalog had of it.
type RegisterNode struct {
	ID         string `msgpack:"id"`          // the node id
	ClientAddr string `msgpack:"c"`           // host:port of its client port
	RaftAddr   string `msgpack:"r"`           // host:port of its Raft port
	Region     string `msgpack:"g,omitempty"` // its region, for placement
}

// CreateStream creates a stream with the placement of its partitions'
// replicas, unless a stream of that name exists. Entries written by older
// versions also carry "e" and "in" (always empty), which nothing reads.
type CreateStream struct {
	Name       string     `msgpack:"n"`  // the full stream name
	Partitions int        `msgpack:"p"`  // how many partitions
	Replicas   int        `msgpack:"r"`  // the replication factor
	Placement  [][]string `msgpack:"pl"` // per partition, its replicas' nodes
	Retention  Retention  `msgpack:"rt"` // the retention policy
	// Local and LeaderRegion are Stream's (catalog format 2).
	Local        string `msgpack:"lo,omitempty"`
	LeaderRegion string `msgpack:"lr,omitempty"`
}

// DeleteStream deletes a stream.
type DeleteStream struct {
	Name string `msgpack:"n"` // the full stream name
}

// ReplaceReplica moves one replica of a partition from node Old to node
// New.
type ReplaceReplica struct {
	Stream    string `msgpack:"s"` // the full stream name
	Partition int    `msgpack:"p"` // the partition's number
	Old       string `msgpack:"o"` // the node that loses the replica
	New       string `msgpack:"n"` // the node that gets it
}

// RenewReplica places a new member of a partition's group on the node of
// Member, whose copy is damaged: the node keeps its place and starts from
// an empty copy under a new member id.
type RenewReplica struct {
	Stream    string `msgpack:"s"` // the full stream name
	Partition int    `msgpack:"p"` // the partition's number
	Member    string `msgpack:"m"` // the member id renewed
}

// SetRetention replaces a stream's retention policy.
type SetRetention struct {
	Stream    string    `msgpack:"s"`  // the full stream name
	Retention Retention `msgpack:"rt"` // the new policy
}

// CreateTenant creates a tenant, unless it exists.
type CreateTenant struct {
	Name string `msgpack:"n"`
}

// DeleteTenant deletes a tenant that has no fabric left.
type DeleteTenant struct {
	Name string `msgpack:"n"`
}

// CreateFabric creates a fabric of an existing tenant, unless it exists.
type CreateFabric struct {
	Name     string         `msgpack:"n"`           // TENANT/FABRIC
	Regions  []string       `msgpack:"g,omitempty"` // sorted; empty is every region
	Defaults StreamDefaults `msgpack:"d"`           // for its new streams
}

// DeleteFabric deletes a fabric that has no stream left.
type DeleteFabric struct {
	Name string `msgpack:"n"` // TENANT/FABRIC
}

// SetFabricRegions replaces a fabric's regions, unless a stream of the
// fabric has a replica, a local region or a leader region outside them.
type SetFabricRegions struct {
	Name    string   `msgpack:"n"`           // TENANT/FABRIC
	Regions []string `msgpack:"g,omitempty"` // sorted; empty is every region
}

// Entry is the body of a metadata entry: one of the entry structs above.
type Entry interface {
	entryType() Type
}

func (RegisterNode) entryType() Type     { return TypeRegisterNode }
func (CreateStream) entryType() Type     { return TypeCreateStream }
func (DeleteStream) entryType() Type     { return TypeDeleteStream }
func (ReplaceReplica) entryType() Type   { return TypeReplaceReplica }
func (RenewReplica) entryType() Type     { return TypeRenewReplica }
func (SetRetention) entryType() Type     { return TypeSetRetention }
func (CreateTenant) entryType() Type     { return TypeCreateTenant }
func (DeleteTenant) entryType() Type     { return TypeDeleteTenant }
func (CreateFabric) entryType() Type     { return TypeCreateFabric }
func (DeleteFabric) entryType() Type     { return TypeDeleteFabric }
func (SetFabricRegions) entryType() Type { return TypeSetFabricRegions }

// Encode returns the Raft bytes of an entry: its type byte, then its body
// in msgpack with sorted map keys.
func Encode(e Entry) ([]byte, error) {
	return encodeTyped(e.entryType(), e)
}

func encodeTyped(t Type, body any) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(byte(t))
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(body); err != nil {
		return nil, fmt.Errorf("meta: encode %v entry: %w", t, err)
	}
	return buf.Bytes(), nil
}

// Result is what applying an entry answers its proposer.
type Result struct {
	// Done reports whether the entry did what it asks: the node was
	// registered, the stream created (not already there), deleted (it
	// existed), the replica moved or renewed (the stream, partition and
	// member were there and the change not made already), the policy set
	// (the stream exists), the tenant or fabric created (its tenant exists,
	// it did not) or deleted (it existed and was empty).
	Done bool
	// Skipped reports an entry of an unknown type flagged ignorable.
	Skipped bool
}

// handler applies one type of entry to the state.
type handler struct {
	name  string
	apply func(s *state, index uint64, body []byte) (Result, error)
}

// handle makes a handler of a function taking the decoded body.
func handle[E Entry](name string, f func(*state, uint64, E) bool) handler {
	return handler{name: name, apply: func(s *state, index uint64, body []byte) (Result, error) {
		var e E
		if err := msgpack.Unmarshal(body, &e); err != nil {
			return Result{}, fmt.Errorf("%s body: %w", name, err)
		}
		return Result{Done: f(s, index, e)}, nil
	}}
}

// handlers is the dispatch table of the metadata entries.
var handlers = map[Type]handler{
	TypeRegisterNode:     handle("RegisterNode", (*state).registerNode),
	TypeCreateStream:     handle("CreateStream", (*state).createStream),
	TypeDeleteStream:     handle("DeleteStream", (*state).deleteStream),
	TypeReplaceReplica:   handle("ReplaceReplica", (*state).replaceReplica),
	TypeRenewReplica:     handle("RenewReplica", (*state).renewReplica),
	TypeSetRetention:     handle("SetRetention", (*state).setRetention),
	TypeCreateTenant:     handle("CreateTenant", (*state).createTenant),
	TypeDeleteTenant:     handle("DeleteTenant", (*state).deleteTenant),
	TypeCreateFabric:     handle("CreateFabric", (*state).createFabric),
	TypeDeleteFabric:     handle("DeleteFabric", (*state).deleteFabric),
	TypeSetFabricRegions: handle("SetFabricRegions", (*state).setFabricRegions),
}

package meta

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fabriq-io/fabriq/geofabric"
)

// Node is a node as the metadata group knows it.
type Node struct {
	ID         string `msgpack:"id"`          // the node id, its name in gossip
	ClientAddr string `msgpack:"c"`           // host:port of its client port
	RaftAddr   string `msgpack:"r"`           // host:port of its Raft port
	Region     string `msgpack:"g,omitempty"` // its region, for placement
}

// QuotaPolicy is what a partition does when a subscription's backlog
// exceeds the backlog quota (the numbers of transport.BacklogQuotaPolicy).
type QuotaPolicy uint8

// Retention is a stream's retention, backlog quota and message TTL policy;
// partition leaders apply it. Its fields mean what transport's
// RetentionPolicy fields of the same names mean.
type Retention struct {
	TimeMs             int64       `msgpack:"rt,omitempty"`  // RetentionTimeMs
	Bytes              int64       `msgpack:"rb,omitempty"`  // RetentionBytes
	BacklogQuotaBytes  int64       `msgpack:"bq,omitempty"`  // BacklogQuotaBytes
	BacklogQuotaPolicy QuotaPolicy `msgpack:"bp,omitempty"`  // BacklogQuotaPolicy
	MessageTTLMs       int64       `msgpack:"ttl,omitempty"` // MessageTTLMs
}

// Stream is a stream's definition and the placement of its partitions'
// replicas. The catalog hands out copies: a Stream is never changed once
// read.
type Stream struct {
	// Epoch is the Raft index of the entry that created the stream: a
	// stream deleted and created again under its name has a higher one.
	Epoch      uint64 `msgpack:"e"`
	Name       string `msgpack:"n"` // the full stream name
	Partitions int    `msgpack:"p"` // how many partitions
	Replicas   int    `msgpack:"r"` // the replication factor
	// Placement[i] lists the node ids of partition i's replicas.
	Placement [][]string `msgpack:"pl"`
	// Initial is the placement the stream was created with: those
	// replicas bootstrap the partition's group; later ones join it. A
	// partition's entry is cleared when one of its replicas moves or is
	// renewed.
	Initial [][]string `msgpack:"in"`
	// Since[i][j] is the Raft index of the metadata entry that placed
	// Placement[i][j] on its node: 0 for the initial placement. It makes
	// the replica's member id in the partition's Raft group (MemberID),
	// so a node given a partition back is a new member with an empty
	// copy, never its old copy with the old copy's stale configuration.
	// Missing entries (catalogs written before it existed) are 0.
	Since [][]uint64 `msgpack:"si,omitempty"`
	// Retention is the stream's retention policy.
	Retention Retention `msgpack:"rt"`
	// Local is the region of a local stream, whose replicas all stay
	// there; empty for a global stream, whose replicas spread over its
	// fabric's regions.
	Local string `msgpack:"lo,omitempty"`
	// LeaderRegion is where the stream's partitions should be led:
	// leadership moves to a replica there, and repair keeps one there.
	LeaderRegion string `msgpack:"lr,omitempty"`
}

// SinceOf returns when replica j of partition i was placed (see Since).
func (s *Stream) SinceOf(i, j int) uint64 {
	if i < len(s.Since) && j < len(s.Since[i]) {
		return s.Since[i][j]
	}
	return 0
}

// Members returns the member ids of partition i's replicas, in placement
// order; nil when there is no partition i.
func (s *Stream) Members(i int) []string {
	if i < 0 || i >= len(s.Placement) {
		return nil
	}
	ids := make([]string, len(s.Placement[i]))
	for j, node := range s.Placement[i] {
		ids[j] = MemberID(node, s.SinceOf(i, j))
	}
	return ids
}

// PartitionNames returns the names of the stream's partitions, by number.
func (s *Stream) PartitionNames() ([]string, error) {
	st, err := geofabric.ParseStream(s.Name)
	if err != nil {
		return nil, err
	}
	parts := st.Partitions(s.Partitions)
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.String()
	}
	return names, nil
}

// MemberID is a replica's server id in its partition's Raft group: the
// node id for a replica of the initial placement, the node id, "@" and the
// index of the entry that placed it for a replica placed later. Each
// placement of a node is a new member of the group, so a node that held a
// partition, was moved away and is given it back neither rejoins with its
// old copy nor is mistaken for the member it was.
func MemberID(node string, since uint64) string {
	if since == 0 {
		return node
	}
	return fmt.Sprintf("%s@%d", node, since)
}

// NodeOf returns the node id of a member id.
func NodeOf(member string) string {
	node, _, _ := strings.Cut(member, "@")
	return node
}

// MemberIndex returns the placement index in a member id (0 for a replica
// of the initial placement): a node's members of one partition only ever
// get newer.
func MemberIndex(member string) uint64 {
	_, idx, ok := strings.Cut(member, "@")
	if !ok {
		return 0
	}
	v, err := strconv.ParseUint(idx, 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// Tenant is a tenant: the owner of fabrics.
type Tenant struct {
	Name string `msgpack:"n"`
}

// Fabric is a tenant's geofabric: the regions its streams may use and the
// defaults of the streams created in it.
type Fabric struct {
	Name string `msgpack:"n"` // TENANT/FABRIC
	// Regions lists the regions the fabric spans, sorted; empty means
	// every region of the cluster.
	Regions []string `msgpack:"g,omitempty"`
	// Defaults are what a stream created in the fabric without saying
	// otherwise gets.
	Defaults StreamDefaults `msgpack:"d"`
}

// StreamDefaults are a fabric's defaults for its new streams; zero
// fields mean the cluster's (one partition, one replica, no retention).
type StreamDefaults struct {
	Partitions int       `msgpack:"p,omitempty"`
	Replicas   int       `msgpack:"r,omitempty"`
	Retention  Retention `msgpack:"rt"`
}

// state is the catalog's content, and its snapshot's format: a msgpack map
// with sorted keys.
type state struct {
	Nodes   map[string]Node    `msgpack:"nodes"`
	Streams map[string]*Stream `msgpack:"streams"`
	// Tenants and Fabrics (by TENANT/FABRIC) always hold the tenant and
	// fabric of every stream: a stream created in a fabric the catalog
	// did not have (by a version without fabrics) brings it along.
	Tenants map[string]Tenant `msgpack:"tenants,omitempty"`
	Fabrics map[string]Fabric `msgpack:"fabrics,omitempty"`
	// Applied is the Raft index of the last entry applied: two catalogs
	// with the same Applied are the same.
	Applied uint64 `msgpack:"applied,omitempty"`
}

func newState() state {
	return state{Nodes: map[string]Node{}, Streams: map[string]*Stream{}, Tenants: map[string]Tenant{}, Fabrics: map[string]Fabric{}}
}

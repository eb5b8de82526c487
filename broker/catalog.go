package broker

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fabriq-io/fabriq/transport"
)

// Metadata entry types. Never renumber.
const (
	metaRegisterNode entryType = iota + 1
	metaCreateStream
	metaDeleteStream
	metaReplaceReplica
	metaRenewReplica
	metaSetRetention
)

// nodeInfo is a node as the metadata group knows it.
type nodeInfo struct {
	ID         string `msgpack:"id"`
	ClientAddr string `msgpack:"c"`
	RaftAddr   string `msgpack:"r"`
	Region     string `msgpack:"g,omitempty"`
}

// streamMeta is a stream's definition and the placement of its partitions'
// replicas: Placement[i] lists the node ids of partition i's replicas.
type streamMeta struct {
	// Epoch is the Raft index of the entry that created the stream: a
	// stream deleted and created again under its name has a higher one.
	Epoch      uint64     `msgpack:"e"`
	Name       string     `msgpack:"n"`
	Partitions int        `msgpack:"p"`
	Replicas   int        `msgpack:"r"`
	Placement  [][]string `msgpack:"pl"`
	// Initial is the placement the stream was created with: those
	// replicas bootstrap the partition's group; later ones join it. A
	// partition's entry is cleared when one of its replicas moves.
	Initial [][]string `msgpack:"in"`
	// Since[i][j] is the Raft index of the metadata entry that placed
	// Placement[i][j] on its node: 0 for the initial placement. It makes
	// the replica's identity in the partition's Raft group (replicaID), so
	// a node given a partition back is a new member with an empty copy,
	// never its old copy with the old copy's stale configuration. Missing
	// entries (catalogs written before it existed) are 0.
	Since [][]uint64 `msgpack:"si,omitempty"`
	// Retention is the stream's retention, backlog quota and message TTL
	// policy; partition leaders apply it.
	Retention transport.RetentionPolicy `msgpack:"rt"`
}

// since returns when replica j of partition i was placed (see Since).
func (s *streamMeta) since(i, j int) uint64 {
	if i < len(s.Since) && j < len(s.Since[i]) {
		return s.Since[i][j]
	}
	return 0
}

// replicaIDs returns the Raft server ids of partition i's replicas.
func (s *streamMeta) replicaIDs(i int) []string {
	if i >= len(s.Placement) {
		return nil
	}
	ids := make([]string, len(s.Placement[i]))
	for j, node := range s.Placement[i] {
		ids[j] = replicaID(node, s.since(i, j))
	}
	return ids
}

// replaceReplicaEntry moves one replica of a partition to another node.
type replaceReplicaEntry struct {
	Stream    string `msgpack:"s"`
	Partition int    `msgpack:"p"`
	Old       string `msgpack:"o"`
	New       string `msgpack:"n"`
}

// renewReplicaEntry places a new member of a partition's group on the
// node of Member, whose copy is damaged: the node keeps its place and
// starts from an empty copy under a new member id.
type renewReplicaEntry struct {
	Stream    string `msgpack:"s"`
	Partition int    `msgpack:"p"`
	Member    string `msgpack:"m"`
}

// setRetentionEntry replaces a stream's retention policy.
type setRetentionEntry struct {
	Stream    string                    `msgpack:"s"`
	Retention transport.RetentionPolicy `msgpack:"rt"`
}

type deleteStreamEntry struct {
	Name string `msgpack:"n"`
}

// catalogState is the metadata group's state.
type catalogState struct {
	Nodes   map[string]nodeInfo    `msgpack:"nodes"`
	Streams map[string]*streamMeta `msgpack:"streams"`
	// Applied is the Raft index of the last entry applied: two catalogs
	// with the same Applied are the same.
	Applied uint64 `msgpack:"applied,omitempty"`
}

// catalog is the metadata state machine: nodes and streams with their
// replica placement. Every node runs a replica; the broker reads it to
// know which partitions to run and where leaders' clients connect.
type catalog struct {
	changed func() // called after every apply or restore; must not block

	// applied mirrors state.Applied, for readers that take no lock.
	applied atomic.Uint64

	mu    sync.RWMutex
	state catalogState
	// next is closed, and replaced, after every change.
	next chan struct{}
}

func newCatalog(changed func()) *catalog {
	return &catalog{changed: changed, next: make(chan struct{}), state: catalogState{Nodes: map[string]nodeInfo{}, Streams: map[string]*streamMeta{}}}
}

// watch returns a channel closed at the next change.
func (c *catalog) watch() <-chan struct{} {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.next
}

// notifyLocked wakes the watchers; the caller holds mu.
func (c *catalog) notifyLocked() {
	close(c.next)
	c.next = make(chan struct{})
}

func (c *catalog) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	if len(l.Data) == 0 {
		panic(fmt.Sprintf("broker: empty metadata entry at raft index %d", l.Index))
	}
	body := l.Data[1:]
	var res any
	var err error
	c.mu.Lock()
	switch entryType(l.Data[0]) {
	case metaRegisterNode:
		var n nodeInfo
		if err = msgpack.Unmarshal(body, &n); err == nil {
			c.state.Nodes[n.ID] = n
		}
	case metaCreateStream:
		var s streamMeta
		if err = msgpack.Unmarshal(body, &s); err == nil {
			if _, ok := c.state.Streams[s.Name]; ok {
				res = false
			} else {
				s.Epoch = l.Index
				s.Initial = s.Placement
				c.state.Streams[s.Name] = &s
				res = true
			}
		}
	case metaDeleteStream:
		var d deleteStreamEntry
		if err = msgpack.Unmarshal(body, &d); err == nil {
			_, ok := c.state.Streams[d.Name]
			delete(c.state.Streams, d.Name)
			res = ok
		}
	case metaReplaceReplica:
		var e replaceReplicaEntry
		if err = msgpack.Unmarshal(body, &e); err == nil {
			res = c.replaceLocked(e, l.Index)
		}
	case metaRenewReplica:
		var e renewReplicaEntry
		if err = msgpack.Unmarshal(body, &e); err == nil {
			res = c.renewLocked(e, l.Index)
		}
	case metaSetRetention:
		var e setRetentionEntry
		if err = msgpack.Unmarshal(body, &e); err == nil {
			s := c.state.Streams[e.Stream]
			if s != nil {
				s.Retention = e.Retention
			}
			res = s != nil
		}
	default:
		c.mu.Unlock()
		panic(fmt.Sprintf("broker: unknown metadata entry type %d at raft index %d", l.Data[0], l.Index))
	}
	c.state.Applied = l.Index
	c.applied.Store(l.Index)
	c.notifyLocked()
	c.mu.Unlock()
	if err != nil {
		panic(fmt.Sprintf("broker: metadata entry at raft index %d: %v", l.Index, err))
	}
	if c.changed != nil {
		c.changed()
	}
	return res
}

func (c *catalog) Snapshot() (raft.FSMSnapshot, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(&c.state); err != nil {
		return nil, err
	}
	return bytesSnapshot(buf.Bytes()), nil
}

func (c *catalog) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var st catalogState
	if err := msgpack.NewDecoder(rc).Decode(&st); err != nil {
		return fmt.Errorf("broker: metadata snapshot: %w", err)
	}
	if st.Nodes == nil {
		st.Nodes = map[string]nodeInfo{}
	}
	if st.Streams == nil {
		st.Streams = map[string]*streamMeta{}
	}
	c.mu.Lock()
	c.state = st
	c.applied.Store(st.Applied)
	c.notifyLocked()
	c.mu.Unlock()
	if c.changed != nil {
		c.changed()
	}
	return nil
}

// replaceLocked applies a replica move; it reports whether it changed
// anything (the stream may be gone, or the move already done).
func (c *catalog) replaceLocked(e replaceReplicaEntry, index uint64) bool {
	s := c.state.Streams[e.Stream]
	if s == nil || e.Partition < 0 || e.Partition >= len(s.Placement) {
		return false
	}
	p := s.Placement[e.Partition]
	i := slices.Index(p, e.Old)
	if i < 0 || slices.Contains(p, e.New) {
		return false
	}
	p = slices.Clone(p)
	p[i] = e.New
	placement := slices.Clone(s.Placement)
	placement[e.Partition] = p
	s.Placement = placement
	s.setSince(e.Partition, i, index)
	// The partition's group exists now: no replica may bootstrap it
	// again. A node that was an initial replica, lost its copy when moved
	// away and is given the partition back later would otherwise start a
	// new, empty group with the others that have no copy yet, and elect
	// a leader of an empty log: every acknowledged message lost.
	if e.Partition < len(s.Initial) {
		initial := slices.Clone(s.Initial)
		initial[e.Partition] = nil
		s.Initial = initial
	}
	return true
}

// renewLocked applies a renewal; it reports whether it changed anything
// (the member may be gone already, or renewed).
func (c *catalog) renewLocked(e renewReplicaEntry, index uint64) bool {
	s := c.state.Streams[e.Stream]
	if s == nil || e.Partition < 0 || e.Partition >= len(s.Placement) {
		return false
	}
	j := slices.Index(s.replicaIDs(e.Partition), e.Member)
	if j < 0 {
		return false
	}
	s.setSince(e.Partition, j, index)
	if e.Partition < len(s.Initial) { // see replaceLocked
		initial := slices.Clone(s.Initial)
		initial[e.Partition] = nil
		s.Initial = initial
	}
	return true
}

// setSince records that replica j of partition i was placed at index,
// copying Since (a copy of the stream may share it).
func (s *streamMeta) setSince(i, j int, index uint64) {
	since := make([][]uint64, len(s.Placement))
	for k := range since {
		since[k] = make([]uint64, len(s.Placement[k]))
		for m := range since[k] {
			since[k][m] = s.since(k, m)
		}
	}
	since[i][j] = index
	s.Since = since
}

// stream returns a copy of a stream's definition.
func (c *catalog) stream(name string) (streamMeta, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s, ok := c.state.Streams[name]
	if !ok {
		return streamMeta{}, false
	}
	return *s, true
}

// streams returns copies of every stream definition, by name.
func (c *catalog) streams() []streamMeta {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]streamMeta, 0, len(c.state.Streams))
	for _, s := range c.state.Streams {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b streamMeta) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// node returns what the catalog knows of a node.
func (c *catalog) node(id string) (nodeInfo, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, ok := c.state.Nodes[id]
	return n, ok
}

// nodes returns every registered node, by id.
func (c *catalog) nodes() []nodeInfo {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]nodeInfo, 0, len(c.state.Nodes))
	for _, n := range c.state.Nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b nodeInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// bytesSnapshot is a snapshot that is its bytes.
type bytesSnapshot []byte

func (b bytesSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(b); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (bytesSnapshot) Release() {}

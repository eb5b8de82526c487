package meta

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"
)

// Catalog is the metadata state machine: nodes and streams with the
// placement of their partitions' replicas. Every node runs a replica of
// it. It is a thin raft.FSM over a deterministic processor (apply.go);
// readers get copies.
type Catalog struct {
	changed func() // called after every apply or restore; must not block
	logger  *slog.Logger

	// applied mirrors state.Applied, for readers that take no lock.
	applied atomic.Uint64

	mu    sync.RWMutex
	state state
	// next is closed, and replaced, after every change.
	next chan struct{}
}

var _ raft.FSM = (*Catalog)(nil)

// NewCatalog returns an empty catalog. changed, if not nil, is called
// after every apply and restore, outside the catalog's lock; it must not
// block. A nil logger discards.
func NewCatalog(changed func(), logger *slog.Logger) *Catalog {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Catalog{changed: changed, logger: logger, next: make(chan struct{}), state: newState()}
}

// Apply implements raft.FSM. It returns a Result. An entry that does not
// decode, or whose type is unknown and not flagged ignorable, stops the
// node (panic): going on would let the catalogs diverge.
func (c *Catalog) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	c.mu.Lock()
	res, err := c.state.apply(l.Index, l.Data)
	if err == nil {
		c.applied.Store(l.Index)
		c.notifyLocked()
	}
	c.mu.Unlock()
	if err != nil {
		panic(fmt.Sprintf("meta: metadata entry at raft index %d: %v", l.Index, err))
	}
	if res.Skipped {
		c.logger.Warn("skipped a metadata entry of a type this version does not know; it is flagged ignorable", "type", l.Data[0], "index", l.Index)
	}
	if c.changed != nil {
		c.changed()
	}
	return res
}

// Snapshot implements raft.FSM: the state in msgpack, map keys sorted.
func (c *Catalog) Snapshot() (raft.FSMSnapshot, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	b, err := encodeState(&c.state)
	if err != nil {
		return nil, err
	}
	return bytesSnapshot(b), nil
}

// encodeState encodes s as msgpack encodes the state struct, except that
// the nodes and streams are written in the order of their keys: msgpack
// writes other maps than the few it special-cases in Go's map order, so
// older versions' snapshots of the same catalog differ in their bytes.
func encodeState(s *state) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	fields := 2
	for _, present := range []bool{s.Applied != 0, len(s.Tenants) > 0, len(s.Fabrics) > 0} {
		if present {
			fields++
		}
	}
	err := errors.Join(
		enc.EncodeMapLen(fields),
		enc.EncodeString("nodes"), encodeSorted(enc, s.Nodes),
		enc.EncodeString("streams"), encodeSorted(enc, s.Streams),
	)
	if err == nil && s.Applied != 0 {
		err = errors.Join(enc.EncodeString("applied"), enc.Encode(s.Applied))
	}
	if err == nil && len(s.Tenants) > 0 {
		err = errors.Join(enc.EncodeString("tenants"), encodeSorted(enc, s.Tenants))
	}
	if err == nil && len(s.Fabrics) > 0 {
		err = errors.Join(enc.EncodeString("fabrics"), encodeSorted(enc, s.Fabrics))
	}
	if err != nil {
		return nil, fmt.Errorf("meta: encode snapshot: %w", err)
	}
	return buf.Bytes(), nil
}

// encodeSorted encodes a map with its keys in increasing order.
func encodeSorted[V any](enc *msgpack.Encoder, m map[string]V) error {
	if m == nil {
		return enc.EncodeNil()
	}
	if err := enc.EncodeMapLen(len(m)); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if err := enc.EncodeString(k); err != nil {
			return err
		}
		if err := enc.Encode(m[k]); err != nil {
			return err
		}
	}
	return nil
}

func decodeState(r io.Reader) (state, error) {
	var st state
	if err := msgpack.NewDecoder(r).Decode(&st); err != nil {
		return st, fmt.Errorf("meta: metadata snapshot: %w", err)
	}
	if st.Nodes == nil {
		st.Nodes = map[string]Node{}
	}
	if st.Streams == nil {
		st.Streams = map[string]*Stream{}
	}
	if st.Tenants == nil {
		st.Tenants = map[string]Tenant{}
	}
	if st.Fabrics == nil {
		st.Fabrics = map[string]Fabric{}
	}
	for name := range st.Streams {
		st.adopt(name)
	}
	return st, nil
}

// Restore implements raft.FSM.
func (c *Catalog) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := decodeState(rc)
	if err != nil {
		return err
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

// notifyLocked wakes the watchers; the caller holds mu.
func (c *Catalog) notifyLocked() {
	close(c.next)
	c.next = make(chan struct{})
}

// Watch returns a channel closed at the next change.
func (c *Catalog) Watch() <-chan struct{} {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.next
}

// Applied returns the Raft index of the last entry applied.
func (c *Catalog) Applied() uint64 { return c.applied.Load() }

// Stream returns a copy of a stream's definition.
func (c *Catalog) Stream(name string) (Stream, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s, ok := c.state.Streams[name]
	if !ok {
		return Stream{}, false
	}
	return *s, true
}

// Streams returns copies of every stream definition, by name.
func (c *Catalog) Streams() []Stream {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]Stream, 0, len(c.state.Streams))
	for _, s := range c.state.Streams {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Stream) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// StreamsIn counts the streams of a fabric, "TENANT/FABRIC".
func (c *Catalog) StreamsIn(fabric string) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for name := range c.state.Streams {
		if fabricOf(name) == fabric {
			n++
		}
	}
	return n
}

// Node returns what the catalog knows of a node.
func (c *Catalog) Node(id string) (Node, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, ok := c.state.Nodes[id]
	return n, ok
}

// Nodes returns every registered node, by id.
func (c *Catalog) Nodes() []Node {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]Node, 0, len(c.state.Nodes))
	for _, n := range c.state.Nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b Node) int { return strings.Compare(a.ID, b.ID) })
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

// Tenants returns the tenants' names, sorted.
func (c *Catalog) Tenants() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return slices.Sorted(maps.Keys(c.state.Tenants))
}

// Tenant reports whether a tenant exists.
func (c *Catalog) Tenant(name string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.state.Tenants[name]
	return ok
}

// Fabric returns a fabric, by TENANT/FABRIC.
func (c *Catalog) Fabric(name string) (Fabric, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	f, ok := c.state.Fabrics[name]
	return f, ok
}

// Fabrics returns a tenant's fabrics, by name.
func (c *Catalog) Fabrics(tenant string) []Fabric {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []Fabric
	for _, name := range slices.Sorted(maps.Keys(c.state.Fabrics)) {
		if t, _, _ := strings.Cut(name, "/"); t == tenant {
			out = append(out, c.state.Fabrics[name])
		}
	}
	return out
}

// Outside names the first stream of a fabric that regions would leave
// outside (a replica, a local or a leader region elsewhere); "" for none.
func (c *Catalog) Outside(fabric string, regions []string) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.state.outside(fabric, regions)
}

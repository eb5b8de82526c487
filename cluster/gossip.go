package cluster

import (
	"bytes"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/vmihailenco/msgpack/v5"
)

// mlDelegate is what memberlist calls: memberlist.Delegate,
// memberlist.EventDelegate and memberlist.ConflictDelegate. memberlist calls
// some of these from its packet loop and some while it holds its node lock
// (calling back into it there deadlocks), so none of them waits or calls
// memberlist: notifications are copied into the inbox and handled by the
// Membership's goroutine; NodeMeta, GetBroadcasts and LocalState answer
// from state kept ready for them.
type mlDelegate struct {
	m *Membership
}

// NodeMeta implements memberlist.Delegate.
func (d mlDelegate) NodeMeta(limit int) []byte {
	b := d.m.metaEnc.Load()
	if b == nil || len(*b) > limit {
		return nil
	}
	return *b
}

// NotifyMsg implements memberlist.Delegate.
func (d mlDelegate) NotifyMsg(b []byte) {
	d.m.in.push(inItem{kind: inMsg, data: bytes.Clone(b)})
}

// GetBroadcasts implements memberlist.Delegate.
func (d mlDelegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.m.bcast.GetBroadcasts(overhead, limit)
}

// LocalState implements memberlist.Delegate.
func (d mlDelegate) LocalState(join bool) []byte {
	return d.m.routes.localState(time.Now())
}

// MergeRemoteState implements memberlist.Delegate.
func (d mlDelegate) MergeRemoteState(b []byte, join bool) {
	if len(b) == 0 {
		return
	}
	d.m.in.push(inItem{kind: inState, data: bytes.Clone(b)})
}

// NotifyJoin implements memberlist.EventDelegate.
func (d mlDelegate) NotifyJoin(n *memberlist.Node) {
	d.m.in.push(inItem{kind: inJoin, node: copyNode(n)})
}

// NotifyLeave implements memberlist.EventDelegate.
func (d mlDelegate) NotifyLeave(n *memberlist.Node) {
	d.m.in.push(inItem{kind: inLeave, node: copyNode(n)})
}

// NotifyUpdate implements memberlist.EventDelegate.
func (d mlDelegate) NotifyUpdate(n *memberlist.Node) {
	d.m.in.push(inItem{kind: inUpdate, node: copyNode(n)})
}

// NotifyConflict implements memberlist.ConflictDelegate: a node announced
// itself under a name known at another address.
func (d mlDelegate) NotifyConflict(existing, other *memberlist.Node) {
	d.m.in.push(inItem{kind: inConflict, node: copyNode(existing), other: copyNode(other)})
}

// nodeInfo is the part of a memberlist.Node the Membership keeps.
type nodeInfo struct {
	name string
	addr string // host:port
	meta []byte
}

func copyNode(n *memberlist.Node) nodeInfo {
	return nodeInfo{
		name: n.Name,
		addr: hostPort(n.Addr, n.Port),
		meta: bytes.Clone(n.Meta),
	}
}

type inKind uint8

const (
	inJoin inKind = iota
	inUpdate
	inLeave
	inConflict
	inMsg   // a gossip message
	inState // a peer's push-pull state
)

type inItem struct {
	kind  inKind
	node  nodeInfo
	other nodeInfo // inConflict: the newcomer
	data  []byte   // inMsg, inState
}

// maxInbox bounds the messages and states waiting in the inbox. Beyond it
// they are dropped: gossip is lossy by design and the next push-pull
// repairs what was lost. Membership notifications are never dropped; there
// are as many as there are membership changes.
const maxInbox = 4096

// inbox is the queue between memberlist's callbacks and the Membership's
// goroutine. push never blocks.
type inbox struct {
	mu      sync.Mutex
	items   []inItem
	data    int // inMsg and inState items queued
	dropped int // since the last drain
	closed  bool
	wake    chan struct{}
}

func newInbox() *inbox { return &inbox{wake: make(chan struct{}, 1)} }

func (q *inbox) push(it inItem) {
	q.mu.Lock()
	switch {
	case q.closed:
		q.mu.Unlock()
		return
	case it.kind >= inMsg && q.data >= maxInbox:
		q.dropped++
		q.mu.Unlock()
		return
	case it.kind >= inMsg:
		q.data++
	}
	q.items = append(q.items, it)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// drain takes everything queued, and how many messages were dropped.
func (q *inbox) drain() ([]inItem, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	items, dropped := q.items, q.dropped
	q.items, q.data, q.dropped = nil, 0, 0
	return items, dropped
}

// close drops what is queued and everything pushed later.
func (q *inbox) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.items = nil
}

// encodeLeaveMsg encodes a leave intent:
//
//	msgLeave, then msgpack: node id str, instance uint
func encodeLeaveMsg(id string, instance uint64) []byte {
	var buf bytes.Buffer
	buf.WriteByte(msgLeave)
	enc := msgpack.NewEncoder(&buf)
	_ = enc.EncodeString(id)
	_ = enc.EncodeUint(instance)
	return buf.Bytes()
}

// decodeLeaveMsg decodes a leave intent without its type byte.
func decodeLeaveMsg(b []byte) (string, uint64, error) {
	d := msgpack.NewDecoder(bytes.NewReader(b))
	id, err := d.DecodeString()
	if err != nil {
		return "", 0, err
	}
	instance, err := d.DecodeUint64()
	if err != nil {
		return "", 0, err
	}
	if len(id) == 0 || len(id) > maxNodeIDLen {
		return "", 0, fmt.Errorf("node id of %d bytes", len(id))
	}
	return id, instance, nil
}

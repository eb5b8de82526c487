package cluster

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Raft reads back from its log store the entries it has just stored: a
// leader reads each entry once per follower to build its appends, and the
// entry before them for its term; a follower reads each entry to apply
// it. From raft-boltdb each read is a bolt transaction and a msgpack
// decode that copies the entry's data: on the leader of ten busy
// partitions, a fifth of what the node allocated, and the garbage
// collector's work grows with what is allocated (with a thousand idle
// groups on the node, each cycle costs more). hashicorp/raft's LogCache
// keeps a fixed number of entries, whatever their size, for as long as
// the group lives: an idle group would hold its last entries for good.
// recentEntries keeps the newest entries stored, shared with Raft (Raft
// never changes an entry once stored, and its own cache shares them too),
// up to recentMaxBytes of data, and forgets them once the group stored
// nothing for recentIdle.
type recentEntries struct {
	mu    sync.Mutex
	logs  []*raft.Log // consecutive indexes, oldest first
	bytes int         // their data
	// stored is set by every store; the idle timer forgets the entries
	// when it finds it unset, and unsets it.
	stored bool
	idle   *time.Timer // nil while nothing is kept
}

const (
	// recentMaxBytes bounds the data a group keeps: the entries a
	// follower that keeps up is behind by, at a busy partition's rate.
	recentMaxBytes = 4 << 20
	// recentIdle is how long a group keeps its entries with nothing new
	// stored.
	recentIdle = 5 * time.Second
)

// add keeps logs, stored after what is kept (anything else starts over).
func (r *recentEntries) add(logs []*raft.Log) {
	if len(logs) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.logs); n > 0 && r.logs[n-1].Index+1 != logs[0].Index {
		r.clearLocked()
	}
	for _, l := range logs {
		r.logs = append(r.logs, l)
		r.bytes += len(l.Data)
	}
	drop := 0
	for drop < len(r.logs)-1 && r.bytes > recentMaxBytes {
		r.bytes -= len(r.logs[drop].Data)
		r.logs[drop] = nil
		drop++
	}
	r.logs = r.logs[drop:]
	r.stored = true
	if r.idle == nil {
		r.idle = time.AfterFunc(recentIdle, r.idleCheck)
	}
}

// idleCheck forgets what is kept if nothing was stored since the last
// check, and checks again later otherwise.
func (r *recentEntries) idleCheck() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.idle == nil {
		return
	}
	if r.stored {
		r.stored = false
		r.idle.Reset(recentIdle)
		return
	}
	r.clearLocked()
	r.idle = nil
}

// close forgets every entry and stops the idle timer (the group closed).
func (r *recentEntries) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.idle != nil {
		r.idle.Stop()
		r.idle = nil
	}
	r.clearLocked()
}

// clearLocked forgets every entry; r.mu is held.
func (r *recentEntries) clearLocked() {
	clear(r.logs)
	r.logs = r.logs[:0]
	r.bytes = 0
	if cap(r.logs) > 1024 {
		r.logs = nil
	}
}

// get fills l with entry index, sharing its data, if it is kept.
func (r *recentEntries) get(index uint64, l *raft.Log) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.logs) == 0 {
		return false
	}
	first := r.logs[0].Index
	if index < first || index-first >= uint64(len(r.logs)) {
		return false
	}
	*l = *r.logs[index-first]
	return true
}

// forget drops the entries from lo to hi (a compaction deletes the oldest,
// a follower's conflict the newest).
func (r *recentEntries) forget(lo, hi uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.logs)
	if n == 0 {
		return
	}
	first, last := r.logs[0].Index, r.logs[n-1].Index
	switch {
	case hi < first || lo > last:
	case lo <= first && hi < last:
		drop := int(hi - first + 1)
		for _, l := range r.logs[:drop] {
			r.bytes -= len(l.Data)
		}
		clear(r.logs[:drop])
		r.logs = r.logs[drop:]
	case lo > first && hi >= last:
		keep := int(lo - first)
		for _, l := range r.logs[keep:] {
			r.bytes -= len(l.Data)
		}
		clear(r.logs[keep:])
		r.logs = r.logs[:keep]
	default:
		r.clearLocked()
	}
}

package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/vmihailenco/msgpack/v5"
)

// Route says which node leads a partition's Raft group.
//
// Routes are ordered by (Epoch, Term): a route with a higher epoch replaces
// any route of a lower one, and within an epoch a higher term replaces a
// lower one. Two routes with the same epoch and term but different leaders
// cannot both be right (Raft elects at most one leader per term); the first
// one a node learns is kept.
type Route struct {
	// LeaderID is the node id of the leader. 1..255 bytes.
	LeaderID string
	// Epoch is the partition's incarnation: 0 for a caller that never
	// re-creates a partition under the same name, otherwise a number that
	// grows each time the partition is created again, such as the index of
	// the metadata entry that created its stream. A re-created partition
	// starts again at a low Raft term, so only a higher epoch lets its
	// routes replace the old incarnation's, and its tombstone (Forget).
	Epoch uint64
	// Term is the Raft term in which LeaderID leads.
	Term uint64
}

// RouteEvent is a change of a partition's route as a RouteWatch delivers
// it.
type RouteEvent struct {
	Partition string
	// Route is the partition's new route. For a forgotten partition it
	// holds the epoch that was forgotten and no leader.
	Route Route
	// Forgotten is set when the partition's route was removed by Forget
	// (here or on another node).
	Forgotten bool
}

// RouteWatch delivers a routing table's changes on C. See Routes.Watch.
type RouteWatch struct {
	// C receives one event per live route when the watch starts, then one
	// per change. A reader that falls behind receives each partition's
	// latest state instead of every step. C is closed by Stop and when the
	// Membership closes.
	C <-chan RouteEvent

	f *feed[string, RouteEvent]
	r *Routes
}

// Stop ends the watch and closes C. It is idempotent.
func (w *RouteWatch) Stop() {
	w.r.mu.Lock()
	delete(w.r.watches, w)
	w.r.mu.Unlock()
	w.f.stop()
}

// Routes is the leader routing table: for each partition, the node that
// leads its Raft group, as the leaders announce it. Every node holds the
// whole table. Announcements spread by gossip and the tables are compared
// in full at every push-pull (anti-entropy), so any node can answer a
// lookup from memory. It is eventually consistent: a route may be stale for
// a moment after a leader change, and a client that reaches a node that no
// longer leads is redirected by its NotLeader answer.
//
// A Membership owns its Routes (Membership.Routes); Announce and Forget
// work before Start (gossip begins with Start) and fail with ErrClosed after
// Close. All methods are safe for concurrent use.
type Routes struct {
	logger *slog.Logger
	ttl    time.Duration
	bcast  *memberlist.TransmitLimitedQueue

	mu      sync.Mutex
	entries map[string]routeEntry
	watches map[*RouteWatch]struct{}
	closed  bool
}

// routeEntry is a partition's route in the table, or its tombstone.
type routeEntry struct {
	leader  string // "" for a tombstone
	epoch   uint64
	term    uint64
	deleted int64 // Unix milliseconds of the Forget for a tombstone; 0 for a live route
}

func (e routeEntry) route() Route { return Route{LeaderID: e.leader, Epoch: e.epoch, Term: e.term} }

func newRoutes(logger *slog.Logger, ttl time.Duration, bcast *memberlist.TransmitLimitedQueue) *Routes {
	return &Routes{
		logger:  logger,
		ttl:     ttl,
		bcast:   bcast,
		entries: make(map[string]routeEntry),
		watches: make(map[*RouteWatch]struct{}),
	}
}

// Announce records that r.LeaderID leads partition in (r.Epoch, r.Term)
// and gossips it to the cluster. The partition's leader calls it when it
// wins an election. It returns ErrStaleRoute, and changes nothing, when the
// table already holds a newer route for the partition, a different leader
// for the same epoch and term, or a tombstone for its epoch; announcing the
// route the table holds already does nothing and returns nil. A partition
// name is 1..MaxGroupIDLen bytes and a leader id 1..255 bytes, otherwise
// ErrBadRoute.
func (r *Routes) Announce(partition string, route Route) error {
	if err := checkRoute(partition, route.LeaderID); err != nil {
		return err
	}
	in := routeEntry{leader: route.LeaderID, epoch: route.Epoch, term: route.Term}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("cluster: announce %s: %w", partition, ErrClosed)
	}
	cur, had := r.entries[partition]
	if r.applyLocked(partition, in, time.Now(), true) {
		return nil
	}
	if had && cur == in {
		return nil
	}
	return fmt.Errorf("cluster: announce %s leader %s epoch %d term %d: %w (table has %s)",
		partition, route.LeaderID, route.Epoch, route.Term, ErrStaleRoute, describeEntry(cur))
}

// Forget removes partition's route, for example when its stream is deleted,
// and gossips the removal. It leaves a tombstone for the epoch: no route of
// that epoch or an older one, still travelling in gossip or held by a node
// that was away, brings the partition back; a route of a newer epoch (the
// partition created again) replaces the tombstone. Tombstones are dropped
// MembershipConfig.TombstoneTTL after the Forget, which assumes node clocks
// that agree to well within that time. Forget returns ErrStaleRoute when
// the table holds a newer epoch of the partition, and nil when the epoch
// is forgotten already.
func (r *Routes) Forget(partition string, epoch uint64) error {
	if err := checkRoute(partition, "-"); err != nil {
		return err
	}
	now := time.Now()
	in := routeEntry{epoch: epoch, deleted: max(now.UnixMilli(), 1)}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("cluster: forget %s: %w", partition, ErrClosed)
	}
	r.reapLocked(now)
	cur, had := r.entries[partition]
	if r.applyLocked(partition, in, now, true) || !had || cur.epoch == epoch {
		return nil
	}
	return fmt.Errorf("cluster: forget %s epoch %d: %w (table has %s)", partition, epoch, ErrStaleRoute, describeEntry(cur))
}

// Lookup returns partition's route, if the table has a live one.
func (r *Routes) Lookup(partition string) (Route, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[partition]
	if !ok || e.deleted != 0 {
		return Route{}, false
	}
	return e.route(), true
}

// Snapshot returns a copy of every live route.
func (r *Routes) Snapshot() map[string]Route {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]Route, len(r.entries))
	for p, e := range r.entries {
		if e.deleted == 0 {
			out[p] = e.route()
		}
	}
	return out
}

// Watch starts a RouteWatch: C receives an event for every live route at
// once, then one for each change, from local calls and from gossip alike.
// Watching never slows the table down: each watch queues at most one event
// per partition, the latest, and a goroutine of its own hands them to C.
// Stop the watch when done with it. After Close, C is closed at once.
func (r *Routes) Watch() *RouteWatch {
	f := newFeed[string, RouteEvent](nil)
	w := &RouteWatch{C: f.ch, f: f, r: r}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		f.stop()
		return w
	}
	for _, p := range slices.Sorted(maps.Keys(r.entries)) {
		if e := r.entries[p]; e.deleted == 0 {
			f.push(p, RouteEvent{Partition: p, Route: e.route()})
		}
	}
	r.watches[w] = struct{}{}
	return w
}

// close refuses further changes and stops every watch.
func (r *Routes) close() {
	r.mu.Lock()
	r.closed = true
	ws := slices.Collect(maps.Keys(r.watches))
	clear(r.watches)
	r.mu.Unlock()
	for _, w := range ws {
		w.f.stop()
	}
}

// supersedes reports whether in replaces cur in the table, and whether the
// two are conflicting announcements: the same epoch and term with different
// leaders.
func supersedes(in, cur routeEntry) (replace, conflict bool) {
	switch {
	case in.epoch != cur.epoch:
		return in.epoch > cur.epoch, false
	case cur.deleted != 0: // a forgotten epoch stays forgotten
		return false, false
	case in.deleted != 0: // forgetting an epoch beats every term of it
		return true, false
	case in.term != cur.term:
		return in.term > cur.term, false
	default: // same term: the first leader stays
		return false, in.leader != cur.leader
	}
}

// expired reports whether a tombstone made at deleted (Unix ms) is past
// its TTL at now.
func (r *Routes) expired(deleted int64, now time.Time) bool {
	return time.UnixMilli(deleted).Add(r.ttl).Before(now)
}

// applyLocked merges in into partition's entry following supersedes,
// notifies the watches of a change, and, if gossip is set, queues the new
// entry for broadcast. A tombstone past its TTL still removes the route it
// supersedes but is not kept. It reports whether the table changed.
func (r *Routes) applyLocked(partition string, in routeEntry, now time.Time, gossip bool) bool {
	cur, had := r.entries[partition]
	if had {
		replace, conflict := supersedes(in, cur)
		if conflict {
			r.logger.Warn("two leaders announced for the same term; keeping the first",
				"partition", partition, "epoch", in.epoch, "term", in.term, "kept", cur.leader, "ignored", in.leader)
		}
		if !replace {
			return false
		}
	}
	if in.deleted != 0 && r.expired(in.deleted, now) {
		if !had {
			return false
		}
		delete(r.entries, partition)
	} else {
		r.entries[partition] = in
		if gossip {
			r.bcast.QueueBroadcast(&gossipMsg{name: "route:" + partition, msg: encodeRouteMsg(partition, in)})
		}
	}
	var ev RouteEvent
	switch {
	case in.deleted == 0:
		ev = RouteEvent{Partition: partition, Route: in.route()}
	case had && cur.deleted == 0:
		ev = RouteEvent{Partition: partition, Route: Route{Epoch: in.epoch}, Forgotten: true}
	default: // one tombstone replaced another, or none: nothing visible changed
		return true
	}
	for w := range r.watches {
		w.f.push(partition, ev)
	}
	return true
}

// reapLocked drops the tombstones past their TTL.
func (r *Routes) reapLocked(now time.Time) {
	for p, e := range r.entries {
		if e.deleted != 0 && r.expired(e.deleted, now) {
			delete(r.entries, p)
		}
	}
}

// reap drops the tombstones past their TTL.
func (r *Routes) reap(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reapLocked(now)
}

// handleMsg merges one gossiped route (the message without its type byte)
// and passes it on if it changed the table. A message that does not decode
// is logged and dropped.
func (r *Routes) handleMsg(b []byte, now time.Time) {
	p, e, err := decodeRouteMsg(b)
	if err != nil {
		r.logger.Warn("dropping a route message that does not decode", "error", err, "bytes", len(b))
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.applyLocked(p, e, now, true)
	}
}

// localState is the table in the push-pull state format, tombstones past
// their TTL left out. It is nil when the table is empty, or when the
// encoding would exceed maxRouteState, which the peer would refuse along
// with the whole push-pull (membership included).
func (r *Routes) localState(now time.Time) []byte {
	r.mu.Lock()
	r.reapLocked(now)
	if len(r.entries) == 0 {
		r.mu.Unlock()
		return nil
	}
	parts := slices.Sorted(maps.Keys(r.entries))
	entries := make([]routeEntry, len(parts))
	for i, p := range parts {
		entries[i] = r.entries[p]
	}
	r.mu.Unlock()
	b := encodeRouteState(parts, entries)
	if len(b) > maxRouteState {
		r.logger.Error("routing table too large for a push-pull; not sending it",
			"partitions", len(parts), "bytes", len(b), "limit", maxRouteState)
		return nil
	}
	return b
}

// mergeState merges a peer's push-pull state (the bytes after the type
// byte). Nothing is gossiped on: anti-entropy is pairwise. A state that
// does not decode is logged and ignored as a whole.
func (r *Routes) mergeState(b []byte, now time.Time) {
	parts, entries, err := decodeRouteState(b)
	if err != nil {
		r.logger.Warn("ignoring a routing state that does not decode", "error", err, "bytes", len(b))
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	for i, p := range parts {
		r.applyLocked(p, entries[i], now, false)
	}
}

func checkRoute(partition, leader string) error {
	if len(partition) == 0 || len(partition) > MaxGroupIDLen {
		return fmt.Errorf("%w: partition name of %d bytes, want 1..%d", ErrBadRoute, len(partition), MaxGroupIDLen)
	}
	if len(leader) == 0 || len(leader) > maxNodeIDLen {
		return fmt.Errorf("%w: leader id of %d bytes, want 1..%d", ErrBadRoute, len(leader), maxNodeIDLen)
	}
	return nil
}

func describeEntry(e routeEntry) string {
	if e.deleted != 0 {
		return fmt.Sprintf("a tombstone for epoch %d", e.epoch)
	}
	return fmt.Sprintf("leader %s epoch %d term %d", e.leader, e.epoch, e.term)
}

// gossipMsg is a message in the broadcast queue. Its name identifies what
// it is about ("route:" and the partition, "leave:" and the node id): a
// newer message about the same thing replaces a queued older one, so the
// queue holds at most one message per partition and per node. The table
// only queues a route that replaced the one it had, so the newest queued
// message is always the newest route.
type gossipMsg struct {
	name string
	msg  []byte
}

// Invalidates implements memberlist.Broadcast: a message replaces a queued
// one with the same name. (memberlist uses Name for named broadcasts; the
// two agree.)
func (g *gossipMsg) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(*gossipMsg)
	return ok && o.name == g.name
}

// Name implements memberlist.NamedBroadcast.
func (g *gossipMsg) Name() string { return g.name }

// Message implements memberlist.Broadcast.
func (g *gossipMsg) Message() []byte { return g.msg }

// Finished implements memberlist.Broadcast.
func (g *gossipMsg) Finished() {}

// newBroadcastQueue returns the queue of the messages this node gossips,
// with its guard in it.
//
// memberlist's TransmitLimitedQueue orders its items by (transmits, length,
// id) and holds one item per key, and it restarts its id counter whenever
// it becomes empty, including while a new item numbered before the restart
// is being inserted (replacing the only queued message about the same
// partition does that). A later message of the same length then gets the
// same id and silently replaces the first one in the queue: a route that is
// never gossiped. hashicorp/memberlist PR #263 fixes it and is not merged
// as of v0.7.0. The guard stays in the queue for good, so it never becomes
// empty and never restarts its counter; it is longer than any packet, so it
// is never sent.
func newBroadcastQueue(numNodes func() int) *memberlist.TransmitLimitedQueue {
	q := &memberlist.TransmitLimitedQueue{NumNodes: numNodes, RetransmitMult: mlRetransmitMult}
	q.QueueBroadcast(queueGuard{})
	return q
}

// queueGuard is the broadcast that keeps the queue from ever being empty.
type queueGuard struct{}

// guardMsg is longer than any packet memberlist sends (UDPBufferSize is
// 1400 bytes); it is never written to, so its pages are never touched.
var guardMsg = make([]byte, 64<<10)

func (queueGuard) Invalidates(memberlist.Broadcast) bool { return false }
func (queueGuard) Message() []byte                       { return guardMsg }
func (queueGuard) Finished()                             {}
func (queueGuard) UniqueBroadcast()                      {}

// Wire formats. Every gossip message and push-pull state opens with a type
// byte; a node ignores types it does not know.
const (
	msgRoute    byte = 1 // a route: partition, leader, epoch, term, deleted
	msgLeave    byte = 2 // a leave intent: node id, instance
	stateRoutes byte = 1 // push-pull state: the routing table
)

const (
	// maxNodeIDLen is the longest node id (memberlist node name, Raft
	// server id) and leader id.
	maxNodeIDLen = 255
	// maxRouteState bounds the push-pull state: memberlist refuses a
	// remote user state over 20 MiB, and the whole push-pull with it.
	maxRouteState = 16 << 20
	// routeFields is the number of msgpack values of an entry in a state.
	routeFields = 6
)

// encodeRouteMsg encodes one route as a gossip message:
//
//	msgRoute, then msgpack: partition str, leader str ("" for a tombstone),
//	epoch uint, term uint, deleted int
func encodeRouteMsg(partition string, e routeEntry) []byte {
	var buf bytes.Buffer
	buf.WriteByte(msgRoute)
	enc := msgpack.NewEncoder(&buf)
	// Writes to a bytes.Buffer do not fail.
	_ = enc.EncodeString(partition)
	_ = enc.EncodeString(e.leader)
	_ = enc.EncodeUint(e.epoch)
	_ = enc.EncodeUint(e.term)
	_ = enc.EncodeInt(e.deleted)
	return buf.Bytes()
}

// decodeRouteMsg decodes a route message without its type byte.
func decodeRouteMsg(b []byte) (string, routeEntry, error) {
	d := msgpack.NewDecoder(bytes.NewReader(b))
	var e routeEntry
	p, err := d.DecodeString()
	if err == nil {
		e.leader, err = d.DecodeString()
	}
	if err == nil {
		e.epoch, err = d.DecodeUint64()
	}
	if err == nil {
		e.term, err = d.DecodeUint64()
	}
	if err == nil {
		e.deleted, err = d.DecodeInt64()
	}
	if err != nil {
		return "", routeEntry{}, err
	}
	if err := checkEntry(p, e); err != nil {
		return "", routeEntry{}, err
	}
	return p, e, nil
}

// checkEntry validates a decoded entry: a valid partition name, and either
// a valid leader (live) or none and a deletion time (tombstone).
func checkEntry(p string, e routeEntry) error {
	if e.deleted < 0 || (e.deleted == 0) == (e.leader == "") {
		return errors.New("route is neither live nor a tombstone")
	}
	leader := e.leader
	if e.deleted != 0 {
		leader = "-"
	}
	return checkRoute(p, leader)
}

// encodeRouteState encodes the table for a push-pull, partitions sorted:
//
//	stateRoutes, then msgpack:
//	  leaders: array of str, each leader id once
//	  entries: array of N arrays of 6:
//	    shared uint   bytes shared with the previous partition's name
//	    suffix str    the rest of the name
//	    leader int    index in leaders; -1 for a tombstone
//	    epoch uint, term uint, deleted int
//
// Front coding shortens the names, which mostly share a long prefix
// ("persistent://tenant/fabric/stream-partition-"), and interning the
// leader ids leaves a few bytes per entry for the numbers.
func encodeRouteState(parts []string, entries []routeEntry) []byte {
	index := make(map[string]int)
	var leaders []string
	for _, e := range entries {
		if _, ok := index[e.leader]; !ok && e.deleted == 0 {
			index[e.leader] = len(leaders)
			leaders = append(leaders, e.leader)
		}
	}
	var buf bytes.Buffer
	buf.Grow(16 * len(parts))
	buf.WriteByte(stateRoutes)
	enc := msgpack.NewEncoder(&buf)
	_ = enc.EncodeArrayLen(len(leaders))
	for _, l := range leaders {
		_ = enc.EncodeString(l)
	}
	_ = enc.EncodeArrayLen(len(parts))
	prev := ""
	for i, p := range parts {
		e := entries[i]
		shared := commonPrefix(prev, p)
		leader := -1
		if e.deleted == 0 {
			leader = index[e.leader]
		}
		_ = enc.EncodeArrayLen(routeFields)
		_ = enc.EncodeUint(uint64(shared))
		_ = enc.EncodeString(p[shared:])
		_ = enc.EncodeInt(int64(leader))
		_ = enc.EncodeUint(e.epoch)
		_ = enc.EncodeUint(e.term)
		_ = enc.EncodeInt(e.deleted)
		prev = p
	}
	return buf.Bytes()
}

// decodeRouteState decodes a push-pull state without its type byte. Every
// count is checked against the bytes that remain, so garbage cannot make
// it allocate much, and any error rejects the whole state.
func decodeRouteState(b []byte) ([]string, []routeEntry, error) {
	d := msgpack.NewDecoder(bytes.NewReader(b))
	n, err := d.DecodeArrayLen()
	if err != nil {
		return nil, nil, fmt.Errorf("leaders: %w", err)
	}
	if n < 0 || n > len(b) {
		return nil, nil, fmt.Errorf("leaders: bad count %d", n)
	}
	leaders := make([]string, n)
	for i := range leaders {
		if leaders[i], err = d.DecodeString(); err != nil {
			return nil, nil, fmt.Errorf("leader %d: %w", i, err)
		}
	}
	n, err = d.DecodeArrayLen()
	if err != nil {
		return nil, nil, fmt.Errorf("entries: %w", err)
	}
	if n < 0 || n*(routeFields+1) > len(b) {
		return nil, nil, fmt.Errorf("entries: bad count %d", n)
	}
	parts := make([]string, n)
	entries := make([]routeEntry, n)
	var name strings.Builder
	prev := ""
	for i := range parts {
		fields, err := d.DecodeArrayLen()
		if err != nil {
			return nil, nil, fmt.Errorf("entry %d: %w", i, err)
		}
		if fields != routeFields {
			return nil, nil, fmt.Errorf("entry %d: %d fields, want %d", i, fields, routeFields)
		}
		shared, err := d.DecodeUint64()
		if err != nil {
			return nil, nil, fmt.Errorf("entry %d: %w", i, err)
		}
		if shared > uint64(len(prev)) {
			return nil, nil, fmt.Errorf("entry %d: shares %d bytes of a %d-byte name", i, shared, len(prev))
		}
		suffix, err := d.DecodeString()
		if err != nil {
			return nil, nil, fmt.Errorf("entry %d: %w", i, err)
		}
		leader, err := d.DecodeInt64()
		if err != nil {
			return nil, nil, fmt.Errorf("entry %d: %w", i, err)
		}
		var e routeEntry
		if e.epoch, err = d.DecodeUint64(); err == nil {
			if e.term, err = d.DecodeUint64(); err == nil {
				e.deleted, err = d.DecodeInt64()
			}
		}
		if err != nil {
			return nil, nil, fmt.Errorf("entry %d: %w", i, err)
		}
		switch {
		case leader >= 0 && leader < int64(len(leaders)):
			e.leader = leaders[leader]
		case leader != -1:
			return nil, nil, fmt.Errorf("entry %d: leader index %d out of range", i, leader)
		}
		if len(suffix) > MaxGroupIDLen {
			return nil, nil, fmt.Errorf("entry %d: name too long", i)
		}
		name.Reset()
		name.WriteString(prev[:shared])
		name.WriteString(suffix)
		p := name.String()
		if err := checkEntry(p, e); err != nil {
			return nil, nil, fmt.Errorf("entry %d: %w", i, err)
		}
		parts[i], entries[i] = p, e
		prev = p
	}
	return parts, entries, nil
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

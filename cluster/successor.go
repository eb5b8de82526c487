package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// Successors (cluster/DESIGN.md, "Quiet groups"). When a leader's node
// goes, its followers campaign one to two heartbeat timeouts after they
// last heard from it (quiet ones: after they woke) if no leader appears:
// the one whose timer fires first stands, and the other, which still
// knows the old leader until its own timer fires, refuses its pre-vote,
// so the group often waits for both timers, or for an election timeout.
//
// A process that dies on a host that stays up leaves more certain
// evidence than silence: its connections end at once, without a timeout,
// and its port refuses new ones. When both hold, the node marks it gone
// for goneFor, and at once (a quiet tick run then) the followers of its leaders
// agree on one successor per group, the group's voters other than the
// leader hashed as for a first election (elect.go). The successor stands
// at once, as a member told to by its leader's TimeoutNow stands: its
// RequestVote says it is a leadership transfer, which the other voter
// grants though it still knows the old leader, if the candidate's log is
// as long as its own and the term is new. The other followers go on as
// before (quiet ones wake, their timeout counting from the wake). A
// successor that is behind is refused by a follower with a newer log,
// which then stands the same way (standOverLagging); one retired or itself
// gone costs what the others' timeouts cost.
//
// Nothing of Raft's safety changes: a vote is still one per term and for a
// log at least as long, and a commit still needs a majority's appends. The
// transfer mark only skips the check that a voter knows of no leader,
// which keeps a live leader from being disturbed; a successor, or a
// follower that refused a lagging one, stands only when the leader's
// process is gone.
const (
	// goneFor is how long a node stays marked gone after the probe found
	// its port closed, unless something comes from it first (heardFrom).
	goneFor = 10 * time.Second
	// goneProbeTimeout bounds the probe's dial.
	goneProbeTimeout = 500 * time.Millisecond
	// quietStandAfter is how long after its leader's node was found gone
	// a quiet successor stands: busy groups' successors, which stand at
	// once, have their elections first. A node's death starts an election
	// in every group it led, a third of a thousand on two cores, and a
	// busy group's among them took 0.9-1.5 s instead of 0.2 s alone.
	quietStandAfter = 300 * time.Millisecond
)

// goneMark is when a node was first and last found gone.
type goneMark struct{ since, last time.Time }

// maybeGone is told that a connection with the node at from, the peer's
// rounds to this one or this one's to the peer, ended with err. A refused
// dial says the peer's process is gone; another end without a timeout
// (the peer's kernel closed or reset it) makes the node dial the peer's
// Raft port once to find out.
func (h *heartbeats) maybeGone(from string, err error) {
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		return
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		h.markGone(from)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	// Heard while the probe runs (goneProbeTimeout at most): a tick in
	// between would wake the quiet followers on silence, before they
	// could stand as successors.
	start := time.Now()
	h.probing[from] = start
	h.wg.Add(1)
	go h.probe(from, start)
}

// probe dials the node at addr and marks it gone if its port refuses, or
// if the connection it accepted is reset before the node could have timed
// it out: a process being killed may still accept on its port for a
// moment after its connections ended (the kernel closes its sockets one
// by one), and the connections it accepted then are reset with the
// listener. A live node waits for the connection's header (Mux's
// headerTimeout, longer than the probe) and closes nothing.
func (h *heartbeats) probe(addr string, start time.Time) {
	defer h.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), goneProbeTimeout)
	defer cancel()
	go func() {
		select {
		case <-h.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := probePort(ctx, addr, goneProbeTimeout)
	h.logger.Debug("probed a node's Raft port after its connection ended", "node", addr, "error", err, "took", time.Since(start))
	if refusedOrReset(ctx, err) {
		h.markGone(addr) // before the probe ends: the node is never unheard in between
	}
	h.mu.Lock()
	if h.probing[addr].Equal(start) {
		delete(h.probing, addr)
	}
	h.mu.Unlock()
}

// probePort dials addr and waits for the connection to end, readFor at
// most once connected, and until ctx ends: a live node's Raft port holds a
// connection until its header comes (HeaderTimeout), longer than a probe.
func probePort(ctx context.Context, addr string, readFor time.Duration) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		stop := context.AfterFunc(ctx, func() { c.Close() }) // the probe's end, or the node closing
		deadline, _ := ctx.Deadline()
		if d := time.Now().Add(readFor); d.Before(deadline) {
			deadline = d
		}
		if err = c.SetReadDeadline(deadline); err == nil {
			_, err = c.Read(make([]byte, 1))
		}
		stop()
		c.Close()
	}
	return err
}

// refusedOrReset reports whether a probe's error says the process is gone:
// its port refused, or reset the connection it accepted, before the probe
// (ctx) ended.
func refusedOrReset(ctx context.Context, err error) bool {
	var ne net.Error
	reset := errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)
	return (errors.Is(err, syscall.ECONNREFUSED) || reset) && ctx.Err() == nil && !(errors.As(err, &ne) && ne.Timeout())
}

// reportedProbeWindow bounds ProbeReported's wait for a connection its
// port accepted to be reset; its dial may take goneProbeTimeout.
const reportedProbeWindow = 50 * time.Millisecond

// ProbeReported is told that a client could not reach the node at Raft
// address addr (its client port refused the client's connection): this
// node dials addr's Raft port, and marks the node gone, as a connection
// that ended does, when the port refuses or resets the connection within
// reportedProbeWindow of connecting. It reports whether the node is gone,
// found now or before. A client's word alone marks nothing: only the
// port's answer does, so a client cannot make a live node look dead. A
// live node costs the caller a connection and reportedProbeWindow.
func (m *Mux) ProbeReported(ctx context.Context, addr string) bool {
	h := m.hb
	if m.Gone(addr) {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, goneProbeTimeout)
	defer cancel()
	err := probePort(ctx, addr, reportedProbeWindow)
	h.logger.Debug("probed a node's Raft port a client could not reach", "node", addr, "error", err)
	if !refusedOrReset(ctx, err) {
		return false
	}
	h.markGone(addr)
	return true
}

// markGone records that the node at addr refused a connection.
func (h *heartbeats) markGone(addr string) {
	now := time.Now()
	h.mu.Lock()
	m, known := h.gone[addr]
	if !known {
		m.since = now
	}
	m.last = now
	h.gone[addr] = m
	h.goneCount.Store(int32(len(h.gone)))
	h.mu.Unlock()
	if !known {
		h.logger.Info("a node's Raft port refuses connections after its connection ended: its groups' successors stand", "node", addr)
		// The awake groups' successors stand at once rather than at the
		// next tick, up to quietTick later: a tenth of a second off
		// every failover of a busy partition whose leader's process died.
		select {
		case h.kick <- struct{}{}:
		default: // a tick is due anyway
		}
	}
}

// forgetGone clears the gone mark of the node at addr. The caller holds
// h.mu.
func (h *heartbeats) forgetGone(addr string) {
	if _, ok := h.gone[addr]; !ok {
		return
	}
	delete(h.gone, addr)
	h.goneCount.Store(int32(len(h.gone)))
}

// heardFrom is told that something came from the node at addr (a Raft
// address): an answer to this node's round, an RPC of one of its groups.
// Its process is there, so it is not gone any more: marked gone when it
// died and restarted since, a group it leads again would otherwise be
// taken from it by a successor standing against a live leader, until
// goneFor ran out (a stream created right after a node's restart had a
// partition elected twice and leaderless for 2.7 s). Free while no node
// is gone: it runs for every RPC a group receives.
func (h *heartbeats) heardFrom(addr string) {
	if addr == "" || h.goneCount.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forgetGone(addr)
}

// succeed is the quiet tick's for a follower quiet under the node at
// under, whose process is gone: it stands at once if it is its group's
// successor (stand); otherwise it wakes, and campaigns one heartbeat
// timeout after the wake, as a follower that woke on silence does, unless
// it refused a lagging successor's vote (standOverLagging).
func (g *voteGate) succeed(under string) {
	r := g.raft.Load()
	if r == nil {
		return
	}
	if !g.stand(r, under) {
		g.wake(under, true)
		g.standOverLagging()
	}
}

// succeedAwake is the tick's for a follower that is not quiet while some
// nodes are gone: it stands if its leader is on one of them and it is its
// group's successor, or over a lagging successor whose vote it refused
// (standOverLagging); otherwise its own timeout runs on, as before.
func (g *voteGate) succeedAwake(r *raft.Raft, gone map[string]time.Time) {
	if addr, _ := r.LeaderWithID(); addr != "" && !gone[string(addr)].IsZero() && g.stand(r, string(addr)) {
		return
	}
	g.standOverLagging() // its leader may be forgotten: it refused a newer term's vote
}

// stand makes this follower stand for election now, as a member told to
// by its leader's TimeoutNow does, if its leader is at under and it is
// its group's successor; it reports whether it stood (or a stand is under
// way). A quiet successor keeps its quiet timeouts until it is a
// candidate (the next tick gives its own back): lowered first, they made
// Raft look at its last contact at once, find it old, and stand on its
// own, with a pre-vote its peer refused while it still knew the old
// leader.
func (g *voteGate) stand(r *raft.Raft, under string) bool {
	addr, id := r.LeaderWithID()
	if string(addr) != under || id == "" || g.retired.Load() || g.mux.hb.leaving.Load() || successor(g.group, r, id) != g.local {
		return false
	}
	if g.timeoutNow(addr, id) {
		g.mux.hb.stoodForGone.Add(1)
	}
	return true
}

// timeoutNow hands Raft a TimeoutNow as if from its leader id at addr:
// Raft stands at once, its vote requests marked as a leadership transfer.
// It reports whether it handed one over (not when one is under way, or
// the gate closes).
func (g *voteGate) timeoutNow(addr raft.ServerAddress, id raft.ServerID) bool {
	if !g.standing.CompareAndSwap(false, true) {
		return false // handed over, not taken yet
	}
	answered := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{
		Command: &raft.TimeoutNowRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte(addr)},
		},
		RespChan: answered,
	}
	g.quiet.mu.Lock()
	defer g.quiet.mu.Unlock()
	if g.quiet.closed {
		g.standing.Store(false)
		return false
	}
	g.wg.Add(1)
	go func() { // Raft's main loop takes it when it is free
		defer g.wg.Done()
		select {
		case g.out <- rpc:
			select { // answered once Raft is a candidate
			case <-answered:
			case <-g.stop:
			}
		case <-g.stop:
		}
		g.standing.Store(false)
	}()
	return true
}

// watchVote passes a vote request on to Raft; one marked as a leadership
// transfer it watches (standOverLagging).
func (g *voteGate) watchVote(rpc raft.RPC, req *raft.RequestVoteRequest) raft.RPC {
	r := g.raft.Load()
	if !req.LeadershipTransfer || r == nil {
		return rpc
	}
	// The leader known before Raft takes the request: a vote request of a
	// newer term makes Raft forget it.
	refused := &refusedTransfer{req: *req} // Raft is done with req once it answered, the watcher not
	refused.leaderAddr, refused.leaderID = r.LeaderWithID()
	return g.watch(rpc, func(a raft.RPCResponse) {
		if resp, ok := a.Response.(*raft.RequestVoteResponse); ok && a.Error == nil && !resp.Granted && refused.leaderAddr != "" {
			g.refusedTransfer.Store(refused)
			g.standOverLagging()
		}
	})
}

// refusedTransfer is a vote request marked as a leadership transfer that
// a member refused, with the leader it knew then.
type refusedTransfer struct {
	req        raft.RequestVoteRequest
	leaderAddr raft.ServerAddress
	leaderID   raft.ServerID
}

// standOverLagging makes a follower whose leader's process is gone stand
// now, after it refused the vote of a successor (a vote request marked as
// a leadership transfer) whose log is behind its own, when that successor
// cannot be elected without this vote (a group of three): this follower,
// which heard from the leader within its heartbeat timeout, would
// otherwise stand only when that timeout ran out. A busy partition's
// successor one entry behind the other follower (its last append had
// reached only that one when the leader's process died) made a failover
// take 3.3 s instead of 20 ms in the 1,000-partition benchmark. The
// follower stands as the successor does, through a TimeoutNow, so that
// the lagging successor, a candidate that knows no leader, grants it. It
// runs when the vote is refused and at the ticks while nodes are gone:
// this node may find the leader's process gone after the successor did.
//
// In a larger group the successor may still be elected by the others, and
// several voters may refuse it: they agree on an order over the voters
// other than the candidate and the gone leader (the group's hash first,
// then by id), and each waits aheadStagger for each place before it, and
// one more when the successor can still win, then stands only while the
// election it refused is still the latest it knows (its term unchanged:
// no refuser stood and no leader was elected since). At most once a
// heartbeat timeout.
func (g *voteGate) standOverLagging() {
	rt := g.refusedTransfer.Load()
	r := g.raft.Load()
	if rt == nil || !g.mayStandOver(r, rt) {
		return
	}
	now, last := time.Now().UnixNano(), g.aheadAt.Load()
	if now-last < int64(g.quiet.base.HeartbeatTimeout) || !g.aheadAt.CompareAndSwap(last, now) {
		return
	}
	g.refusedTransfer.CompareAndSwap(rt, nil)
	place, voters := refuserPlace(g.group, r, g.local, raft.ServerID(rt.req.ID), rt.leaderID)
	if place < 0 {
		return
	}
	if voters-2 >= voters/2+1 {
		place++ // the successor can win without this vote: give it the time
	}
	if place == 0 {
		if g.timeoutNow(rt.leaderAddr, rt.leaderID) {
			g.mux.hb.stoodOverLagging.Add(1)
		}
		return
	}
	g.after(time.Duration(place)*aheadStagger(g.quiet.base.HeartbeatTimeout), func() {
		if g.mayStandOver(r, rt) && g.timeoutNow(rt.leaderAddr, rt.leaderID) {
			g.mux.hb.stoodOverLagging.Add(1)
		}
	})
}

// refuserPlace returns self's place among the voters of r's configuration
// other than candidate and leader, in the order refusers agree on (first
// over them, then the others by id after it, wrapping round), -1 if self is
// not among them; and how many voters the configuration has.
func refuserPlace(group string, r *raft.Raft, self, candidate, leader raft.ServerID) (place, voters int) {
	f := r.GetConfiguration() // answered at once, from memory
	if f.Error() != nil {
		return -1, 0
	}
	return placeAmong(group, f.Configuration().Servers, self, candidate, leader)
}

// placeAmong is refuserPlace over servers.
func placeAmong(group string, servers []raft.Server, self, candidate, leader raft.ServerID) (place, voters int) {
	var rest []raft.ServerID
	for _, s := range servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if s.ID != candidate && s.ID != leader {
			rest = append(rest, s.ID)
		}
	}
	slices.Sort(rest)
	me := slices.Index(rest, self)
	if me < 0 {
		return -1, voters
	}
	start := slices.Index(rest, first(group, rest))
	return (me - start + len(rest)) % len(rest), voters
}

// after runs fn once wait has passed, on a goroutine the gate's Close
// waits for and stops, unless the gate is closing: callers outside the
// gate's own goroutines (the node's ticks) may race with Close.
func (g *voteGate) after(wait time.Duration, fn func()) {
	g.quiet.mu.Lock()
	defer g.quiet.mu.Unlock()
	if g.quiet.closed {
		return
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
			fn()
		case <-g.stop:
		}
	}()
}

// mayStandOver reports whether r may stand over the candidate of a
// transfer vote it refused: r is a follower, not retired and not on a
// stopping node, that knows no leader or the one it knew then, whose node
// is gone; it is still in the term of the request, and its log is newer
// than the candidate's.
func (g *voteGate) mayStandOver(r *raft.Raft, rt *refusedTransfer) bool {
	if r == nil || r.State() != raft.Follower || g.retired.Load() || g.mux.hb.leaving.Load() {
		return false
	}
	if addr, _ := r.LeaderWithID(); (addr != "" && addr != rt.leaderAddr) || !g.mux.Gone(string(rt.leaderAddr)) {
		return false
	}
	st := r.Stats() // from memory; only after a refused transfer vote
	term, err1 := strconv.ParseUint(st["term"], 10, 64)
	lastIndex, err2 := strconv.ParseUint(st["last_log_index"], 10, 64)
	lastTerm, err3 := strconv.ParseUint(st["last_log_term"], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || term != rt.req.Term {
		return false
	}
	return lastTerm > rt.req.LastLogTerm || (lastTerm == rt.req.LastLogTerm && lastIndex > rt.req.LastLogIndex)
}

// Leave tells the mux that its node is stopping: its quiet followers no
// longer stand as successors of a gone leader (they wake as on silence),
// so that a cluster stopped all at once does not elect on its way down.
func (m *Mux) Leave() { m.hb.leaving.Store(true) }

// successor returns the voter of r's configuration that stands first when
// leader goes: the group's hash over the other voters' ids (first); empty
// when the configuration cannot be read or leaves no voter.
func successor(group string, r *raft.Raft, leader raft.ServerID) raft.ServerID {
	id, leaderVotes := firstBut(group, r, leader)
	if !leaderVotes {
		return ""
	}
	return id
}

// LeaderGone reports whether the leader this member knows is on a node
// whose process this node found gone (its connections ended and its port
// refuses): the group is electing its successor, and the leader it names
// is no use to a client.
func (g *Group) LeaderGone() bool {
	addr, _ := g.raft.LeaderWithID()
	return addr != "" && g.gate.mux.Gone(string(addr))
}

// transferSilentAfter is how long a node whose last heartbeat round
// failed must have answered none to be silent to a leadership transfer
// (reachable).
const transferSilentAfter = 2 * time.Second

// reachable reports whether a leadership transfer to a member on the node
// at Raft address addr could finish: the node is not gone, and it is not
// silent — its last heartbeat round from this node failed (timed out, or
// its connection broke) and none succeeded for transferSilentAfter. A
// round still waiting for its answer is not silence: under a burst of
// elections a live node answers rounds seconds late, and a SIGTERM's
// hand-over must still reach it. hashicorp/raft's transfer first waits
// for the target to hold the leader's whole log, and refuses every
// proposal of the group meanwhile, up to its election timeout: a transfer
// to a node whose process died a moment ago (gossip still counts it
// alive, and a new leader's first entry is not on it) made a partition
// refuse its sends for 4 s at fabriqd's timings.
func (m *Mux) reachable(addr string) bool {
	if m.Gone(addr) {
		return false
	}
	h := m.hb
	h.mu.Lock()
	p := h.peers[addr]
	h.mu.Unlock()
	if p == nil {
		return true // no rounds to it: nothing known against it
	}
	ok, fail := p.lastOK.Load(), p.lastFail.Load()
	return fail <= ok || time.Since(time.Unix(0, ok)) < transferSilentAfter
}

// Gone reports whether this node found the process of the node at Raft
// address addr gone, and has heard nothing from it since (see LeaderGone).
func (m *Mux) Gone(addr string) bool {
	h := m.hb
	if h.goneCount.Load() == 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, gone := h.gone[addr]
	return gone
}

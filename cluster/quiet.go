package cluster

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Quiet groups (cluster/DESIGN.md, "Quiet groups"). A leader whose group
// has had no proposal for quietAfter goes quiet: it marks its heartbeats
// quiet, and a follower that takes a quiet heartbeat stretches its own
// heartbeat timeout to quietFollowerTimeout, and says so. From then on the
// leader answers most of its own heartbeats to that follower itself —
// while a round to the follower's node succeeded within four fifths of
// its lease — and
// lets one through every quietRealEvery. The followers' nodes watch the
// leader's node instead: heartbeat rounds (pings when there is nothing
// else) come every pingEvery, and a follower whose leader's node has been
// silent for quietWakeAfter, or whose connection closed, takes its normal
// timeout back, counted from then: it campaigns if the silence lasts
// another heartbeat timeout. Its node tells the leader's, whose leader
// then heartbeats it for real again, so that a moment of silence (a node
// held up) elects nobody.
// A proposal wakes the group: the leader's heartbeats are real and not
// quiet again, and each follower takes its normal timeout back with the
// first one.
const (
	// quietAfter is how long a leader's group has had no proposal before
	// it goes quiet.
	quietAfter           = 2 * time.Second
	quietRealEvery       = 2 * time.Second
	quietFollowerTimeout = 10 * time.Second
	// pingEvery is how often a node sends each other an empty round when
	// it has no heartbeat for it: four in a quietWakeAfter. (100 ms at
	// first: ten rounds a second each way per pair of nodes, which the
	// quiet leaders' real heartbeats ride, for nothing.)
	pingEvery      = 250 * time.Millisecond
	quietWakeAfter = time.Second
	// quietTick is how often the node looks at its groups: which leaders
	// go quiet, which followers wake.
	quietTick = 100 * time.Millisecond
)

// quietState is a group's side of quiet groups, kept by its gate.
type quietState struct {
	// base are the heartbeat and election timeouts of the group's
	// configuration: what a member goes back to when it wakes.
	base raft.ReloadableConfig
	// lease is the group's LeaderLeaseTimeout: a quiet leader heartbeats
	// every 0.3 to 0.6 of it (quietLeaderTimeout).
	lease time.Duration
	// lastActive is when the group last proposed (UnixNano), or when
	// this member began to lead, if later; 0: never. lastProposed is
	// when it last proposed an entry for the FSM (proposed), 0: never.
	lastActive, lastProposed atomic.Int64
	// leading is set while this member leads quietly.
	leading atomic.Bool
	// wasLeader: the last tick found this member leading (tick's alone).
	wasLeader bool
	// quietSince: when the ticks first found this member following
	// quietly, in the spell that goes on; zero when it does not.
	// streamsClosed: it closed its connections in that spell
	// (closeQuietStreams). Tick's alone.
	quietSince    time.Time
	streamsClosed bool

	mu sync.Mutex
	// acked, on a quiet leader: the followers that took a quiet heartbeat
	// of this term, and when the last real one went.
	acked map[raft.ServerID]quietAck
	// waking, on a leader woken from quiet: the followers that took its
	// quiet heartbeats and have not taken a real one since, by ID, with
	// their node's Raft address. Each wakes with its first real
	// heartbeat; those left when this member stops leading or closes are
	// told to wake (tellWaking), or they would wait out their stretched
	// timeout while their node still hears this one.
	waking map[raft.ServerID]string
	// hasWaking is set while waking may hold followers: the tick looks
	// at it without the lock.
	hasWaking atomic.Bool
	// under, on a quiet follower: the Raft address of the leader's node it
	// is quiet under; empty when not quiet.
	under string
	// closed: the gate is closing; no refresh starts.
	closed bool
}

type quietAck struct {
	term     uint64
	addr     string // the follower's node
	lastReal time.Time
	// refreshing: a real heartbeat to the follower is under way
	// (refresh).
	refreshing bool
}

// active records a proposal: a quiet leader wakes. Its followers wake
// with its next heartbeats, which are real and not quiet: after Raft took
// one, so that a woken follower does not find its last contact old.
func (g *voteGate) active() {
	g.quiet.lastActive.Store(time.Now().UnixNano())
	if g.quiet.leading.Load() {
		g.stopLeadingQuietly(false)
	}
}

// proposed records a proposal of an entry for the FSM (an apply, a
// barrier), which also makes the group active: the group is in use
// (pipeline.closeAfter). Membership changes, transfers and a bootstrap
// only make it active.
func (g *voteGate) proposed() {
	g.quiet.lastProposed.Store(time.Now().UnixNano())
	g.active()
}

// leadQuietly makes this leader quiet: its heartbeats are marked quiet,
// and come every 0.3 to 0.6 of the lease instead of every tenth to fifth
// of the heartbeat timeout (most of them answered locally, quiet.go): its
// heartbeat timeout is three leases.
func (g *voteGate) leadQuietly(r *raft.Raft) {
	g.quiet.mu.Lock()
	defer g.quiet.mu.Unlock()
	rc := g.quiet.base
	if g.quiet.lease > 0 {
		rc.HeartbeatTimeout = max(rc.HeartbeatTimeout, 3*g.quiet.lease)
		rc.ElectionTimeout = max(rc.HeartbeatTimeout, rc.ElectionTimeout)
	}
	if rc == g.quiet.base || g.reload(r, rc) {
		g.quiet.leading.Store(true)
	}
}

// stopLeadingQuietly ends quiet leading: every heartbeat is real and not
// quiet again, at the normal pace. The followers that were quiet wait for
// their first real heartbeat to wake (waking). With tell (this member
// stops leading, or closes), they are told to wake with the next round to
// their node instead: there will be no heartbeat to wake them.
func (g *voteGate) stopLeadingQuietly(tell bool) {
	g.quiet.mu.Lock()
	g.quiet.leading.Store(false)
	if len(g.quiet.acked) > 0 && g.quiet.waking == nil {
		g.quiet.waking = make(map[raft.ServerID]string, len(g.quiet.acked))
	}
	for id, a := range g.quiet.acked {
		g.quiet.waking[id] = a.addr
	}
	g.quiet.hasWaking.Store(len(g.quiet.waking) > 0)
	g.quiet.acked = nil
	if r := g.raft.Load(); r != nil && g.quiet.under == "" {
		g.reload(r, g.quiet.base) // lowering the timeout makes Raft heartbeat at once
	}
	g.quiet.mu.Unlock()
	if tell {
		g.tellWaking()
	}
}

// tookReal records that follower id took a real heartbeat of this
// leader's: it is awake.
func (g *voteGate) tookReal(id raft.ServerID) {
	if !g.quiet.hasWaking.Load() {
		return
	}
	g.quiet.mu.Lock()
	g.awake(id)
	g.quiet.mu.Unlock()
}

// awake forgets follower id among the waking: it took a heartbeat of
// this leader's since. The quiet state's lock is held.
func (g *voteGate) awake(id raft.ServerID) {
	delete(g.quiet.waking, id)
	g.quiet.hasWaking.Store(len(g.quiet.waking) > 0)
}

// tellWaking tells the followers that were quiet under this member and
// have not taken a real heartbeat since (waking) to wake, with the next
// round to their node: this member no longer leads, or closes, so no
// heartbeat of its will wake them. (Only a woken leader's quiet
// followers were told at first: a proposal that woke a group a moment
// before its leader's copy stopped — its disk full — left a follower not
// yet reached by a real heartbeat quiet, refusing the other's votes for
// the 10–20 s of its stretched timeout.)
func (g *voteGate) tellWaking() {
	if !g.quiet.hasWaking.Load() {
		return
	}
	g.quiet.mu.Lock()
	waking := g.quiet.waking
	g.quiet.waking = nil
	g.quiet.hasWaking.Store(false)
	g.quiet.mu.Unlock()
	if g.sleeping() {
		return // its followers are put to sleep instead (sleep.go)
	}
	for _, addr := range waking {
		if p := g.mux.hb.peer(addr); p != nil {
			p.wakeLater(g.group)
		}
	}
}

// answerLocally answers a heartbeat of a quiet leader to follower id at
// target itself, when the follower took a quiet heartbeat of this term, a
// round to its node succeeded within quietRealEvery, and a real heartbeat
// went within twice that. Once one went more than quietRealEvery ago, the
// next is sent in the background (refresh) while this one is answered
// here: sent in Raft's heartbeat goroutine, a real heartbeat held it for
// a whole round, which on two cores saturated by a few busy partitions
// took 300–800 ms, and every quiet leader whose two followers' real
// heartbeats fell in such rounds lost its 500 ms lease at once: an
// election storm. (Within four fifths of the lease at first, then within
// quietRealEvery, with each real heartbeat in Raft's goroutine.)
func (g *voteGate) answerLocally(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) bool {
	if !g.quiet.leading.Load() {
		return false
	}
	every := g.mux.hb.realEvery
	fresh := g.mux.hb.fresh(string(target), every)
	g.quiet.mu.Lock()
	a, ok := g.quiet.acked[id]
	since := time.Since(a.lastReal)
	local := ok && fresh && a.term == args.Term && since < 2*every
	refresh := local && since >= every && !a.refreshing && !g.quiet.closed
	if refresh {
		a.refreshing = true
		g.quiet.acked[id] = a
		req := *args
		g.wg.Add(1) // under quiet.mu, which Close takes before it waits
		go g.refresh(id, target, &req)
	}
	g.quiet.mu.Unlock()
	if !local {
		return false
	}
	*resp = raft.AppendEntriesResponse{
		RPCHeader: raft.RPCHeader{ProtocolVersion: args.ProtocolVersion, ID: []byte(id), Addr: []byte(target)},
		Term:      args.Term,
		Success:   true,
	}
	g.mux.hb.local.Add(1)
	return true
}

// refresh sends a quiet leader's real heartbeat to follower id in the
// background and records its outcome (heard).
func (g *voteGate) refresh(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest) {
	defer g.wg.Done()
	var resp raft.AppendEntriesResponse
	acked, err := g.mux.hb.beat(g, string(target), string(id), req, &resp, true, true)
	g.heard(id, target, req.Term, acked, err)
}

// heard records a real heartbeat's outcome on a quiet leader: a follower
// that took it quiet is acked; one that answered otherwise (not quiet, a
// newer term, no such member) is forgotten, and its next heartbeats are
// real. No answer at all (a round that failed, a node too busy to hand
// the heartbeat over in time, a closing gate) changes nothing but lets
// the next heartbeat try again: answerLocally stops answering for the
// follower once rounds to its node fail for quietRealEvery, or no real
// heartbeat went through for twice that. (Forgotten on no answer too at
// first: under load, rounds answered "busy" and every quiet leader's
// heartbeats went real and slow at once.)
func (g *voteGate) heard(id raft.ServerID, target raft.ServerAddress, term uint64, acked bool, err error) {
	g.quiet.mu.Lock()
	defer g.quiet.mu.Unlock()
	if errors.Is(err, errUnanswered) || errors.Is(err, ErrClosed) {
		if a, ok := g.quiet.acked[id]; ok {
			a.refreshing = false
			g.quiet.acked[id] = a
		}
		return
	}
	if err != nil || !acked || !g.quiet.leading.Load() {
		delete(g.quiet.acked, id)
		return
	}
	if g.quiet.acked == nil {
		g.quiet.acked = make(map[raft.ServerID]quietAck)
	}
	g.quiet.acked[id] = quietAck{term: term, addr: string(target), lastReal: time.Now()}
	g.awake(id) // acked again, told if this member stops
}

// followQuietly makes this member quiet under the leader's node at from,
// after it took a quiet heartbeat: its heartbeat timeout is stretched.
func (g *voteGate) followQuietly(from string) bool {
	r := g.raft.Load()
	if r == nil || from == "" {
		return false
	}
	g.quiet.mu.Lock()
	defer g.quiet.mu.Unlock()
	if g.quiet.under == from {
		return true
	}
	rc := g.quiet.base
	rc.HeartbeatTimeout = max(g.mux.hb.followerTimeout, rc.HeartbeatTimeout)
	// Raft wants the election timeout no shorter; a quiet member that
	// campaigns wakes at the next tick and has its own back.
	rc.ElectionTimeout = max(rc.HeartbeatTimeout, rc.ElectionTimeout)
	if !g.reload(r, rc) {
		return false
	}
	g.quiet.under = from
	return true
}

// wake gives this member its normal timeouts back, and reports whether it
// woke. Only a member quiet under from (any, when from is empty) wakes. With silent (the leader's
// node has gone silent), the follower's heartbeat timeout counts from now:
// it campaigns if the silence lasts another heartbeat timeout, as an awake
// follower does, rather than at once on a last contact up to
// quietRealEvery old. A node held up for half a second otherwise had both
// followers of each group it led campaign together, and they elected.
func (g *voteGate) wake(from string, silent bool) bool {
	g.quiet.mu.Lock()
	if g.quiet.under == "" || (from != "" && g.quiet.under != from) {
		g.quiet.mu.Unlock()
		return false
	}
	r := g.raft.Load()
	if r != nil && silent {
		// Before the timeout is lowered: Raft looks at its last contact
		// as soon as it is, and one up to quietRealEvery old would make
		// it stand at once (and, its peer still knowing the leader, have
		// its pre-vote refused and wait out an election timeout).
		g.contactNow(r)
	}
	woke := r != nil && g.reload(r, g.quiet.base)
	if woke {
		g.quiet.under = ""
	}
	g.quiet.mu.Unlock()
	if woke && silent {
		// The leader, if it is there, wakes: its heartbeats are real
		// and at the normal pace again, well within this follower's
		// heartbeat timeout.
		if p := g.mux.hb.peer(from); p != nil && from != "" {
			p.wokeLater(g.group)
		}
	}
	return woke
}

// contactNow has a follower's Raft take a heartbeat of its leader's, as
// it knows them: its last contact is now. Nothing else changes: the term
// is its own, and a member that is not a follower of a known leader is
// left alone.
func (g *voteGate) contactNow(r *raft.Raft) {
	fn := g.heartbeatHandler()
	addr, id := r.LeaderWithID()
	if fn == nil || addr == "" || r.State() != raft.Follower {
		return
	}
	ae := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte(addr)},
		Term:      r.CurrentTerm(),
	}
	fn(raft.RPC{Command: ae, RespChan: make(chan raft.RPCResponse, 1)})
}

// quietUnder returns the leader's node this member is quiet under.
func (g *voteGate) quietUnder() string {
	g.quiet.mu.Lock()
	defer g.quiet.mu.Unlock()
	return g.quiet.under
}

// reload sets the heartbeat and election timeouts of rc, keeping the
// other reloadable settings as they are. The caller holds quiet.mu.
func (g *voteGate) reload(r *raft.Raft, rc raft.ReloadableConfig) bool {
	cur := r.ReloadableConfig()
	cur.HeartbeatTimeout, cur.ElectionTimeout = rc.HeartbeatTimeout, rc.ElectionTimeout
	if err := r.ReloadConfig(cur); err != nil {
		g.mux.hb.logger.Warn("could not change a group's heartbeat timeout", "group", g.group, "error", err)
		return false
	}
	return true
}

// closeQuietStreams closes the connections a member that follows quietly
// holds, once it has followed quietly for twice pipelineIdleClose: by
// then its leader has closed its pipelines, and its own connections
// serve nobody. A leader closes its own when its pipelines close for
// idleness (idled); a follower's are those of its appends from when it
// led, which NetworkTransport pools and never closes, each with 256 KiB
// at both ends (its votes and TimeoutNow went on connections of their
// own, oneshot.go; pooled, they came to 290 MB of a node's heap after a
// restart and the leadership balancing that follows). Closing
// them also ends the connections the member accepted, each after its
// next request, which is why it waits for its leader's pipelines to
// close first: under a leader whose node is older than ProtocolCatchUp,
// which never closes them and sends an idle append every second, it keeps
// them. under is the Raft address of the leader's node it follows quietly
// under ("" when it does not), follower whether it follows.
func (g *voteGate) closeQuietStreams(now time.Time, under string, follower bool) {
	q := &g.quiet
	switch {
	case under == "" || !follower:
		q.quietSince, q.streamsClosed = time.Time{}, false
	case q.quietSince.IsZero():
		q.quietSince = now
	case !q.streamsClosed && g.mux.hb.pipelineIdleClose > 0 && now.Sub(q.quietSince) >= 2*g.mux.hb.pipelineIdleClose:
		// Once a spell, not every tick: gossip answers under a lock,
		// scanning the members.
		q.streamsClosed = true
		if g.mux.Protocol(under) >= ProtocolCatchUp {
			g.idled()
		}
	}
}

// tick decides, for one group, whether its leader goes quiet or stops,
// and whether a quiet member wakes: it is not a follower any more, or the
// leader's node has been silent for quietWakeAfter (it is not in heard,
// heartbeats.heard), or gone for quietStandAfter (gone holds when nodes
// were found gone; it stands if it is the successor, or if it refused a
// lagging successor's vote).
func (g *voteGate) tick(now time.Time, heard map[string]bool, gone map[string]time.Time) {
	r := g.raft.Load()
	if r == nil {
		return
	}
	state := r.State()
	switch {
	case state == raft.Leader && !g.quiet.wasLeader:
		// A new leader's group is idle from now on, not from its last
		// proposal under another leader.
		g.quiet.lastActive.Store(now.UnixNano())
	case state == raft.Leader:
		last := g.quiet.lastActive.Load()
		if after := g.mux.hb.quietAfter; after > 0 && !g.quiet.leading.Load() && now.Sub(time.Unix(0, last)) >= after {
			g.leadQuietly(r)
		}
	case g.quiet.leading.Load():
		g.stopLeadingQuietly(true)
	default:
		g.tellWaking() // a woken leader that lost its leadership
	}
	g.quiet.wasLeader = state == raft.Leader
	if len(gone) > 0 {
		g.rearrange(now, gone)
	}
	under := g.quietUnder()
	g.closeQuietStreams(now, under, state == raft.Follower)
	if under == "" {
		if len(gone) > 0 && state == raft.Follower {
			g.succeedAwake(r, gone)
		}
		return
	}
	switch {
	case state != raft.Follower:
		g.wake(under, false)
	case !gone[under].IsZero():
		if now.Sub(gone[under]) >= quietStandAfter {
			g.succeed(under)
		}
	case !heard[under]:
		g.wake(under, true)
	}

}

package cluster

import (
	"hash/fnv"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// First elections (cluster/DESIGN.md, "First elections"). A group that
// opens with no leader — just bootstrapped, or opened again by a node that
// restarted — waits a heartbeat timeout (1–2 s at fabriqd's 1 s) before
// one of its members stands, and its members may stand together and split
// the vote. Instead, the group's voters agree on one of them, first (the
// group id's hash over their sorted ids), and that member stands as soon
// as another voter has the group open too: every other voter tells the
// first one's node when it opens the group, in a heartbeat round within
// the heartbeat window. The others keep their heartbeat timeout, so a
// first member that is down, or whose log is behind, costs what it costs
// without this. A member that knows of a leader never stands early.
const (
	// firstWithin is how long after it opened a first member still stands
	// on a notice, and how long a notice waits for the first member to
	// open the group.
	firstWithin = 30 * time.Second
	// openNoticesMax bounds the notices waiting for their first member.
	openNoticesMax = 4096
)

// first returns the member of voters that stands first in group.
func first(group string, voters []raft.ServerID) raft.ServerID {
	ids := slices.Clone(voters)
	slices.Sort(ids)
	h := fnv.New32a()
	h.Write([]byte(group))
	return ids[h.Sum32()%uint32(len(ids))]
}

// arrangeElection arranges the first election of a group that opened with
// servers as its configuration and knows no leader: this member stands
// once another voter has the group open, if it is the group's first;
// otherwise it tells the first member's node that it has the group open.
func (g *Group) arrangeElection(servers []Server) {
	defer g.gate.arranged.Store(true)
	var voters []raft.ServerID
	addrOf := map[raft.ServerID]string{}
	for _, s := range servers {
		if s.Voter {
			voters = append(voters, raft.ServerID(s.ID))
			addrOf[raft.ServerID(s.ID)] = s.Address
		}
	}
	self := raft.ServerID(g.nodeID)
	if len(voters) < 2 || !slices.Contains(voters, self) {
		return
	}
	lead := first(g.id, voters)
	if g.gate.mux.Gone(addrOf[lead]) {
		// Its node's process was found gone: the group could wait for
		// it until a timeout. The other voters, whose nodes found it
		// gone too, agree on the first among the rest (a sleeping group
		// woken after a node died; sleep.go).
		alive := slices.DeleteFunc(slices.Clone(voters), func(id raft.ServerID) bool { return id != self && g.gate.mux.Gone(addrOf[id]) })
		if len(alive) >= 2 {
			lead = first(g.id, alive)
		}
	}
	if lead == self {
		g.gate.firstHere(time.Now())
		return
	}
	addr := addrOf[lead]
	g.gate.toldFirst.Store(&toldFirst{addr: addr, until: time.Now().Add(firstWithin)})
	if !g.gate.tellOpened(addr) {
		g.tellOpenedOnceKnown(addr)
	}
}

// firstHere makes this member its group's first: it stands once another
// voter has the group open, within firstWithin of now.
func (g *voteGate) firstHere(now time.Time) {
	g.firstUntil.Store(now.Add(firstWithin).UnixNano())
	if g.mux.hb.takeOpened(g.group) {
		g.standFirst()
	}
}

// toldFirst is the first member a member told it opened its group.
type toldFirst struct {
	addr  string
	until time.Time
}

// rearrange, at a tick, tells another first member that this member has
// its group open, when the one it told is on a node found gone since and
// the group still knows no leader: a group woken (sleep.go) a moment
// after a node's process died, before this node found it gone, told that
// node, while the others, which had found it gone, agreed on another
// first member and waited for a notice until a heartbeat timeout.
func (g *voteGate) rearrange(now time.Time, gone map[string]time.Time) {
	t := g.toldFirst.Load()
	if t == nil {
		return
	}
	if _, ok := gone[t.addr]; !ok {
		if now.After(t.until) {
			g.toldFirst.CompareAndSwap(t, nil)
		}
		return
	}
	if !g.toldFirst.CompareAndSwap(t, nil) {
		return
	}
	r := g.raft.Load()
	if r == nil || r.State() != raft.Follower {
		return
	}
	if addr, _ := r.LeaderWithID(); addr != "" {
		return
	}
	f := r.GetConfiguration() // answered at once, from memory
	if f.Error() != nil {
		return
	}
	var alive []raft.ServerID
	addrOf := map[raft.ServerID]string{}
	for _, s := range f.Configuration().Servers {
		if _, down := gone[string(s.Address)]; s.Suffrage == raft.Voter && (s.ID == g.local || !down) {
			alive = append(alive, s.ID)
			addrOf[s.ID] = string(s.Address)
		}
	}
	if len(alive) < 2 || !slices.Contains(alive, g.local) {
		return
	}
	if lead := first(g.group, alive); lead == g.local {
		g.firstHere(now)
	} else {
		g.tellOpened(addrOf[lead])
	}
}

// tellOpened tells the first member's node at addr, in its next heartbeat
// round, that this member has the group open, if that node speaks
// ProtocolCatchUp; it reports whether gossip has told what the node
// speaks (false: nothing was done).
func (g *voteGate) tellOpened(addr string) bool {
	switch proto := g.mux.Protocol(addr); {
	case proto == ProtocolUnknown:
		return false
	case proto >= ProtocolCatchUp:
		if p := g.mux.hb.peer(addr); p != nil {
			p.openedLater(g.group)
		}
	}
	return true
}

// openedPoll is how often a notice that waits for gossip looks again.
const openedPoll = 50 * time.Millisecond

// tellOpenedOnceKnown tells the first member's node at addr that this
// member has the group open, as soon as gossip has told what that node
// speaks, within firstWithin. The metadata group opens before its node
// joins the cluster: a member that skipped the notice then left the
// first member of a cluster restarted at once to wait its heartbeat
// timeout, and the whole cluster with it (every node ready 2.3–2.9 s after
// the restart instead of 40 ms, in 3 of a dozen runs of the
// 1,000-partition benchmark). Its goroutine is one of the group's waiters
// and ends with the group's Raft (down).
func (g *Group) tellOpenedOnceKnown(addr string) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.waiters.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.waiters.Done()
		poll := time.NewTicker(openedPoll)
		defer poll.Stop()
		giveUp := time.NewTimer(firstWithin)
		defer giveUp.Stop()
		for {
			select {
			case <-g.down:
				return
			case <-giveUp.C:
				return
			case <-poll.C:
				if g.gate.tellOpened(addr) {
					return
				}
			}
		}
	}()
}

// standFirst makes this member stand for election now, if it is its
// group's first member, opened within firstWithin, and knows of no leader.
// Lowering Raft's heartbeat timeout wakes its follower loop at once, which
// stands when it has heard from no leader within the timeout: so the
// timeout is raised, then set back.
func (g *voteGate) standFirst() {
	until := g.firstUntil.Swap(0)
	r := g.raft.Load()
	if until == 0 || time.Now().UnixNano() > until || r == nil || r.State() != raft.Follower {
		return
	}
	if addr, _ := r.LeaderWithID(); addr != "" {
		return
	}
	g.quiet.mu.Lock()
	defer g.quiet.mu.Unlock()
	if g.quiet.under != "" {
		return
	}
	if g.kick(r) {
		g.mux.hb.stoodFirst.Add(1)
	}
}

// kick wakes Raft's follower loop now: it stands if it heard from no
// leader within its heartbeat timeout. Lowering the timeout wakes the
// loop, so it is raised, then set back. The caller holds quiet.mu.
func (g *voteGate) kick(r *raft.Raft) bool {
	cur := r.ReloadableConfig()
	up := cur
	up.HeartbeatTimeout = 2 * cur.HeartbeatTimeout
	up.ElectionTimeout = max(up.ElectionTimeout, up.HeartbeatTimeout)
	return g.reload(r, up) && g.reload(r, cur)
}

// watchPreVote passes a pre-vote request of candidate's on to Raft and
// watches its answer (standAhead).
func (g *voteGate) watchPreVote(rpc raft.RPC, candidate raft.ServerID) raft.RPC {
	return g.watch(rpc, func(a raft.RPCResponse) {
		if resp, ok := a.Response.(*raft.RequestPreVoteResponse); ok && a.Error == nil && !resp.Granted {
			g.standAhead(candidate)
		}
	})
}

// watch returns rpc with its answer passed on to the asker, then to
// answered. The caller is the gate's loop.
func (g *voteGate) watch(rpc raft.RPC, answered func(raft.RPCResponse)) raft.RPC {
	answer := make(chan raft.RPCResponse, 1)
	to := rpc.RespChan
	rpc.RespChan = answer
	g.wg.Add(1) // on the loop's goroutine, which Close waits for
	go func() {
		defer g.wg.Done()
		select {
		case a := <-answer:
			select {
			case to <- a:
			case <-g.stop:
				return
			}
			answered(a)
		case <-g.stop:
		}
	}()
	return rpc
}

// standAhead makes a follower that knows no leader stand, after it
// refused candidate's pre-vote: Raft refuses one, when no leader is known,
// to a candidate whose log (or term) is older than its own, and that
// candidate will not be elected. Without it, a first member whose log was
// behind (a node that was down while its groups went on, then a restart
// of every node) had its pre-vote refused and waited an election timeout
// (4-8 s at fabriqd's default), and the others their heartbeat timeouts:
// a restart of 1,000 partitions took 16 s where one whose copies were
// even took 6. At most once a heartbeat timeout.
//
// Every voter that refused stands, so they agree on an order: the group's
// hash over the voters other than the candidate (firstBut) stands at once,
// the others aheadStagger later if they still know no leader. Standing
// together, two refusers each voted for themselves in the same term and
// the group waited out an election timeout (a restart of 1,000
// partitions: a tenth of the groups led 7-10 s late). A refuser that
// granted the first one's vote has heard from a candidate within its
// heartbeat timeout (Raft counts a granted vote as contact) and does not
// stand.
func (g *voteGate) standAhead(candidate raft.ServerID) {
	r := g.raft.Load()
	if !g.mayStandAhead(r) {
		return
	}
	now, last := time.Now().UnixNano(), g.aheadAt.Load()
	if now-last < int64(g.quiet.base.HeartbeatTimeout) || !g.aheadAt.CompareAndSwap(last, now) {
		return
	}
	if first, _ := firstBut(g.group, r, candidate); first == g.local {
		g.kickAhead(r)
		return
	}
	g.after(aheadStagger(g.quiet.base.HeartbeatTimeout), func() {
		if g.mayStandAhead(r) {
			g.kickAhead(r)
		}
	})
}

// aheadStagger is how long a voter that refused a pre-vote, and is not the
// refusers' first, waits before it stands: half a heartbeat timeout, long
// enough for the first one's pre-vote and vote to reach it. Refusers of a
// lagging successor's vote wait it once per place (standOverLagging).
func aheadStagger(heartbeatTimeout time.Duration) time.Duration { return heartbeatTimeout / 2 }

// mayStandAhead reports whether r is a follower, not retired and not on a
// stopping node, that knows no leader.
func (g *voteGate) mayStandAhead(r *raft.Raft) bool {
	if r == nil || r.State() != raft.Follower || g.retired.Load() || g.mux.hb.leaving.Load() {
		return false
	}
	addr, _ := r.LeaderWithID()
	return addr == ""
}

// kickAhead makes r stand now (standAhead).
func (g *voteGate) kickAhead(r *raft.Raft) {
	g.quiet.mu.Lock()
	defer g.quiet.mu.Unlock()
	if g.quiet.under != "" || g.quiet.closed {
		return
	}
	if g.kick(r) {
		g.mux.hb.stoodAhead.Add(1)
	}
}

// firstBut returns first over the voters of r's configuration other than
// but, and whether but is a voter; empty when the configuration cannot be
// read or leaves no other voter.
func firstBut(group string, r *raft.Raft, but raft.ServerID) (id raft.ServerID, butVotes bool) {
	f := r.GetConfiguration() // answered at once, from memory
	if f.Error() != nil {
		return "", false
	}
	var voters []raft.ServerID
	for _, s := range f.Configuration().Servers {
		switch {
		case s.Suffrage != raft.Voter:
		case s.ID == but:
			butVotes = true
		default:
			voters = append(voters, s.ID)
		}
	}
	if len(voters) == 0 {
		return "", butVotes
	}
	return first(group, voters), butVotes
}

// openedThere records that a member on another node opened group with no
// leader known: the group's first member here stands, or, not open yet,
// stands when it opens (takeOpened).
func (h *heartbeats) openedThere(group string) {
	g := h.gate(group)
	if g != nil && g.settled() {
		return
	}
	if g == nil {
		h.mux.askedOf(group) // asleep here: it wakes, and finds the notice
	}
	now := time.Now()
	h.mu.Lock()
	if len(h.opens) >= openNoticesMax {
		// Full: the expired go (takeOpened ignores them anyway), and
		// while none has expired, new notices are not kept.
		for grp, at := range h.opens {
			if now.Sub(at) > firstWithin {
				delete(h.opens, grp)
			}
		}
	}
	if len(h.opens) < openNoticesMax {
		h.opens[group] = now
	}
	h.mu.Unlock()
	// After the notice is recorded: a first member that opens meanwhile
	// finds it there, or is found here.
	if g = h.gate(group); g != nil && g.firstUntil.Load() != 0 && h.takeOpened(group) {
		g.standFirst()
	}
}

// settled reports whether this member, open, waits for no notice: it
// arranged its group's first election (arrangeElection, when the group
// opened with a configuration or was bootstrapped), and it is not
// a first member waiting to stand (it stood, or knew its leader, or was
// not the first). A notice that comes then (the second voter's, after the
// first member stood on the first's) is for no one; kept, it made the
// member stand the moment it opened the group again within firstWithin,
// before the other members had, and its pre-vote failed on their closed
// copies: the group waited out its election timeout.
func (g *voteGate) settled() bool {
	return g.arranged.Load() && g.firstUntil.Load() == 0
}

// takeOpened reports, and forgets, whether another node opened group
// within firstWithin.
func (h *heartbeats) takeOpened(group string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	at, ok := h.opens[group]
	delete(h.opens, group)
	return ok && time.Since(at) <= firstWithin
}

package cluster

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"
)

// HeartbeatGroup is the group id under which a node's Mux carries the
// heartbeats of every Raft group between two nodes (see Heartbeats),
// instead of a Raft group's connections.
const HeartbeatGroup = "_hb"

const (
	// heartbeatWindow is how long a heartbeat waits for others to the same
	// node before they leave together: a frame per pair of nodes and
	// window, whatever the number of groups. A leader heartbeats each
	// follower every tenth to fifth of the heartbeat timeout (50–100 ms at
	// fabriqd's 500 ms), and holds its lease while a majority answered
	// within LeaderLeaseTimeout (fabriqd: 250 ms); the window stretches
	// the gap between a follower's heartbeats to 125 ms at most.
	heartbeatWindow = 25 * time.Millisecond
	// heartbeatMaxBatch bounds the heartbeats of one frame; more wait for
	// the next round.
	heartbeatMaxBatch = 8192
	// heartbeatRoundTimeout bounds a round: writing a frame and reading
	// its answer. A peer that takes longer loses its connection, and the
	// round's heartbeats fail as they would on a group's own connection.
	heartbeatRoundTimeout = transportTimeout
	// heartbeatIdle ends a peer's sender (and closes its connection) after
	// this long without a heartbeat to send; the receiving side closes a
	// connection silent for twice as long.
	heartbeatIdle = time.Minute
)

// errHeartbeatsClosed fails the heartbeats of a closed mux.
var errHeartbeatsClosed = fmt.Errorf("cluster: heartbeats: %w", ErrClosed)

// errUnanswered marks a heartbeat whose member did not answer: the round
// failed or timed out, or the member's node was too busy to hand it over
// in time. The member may be as it was; an answer says how it is.
var errUnanswered = errors.New("no answer")

// heartbeats carries the heartbeats of every Raft group between this node
// and each other node over one connection per pair of nodes, as
// CockroachDB coalesces its ranges' heartbeats. hashicorp/raft sends a
// heartbeat per follower of each group it leads every tenth of the
// heartbeat timeout, each an RPC on the group's own connection: with
// hundreds of groups per node, the system calls and wake-ups of those RPCs
// alone kept a core busy. Here a group's heartbeat joins a queue per
// destination node; every heartbeatWindow the queue leaves as one frame,
// the receiving node hands each heartbeat to its group's Raft (the fast
// path Raft gives its transport, SetHeartbeatHandler) and answers them in
// one frame, and each group's Raft gets its own follower's answer, as
// before. Nothing of Raft changes: each follower still hears from its own
// leader, each answer is the follower's own, and a group whose member is
// not on the receiving node (another member at the address) is refused,
// as the mux refuses its connections. Only heartbeats travel together:
// entries, votes and snapshots keep the group's own connections.
//
// A node sends a group's heartbeats this way only to a node that speaks
// ProtocolHeartbeats (gossip tells); to an older one, on the group's own
// connections as before.
type heartbeats struct {
	mux    *Mux
	layer  *Layer
	logger *slog.Logger
	window time.Duration
	// The quiet groups' timings (quiet.go); tests shorten them. tickEvery
	// is quietTick, read when the mux starts.
	quietAfter, realEvery, followerTimeout, tickEvery time.Duration
	// idleAppendEvery is how often an idle leader's append that tells
	// nothing new still goes to a node that speaks ProtocolCatchUp
	// (idleAppendCatchUpEvery; pipeline.go); tests lengthen it.
	idleAppendEvery time.Duration
	// pipelineIdleClose is how long a pipeline to a node that speaks
	// ProtocolCatchUp stays open with nothing sent (pipeline.go), and
	// pipelineUnusedClose how long when its group has had no proposal for
	// pipelineInUse; tests change them.
	pipelineIdleClose, pipelineUnusedClose, pipelineInUse time.Duration

	done chan struct{}
	wg   sync.WaitGroup
	// kick runs a tick at once (ticks): a node was just found gone, and
	// its groups' successors need not wait for the next tick to stand.
	kick chan struct{}

	// self is this node's Raft address as its groups advertise it (from
	// their heartbeats): a round says whom it is from.
	self atomic.Pointer[string]

	mu    sync.Mutex
	gates map[string]*voteGate // by group id: where received heartbeats go
	peers map[string]*hbPeer   // by Raft address: senders
	seen  map[string]time.Time // by Raft address: the last round received from that node
	// busy counts, by Raft address, the rounds from that node being
	// answered: a node this one owes an answer is not silent.
	busy   map[string]int
	closed bool

	// deaf, when set (UnixNano), makes every other node silent to this
	// one's quiet followers until then, though their rounds arrive and
	// are answered: tests make a moment of silence with it.
	deaf atomic.Int64
	// busyFrom, when set, is a node whose real (not quiet) heartbeats this
	// one answers busy, as when too many of its deliveries are under way:
	// tests keep a follower from taking its woken leader's heartbeats
	// with it.
	busyFrom atomic.Pointer[string]

	// opens are the groups other nodes opened with no leader known,
	// waiting for their first member here to open (elect.go).
	opens map[string]time.Time
	// gone are the nodes, by Raft address, whose connection ended without
	// a timeout and whose port then refused a connection: their process
	// is gone (successor.go). Anything from the node clears it: a round,
	// an answered round, an RPC of one of its groups (heardFrom).
	gone map[string]goneMark
	// goneCount is len(gone), read without the lock by heardFrom.
	goneCount atomic.Int32
	// probing holds, by Raft address, when the latest probe started
	// (successor.go): the node is heard for as long as a probe may take.
	probing map[string]time.Time
	// leaving is set when the node stops (Mux.Leave).
	leaving atomic.Bool

	sent, frames, delivered, refused atomic.Int64
	// stoodFirst counts the first members that stood at once (elect.go);
	// late the heartbeats their follower took late (errHeartbeatLate);
	// stoodForGone the successors that stood for a leader whose process
	// was gone, stoodOverLagging the followers that stood over a lagging
	// one (successor.go).
	stoodFirst, late, stoodForGone, stoodAhead, stoodOverLagging atomic.Int64
	// idleAppends counts the appends that told a follower nothing new,
	// not sent (pipeline.go); local the heartbeats answered locally.
	idleAppends, local atomic.Int64
	// pipelines counts the transport pipelines open now (pipeline.go).
	pipelines atomic.Int64
}

// HeartbeatStats counts what a node's coalesced heartbeats did since the
// mux started.
type HeartbeatStats struct {
	// Sent is the heartbeats this node's groups sent, and Frames the
	// frames that carried them.
	Sent, Frames int64
	// Delivered is the heartbeats received and handed to a group here;
	// Refused those for a group or member this node does not run.
	Delivered, Refused int64
	// IdleAppendsSkipped is the appends this node's groups, leading an
	// idle group, did not send because they told the follower nothing
	// new (see cluster/DESIGN.md).
	IdleAppendsSkipped int64
	// PipelinesOpen is the pipelines, one connection each, that this
	// node's leaders hold open to followers now; an idle group's close
	// (pipelineIdleClose).
	PipelinesOpen int64
	// AnsweredLocally is the heartbeats of quiet leaders answered on this
	// node (quiet.go); QuietLeaders and QuietFollowers the members that
	// lead and follow quietly now.
	AnsweredLocally              int64
	QuietLeaders, QuietFollowers int
	// StoodFirst is the members of groups opened here with no leader
	// known that stood at once, as their group's first member, when
	// another voter had the group open (elect.go). Late is the
	// heartbeats this node's leaders sent whose follower took them after
	// the round's answer, counted as contact (errHeartbeatLate).
	StoodFirst, Late int64
	// StoodForGone is the followers here that stood for election at once,
	// as their group's successor, when the process of their leader's node
	// was gone (successor.go).
	StoodForGone int64
	// StoodAhead is the members here that stood for election at once,
	// knowing no leader, after they refused a voter's pre-vote: their log
	// was newer than the candidate's (elect.go).
	StoodAhead int64
	// StoodOverLagging is the followers here that stood for election at
	// once, their leader's process gone, after they refused the vote of
	// a successor whose log was behind theirs (successor.go).
	StoodOverLagging int64
}

// HeartbeatStats returns what the mux's coalesced heartbeats did.
func (m *Mux) HeartbeatStats() HeartbeatStats {
	h := m.hb
	s := HeartbeatStats{
		Sent: h.sent.Load(), Frames: h.frames.Load(), Delivered: h.delivered.Load(), Refused: h.refused.Load(),
		IdleAppendsSkipped: h.idleAppends.Load(), AnsweredLocally: h.local.Load(), StoodFirst: h.stoodFirst.Load(), Late: h.late.Load(), StoodForGone: h.stoodForGone.Load(), StoodAhead: h.stoodAhead.Load(),
		StoodOverLagging: h.stoodOverLagging.Load(), PipelinesOpen: h.pipelines.Load(),
	}
	for _, g := range h.registered() {
		if g.quiet.leading.Load() {
			s.QuietLeaders++
		}
		if g.quietUnder() != "" {
			s.QuietFollowers++
		}
	}
	return s
}

// hbRequest is one group's heartbeat in a frame: what hashicorp/raft puts
// in a heartbeat's AppendEntriesRequest (every other field is zero), and
// the group and member it is for.
type hbRequest struct {
	// Quiet: the leader leads quietly (quiet.go).
	Quiet   bool   `msgpack:"q,omitempty"`
	Group   string `msgpack:"g"`
	Member  string `msgpack:"m"`
	Version int    `msgpack:"v"`
	ID      []byte `msgpack:"i"`
	Addr    []byte `msgpack:"a"`
	Leader  []byte `msgpack:"l,omitempty"`
	Term    uint64 `msgpack:"t"`
}

// hbResult is a follower's answer to one heartbeat, or Err.
type hbResult struct {
	// Quiet: the follower took a quiet heartbeat and follows quietly.
	Quiet          bool   `msgpack:"q,omitempty"`
	Err            string `msgpack:"e,omitempty"`
	Version        int    `msgpack:"v"`
	ID             []byte `msgpack:"i"`
	Addr           []byte `msgpack:"a"`
	Term           uint64 `msgpack:"t"`
	LastLog        uint64 `msgpack:"l"`
	Success        bool   `msgpack:"s"`
	NoRetryBackoff bool   `msgpack:"n,omitempty"`
	// Behind: the follower holds entries it has not applied, so it may
	// not know that they are committed; its leader's next append goes
	// even when it tells nothing new (ProtocolCatchUp, pipeline.go).
	Behind bool `msgpack:"c,omitempty"`
}

// hbFrame is a round's request: whom it is from (a Raft address), the
// heartbeats, the groups whose quiet followers on the receiving node are
// to wake (their leader here stopped leading quietly), and those whose
// followers here woke.
type hbFrame struct {
	From  string      `msgpack:"f"`
	Beats []hbRequest `msgpack:"b"`
	Wake  []string    `msgpack:"w,omitempty"`
	// Woke are the groups whose quiet followers on the sending node woke
	// because the receiving node was silent: their leader here is to
	// heartbeat them for real again (quiet.go).
	Woke []string `msgpack:"k,omitempty"`
	// Opened are the groups the sending node opened with no leader known,
	// whose first member is on the receiving node (elect.go;
	// ProtocolCatchUp).
	Opened []string `msgpack:"o,omitempty"`
	// Sleep are the groups whose leader on the sending node put them to
	// sleep, and Rouse those whose member on the receiving node is to
	// wake (sleep.go; ProtocolSleep).
	Sleep []hbSleep `msgpack:"s,omitempty"`
	Rouse []string  `msgpack:"r,omitempty"`
}

// isHeartbeat reports whether an AppendEntries request is a heartbeat, as
// NetworkTransport tells them (and nothing else is set).
func isHeartbeat(a *raft.AppendEntriesRequest) bool {
	//lint:ignore SA1019 hashicorp/raft still fills the field Leader
	leader := a.Leader
	return a.Term != 0 && (len(a.Addr) > 0 || len(leader) > 0) &&
		a.PrevLogEntry == 0 && a.PrevLogTerm == 0 && len(a.Entries) == 0 && a.LeaderCommitIndex == 0
}

func newHeartbeats(m *Mux, layer *Layer) *heartbeats {
	return &heartbeats{
		mux:                 m,
		layer:               layer,
		logger:              m.logger.With("component", "raft-heartbeats"),
		window:              heartbeatWindow,
		quietAfter:          quietAfter,
		realEvery:           quietRealEvery,
		followerTimeout:     quietFollowerTimeout,
		tickEvery:           quietTick,
		kick:                make(chan struct{}, 1),
		idleAppendEvery:     idleAppendCatchUpEvery,
		pipelineIdleClose:   pipelineIdleClose,
		pipelineUnusedClose: pipelineUnusedClose,
		pipelineInUse:       pipelineInUse,
		done:                make(chan struct{}),
		gates:               make(map[string]*voteGate),
		peers:               make(map[string]*hbPeer),
		seen:                make(map[string]time.Time),
		busy:                make(map[string]int),
		opens:               make(map[string]time.Time),
		gone:                make(map[string]goneMark),
		probing:             make(map[string]time.Time),
	}
}

// start runs the accept loop and the quiet groups' ticks; close stops them.
func (h *heartbeats) start() {
	h.wg.Add(2)
	go h.accept()
	go h.ticks()
}

// ticks runs every group's quiet tick (quiet.go) every tickEvery, and at
// once when kicked.
func (h *heartbeats) ticks() {
	defer h.wg.Done()
	t := time.NewTicker(h.tickEvery)
	defer t.Stop()
	tick := func(now time.Time) {
		heard, gone := h.heard(now)
		for _, g := range h.registered() {
			g.tick(now, heard, gone)
		}
	}
	for {
		select {
		case now := <-t.C:
			tick(now)
		case <-h.kick:
			tick(time.Now())
		case <-h.done:
			return
		}
	}
}

// registered returns the gates that receive heartbeats here.
func (h *heartbeats) registered() []*voteGate {
	h.mu.Lock()
	defer h.mu.Unlock()
	gs := make([]*voteGate, 0, len(h.gates))
	for _, g := range h.gates {
		gs = append(gs, g)
	}
	return gs
}

// fresh reports whether a round to the node at addr succeeded within
// within.
func (h *heartbeats) fresh(addr string, within time.Duration) bool {
	h.mu.Lock()
	p := h.peers[addr]
	h.mu.Unlock()
	return p != nil && time.Since(time.Unix(0, p.lastOK.Load())) < within
}

// heard returns the Raft addresses of the nodes this one has heard from
// as of now: a round from the node arrived within quietWakeAfter, or is
// being answered, on a connection still open. The node waits for each
// round's answer before it sends the next: a round this node is slow to
// answer (a burst of new terms, each written to disk) is not the other
// node's silence. One look for every group of a tick: asked once per
// quiet follower, under the lock the rounds take, it was a tenth of an
// idle node's CPU.
func (h *heartbeats) heard(now time.Time) (heard map[string]bool, gone map[string]time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	heard = make(map[string]bool, len(h.seen))
	for addr, m := range h.gone {
		if now.Sub(m.last) > goneFor {
			h.forgetGone(addr)
			continue
		}
		if gone == nil {
			gone = make(map[string]time.Time, len(h.gone))
		}
		gone[addr] = m.since
	}
	if now.UnixNano() < h.deaf.Load() {
		return heard, gone
	}
	for addr, t := range h.seen {
		if h.busy[addr] > 0 || now.Sub(t) < quietWakeAfter {
			heard[addr] = true
		}
	}
	for addr, t := range h.probing {
		if now.Sub(t) < goneProbeTimeout {
			heard[addr] = true
		}
	}
	return heard, gone
}

// close stops every sender and receiver, failing the heartbeats waiting,
// and waits for their goroutines.
func (h *heartbeats) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.done)
	h.mu.Unlock()
	h.layer.Close() // ends accept, and every connection, dialled or accepted
	h.wg.Wait()
}

// register makes g the receiver of its group's heartbeats on this node.
func (h *heartbeats) register(group string, g *voteGate) {
	h.mu.Lock()
	h.gates[group] = g
	h.mu.Unlock()
}

// gate returns the gate that receives group's heartbeats here, nil if none.
func (h *heartbeats) gate(group string) *voteGate {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gates[group]
}

// unregister forgets g, if it is still its group's receiver; a nil g,
// whatever receives the group's heartbeats (its layer closed).
func (h *heartbeats) unregister(group string, g *voteGate) {
	h.mu.Lock()
	if g == nil || h.gates[group] == g {
		delete(h.gates, group)
	}
	h.mu.Unlock()
}

// beat sends the heartbeat of g, this node's member of a group, to
// member of the group at addr, a node's Raft address, and fills resp with
// the member's answer; quiet marks it a quiet leader's, and acked says
// the member follows quietly. A lazy heartbeat (a quiet leader's real one,
// sent in the background) starts no round of its own: it leaves with the
// next, a ping at the latest. The gate closing gives up the wait.
func (h *heartbeats) beat(g *voteGate, addr, member string, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, quiet, lazy bool) (acked bool, err error) {
	group := g.group
	if self := h.self.Load(); (self == nil || *self != string(args.Addr)) && len(args.Addr) > 0 {
		a := string(args.Addr)
		h.self.Store(&a)
	}
	c := &hbCall{
		req: hbRequest{
			Quiet: quiet, Group: group, Member: member, Version: int(args.ProtocolVersion),
			ID: args.ID, Addr: args.Addr, Term: args.Term,
		},
		done: make(chan hbOutcome, 1),
	}
	//lint:ignore SA1019 hashicorp/raft still fills the field, and reads it when Addr is empty
	c.req.Leader = args.Leader
	p := h.peer(addr)
	if p == nil {
		return false, errHeartbeatsClosed
	}
	p.enqueue(c, lazy)
	h.sent.Add(1)
	t := time.NewTimer(heartbeatRoundTimeout + h.window)
	defer t.Stop()
	var o hbOutcome
	select {
	case o = <-c.done:
	case <-t.C:
		return false, fmt.Errorf("cluster: heartbeat to %s: %w in %s", addr, errUnanswered, heartbeatRoundTimeout)
	case <-h.done:
		return false, errHeartbeatsClosed
	case <-g.stop:
		return false, errHeartbeatsClosed
	}
	if o.err != nil {
		return false, fmt.Errorf("%w: %w", errUnanswered, o.err)
	}
	if o.res.Err == errHeartbeatLate {
		// The follower's node handed the heartbeat to the follower, which
		// takes it once it has written the new term: it is there, and
		// hears its leader. Counted as contact, so that a leader whose
		// followers are slow, not gone, keeps its lease. Taken as a
		// failure, after a restart of every node (each follower writing
		// hundreds of new terms at once) leaders lost their lease by the
		// thousand, and every new election wrote more terms.
		*resp = raft.AppendEntriesResponse{
			RPCHeader: raft.RPCHeader{ProtocolVersion: args.ProtocolVersion, ID: []byte(member), Addr: []byte(addr)},
			Term:      args.Term,
			Success:   true,
		}
		h.late.Add(1)
		return false, nil
	}
	if o.res.Err == errHeartbeatBusy {
		return false, fmt.Errorf("cluster: heartbeat to %s: %w: %s", addr, errUnanswered, o.res.Err)
	}
	if o.res.Err != "" {
		return false, fmt.Errorf("cluster: heartbeat to %s: %s", addr, o.res.Err)
	}
	if o.res.Term > args.Term {
		// hashicorp/raft's heartbeat takes any answer as contact, even
		// one from a follower that has moved on to a newer term. Failing
		// it instead lets the leader's lease lapse when a majority has:
		// it steps down within LeaderLeaseTimeout, as it would on the
		// idle appends the pipeline no longer sends (pipeline.go).
		return false, fmt.Errorf("cluster: heartbeat to %s: member %s of group %s is at term %d, this leader at %d", addr, member, group, o.res.Term, args.Term)
	}
	if o.res.Success {
		if g.quiet.leading.Load() {
			// Only a quiet leader may sleep (sleep.go): a busy one's
			// heartbeats record nothing.
			g.sawFollower(raft.ServerID(member), args.Term, o.res.LastLog, o.res.Behind)
		}
		// A follower that holds entries it has not applied, or fewer
		// than this leader (one whose log was lost), needs an append:
		// an idle group sends none otherwise (pipeline.go).
		if o.res.Behind || g.lacks(o.res.LastLog) {
			g.catchUp(raft.ServerID(member))
		}
	}
	*resp = raft.AppendEntriesResponse{
		RPCHeader:      raft.RPCHeader{ProtocolVersion: raft.ProtocolVersion(o.res.Version), ID: o.res.ID, Addr: o.res.Addr},
		Term:           o.res.Term,
		LastLog:        o.res.LastLog,
		Success:        o.res.Success,
		NoRetryBackoff: o.res.NoRetryBackoff,
	}
	return o.res.Quiet && o.res.Success, nil
}

// peer returns the sender to addr, starting it if needed; nil once closed.
func (h *heartbeats) peer(addr string) *hbPeer {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	p := h.peers[addr]
	if p == nil {
		p = &hbPeer{h: h, addr: addr, wake: make(chan struct{}, 1)}
		h.peers[addr] = p
		h.wg.Add(1)
		go p.run()
	}
	return p
}

// hbCall is a heartbeat waiting for its answer.
type hbCall struct {
	req  hbRequest
	done chan hbOutcome // buffered: an answer nobody waits for any more is dropped
}

type hbOutcome struct {
	res hbResult
	err error
}

// hbPeer sends the heartbeats to one node: a round every window while
// there are some, one round at a time, on one connection.
type hbPeer struct {
	h    *heartbeats
	addr string
	wake chan struct{}
	// lastOK is when a round last succeeded, lastFail when one last
	// failed (UnixNano).
	lastOK, lastFail atomic.Int64

	mu    sync.Mutex
	queue []*hbCall
	notes hbNotes
}

// hbNotes are what a round tells besides its heartbeats (hbFrame).
type hbNotes struct {
	wake   []string  // groups whose quiet followers there are to wake
	woke   []string  // groups whose followers here woke, their leader there
	opened []string  // groups opened here whose first member is there
	sleep  []hbSleep // groups put to sleep here, with a follower there
	rouse  []string  // groups whose member there is to wake
}

// wakeLater tells the node's quiet followers of group to wake, with the
// next round (a ping at the latest).
func (p *hbPeer) wakeLater(group string) {
	p.note(func(n *hbNotes) { n.wake = append(n.wake, group) }, false)
}

// wokeLater tells the node that group's follower here woke, with the next
// round (a ping at the latest).
func (p *hbPeer) wokeLater(group string) {
	p.note(func(n *hbNotes) { n.woke = append(n.woke, group) }, false)
}

// openedLater tells the node, with a round within the heartbeat window,
// that group's member here opened it with no leader known: the group's
// first member there stands (elect.go).
func (p *hbPeer) openedLater(group string) {
	// Within the window, not at the next ping: a first election waits
	// on it.
	p.note(func(n *hbNotes) { n.opened = append(n.opened, group) }, true)
}

// note adds to what the next round tells (add runs under the peer's
// lock); with soon, that round leaves within the heartbeat window rather
// than with the next ping.
func (p *hbPeer) note(add func(*hbNotes), soon bool) {
	p.mu.Lock()
	add(&p.notes)
	p.mu.Unlock()
	if !soon {
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// takeNotes returns what the next round tells besides its heartbeats, and
// forgets it.
func (p *hbPeer) takeNotes() hbNotes {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.notes
	p.notes = hbNotes{}
	return n
}

// enqueue queues a heartbeat for the next round, and starts one within
// the window unless lazy. Quiet leaders' real heartbeats, a third of a
// second each for a thousand groups, went in a round every window (25 ms)
// per peer; lazy, they ride the pings.
func (p *hbPeer) enqueue(c *hbCall, lazy bool) {
	p.mu.Lock()
	p.queue = append(p.queue, c)
	p.mu.Unlock()
	if lazy {
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns the queued heartbeats, heartbeatMaxBatch at most.
func (p *hbPeer) take() []*hbCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := min(len(p.queue), heartbeatMaxBatch)
	calls := p.queue[:n:n]
	p.queue = p.queue[n:]
	if len(p.queue) == 0 {
		p.queue = nil
	}
	return calls
}

// run is the peer's sender. It ends when the heartbeats close, or after
// heartbeatIdle without a heartbeat (the next one starts a new sender).
// Between heartbeats it pings every pingEvery: an empty round, which tells
// the other node this one is there (quiet followers watch for it) and
// this one that the other answers (quiet leaders answer for it).
func (p *hbPeer) run() {
	h := p.h
	defer h.wg.Done()
	var conn *hbConn
	defer func() {
		if conn != nil {
			conn.Close()
		}
		for _, c := range p.take() {
			c.done <- hbOutcome{err: errHeartbeatsClosed}
		}
	}()
	idle := time.NewTimer(heartbeatIdle)
	defer idle.Stop()
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	window := time.NewTimer(0)
	<-window.C
	var lastRound time.Time
	for {
		select {
		case <-p.wake:
			window.Reset(h.window)
			select {
			case <-window.C:
			case <-h.done:
				return
			}
			idle.Reset(heartbeatIdle)
		case <-ping.C:
			if time.Since(lastRound) < pingEvery {
				continue
			}
		case <-idle.C:
			if p.retire() {
				return
			}
			idle.Reset(heartbeatIdle)
			continue
		case <-h.done:
			return
		}
		// At least one round: a ping when nothing is queued.
		for calls, first := p.take(), true; first || len(calls) > 0; calls, first = p.take(), false {
			if len(calls) > 0 {
				idle.Reset(heartbeatIdle) // lazy heartbeats come without a wake
			}
			var err error
			if conn == nil {
				if conn, err = p.dial(); errors.Is(err, syscall.ECONNREFUSED) {
					h.maybeGone(p.addr, err) // nothing listens there: the process is gone
				}
			}
			if err == nil {
				h.frames.Add(1)
				err = conn.round(calls, h.self.Load(), p.takeNotes())
				if err != nil {
					conn.Close()
					conn = nil
					h.maybeGone(p.addr, err) // a reset connection: is the process there?
				}
			}
			lastRound = time.Now()
			if err == nil {
				p.lastOK.Store(lastRound.UnixNano())
				h.heardFrom(p.addr) // it answered: its process is there
				continue
			}
			p.lastFail.Store(lastRound.UnixNano())
			h.logger.Debug("heartbeat round failed", "peer", p.addr, "heartbeats", len(calls), "error", err)
			for _, c := range calls {
				c.done <- hbOutcome{err: fmt.Errorf("cluster: heartbeat to %s: %w", p.addr, err)}
			}
		}
	}
}

// retire removes an idle peer from the senders; false if a heartbeat
// arrived meanwhile.
func (p *hbPeer) retire() bool {
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) > 0 {
		return false
	}
	delete(p.h.peers, p.addr)
	return true
}

func (p *hbPeer) dial() (*hbConn, error) {
	c, err := p.h.layer.Dial(raft.ServerAddress(p.addr), heartbeatRoundTimeout)
	if err != nil {
		return nil, err
	}
	return &hbConn{Conn: c, r: bufio.NewReader(c)}, nil
}

// hbConn is a sender's connection. A frame is u32 length, u64 round
// number, then the msgpack array of the round's requests (or, answering,
// of their results, in the same order).
type hbConn struct {
	net.Conn
	r      *bufio.Reader
	rounds uint64 // the number of the last round sent
}

// round sends calls as one frame, from the node at self (nil: not known
// yet), with notes, reads the answer and completes each call.
func (c *hbConn) round(calls []*hbCall, self *string, notes hbNotes) error {
	f := hbFrame{Beats: make([]hbRequest, len(calls)), Wake: notes.wake, Woke: notes.woke, Opened: notes.opened, Sleep: notes.sleep, Rouse: notes.rouse}
	if self != nil {
		f.From = *self
	}
	for i, call := range calls {
		f.Beats[i] = call.req
	}
	body, err := msgpack.Marshal(&f)
	if err != nil {
		return err
	}
	c.rounds++
	var head [8]byte
	binary.BigEndian.PutUint64(head[:], c.rounds)
	if err := c.SetDeadline(time.Now().Add(heartbeatRoundTimeout)); err != nil {
		return err
	}
	if err := writeFrame(c, head[:], body); err != nil {
		return err
	}
	frame, err := readFrame(c.r)
	if err != nil {
		return err
	}
	var results []hbResult
	if err := decodeHeartbeatFrame(frame, c.rounds, &results); err != nil {
		return err
	}
	if len(results) != len(calls) {
		return fmt.Errorf("answer holds %d results for %d heartbeats", len(results), len(calls))
	}
	for i, call := range calls {
		call.done <- hbOutcome{res: results[i]}
	}
	return nil
}

// decodeHeartbeatFrame checks a frame's round number and decodes its body
// into v.
func decodeHeartbeatFrame(frame []byte, round uint64, v any) error {
	if len(frame) < 8 {
		return errors.New("short heartbeat frame")
	}
	if got := binary.BigEndian.Uint64(frame); got != round {
		return fmt.Errorf("answer to round %d, want %d", got, round)
	}
	return msgpack.Unmarshal(frame[8:], v)
}

// accept serves the heartbeat connections other nodes open.
func (h *heartbeats) accept() {
	defer h.wg.Done()
	for {
		c, err := h.layer.Accept()
		if err != nil {
			return
		}
		h.wg.Add(1)
		go h.serve(c)
	}
}

// serve answers the rounds of one connection until it closes, is silent
// for twice heartbeatIdle, or sends a malformed frame. When it ends, the
// quiet followers under the node it came from wake at the next tick,
// unless another connection from that node keeps it heard.
func (h *heartbeats) serve(c net.Conn) {
	defer h.wg.Done()
	defer c.Close()
	var from string
	var readErr error
	defer func() {
		if from != "" {
			h.mu.Lock()
			delete(h.seen, from)
			h.mu.Unlock()
			h.maybeGone(from, readErr)
		}
	}()
	r := bufio.NewReader(c)
	slots := make(chan struct{}, heartbeatSlowMax)
	for {
		if err := c.SetReadDeadline(time.Now().Add(2 * heartbeatIdle)); err != nil {
			return
		}
		frame, err := readFrame(r)
		if err != nil {
			readErr = err
			return
		}
		if len(frame) < 8 {
			h.logger.Debug("dropping heartbeat connection", "remote", c.RemoteAddr().String(), "error", "short frame")
			return
		}
		round := binary.BigEndian.Uint64(frame)
		var f hbFrame
		if err := decodeHeartbeatFrame(frame, round, &f); err != nil {
			h.logger.Debug("dropping heartbeat connection", "remote", c.RemoteAddr().String(), "error", err)
			return
		}
		if f.From != "" {
			from = f.From
			h.mu.Lock()
			h.seen[from] = time.Now()
			h.busy[from]++
			h.forgetGone(from)
			h.mu.Unlock()
		}
		for _, group := range f.Wake {
			if g := h.gate(group); g != nil && from != "" {
				g.wake(from, false)
			}
		}
		for _, group := range f.Woke {
			// A follower there woke because its node stopped hearing
			// this one: the group wakes as a proposal wakes it, so that
			// the follower, whose heartbeat timeout counts from its wake,
			// gets real heartbeats at the normal pace at once rather
			// than one every 0.3–0.6 lease (quiet.go). It goes quiet
			// again after quietAfter without a proposal.
			if g := h.gate(group); g != nil && from != "" {
				g.active()
			}
		}
		for _, group := range f.Opened {
			h.openedThere(group)
		}
		for _, group := range f.Rouse {
			if h.gate(group) == nil {
				h.mux.askedOf(group)
			}
		}
		results := h.deliverAll(f.Beats, from, slots)
		for _, n := range f.Sleep {
			h.sleepNoted(n)
		}
		if f.From != "" {
			h.mu.Lock()
			h.seen[from] = time.Now()
			h.busy[from]--
			h.mu.Unlock()
		}
		body, err := msgpack.Marshal(results)
		if err != nil {
			return
		}
		if err := c.SetWriteDeadline(time.Now().Add(heartbeatRoundTimeout)); err != nil {
			return
		}
		if err := writeFrame(c, frame[:8], body); err != nil {
			readErr = err // an answer the peer's kernel refused: as telling as a read
			return
		}
	}
}

// A round is answered within heartbeatAnswerWithin: its heartbeats are
// handed to their groups at once, and one not taken by then is answered
// "busy" (the leader retries it, as a failed heartbeat), while at most
// heartbeatSlowMax deliveries of a connection are still under way. A
// heartbeat of a newer term makes Raft write the term to disk before it
// answers: after many elections, handed over one at a time, a round took
// seconds, the sender's next round waited on it, and every leader of the
// sender with a follower here lost its lease meanwhile.
const (
	heartbeatAnswerWithin = 300 * time.Millisecond
	heartbeatSlowMax      = 256
)

// errHeartbeatBusy answers a heartbeat the node could not hand to its
// group: too many of the connection's deliveries are under way.
const errHeartbeatBusy = "busy: the group did not take the heartbeat in time"

// errHeartbeatLate answers a heartbeat handed to its group that had not
// answered within heartbeatAnswerWithin (it writes a newer term to disk
// first): it takes it, later. Nodes before ProtocolCatchUp answer such a
// heartbeat errHeartbeatBusy.
const errHeartbeatLate = "late: the group is taking the heartbeat"

// deliverAll hands a round's heartbeats to their groups and returns their
// answers in order, within heartbeatAnswerWithin. slots bounds the
// deliveries of the connection under way, late ones included.
func (h *heartbeats) deliverAll(beats []hbRequest, from string, slots chan struct{}) []hbResult {
	results := make([]hbResult, len(beats))
	outs := make([]chan hbResult, len(beats))
	busyFrom := h.busyFrom.Load()
	for i := range beats {
		if busyFrom != nil && *busyFrom == from && !beats[i].Quiet {
			results[i] = hbResult{Err: errHeartbeatBusy}
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			results[i] = hbResult{Err: errHeartbeatBusy}
			continue
		}
		out := make(chan hbResult, 1) // a late answer is dropped
		outs[i] = out
		req := beats[i]
		h.wg.Go(func() {
			defer func() { <-slots }()
			out <- h.deliver(&req, from)
		})
	}
	t := time.NewTimer(heartbeatAnswerWithin)
	defer t.Stop()
	late := false
	for i, out := range outs {
		if out == nil {
			continue
		}
		if !late {
			select {
			case results[i] = <-out:
				continue
			case <-t.C:
				late = true
			}
		}
		select {
		case results[i] = <-out:
		default:
			results[i] = hbResult{Err: errHeartbeatLate}
		}
	}
	return results
}

// deliver hands one heartbeat from the node at from to its group's Raft
// and returns the answer. A heartbeat Raft took makes the member follow
// quietly when it is quiet, and wakes it when it is not.
func (h *heartbeats) deliver(req *hbRequest, from string) hbResult {
	g := h.gate(req.Group)
	if g == nil {
		h.refused.Add(1)
		if h.mux.askedOf(req.Group) {
			return hbResult{Err: fmt.Sprintf("group %q is asleep here; waking it", req.Group)}
		}
		return hbResult{Err: fmt.Sprintf("unknown group %q", req.Group)}
	}
	if req.Member != "" && req.Member != string(g.local) {
		// As the mux refuses a connection for another member (mux.go).
		h.refused.Add(1)
		g.refused.Add(1)
		return hbResult{Err: fmt.Sprintf("group %q: heartbeat for member %q, this node runs %q", req.Group, req.Member, g.local)}
	}
	fn := g.heartbeatHandler()
	if fn == nil {
		return hbResult{Err: fmt.Sprintf("group %q: not running", req.Group)}
	}
	ae := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersion(req.Version), ID: req.ID, Addr: req.Addr},
		Term:      req.Term,
	}
	//lint:ignore SA1019 as hashicorp/raft sends it
	ae.Leader = req.Leader
	answer := make(chan raft.RPCResponse, 1)
	fn(raft.RPC{Command: ae, RespChan: answer}) // answers before it returns, unless Raft is shutting down
	select {
	case out := <-answer:
		if out.Error != nil {
			return hbResult{Err: out.Error.Error()}
		}
		resp, ok := out.Response.(*raft.AppendEntriesResponse)
		if !ok {
			return hbResult{Err: fmt.Sprintf("unexpected answer %T", out.Response)}
		}
		h.delivered.Add(1)
		res := hbResult{
			Version: int(resp.ProtocolVersion), ID: resp.ID, Addr: resp.Addr,
			Term: resp.Term, LastLog: resp.LastLog, Success: resp.Success, NoRetryBackoff: resp.NoRetryBackoff,
			Behind: g.behind(),
		}
		if resp.Success && resp.Term == req.Term {
			if req.Quiet {
				res.Quiet = g.followQuietly(from)
			} else {
				g.wake("", false)
			}
		}
		return res
	default:
		return hbResult{Err: fmt.Sprintf("group %q: shutting down", req.Group)}
	}
}

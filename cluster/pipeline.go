package cluster

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// idleAppendEvery is how often an idle leader still sends a follower an
// append that tells it nothing new (see pipeline.AppendEntries), to a
// node older than ProtocolCatchUp. It is also how soon the leader finds
// that such a follower restarted behind it: the append fails on the
// connection of the follower's old process, and Raft replicates what the
// follower misses on a new one. With 30 s a restarted follower of an idle
// partition stayed behind for up to 30 s.
const idleAppendEvery = time.Second

// idleAppendCatchUpEvery is idleAppendEvery to a node that speaks
// ProtocolCatchUp: its followers say in their heartbeat answers when they
// hold entries they have not applied (a restarted follower, one that has
// not heard the commit index of its last entries), and the leader's next
// append to such a follower goes at once. Sent every second regardless,
// these appends were a third of an idle node's CPU (BENCHMARKS.md, "Many
// idle partitions").
const idleAppendCatchUpEvery = 30 * time.Second

// pipelineIdleClose is how long a pipeline to a node that speaks
// ProtocolCatchUp stays open with nothing sent on it: then it closes its
// connection, and the next append that must go opens one again. A
// pipeline holds a TCP connection with a 256 KiB buffer at each end (the
// transport's; constants in hashicorp/raft 1.8), a goroutine at each end
// and one of ours: at 1,000 idle partitions a node held about 670 of
// them, two fifths of its heap, for groups that send nothing. Such a
// group sends nothing for as long as it is idle: the appends that would
// tell its followers nothing new are not sent while the connection is
// closed (a follower that is behind says so, catchUp). The cost is a
// dial on the first append after the pause (plus a TLS handshake between
// nodes that use it).
const pipelineIdleClose = 30 * time.Second

// pipelineUnusedClose is pipelineIdleClose for the pipeline of a group
// that has had no entry for its FSM proposed (an apply, a barrier) for
// pipelineInUse: its appends were a new
// leadership's first entry, a restarted follower's catch-up, or a send
// after a long silence. After a node's restart those pipelines, one
// per group member and 256 KiB at each end, held most of the restarted
// node's memory for the next 30 s (BENCHMARKS.md, "Many idle
// partitions"). A group in use keeps its connection through pauses
// shorter than pipelineIdleClose; a group's first send after a long
// silence pays the dial either way.
const (
	pipelineUnusedClose = 3 * time.Second
	pipelineInUse       = 5 * time.Minute
)

// errPipelineBroken fails a pipelined AppendEntries sent after the
// follower refused an earlier one: the leader falls back to one request at
// a time, which finds where the follower's log stands.
var errPipelineBroken = errors.New("cluster: the follower refused a pipelined append; replicating one request at a time")

// AppendEntriesPipeline implements raft.Transport: NetworkTransport's
// pipeline, guarded (pipeline below), opened with the first append that
// must go.
func (g *voteGate) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	addr, _ := g.to(id, target)
	pl := newPipeline(func() (raft.AppendPipeline, error) { return g.NetworkTransport.AppendEntriesPipeline(id, addr) })
	pl.opened = &g.mux.hb.pipelines
	switch proto := g.mux.Protocol(string(target)); {
	case proto >= ProtocolCatchUp:
		pl.idleClose = g.mux.hb.pipelineIdleClose
		pl.unusedClose, pl.inUse = g.mux.hb.pipelineUnusedClose, g.mux.hb.pipelineInUse
		pl.lastProposed = &g.quiet.lastProposed
		pl.idled = g.idled
		pl.speaksCatchUp = func() bool { return g.mux.Protocol(string(target)) >= ProtocolCatchUp }
		pl.skipped = &g.mux.hb.idleAppends
		pl.every = g.mux.hb.idleAppendEvery
		pl.catchUp = g.catchUpFlag(id)
	case proto >= ProtocolHeartbeats:
		pl.skipped = &g.mux.hb.idleAppends
		pl.every = idleAppendEvery
	}
	return pl, nil
}

// idled runs when one of this leader's pipelines closed for idleness:
// the group's other connections go too. NetworkTransport pools the
// connections of its appends sent one at a time, and never closes them,
// each with 256 KiB at the other end (votes, pre-votes and TimeoutNow go
// on connections of their own, oneshot.go). CloseStreams closes the pooled
// ones, a request under way keeps its own, and the next request dials. It
// also ends the connections this member accepted, each after its next
// request: their senders' next request on them fails at once, and appends
// back off from it.
func (g *voteGate) idled() { g.NetworkTransport.CloseStreams() }

// catchUpFlag returns the flag that makes the next idle append to
// follower id go (catchUp sets it).
func (g *voteGate) catchUpFlag(id raft.ServerID) *atomic.Bool {
	g.catchUpMu.Lock()
	defer g.catchUpMu.Unlock()
	if g.catchUps == nil {
		g.catchUps = make(map[raft.ServerID]*atomic.Bool)
	}
	f := g.catchUps[id]
	if f == nil {
		f = new(atomic.Bool)
		g.catchUps[id] = f
	}
	return f
}

// catchUp records that follower id answered a heartbeat of this leader
// saying it is behind: the next append to it goes, even one that tells
// nothing new, and carries the commit index it is missing.
func (g *voteGate) catchUp(id raft.ServerID) { g.catchUpFlag(id).Store(true) }

// lacks reports whether a follower whose last entry is last lacks
// entries this member holds.
func (g *voteGate) lacks(last uint64) bool {
	r := g.raft.Load()
	return r != nil && last < r.LastIndex()
}

// behind reports whether this member holds entries it has not applied:
// it may not know that they are committed (a follower that restarted, or
// that has not heard its leader's last commit index), and says so in its
// heartbeat answers (catchUp).
func (g *voteGate) behind() bool {
	r := g.raft.Load()
	return r != nil && r.AppliedIndex() < r.LastIndex()
}

// pipeline is a NetworkTransport pipeline that never blocks its sender
// once the follower has refused a request.
//
// hashicorp/raft (1.8) reads a pipeline's responses until the first one
// that is not a success (a follower whose log store failed a write, a
// missing entry, a timed-out answer), then stops reading, while its send
// loop may send once more before it sees the reader gone. The transport
// hands every response to the reader through unbuffered channels, so that
// send waits for ever: the leader never replicates to that follower again,
// while its heartbeats, sent elsewhere, keep the follower from starting an
// election (hashicorp/raft issue 612). The follower stays behind until the
// leader changes, for one group among many on a node.
//
// The guard reads every response from the transport itself. It passes
// them on until the first failure, which it passes on too; from then on it
// drops what comes, and every new send fails at once with
// errPipelineBroken, so Raft's send loop ends, its pipeline closes, and
// it replicates one request at a time from where the follower's log is.
//
// It also spares the follower of an idle group most of the appends that
// tell it nothing new. hashicorp/raft's send loop sends one every
// CommitTimeout (50–100 ms) even when there is nothing to send, so that a
// follower learns the commit index once commits stop: as many requests as
// heartbeats, on the group's own connection. An append without entries
// whose term, previous entry and commit index are those of the last one
// sent is not sent, unless every (idleAppendEvery, or
// idleAppendCatchUpEvery to a node that speaks ProtocolCatchUp) has passed
// since, or the follower said in a heartbeat answer that it is behind
// (catchUp): Raft gets a future it never sees answered, which it does not
// wait for. The follower misses nothing (it was told that commit index,
// or asks for it), hears from its leader
// by the heartbeats, and a follower of a newer term makes the leader's
// heartbeats to it fail (heartbeats.beat), so a leader that a majority has
// left steps down within its lease, as it would have on these appends'
// answers. Only to nodes that speak ProtocolHeartbeats (skipped set).
type pipeline struct {
	out    chan raft.AppendFuture
	failed chan struct{} // closed at the first failure (fail)
	fail   sync.Once
	stop   chan struct{} // closed by Close
	once   sync.Once

	// The transport's pipeline, and the goroutine forwarding its
	// responses (forward); nil while closed for idleness. Used by
	// AppendEntries and Close alone (Raft's send loop, one goroutine).
	inner *innerPipeline
	// open opens the transport's pipeline.
	open func() (raft.AppendPipeline, error)
	// idleClose is how long inner stays open with nothing sent
	// (pipelineIdleClose); 0: for ever. unusedClose, when shorter,
	// replaces it while the group's last entry proposed (lastProposed,
	// UnixNano; 0: none) is inUse or more ago (pipelineUnusedClose); 0:
	// never.
	idleClose, unusedClose, inUse time.Duration
	lastProposed                  *atomic.Int64
	// opened counts the node's open transport pipelines; nil: not
	// counted.
	opened *atomic.Int64
	// idled, when set, runs after the pipeline closed for idleness: it
	// closes the group's pooled connections (voteGate.idled).
	idled func()

	// skipped counts the appends not sent; nil: send every one.
	skipped *atomic.Int64
	// every is how often an append that tells nothing new still goes
	// while the connection is open.
	every time.Duration
	// catchUp, when set, makes the next append go (voteGate.catchUp);
	// nil for a follower's node older than ProtocolCatchUp.
	catchUp *atomic.Bool
	// last is the last append sent, and when; used by AppendEntries
	// alone. lastNews is when the last append that was not the same as
	// the one before went (entries, a new commit index or term, one a
	// follower asked for): the connection's idleness counts from it.
	last               raft.AppendEntriesRequest
	lastSent, lastNews time.Time
	// speaksCatchUp reports whether the follower's node speaks
	// ProtocolCatchUp, looked at every p.every while the connection is
	// closed (spokeOlder, when it was last); nil: not looked at.
	speaksCatchUp func() bool
	checked       time.Time
}

// innerPipeline is one transport pipeline, on one connection, with the
// goroutine that forwards its responses.
type innerPipeline struct {
	raft.AppendPipeline
	sent     int64        // appends sent on it (Raft's send loop)
	answered atomic.Int64 // responses forwarded or dropped (forward)
	stop     chan struct{}
	done     chan struct{} // closed when forward returned
}

// newPipeline returns a pipeline that opens the transport's pipeline
// with open when an append must go; with idleClose set, it closes it
// again once nothing new has been sent on it for that long and every
// append sent was answered.
func newPipeline(open func() (raft.AppendPipeline, error)) *pipeline {
	return &pipeline{
		out:    make(chan raft.AppendFuture),
		failed: make(chan struct{}),
		stop:   make(chan struct{}),
		open:   open,
	}
}

// start makes inner the pipeline's connection and starts forwarding its
// responses.
func (p *pipeline) start(inner raft.AppendPipeline) {
	p.inner = &innerPipeline{AppendPipeline: inner, stop: make(chan struct{}), done: make(chan struct{})}
	if p.opened != nil {
		p.opened.Add(1)
	}
	go p.forward(p.inner)
}

// closeInner closes the transport's pipeline and waits for its
// forwarding to end.
func (p *pipeline) closeInner() error {
	in := p.inner
	p.inner = nil
	close(in.stop)
	err := in.Close()
	<-in.done
	if p.opened != nil {
		p.opened.Add(-1)
	}
	return err
}

// AppendEntries implements raft.AppendPipeline.
func (p *pipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	select {
	case <-p.failed:
		return nil, errPipelineBroken
	default:
	}
	if p.skipped != nil {
		now := time.Now()
		if len(args.Entries) == 0 && args.Term == p.last.Term && args.PrevLogEntry == p.last.PrevLogEntry &&
			args.PrevLogTerm == p.last.PrevLogTerm && args.LeaderCommitIndex == p.last.LeaderCommitIndex &&
			(p.catchUp == nil || !p.catchUp.Swap(false)) {
			if in := p.inner; in != nil && p.idleClose > 0 && now.Sub(p.lastNews) >= p.closeAfter(now) && in.answered.Load() == in.sent {
				// Idle, nothing in flight: no response of this
				// connection is still to come, so Raft's reader sees
				// them in order when another opens.
				_ = p.closeInner() // its end is all that is left of it
				if p.idled != nil {
					p.idled()
				}
			}
			if now.Sub(p.lastSent) < p.every || p.inner == nil && !p.spokeOlder(now) {
				p.skipped.Add(1)
				return &unsentAppend{req: args, resp: resp, start: now}, nil
			}
		} else {
			p.lastNews = now
		}
		p.last = raft.AppendEntriesRequest{Term: args.Term, PrevLogEntry: args.PrevLogEntry, PrevLogTerm: args.PrevLogTerm, LeaderCommitIndex: args.LeaderCommitIndex}
		if n := len(args.Entries); n > 0 {
			// The next append's previous entry is this one's last.
			p.last.PrevLogEntry, p.last.PrevLogTerm = args.Entries[n-1].Index, args.Entries[n-1].Term
		}
		p.lastSent = now
	}
	if p.inner == nil {
		inner, err := p.open()
		if err != nil {
			return nil, err
		}
		p.start(inner)
	}
	f, err := p.inner.AppendEntries(args, resp)
	if err == nil {
		p.inner.sent++
	}
	return f, err
}

// closeAfter is how long the pipeline stays open with nothing new sent:
// idleClose, or unusedClose if shorter for a group with no proposal for
// inUse.
func (p *pipeline) closeAfter(now time.Time) time.Duration {
	if p.unusedClose > 0 && p.lastProposed != nil && now.Sub(time.Unix(0, p.lastProposed.Load())) >= p.inUse {
		return min(p.unusedClose, p.idleClose)
	}
	return p.idleClose
}

// spokeOlder reports, at most once every p.every, whether the follower's
// node no longer speaks ProtocolCatchUp (it went back to an older
// version since the pipeline was made): such a follower does not say
// that it is behind, and needs the append every p.every again.
func (p *pipeline) spokeOlder(now time.Time) bool {
	if p.speaksCatchUp == nil || now.Sub(p.checked) < p.every {
		return false
	}
	p.checked = now
	return !p.speaksCatchUp()
}

// unsentAppend is the future of an append the pipeline did not send. It
// is never handed to Raft's reader.
type unsentAppend struct {
	req   *raft.AppendEntriesRequest
	resp  *raft.AppendEntriesResponse
	start time.Time
}

func (u *unsentAppend) Error() error                          { return nil }
func (u *unsentAppend) Start() time.Time                      { return u.start }
func (u *unsentAppend) Request() *raft.AppendEntriesRequest   { return u.req }
func (u *unsentAppend) Response() *raft.AppendEntriesResponse { return u.resp }

// Consumer implements raft.AppendPipeline.
func (p *pipeline) Consumer() <-chan raft.AppendFuture { return p.out }

// Close implements raft.AppendPipeline: it stops forwarding and closes
// the transport's pipeline, which ends its reader.
func (p *pipeline) Close() error {
	p.once.Do(func() { close(p.stop) })
	if p.inner == nil {
		return nil
	}
	return p.closeInner()
}

// forward reads the responses of in for as long as it is open, so the
// transport's reader, and through it every send, never waits on Raft's
// reader once that one has stopped.
func (p *pipeline) forward(in *innerPipeline) {
	defer close(in.done)
	c := in.Consumer()
	for {
		var f raft.AppendFuture
		select {
		case f = <-c:
		case <-in.stop:
			return
		case <-p.stop:
			return
		}
		select {
		case <-p.failed:
			in.answered.Add(1)
			continue // Raft's reader has stopped
		default:
		}
		// The transport hands over a future once it is answered:
		// Error does not wait.
		if f.Error() != nil || !f.Response().Success {
			p.fail.Do(func() { close(p.failed) })
		}
		select {
		case p.out <- f:
			in.answered.Add(1)
		case <-in.stop:
			return
		case <-p.stop:
			return
		}
	}
}

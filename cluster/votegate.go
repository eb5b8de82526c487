package cluster

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// voteGate is the group's transport as Raft sees it: NetworkTransport,
// with each request addressed to a member (a server id), not only to an
// address, and refused by a server that is another member.
//
// Votes are counted by the id the candidate asked, but go to an address. A
// server started at the address of a member the group has not removed yet
// (a node given a partition back, or renewing a damaged copy, under a new
// server id) would cast that member's vote with its own, shorter log, and
// could elect a candidate missing entries the member had acknowledged. So
// the gate dials every request to the member Raft names with it: to a node
// that speaks RaftProtocol, at MemberAddress(address, id), whose
// connection header names the member, and the receiving node's mux refuses
// a connection for a member of the group it does not run. Raft's
// configurations keep plain addresses: nothing on disk changes.
//
// A node of an older version (ProtocolGroups, or not known yet: gossip has
// not told) reads only headers that name a group. To it the gate dials the
// plain address and writes the id of the member asked into each
// RequestVote, in the Candidate field hashicorp/raft no longer reads (its
// RPC header carries the candidate's address), as older versions do; and a
// request that carries an id there is refused by a server with another id,
// as older versions refuse it. A request that carries none comes over a
// header naming the member, which the mux checked (or from a version older
// than the one that began to write the id, which a rolling upgrade must
// not skip: see cluster/DESIGN.md).
//
// A server asked under its own id votes as Raft says, even with an empty
// log or a configuration that does not hold it yet: that is its true state,
// and a group whose majority needs a member that has not caught up yet
// can still elect a leader. Pre-votes change nothing and pass; TimeoutNow
// is refused while the server is not in its own configuration.
//
// A retired server (Group.Retire) never campaigns: its own RequestVote and
// RequestPreVote fail before they leave, and TimeoutNow is refused. It
// still answers AppendEntries and votes, so the group keeps its majority
// until it has removed the member.
//
// Its pipelines are guarded too (pipeline.go): a follower's refusal never
// wedges the leader's replication to it.
type voteGate struct {
	*raft.NetworkTransport
	mux   *Mux
	group string
	local raft.ServerID
	// heartbeat is Raft's heartbeat handler (SetHeartbeatHandler), for
	// the heartbeats that arrive coalesced (heartbeat.go).
	heartbeat atomic.Pointer[func(raft.RPC)]
	// quiet is the group's side of quiet groups (quiet.go).
	quiet quietState
	// sleep is its side of sleeping groups, and onSleep the owner's
	// GroupConfig.OnSleep (sleep.go).
	sleep   sleepState
	onSleep atomic.Pointer[func()]
	raft    atomic.Pointer[raft.Raft]
	out     chan raft.RPC
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	retired atomic.Bool
	// layer is the group's: a request reaches the gate only over a
	// connection it accepted, and the loop runs only while one is open
	// (loopMu guards looping and loopsDone: startLoop, rest).
	layer     *Layer
	loopMu    sync.Mutex
	looping   bool
	loopsDone bool // closing: no loop starts again
	// refused counts the requests answered "no"; campaigns counts the
	// vote requests of a retired server held back.
	refused   atomic.Int64
	campaigns atomic.Int64
	// firstUntil, while this member is its group's first (elect.go) and
	// has not stood yet: until when it stands on a notice (UnixNano).
	firstUntil atomic.Int64
	// arranged is set once the group arranged its first election
	// (arrangeElection, settled).
	arranged atomic.Bool
	// toldFirst, while this member waits for the first member it told
	// to stand: that member's Raft address, and until when it waits
	// (rearrange).
	toldFirst atomic.Pointer[toldFirst]
	// standing is set while a TimeoutNow handed over by the gate (a gone
	// leader's successor, or a follower standing over a lagging one)
	// waits for Raft to take it (successor.go).
	standing atomic.Bool
	// aheadAt is when this member last stood after it refused a pre-vote
	// or a lagging successor's vote (standAhead, standOverLagging;
	// UnixNano).
	aheadAt atomic.Int64
	// refusedTransfer is the last vote request marked as a leadership
	// transfer this member refused (standOverLagging).
	refusedTransfer atomic.Pointer[refusedTransfer]
	// catchUps, on a leader: per follower, whether its next idle append
	// goes (pipeline.go).
	catchUpMu sync.Mutex
	catchUps  map[raft.ServerID]*atomic.Bool
}

func newVoteGate(t *raft.NetworkTransport, layer *Layer, mux *Mux, group string, local raft.ServerID) *voteGate {
	g := &voteGate{NetworkTransport: t, layer: layer, mux: mux, group: group, local: local, out: make(chan raft.RPC), stop: make(chan struct{})}
	start := g.startLoop
	layer.onAccept.Store(&start)
	g.startLoop() // for what the layer accepted before
	mux.hb.register(group, g)
	return g
}

// gateLinger is how long the gate's loop waits, with no request, before it
// looks whether it may end.
const gateLinger = 5 * time.Second

// startLoop starts the loop unless it runs. The layer calls it for every
// connection it accepts, before NetworkTransport can read a request from
// it: a group all of whose connections are closed (an idle one: its
// leader closes them, pipeline.go) holds no goroutine of the gate, and the
// first request after that finds the loop running.
func (g *voteGate) startLoop() {
	g.loopMu.Lock()
	defer g.loopMu.Unlock()
	if g.looping || g.loopsDone {
		return
	}
	g.looping = true
	g.wg.Add(1) // never during Close's Wait: loopsDone is set first, under loopMu
	go g.loop()
}

// rest reports whether the loop may end: whether no connection the layer
// accepted is open, looked at under the lock startLoop takes. NetworkTransport
// hands the gate requests only from the goroutine serving a connection,
// which closes the connection when it returns: with none open, no request
// can come until the layer accepts again, and starts it.
func (g *voteGate) rest() bool {
	g.loopMu.Lock()
	defer g.loopMu.Unlock()
	if g.layer.acceptedOpen() {
		return false
	}
	g.looping = false
	return true
}

// SetHeartbeatHandler implements raft.Transport: Raft's handler gets the
// heartbeats of both ways, the group's own connections and the node's
// coalesced ones.
func (g *voteGate) SetHeartbeatHandler(fn func(raft.RPC)) {
	if fn == nil {
		g.heartbeat.Store(nil)
	} else {
		g.heartbeat.Store(&fn)
	}
	g.NetworkTransport.SetHeartbeatHandler(fn)
}

// heartbeatHandler returns Raft's heartbeat handler; nil before Raft set
// one.
func (g *voteGate) heartbeatHandler() func(raft.RPC) {
	if p := g.heartbeat.Load(); p != nil {
		return *p
	}
	return nil
}

// Consumer implements raft.Transport.
func (g *voteGate) Consumer() <-chan raft.RPC { return g.out }

// errNotMember answers TimeoutNow sent to a server outside its group.
var errNotMember = errors.New("cluster: not a member of the group's configuration yet")

// errRetired fails the vote requests of a retired server, and answers a
// TimeoutNow sent to it.
var errRetired = errors.New("cluster: this member is retired: it never campaigns")

// voterPrefix starts the voter's id in a RequestVote's Candidate field, for
// and from nodes that do not read headers naming a member; an address
// never starts with a NUL byte.
const voterPrefix = "\x00voter:"

// to returns where to dial member id at target: MemberAddress when the
// node there reads headers naming a member; otherwise the plain address,
// and legacy is true.
func (g *voteGate) to(id raft.ServerID, target raft.ServerAddress) (addr raft.ServerAddress, legacy bool) {
	if g.mux.Protocol(string(target)) >= ProtocolMembers {
		return raft.ServerAddress(MemberAddress(string(target), string(id))), false
	}
	return target, true
}

// RequestVote implements raft.Transport: the request goes to the member
// asked; a retired server asks nobody.
func (g *voteGate) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if g.retired.Load() {
		g.campaigns.Add(1)
		return errRetired
	}
	addr, legacy := g.to(id, target)
	if !legacy {
		return g.oneShot(addr, rpcRequestVote, args, resp)
	}
	// Raft sends one request to every peer: each gets its own copy.
	req := *args
	//lint:ignore SA1019 the field Raft no longer reads carries the voter's id, for older nodes
	req.Candidate = []byte(voterPrefix + string(id))
	return g.oneShot(addr, rpcRequestVote, &req, resp)
}

// meantFor reports whether a vote request is meant for this server: one
// that names its voter (from a node that does not know this one reads
// headers naming a member) names this server's id; one that does not came
// over a header the mux checked.
func (g *voteGate) meantFor(req *raft.RequestVoteRequest) bool {
	//lint:ignore SA1019 the field Raft no longer reads carries the voter's id, from older nodes
	to, ok := bytes.CutPrefix(req.Candidate, []byte(voterPrefix))
	if !ok {
		return true
	}
	//lint:ignore SA1019 restored to what older versions of Raft read
	req.Candidate = req.Addr
	return raft.ServerID(to) == g.local
}

// RequestPreVote implements raft.WithPreVote: a retired server asks nobody.
func (g *voteGate) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if g.retired.Load() {
		g.campaigns.Add(1)
		return errRetired
	}
	addr, _ := g.to(id, target)
	return g.oneShot(addr, rpcRequestPreVote, args, resp)
}

// AppendEntries implements raft.Transport, to the member Raft names. A
// heartbeat to a node that speaks ProtocolHeartbeats travels with the
// node's other heartbeats to it (heartbeat.go).
func (g *voteGate) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if isHeartbeat(args) && g.mux.Protocol(string(target)) >= ProtocolHeartbeats {
		if g.answerLocally(id, target, args, resp) {
			return nil
		}
		quiet := g.quiet.leading.Load()
		acked, err := g.mux.hb.beat(g, string(target), string(id), args, resp, quiet, false)
		if quiet || acked {
			g.heard(id, target, args.Term, acked, err)
		} else if err == nil && resp.Success && resp.Term == args.Term {
			g.tookReal(id)
		}
		return err
	}
	addr, _ := g.to(id, target)
	return g.NetworkTransport.AppendEntries(id, addr, args, resp)
}

// InstallSnapshot implements raft.Transport, to the member Raft names.
func (g *voteGate) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	addr, _ := g.to(id, target)
	return g.NetworkTransport.InstallSnapshot(id, addr, args, resp, data)
}

// TimeoutNow implements raft.Transport, to the member Raft names.
func (g *voteGate) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	addr, _ := g.to(id, target)
	return g.oneShot(addr, rpcTimeoutNow, args, resp)
}

// loop passes RPCs on to Raft, answering the refused ones itself. It ends
// with close, or when no connection is left to bring a request (rest).
func (g *voteGate) loop() {
	defer g.wg.Done()
	in := g.NetworkTransport.Consumer()
	idle := time.NewTimer(gateLinger)
	defer idle.Stop()
	for {
		var rpc raft.RPC
		idle.Reset(gateLinger)
		select {
		case rpc = <-in:
		case <-g.stop:
			return
		case <-idle.C:
			if g.rest() {
				return
			}
			continue
		}
		if h, ok := rpc.Command.(raft.WithRPCHeader); ok {
			g.mux.hb.heardFrom(string(h.GetRPCHeader().Addr)) // its node is there
		}
		if _, ok := rpc.Command.(*raft.TimeoutNowRequest); ok && g.retired.Load() {
			rpc.Respond(nil, errRetired)
			g.refused.Add(1)
			continue
		}
		refused := false
		switch req := rpc.Command.(type) {
		case *raft.RequestVoteRequest:
			if refused = !g.meantFor(req); refused {
				rpc.Respond(&raft.RequestVoteResponse{RPCHeader: g.header(), Term: req.Term, Granted: false}, nil)
			} else {
				rpc = g.watchVote(rpc, req)
			}
		case *raft.TimeoutNowRequest:
			if refused = !g.member(); refused {
				rpc.Respond(nil, errNotMember)
			}
		case *raft.RequestPreVoteRequest:
			rpc = g.watchPreVote(rpc, raft.ServerID(req.ID))
		}
		if refused {
			g.refused.Add(1)
			continue
		}
		select {
		case g.out <- rpc:
		case <-g.stop:
			rpc.Respond(nil, raft.ErrTransportShutdown)
			return
		}
	}
}

// header is the RPC header of this server's answers.
func (g *voteGate) header() raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(g.local), Addr: g.EncodePeer(g.local, g.LocalAddr())}
}

// member reports whether this server is in its latest configuration.
func (g *voteGate) member() bool {
	r := g.raft.Load()
	if r == nil {
		return false
	}
	f := r.GetConfiguration() // answered at once, from memory
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == g.local {
			return true
		}
	}
	return false
}

// Close implements raft.WithClose: it stops the gate, then the
// transport. Raft's shutdown calls it, and the group's close again.
func (g *voteGate) Close() error {
	g.once.Do(func() {
		if g.quiet.leading.Load() {
			g.stopLeadingQuietly(true) // its quiet followers need not wait out their timeout
		} else {
			g.tellWaking() // nor those a proposal woke it from, not yet reached
		}
		g.mux.hb.unregister(g.group, g)
		g.layer.onAccept.Store(nil)
		g.loopMu.Lock()
		g.loopsDone = true // no loop starts after the wait below
		g.loopMu.Unlock()
		g.quiet.mu.Lock()
		g.quiet.closed = true // no refresh starts after the wait below
		g.quiet.mu.Unlock()
		close(g.stop)
	})
	g.wg.Wait()
	return g.NetworkTransport.Close()
}

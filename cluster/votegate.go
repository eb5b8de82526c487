package cluster

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// voteGate is the group's transport as Raft sees it: NetworkTransport,
// with the requests that ask a member to vote or to campaign (RequestVote,
// RequestPreVote, TimeoutNow) answered "no" while this server is not in
// its own Raft configuration.
//
// A server that joins a group it was never part of starts with an empty
// log and no configuration. hashicorp/raft checks a candidate's membership
// only against a configuration it has, and an empty log is never more up
// to date than a candidate's, so such a server grants every vote. Votes
// are counted by address: a server started at the address of a member the
// group has not removed yet (a node given a partition back, or renewing a
// damaged copy, under a new server id) would cast that member's vote with
// an empty log and could elect a candidate missing entries the member had
// acknowledged. Once the leader has added the server, its configuration
// holds it; by then the group has removed the member it replaces.
//
// A retired server (Group.Retire) never campaigns: its own RequestVote and
// RequestPreVote fail before they leave, and TimeoutNow is refused. It
// still answers AppendEntries and votes, so the group keeps its majority
// until it has removed the member.
type voteGate struct {
	*raft.NetworkTransport
	local   raft.ServerID
	raft    atomic.Pointer[raft.Raft]
	out     chan raft.RPC
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	retired atomic.Bool
	// refused counts the requests answered "no"; campaigns counts the
	// vote requests of a retired server held back.
	refused   atomic.Int64
	campaigns atomic.Int64
}

func newVoteGate(t *raft.NetworkTransport, local raft.ServerID) *voteGate {
	g := &voteGate{NetworkTransport: t, local: local, out: make(chan raft.RPC), stop: make(chan struct{})}
	g.wg.Add(1)
	go g.loop()
	return g
}

// Consumer implements raft.Transport.
func (g *voteGate) Consumer() <-chan raft.RPC { return g.out }

// errNotMember answers TimeoutNow sent to a server outside its group.
var errNotMember = errors.New("cluster: not a member of the group's configuration yet")

// errRetired fails the vote requests of a retired server, and answers a
// TimeoutNow sent to it.
var errRetired = errors.New("cluster: this member is retired: it never campaigns")

// RequestVote implements raft.Transport: a retired server asks nobody.
func (g *voteGate) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if g.retired.Load() {
		g.campaigns.Add(1)
		return errRetired
	}
	return g.NetworkTransport.RequestVote(id, target, args, resp)
}

// RequestPreVote implements raft.WithPreVote: a retired server asks nobody.
func (g *voteGate) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if g.retired.Load() {
		g.campaigns.Add(1)
		return errRetired
	}
	return g.NetworkTransport.RequestPreVote(id, target, args, resp)
}

// loop passes RPCs on to Raft, answering the refused ones itself. It ends
// with close.
func (g *voteGate) loop() {
	defer g.wg.Done()
	in := g.NetworkTransport.Consumer()
	for {
		var rpc raft.RPC
		select {
		case rpc = <-in:
		case <-g.stop:
			return
		}
		if _, ok := rpc.Command.(*raft.TimeoutNowRequest); ok && g.retired.Load() {
			rpc.Respond(nil, errRetired)
			g.refused.Add(1)
			continue
		}
		if !g.member() {
			refused := true
			switch req := rpc.Command.(type) {
			case *raft.RequestVoteRequest:
				rpc.Respond(&raft.RequestVoteResponse{Term: req.Term, Granted: false}, nil)
			case *raft.RequestPreVoteRequest:
				rpc.Respond(&raft.RequestPreVoteResponse{Term: req.Term, Granted: false}, nil)
			case *raft.TimeoutNowRequest:
				rpc.Respond(nil, errNotMember)
			default:
				refused = false
			}
			if refused {
				g.refused.Add(1)
				continue
			}
		}
		select {
		case g.out <- rpc:
		case <-g.stop:
			rpc.Respond(nil, raft.ErrTransportShutdown)
			return
		}
	}
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
	g.once.Do(func() { close(g.stop) })
	g.wg.Wait()
	return g.NetworkTransport.Close()
}

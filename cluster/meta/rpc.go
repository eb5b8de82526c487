package meta

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/fabriq-io/fabriq/cluster"
	"github.com/fabriq-io/fabriq/geofabric"
)

// The control plane's node-to-node calls (cluster.RPCServer, on the Raft
// port). Each takes many partitions at once: a round over a thousand
// partitions makes one call per node.
const (
	// methodViews asks a node for its copies of some partitions: their
	// member, whether they lead, their committed configuration (View).
	methodViews = "meta.views"
	// methodRenew asks the metadata leader to renew the caller's member
	// of a partition, whose copy is damaged (Renew).
	methodRenew = "meta.renew"
	// methodIndex asks the metadata leader how far its catalog is, once
	// it has applied everything committed (Index).
	methodIndex = "meta.index"
	// methodAutoCreate asks the metadata leader to create a stream on its
	// first use, with its fabric's defaults (AutoCreate).
	methodAutoCreate = "meta.autocreate"
	// maxViews bounds the partitions of one views call: a larger ask is
	// split.
	maxViews = 4096
)

type viewsRequest struct {
	Partitions []string `msgpack:"p"`
}

type viewsAnswer struct {
	Views []View `msgpack:"v"`
}

type renewRequest struct {
	Partition string `msgpack:"p"`
	Member    string `msgpack:"m"`
}

type autoCreateRequest struct {
	Stream  string `msgpack:"s"`
	Fabrics bool   `msgpack:"f,omitempty"` // its tenant and fabric too, when missing
}

type indexAnswer struct {
	Index uint64 `msgpack:"i"`
}

type none struct{}

// RPC error codes, one per sentinel a caller acts on.
var rpcCodes = []struct {
	code string
	err  error
}{
	{"invalid", ErrInvalid},
	{"not_allowed", ErrNotAllowed},
	{"not_member", ErrNotMember},
	{"not_ready", ErrNotReady},
	{"stream_not_found", ErrStreamNotFound},
	{"tenant_not_found", ErrTenantNotFound},
	{"fabric_not_found", ErrFabricNotFound},
}

// toRPC is err as an answer: the code of its sentinel, and the leader's id
// for a *NotLeaderError.
func toRPC(err error) error {
	if err == nil {
		return nil
	}
	var nl *NotLeaderError
	if errors.As(err, &nl) {
		return &cluster.RPCError{Code: "not_leader", Message: err.Error(), Hint: nl.LeaderID}
	}
	for _, c := range rpcCodes {
		if errors.Is(err, c.err) {
			return &cluster.RPCError{Code: c.code, Message: err.Error()}
		}
	}
	return err
}

// fromRPC is an answered error as the sentinel its code stands for.
func fromRPC(err error) error {
	var re *cluster.RPCError
	if !errors.As(err, &re) {
		return err
	}
	if re.Code == "not_leader" {
		return &NotLeaderError{LeaderID: re.Hint}
	}
	msg := strings.TrimPrefix(re.Message, "meta: ")
	for _, c := range rpcCodes {
		if re.Code == c.code {
			return fmt.Errorf("%w (answered: %s)", c.err, msg)
		}
	}
	return err
}

// register registers the control plane's methods on srv.
func (s *Service) register(srv *cluster.RPCServer) {
	cluster.RPCHandle(srv, methodViews, func(_ context.Context, _ net.Addr, req *viewsRequest) (*viewsAnswer, error) {
		if len(req.Partitions) > maxViews {
			return nil, toRPC(fmt.Errorf("%w: %d partitions in one call, at most %d", ErrInvalid, len(req.Partitions), maxViews))
		}
		return &viewsAnswer{Views: s.cfg.Host.Views(req.Partitions)}, nil
	})
	cluster.RPCHandle(srv, methodRenew, func(ctx context.Context, from net.Addr, req *renewRequest) (*none, error) {
		return &none{}, toRPC(s.Renew(ctx, req.Partition, req.Member, from))
	})
	cluster.RPCHandle(srv, methodAutoCreate, func(ctx context.Context, _ net.Addr, req *autoCreateRequest) (*none, error) {
		return &none{}, toRPC(s.autoCreateHere(ctx, req.Stream, req.Fabrics))
	})
	cluster.RPCHandle(srv, methodIndex, func(ctx context.Context, _ net.Addr, _ *none) (*indexAnswer, error) {
		if !s.group.IsLeader() {
			return nil, toRPC(&NotLeaderError{LeaderID: s.Leader()})
		}
		i, err := s.Index(ctx)
		return &indexAnswer{Index: i}, toRPC(err)
	})
}

// errOlderNode is call's answer for a node of an older version, which
// serves no node-to-node calls.
var errOlderNode = errors.New("meta: the node runs an older version, without node-to-node calls")

// call calls a method of node, at its Raft address as the catalog knows
// it; an answered error comes back as its sentinel.
func (s *Service) call(ctx context.Context, node, method string, req, resp any) error {
	info, ok := s.catalog.Node(node)
	if !ok {
		return fmt.Errorf("meta: node %s is not registered", node)
	}
	if s.cfg.Protocol(info.RaftAddr) == cluster.ProtocolGroups {
		return fmt.Errorf("%w: %s", errOlderNode, node)
	}
	return fromRPC(s.cfg.Client.Call(ctx, info.RaftAddr, method, req, resp))
}

// viewSet holds what nodes reported of their copies: node, partition,
// view.
type viewSet map[string]map[string]View

// of returns what each node that answered reported of a partition.
func (v viewSet) of(partition string) map[string]View {
	out := map[string]View{}
	for node, views := range v {
		if view, ok := views[partition]; ok {
			out[node] = view
		}
	}
	return out
}

// views asks each node of ask (node: partitions) for its copies of those
// partitions: every node at once, one call per node (per maxViews
// partitions). This node's copies are read directly. A node that does not
// answer is left out.
func (s *Service) views(ctx context.Context, ask map[string][]string) viewSet {
	out := viewSet{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for node, parts := range ask {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.viewsOf(ctx, node, parts)
			if err != nil {
				s.logger.Debug("a node did not tell its copies", "node", node, "err", err)
				return
			}
			mu.Lock()
			out[node] = got
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// viewsOf asks one node for its copies of parts.
func (s *Service) viewsOf(ctx context.Context, node string, parts []string) (map[string]View, error) {
	got := make(map[string]View, len(parts))
	for len(parts) > 0 {
		chunk := parts[:min(len(parts), maxViews)]
		parts = parts[len(chunk):]
		var vs []View
		if node == s.cfg.Self.ID {
			vs = s.cfg.Host.Views(chunk)
		} else {
			var ans viewsAnswer
			if err := s.call(ctx, node, methodViews, &viewsRequest{Partitions: chunk}, &ans); err != nil {
				return nil, err
			}
			vs = ans.Views
		}
		if len(vs) != len(chunk) {
			return nil, fmt.Errorf("meta: %d views for %d partitions", len(vs), len(chunk))
		}
		for i, p := range chunk {
			got[p] = vs[i]
		}
	}
	return got, nil
}

// asks collects what to ask which node: node, partitions, each once.
type asks map[string][]string

func (a asks) add(node, partition string) {
	if node != "" && (len(a[node]) == 0 || a[node][len(a[node])-1] != partition) {
		a[node] = append(a[node], partition)
	}
}

// settledViews asks what Settled needs to know of partitions: each one's
// leader as this node knows it, and the views of the leader and of every
// placed node but except's.
func (s *Service) settledViews(ctx context.Context, parts []Repair) (map[string]string, viewSet) {
	leaders := map[string]string{}
	ask := asks{}
	for _, r := range parts {
		leader := s.cfg.Host.LeaderOf(r.Name)
		leaders[r.Name] = leader
		ask.add(leader, r.Name)
		for _, node := range r.Placement {
			if !slices.Contains(r.Leaving, node) {
				ask.add(node, r.Name)
			}
		}
	}
	return leaders, s.views(ctx, ask)
}

// LeaderViews asks each partition's leader, as this node knows it, for
// its copy: one call per leading node. A partition whose leader is not
// known, or did not answer, or no longer leads, is left out.
func (s *Service) LeaderViews(ctx context.Context, partitions []string) map[string]View {
	ask := asks{}
	for _, p := range partitions {
		ask.add(s.cfg.Host.LeaderOf(p), p)
	}
	out := map[string]View{}
	for _, views := range s.views(ctx, ask) {
		for p, v := range views {
			if v.Leader {
				out[p] = v
			}
		}
	}
	return out
}

// Renew places a new member on the node of member, whose copy of
// partition is damaged, as the metadata leader (RenewReplica): the node
// keeps its place and starts from an empty copy. from is the address the
// request came from: only the member's own node may ask, since a renewal
// throws its copy away; nil is this node asking for itself. The errors:
// ErrInvalid, *NotLeaderError, ErrNotAllowed, ErrNotReady (the partition
// is still changing members, or the metadata group failed; ask again),
// ErrNotMember.
func (s *Service) Renew(ctx context.Context, partition, member string, from net.Addr) error {
	pn, err := geofabric.ParsePartition(partition)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !s.group.IsLeader() {
		return &NotLeaderError{LeaderID: s.Leader()}
	}
	if from != nil && !s.fromNode(from, NodeOf(member)) {
		return fmt.Errorf("%w: only node %s may renew its member %s", ErrNotAllowed, NodeOf(member), member)
	}
	if st, ok := s.catalog.Stream(pn.Stream.String()); ok && pn.Number() < len(st.Placement) {
		i := pn.Number()
		r := Repair{Name: partition, Placement: st.Placement[i], Leaving: []string{NodeOf(member)}}
		leaders, views := s.settledViews(ctx, []Repair{r})
		if err := Settled(st.Members(i), r.Placement, r.Leaving, leaders[partition], views.of(partition)); err != nil {
			return fmt.Errorf("%w: partition %s is still changing members (%v); ask again", ErrNotReady, partition, err)
		}
	}
	res, err := s.apply(ctx, RenewReplica{Stream: pn.Stream.String(), Partition: pn.Number(), Member: member})
	if err != nil {
		return err
	}
	if !res.Done {
		return fmt.Errorf("%w: %s is not a member of partition %s", ErrNotMember, member, partition)
	}
	s.logger.Warn("a replica's copy is damaged: its node starts a new member from an empty copy", "partition", partition, "member", member)
	return nil
}

// AskRenewal asks the metadata leader to renew this node's member of a
// partition, whose copy is damaged (Renew).
func (s *Service) AskRenewal(ctx context.Context, partition, member string) error {
	err := s.Renew(ctx, partition, member, nil)
	var nl *NotLeaderError
	if errors.As(err, &nl) && nl.LeaderID != "" {
		err = s.call(ctx, nl.LeaderID, methodRenew, &renewRequest{Partition: partition, Member: member}, nil)
	}
	return err
}

package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fabriq-io/fabriq/cluster/meta"
	"github.com/fabriq-io/fabriq/transport"
)

// host is the node as its control plane (cluster/meta) sees it: what only
// the node can do with its partition copies.
type host struct{ n *Node }

var _ meta.Host = host{}

// Views implements meta.Host: the running copies' member, leadership and
// committed configuration. Retired copies are not reported: they are no
// longer placed here.
func (h host) Views(partitions []string) []meta.View {
	out := make([]meta.View, len(partitions))
	for i, name := range partitions {
		if lp, ok := h.n.partition(name); ok {
			out[i] = meta.View{Member: lp.replica, Leader: lp.group.IsLeader(), Members: h.n.committedConfig(lp)}
		}
	}
	return out
}

// LeaderOf implements meta.Host.
func (h host) LeaderOf(partition string) string {
	id, _ := h.n.leaderOf(partition)
	return id
}

// TransferLeadership implements meta.Host.
func (h host) TransferLeadership(ctx context.Context, partition, member, addr string) error {
	lp, ok := h.n.partition(partition)
	if !ok || !lp.group.IsLeader() {
		return fmt.Errorf("broker: this node does not lead partition %s", partition)
	}
	return lp.group.TransferLeadershipTo(ctx, member, addr)
}

// CatalogChanged implements meta.Host: the node reconciles its partitions.
func (h host) CatalogChanged() { h.n.requestReconcile() }

// committedConfig returns the members of a local copy's Raft
// configuration when that configuration is committed as the copy knows
// it and no change is in flight, nil otherwise: a removal not yet
// committed may still fail, and a node told its member is gone deletes
// the member's copy.
func (n *Node) committedConfig(lp *localPartition) []string {
	st := lp.group.ConfigStatus()
	if !st.Known || st.Pending {
		return nil
	}
	return st.Committed.IDs()
}

// metaError maps an error of the control plane to the wire: its sentinel
// to a code, a *meta.NotLeaderError to NotLeader with the leader's client
// address.
func (n *Node) metaError(err error) error {
	var nl *meta.NotLeaderError
	if errors.As(err, &nl) {
		return n.metaNotLeader(nl.LeaderID)
	}
	msg := strings.TrimPrefix(err.Error(), "meta: ")
	for _, m := range []struct {
		err  error
		code transport.ErrorCode
		// detail drops the sentinel's words: the detail says it all.
		detail bool
	}{
		{meta.ErrInvalid, transport.CodeInvalidArgument, true},
		{meta.ErrStreamExists, transport.CodeStreamExists, false},
		{meta.ErrStreamNotFound, transport.CodeStreamNotFound, false},
		{meta.ErrNotAllowed, transport.CodeNotAllowed, true},
		{meta.ErrNotMember, transport.CodeNotAllowed, true},
		{meta.ErrNotReady, transport.CodeServiceNotReady, true},
	} {
		if errors.Is(err, m.err) {
			if m.detail {
				msg = strings.TrimPrefix(msg, strings.TrimPrefix(m.err.Error(), "meta: ")+": ")
			}
			return wireError(m.code, "%s", msg)
		}
	}
	return err
}

// metaNotLeader is the answer of a node that does not lead the metadata
// group to a request that changes it: NotLeader with the leader's client
// address, or ServiceNotReady while there is none.
func (n *Node) metaNotLeader(id string) error {
	if info, ok := n.catalog.Node(id); ok && id != "" {
		return &transport.Error{Code: transport.CodeNotLeader, Message: "node " + id + " leads the metadata group", LeaderHint: info.ClientAddr}
	}
	return wireError(transport.CodeServiceNotReady, "the metadata group has no leader yet")
}

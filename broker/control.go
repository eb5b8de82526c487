package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/fabriq-io/fabriq/broker/wire"
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
// A partition asleep here has none: its last leader's leadership is not
// to be balanced.
func (h host) LeaderOf(partition string) string {
	if h.n.asleepHere(partition) {
		return ""
	}
	id, _ := h.n.leaderOf(partition)
	return id
}

// InUse implements meta.Host: producers or consumers are attached to the
// copy, which leads.
func (h host) InUse(partition string) bool {
	lp, ok := h.n.partition(partition)
	return ok && lp.group.IsLeader() && lp.Attached()
}

// TransferLeadership implements meta.Host.
func (h host) TransferLeadership(ctx context.Context, partition, member, addr string) error {
	lp, ok := h.n.partition(partition)
	if !ok || !lp.group.IsLeader() {
		return fmt.Errorf("broker: this node does not lead partition %s", partition)
	}
	return lp.group.TransferLeadershipTo(ctx, member, addr)
}

// Wake implements meta.Host: a copy asleep here wakes and rouses the
// others; without one, the replicas are roused.
func (h host) Wake(partition string) {
	if !h.n.wakeCopy(partition, true) {
		h.n.rouseReplicas(partition)
	}
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
		{meta.ErrTenantExists, transport.CodeTenantExists, false},
		{meta.ErrTenantNotFound, transport.CodeTenantNotFound, false},
		{meta.ErrFabricExists, transport.CodeFabricExists, false},
		{meta.ErrFabricNotFound, transport.CodeFabricNotFound, false},
		{meta.ErrNotEmpty, transport.CodeNotEmpty, true},
		{meta.ErrNotAllowed, transport.CodeNotAllowed, true},
		{meta.ErrNotMember, transport.CodeNotAllowed, true},
		{meta.ErrNotReady, transport.CodeServiceNotReady, true},
	} {
		if errors.Is(err, m.err) {
			if m.detail {
				msg = strings.TrimPrefix(msg, strings.TrimPrefix(m.err.Error(), "meta: ")+": ")
			}
			return wire.Errorf(m.code, "%s", msg)
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
	return wire.Errorf(transport.CodeServiceNotReady, "the metadata group has no leader yet")
}

// legacyIndex asks the metadata leader, a node of an older version that
// serves no node-to-node calls, how far its catalog is: ClusterStatus
// over its client port, which it answers after a read barrier. Only
// catching up uses it, during a rolling upgrade (meta.Config.LegacyIndex).
func (n *Node) legacyIndex(ctx context.Context, addr string) (uint64, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	if n.cfg.TLS != nil {
		tc := tls.Client(nc, n.cfg.TLS.PeerClient())
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return 0, err
		}
		nc = tc
	}
	// The connection closes when ctx ends: no read outlives it.
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	conn, err := transport.NewConn(nc, transport.DefaultConfig())
	if err != nil {
		nc.Close()
		return 0, err
	}
	defer conn.Close()
	if _, err := transport.Handshake(ctx, conn, &transport.Connect{ClientName: "fabriqd " + n.cfg.NodeID}); err != nil {
		return 0, err
	}
	if err := conn.Send(ctx, &transport.ClusterStatus{RequestID: 1}); err != nil {
		return 0, err
	}
	cmd, err := conn.Receive()
	if err != nil {
		return 0, err
	}
	res, ok := cmd.(*transport.ClusterStatusResult)
	if !ok || res.Status.Node != res.Status.MetaLeader {
		return 0, fmt.Errorf("broker: %s answered %T, not the metadata leader's status", addr, cmd)
	}
	return res.Status.MetaIndex, nil
}

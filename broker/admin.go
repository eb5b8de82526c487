package broker

import (
	"context"
	"fmt"
	"slices"

	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/cluster/meta"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// lookup answers where a partition's leader is: here, another node's
// client address (from this node's replica or from the routes gossip
// spreads), or an error with a hint.
func (n *Node) lookup(name string) (*transport.LookupResult, error) {
	p, err := geofabric.ParsePartition(name)
	if err != nil {
		return nil, wire.Errorf(transport.CodeInvalidName, "%v", err)
	}
	if _, ok := n.catalog.Stream(p.Stream.String()); !ok {
		return nil, n.streamNotFound("stream %s does not exist", p.Stream)
	}
	if lp, ok := n.partition(name); ok && lp.group.IsLeader() {
		return &transport.LookupResult{Here: true, Address: n.cfg.AdvertiseClientAddr, NodeID: n.cfg.NodeID}, nil
	}
	if id, _ := n.leaderOf(name); id != "" && id != n.cfg.NodeID {
		if info, ok := n.catalog.Node(id); ok {
			return &transport.LookupResult{Address: info.ClientAddr, NodeID: id}, nil
		}
	}
	if _, ok := n.partition(name); ok {
		return nil, wire.Errorf(transport.CodeServiceNotReady, "partition %s has no leader yet", name)
	}
	return nil, n.notHere(name)
}

// streamNotFound is the answer for a stream or partition the catalog does
// not have: StreamNotFound, or ServiceNotReady while the node's catalog
// is catching up after a restart (it may not know the stream yet, and a
// client must not give up on a stream that exists).
func (n *Node) streamNotFound(format string, args ...any) error {
	if !n.catalogCurrent() {
		return wire.Errorf(transport.CodeServiceNotReady, "node %s is catching up with the metadata group", n.cfg.NodeID)
	}
	return wire.Errorf(transport.CodeStreamNotFound, format, args...)
}

// notHere is the answer for a partition this node does not run: a hint to
// a node that does.
func (n *Node) notHere(name string) error {
	p, err := geofabric.ParsePartition(name)
	if err != nil {
		return wire.Errorf(transport.CodeInvalidName, "%v", err)
	}
	sm, ok := n.catalog.Stream(p.Stream.String())
	if !ok {
		return n.streamNotFound("stream %s does not exist", p.Stream)
	}
	i := p.Number()
	if (p.Index < 0) != (sm.Partitions == 1) || i >= sm.Partitions {
		return n.streamNotFound("stream %s has no partition %s", p.Stream, name)
	}
	for _, id := range sm.Placement[i] {
		if info, ok := n.catalog.Node(id); ok {
			return &transport.Error{Code: transport.CodeNotLeader, Message: "partition " + name + " is not on node " + n.cfg.NodeID, LeaderHint: info.ClientAddr}
		}
	}
	return wire.Errorf(transport.CodeServiceNotReady, "partition %s is not open yet", name)
}

// stream parses a stream name and finds it in the catalog, or returns the
// error to answer.
func (n *Node) stream(name string) (geofabric.Stream, meta.Stream, error) {
	st, err := geofabric.ParseStream(name)
	if err != nil {
		return st, meta.Stream{}, wire.Errorf(transport.CodeInvalidName, "%v", err)
	}
	sm, ok := n.catalog.Stream(st.String())
	if !ok {
		return st, sm, n.streamNotFound("stream %s does not exist", st)
	}
	return st, sm, nil
}

func (s *session) createStream(c *transport.CreateStream) {
	ctx, cancel := context.WithTimeout(s.ctx, applyTimeout)
	defer cancel()
	var retention transport.RetentionPolicy
	if c.Retention != nil {
		retention = *c.Retention
	}
	if err := s.n.createStream(ctx, c.Stream, int(c.Partitions), int(c.Replicas), retention); err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	s.reply(&transport.Success{RequestID: c.RequestID})
}

// createStream records a stream with its retention policy in the metadata
// group and waits until its partitions on this node have leaders.
func (n *Node) createStream(ctx context.Context, name string, partitions, replicas int, retention transport.RetentionPolicy) error {
	st, err := geofabric.ParseStream(name)
	if err != nil {
		return wire.Errorf(transport.CodeInvalidName, "%v", err)
	}
	if !n.control.IsLeader() {
		return n.metaNotLeader(n.control.Leader())
	}
	if err := validRetention(retention); err != nil {
		return wire.Errorf(transport.CodeInvalidArgument, "%v", err)
	}
	spec := meta.StreamSpec{Name: st.String(), Partitions: partitions, Replicas: replicas, Retention: retentionFromWire(retention)}
	placement, err := n.control.CreateStream(ctx, spec)
	if err != nil {
		return n.metaError(err)
	}
	for i, p := range st.Partitions(len(placement)) {
		if slices.Contains(placement[i], n.cfg.NodeID) {
			if _, err := n.waitPartition(ctx, p.String()); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *session) deleteStream(c *transport.DeleteStream) {
	st, sm, err := s.n.stream(c.Stream)
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	if !s.n.control.IsLeader() {
		s.replyErr(c.RequestID, s.n.metaNotLeader(s.n.control.Leader()))
		return
	}
	if !c.Force {
		for _, p := range st.Partitions(sm.Partitions) {
			if lp, ok := s.n.partition(p.String()); ok && lp.Attached() {
				s.replyErr(c.RequestID, wire.Errorf(transport.CodeNotAllowed, "stream %s has producers or consumers attached; use force", st))
				return
			}
		}
	}
	if err := s.n.control.DeleteStream(s.ctx, st.String()); err != nil {
		s.replyErr(c.RequestID, s.n.metaError(err))
		return
	}
	s.reply(&transport.Success{RequestID: c.RequestID})
}

func (s *session) setRetention(c *transport.SetRetention) {
	st, _, err := s.n.stream(c.Stream)
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	if err := validRetention(c.Retention); err != nil {
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidArgument, "%v", err))
		return
	}
	if !s.n.control.IsLeader() {
		s.replyErr(c.RequestID, s.n.metaNotLeader(s.n.control.Leader()))
		return
	}
	if err := s.n.control.SetRetention(context.Background(), st.String(), retentionFromWire(c.Retention)); err != nil {
		s.replyErr(c.RequestID, s.n.metaError(err))
		return
	}
	s.reply(&transport.Success{RequestID: c.RequestID})
}

func (s *session) listStreams(c *transport.ListStreams) {
	tenant, fabric, err := geofabric.ParseFabric(c.Fabric)
	if err != nil {
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidName, "%v", err))
		return
	}
	res := &transport.ListStreamsResult{RequestID: c.RequestID, Streams: []string{}}
	for _, m := range s.n.catalog.Streams() {
		st, err := geofabric.ParseStream(m.Name)
		if err == nil && st.Tenant == tenant && st.Fabric == fabric {
			res.Streams = append(res.Streams, m.Name)
		}
	}
	s.reply(res)
}

func (s *session) describeStream(c *transport.DescribeStream) {
	st, sm, err := s.n.stream(c.Stream)
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	info := transport.StreamInfo{Stream: sm.Name, Replicas: int32(sm.Replicas), Retention: retentionToWire(sm.Retention)}
	if c.Partition != nil && (*c.Partition < 0 || int(*c.Partition) >= sm.Partitions) {
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidArgument, "stream %s has partitions 0..%d, not %d", sm.Name, sm.Partitions-1, *c.Partition))
		return
	}
	for i, p := range st.Partitions(sm.Partitions) {
		if c.Partition != nil {
			if int(*c.Partition) != i {
				continue
			}
			if _, err := s.localLeader(p.String()); err != nil {
				s.replyErr(c.RequestID, err)
				return
			}
		}
		pi := transport.PartitionInfo{Partition: int32(i), Replicas: sm.Placement[i], Subscriptions: []transport.SubscriptionInfo{}}
		if lp, ok := s.n.partition(p.String()); ok {
			id, _ := lp.group.Leader()
			pi.Leader = meta.NodeOf(id)
			lp.Describe(&pi)
			// Only a committed configuration: a removal not yet
			// committed may still fail, and a node told its member is
			// gone deletes the member's copy.
			pi.Members = s.n.committedConfig(lp)
		}
		info.Partitions = append(info.Partitions, pi)
	}
	s.reply(&transport.DescribeStreamResult{RequestID: c.RequestID, Info: info})
}

func (s *session) clusterStatus(c *transport.ClusterStatus) {
	s.reply(&transport.ClusterStatusResult{RequestID: c.RequestID, Status: s.n.status()})
}

// status reports the cluster as this node sees it: nodes with their state,
// partitions with their leader and, for replicas on this node, how many
// committed entries they have yet to apply.
func (n *Node) status() transport.ClusterInfo {
	info := transport.ClusterInfo{Node: n.cfg.NodeID, Nodes: []transport.NodeStatus{}, Partitions: []transport.PartitionStatus{}}
	info.MetaLeader = n.control.Leader()
	// On the leader everything committed is applied before the index is
	// told: a restarting node waits for its catalog to reach it.
	ctx, cancel := context.WithTimeout(n.ctx, applyTimeout)
	info.MetaIndex, _ = n.control.Index(ctx)
	cancel()
	for _, nd := range n.catalog.Nodes() {
		info.Nodes = append(info.Nodes, transport.NodeStatus{
			ID: nd.ID, State: n.nodeState(nd.ID), Region: nd.Region, ClientAddr: nd.ClientAddr, RaftAddr: nd.RaftAddr,
		})
	}
	for _, s := range n.catalog.Streams() {
		st, err := geofabric.ParseStream(s.Name)
		if err != nil {
			continue
		}
		for i, p := range st.Partitions(s.Partitions) {
			ps := transport.PartitionStatus{Partition: p.String(), Replicas: []transport.ReplicaStatus{}}
			ps.Leader, ps.Term = n.leaderOf(p.String())
			lp, local := n.partition(p.String())
			for _, id := range s.Placement[i] {
				r := transport.ReplicaStatus{Node: id, Lag: -1}
				if local && id == n.cfg.NodeID {
					r.Lag = lp.group.Lag()
				}
				ps.Replicas = append(ps.Replicas, r)
			}
			info.Partitions = append(info.Partitions, ps)
		}
	}
	return info
}

// retentionFromWire is a retention policy as the catalog keeps it.
func retentionFromWire(p transport.RetentionPolicy) meta.Retention {
	return meta.Retention{
		TimeMs: p.RetentionTimeMs, Bytes: p.RetentionBytes, BacklogQuotaBytes: p.BacklogQuotaBytes,
		BacklogQuotaPolicy: meta.QuotaPolicy(p.BacklogQuotaPolicy), MessageTTLMs: p.MessageTTLMs,
	}
}

// retentionToWire is a catalog's retention policy as clients and
// partitions read it.
func retentionToWire(r meta.Retention) transport.RetentionPolicy {
	return transport.RetentionPolicy{
		RetentionTimeMs: r.TimeMs, RetentionBytes: r.Bytes, BacklogQuotaBytes: r.BacklogQuotaBytes,
		BacklogQuotaPolicy: transport.BacklogQuotaPolicy(r.BacklogQuotaPolicy), MessageTTLMs: r.MessageTTLMs,
	}
}

// validRetention checks a stream's policy.
func validRetention(r transport.RetentionPolicy) error {
	switch {
	case r.RetentionTimeMs < -1:
		return fmt.Errorf("retention time %dms: must be -1 (no limit), 0 or positive", r.RetentionTimeMs)
	case r.RetentionBytes < -1:
		return fmt.Errorf("retention size %d bytes: must be -1 (no limit), 0 or positive", r.RetentionBytes)
	case r.BacklogQuotaBytes < 0:
		return fmt.Errorf("backlog quota %d bytes: must be 0 (none) or positive", r.BacklogQuotaBytes)
	case r.BacklogQuotaPolicy > transport.ConsumerBacklogEviction:
		return fmt.Errorf("backlog quota policy %d: must be producer_exception or consumer_backlog_eviction", r.BacklogQuotaPolicy)
	case r.MessageTTLMs < 0:
		return fmt.Errorf("message TTL %dms: must be 0 (none) or positive", r.MessageTTLMs)
	}
	return nil
}

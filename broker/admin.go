package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/fabriq-io/fabriq/broker/partition"
	"github.com/fabriq-io/fabriq/broker/session"
	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/cluster"
	"github.com/fabriq-io/fabriq/cluster/meta"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// sessionNode is the node as its client sessions see it: the partitions
// it leads, lookups and admin operations.
type sessionNode struct{ n *Node }

var _ session.Node = sessionNode{}

func (h sessionNode) LocalLeader(name string) (*partition.Partition, error) {
	return h.n.localLeader(name)
}

func (h sessionNode) Lookup(name string) (*transport.LookupResult, error) { return h.n.lookup(name) }

func (h sessionNode) LookupWait(ctx context.Context, name string, hints bool, unreachable string) (*transport.LookupResult, error) {
	return h.n.lookupWait(ctx, name, hints, unreachable)
}

func (h sessionNode) Partitions(ctx context.Context, stream string) (int, error) {
	_, sm, err := h.n.stream(stream)
	if err != nil && transport.CodeOf(err) == transport.CodeStreamNotFound && !h.n.cfg.NoAutoCreate {
		sm, err = h.n.autoCreate(ctx, stream)
	}
	return sm.Partitions, err
}

func (h sessionNode) CreateStream(ctx context.Context, c *transport.CreateStream) error {
	return h.n.createStream(ctx, c)
}

func (h sessionNode) DeleteStream(ctx context.Context, name string, force bool) error {
	return h.n.deleteStream(ctx, name, force)
}

func (h sessionNode) SetRetention(ctx context.Context, name string, retention transport.RetentionPolicy) error {
	return h.n.setRetention(ctx, name, retention)
}

func (h sessionNode) Streams() []string { return h.n.streamNames() }

func (h sessionNode) SyncCatalog(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if err := h.n.control.Sync(ctx); err != nil {
		return wire.Errorf(transport.CodeServiceNotReady, "the metadata leader cannot confirm this node's catalog is current: %v", err)
	}
	return nil
}

func (h sessionNode) StreamsChanged() <-chan struct{} { return h.n.catalog.Watch() }

func (h sessionNode) DescribeStream(name string, only *int32) (transport.StreamInfo, error) {
	return h.n.describeStream(name, only)
}

func (h sessionNode) ClusterStatus() transport.ClusterInfo { return h.n.status() }

func (h sessionNode) RenewReplica(partition, member string, from net.Addr) error {
	return h.n.renewReplica(partition, member, from)
}

// lookup answers where a partition's leader is: here, another node's
// client address (from this node's replica or from the routes gossip
// spreads), or an error with a hint.
func (n *Node) lookup(name string) (*transport.LookupResult, error) {
	p, err := geofabric.ParsePartition(name)
	if err != nil {
		return nil, wire.Errorf(transport.CodeInvalidName, "%v", err)
	}
	// A stream created a moment ago through another node may not be in
	// this node's catalog yet: stream looks again after a sync.
	if _, _, err := n.stream(p.Stream.String()); err != nil {
		return nil, err
	}
	lp, here := n.partition(name)
	if here && lp.group.IsLeader() {
		return &transport.LookupResult{Here: true, Address: n.cfg.AdvertiseClientAddr, NodeID: n.cfg.NodeID}, nil
	}
	if !here && n.wakeCopy(name, true) {
		return nil, asleepError(name)
	}
	if here && lp.group.LeaderGone() {
		// Its followers here are electing the successor: the client
		// would only find the old leader's port closed.
		return nil, wire.Errorf(transport.CodeServiceNotReady, "partition %s: the process of its leader's node is gone; a new leader is being elected", name)
	}
	if id, _ := n.leaderOf(name); id != "" && id != n.cfg.NodeID {
		if info, ok := n.catalog.Node(id); ok {
			if n.mux.Gone(info.RaftAddr) || !n.mayLead(id) {
				// A route gossip spread before the node died (this node's
				// replica, if any, knows no leader): naming it would send
				// the client to a closed port. Holding no copy, this node
				// asks the replicas to wake, in case the partition slept
				// when its leader's node went.
				if !here {
					n.rouseReplicas(name)
				}
				return nil, wire.Errorf(transport.CodeServiceNotReady, "partition %s: node %s, its last known leader, is gone; a new leader is being elected", name, id)
			}
			return &transport.LookupResult{Address: info.ClientAddr, NodeID: id}, nil
		}
	}
	if here {
		return nil, wire.Errorf(transport.CodeServiceNotReady, "partition %s has no leader yet", name)
	}
	return nil, n.notHere(name)
}

// lookupRetry is how often lookupWait asks again for a partition whose
// leadership it cannot watch: one this node does not run, whose leader
// gossip tells.
const lookupRetry = 50 * time.Millisecond

// lookupWait is lookup that waits, until ctx ends, while the partition has
// no leader to name, and then returns the last answer; with hints, a
// NotLeader that names a node holding the partition is answered at once
// (the client follows it). For a partition
// this node runs, it asks again as soon as its group's leadership changes:
// a client waiting through a failover hears of the new leader as soon as
// this node does.
//
// unreachable is the client address of a leader the client could not
// connect to. A node that would name it probes that node's Raft port once
// (cluster.Mux.ProbeReported): found gone, the node is marked so, its
// groups' successors here stand at once, and the lookup waits for the next
// leader; found alive, it is named. A client killed a leader's process
// often learns of it before the leader's peers do: without this, the node
// named the dead leader again, and the client waited out a backoff.
func (n *Node) lookupWait(ctx context.Context, name string, hints bool, unreachable string) (*transport.LookupResult, error) {
	var watch *cluster.LeaderWatch
	defer func() {
		if watch != nil {
			watch.Stop()
		}
	}()
	var changed <-chan cluster.Leadership
	t := time.NewTicker(lookupRetry)
	defer t.Stop()
	probed := false
	for {
		res, err := n.lookup(name)
		if err == nil && !res.Here && unreachable != "" && res.Address == unreachable && !probed {
			probed = true
			if info, ok := n.catalog.Node(res.NodeID); ok && n.mux.ProbeReported(ctx, info.RaftAddr) {
				res, err = n.lookup(name) // its successors stand: the node is gone now
			}
		}
		var te *transport.Error
		switch code := transport.CodeOf(err); {
		case code == transport.CodeNotLeader && hints && errors.As(err, &te) && te.LeaderHint != "":
			return nil, err
		case code != transport.CodeNotLeader && code != transport.CodeServiceNotReady:
			return res, err
		}
		if watch == nil {
			if lp, ok := n.partition(name); ok {
				watch = lp.group.WatchLeader()
				changed = watch.C
			}
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-t.C:
		case _, open := <-changed:
			if !open {
				changed = nil // the group closed: the ticker alone
			}
		}
	}
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
	_, sm, err := n.stream(p.Stream.String())
	if err != nil {
		return err
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
		// It may have been created a moment ago through another node:
		// look again once this node's catalog holds everything committed.
		ctx, cancel := context.WithTimeout(context.Background(), syncTimeout)
		defer cancel()
		if err := n.control.Sync(ctx); err != nil {
			return st, sm, wire.Errorf(transport.CodeServiceNotReady, "stream %s is not known here and the metadata leader cannot confirm it: %v", st, err)
		}
		if sm, ok = n.catalog.Stream(st.String()); !ok {
			return st, sm, n.streamNotFound("stream %s does not exist", st)
		}
	}
	return st, sm, nil
}

// syncTimeout bounds the wait for the catalog to catch up before a stream
// is answered missing.
const syncTimeout = 2 * time.Second

// createStream records a stream with its retention policy in the metadata
// group and waits until its partitions on this node have leaders.
func (n *Node) createStream(ctx context.Context, c *transport.CreateStream) error {
	st, err := geofabric.ParseStream(c.Stream)
	if err != nil {
		return wire.Errorf(transport.CodeInvalidName, "%v", err)
	}
	if !n.control.IsLeader() {
		return n.metaNotLeader(n.control.Leader())
	}
	spec := meta.StreamSpec{Name: st.String(), Partitions: int(c.Partitions), Replicas: int(c.Replicas),
		Local: c.Local, LeaderRegion: c.LeaderRegion}
	if c.Retention != nil {
		if err := validRetention(*c.Retention); err != nil {
			return wire.Errorf(transport.CodeInvalidArgument, "%v", err)
		}
		r := retentionFromWire(*c.Retention)
		spec.Retention = &r
	}
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

// localLeader finds a partition this node leads, or the error to answer.
func (n *Node) localLeader(name string) (*partition.Partition, error) {
	if _, err := geofabric.ParsePartition(name); err != nil {
		return nil, wire.Errorf(transport.CodeInvalidName, "%v", err)
	}
	lp, ok := n.partition(name)
	if !ok && n.wakeCopy(name, true) {
		return nil, asleepError(name)
	}
	if !ok {
		return nil, n.notHere(name)
	}
	if !lp.group.IsLeader() {
		return nil, n.notLeaderError(name, lp.group)
	}
	return lp.Partition, nil
}

// deleteStream removes a stream from the metadata group, unless producers
// or consumers are attached to its partitions on this node and not force.
func (n *Node) deleteStream(ctx context.Context, name string, force bool) error {
	st, sm, err := n.stream(name)
	if err != nil {
		return err
	}
	if !n.control.IsLeader() {
		return n.metaNotLeader(n.control.Leader())
	}
	if !force {
		for _, p := range st.Partitions(sm.Partitions) {
			if lp, ok := n.partition(p.String()); ok && lp.Attached() {
				return wire.Errorf(transport.CodeNotAllowed, "stream %s has producers or consumers attached; use force", st)
			}
		}
	}
	if err := n.control.DeleteStream(ctx, st.String()); err != nil {
		return n.metaError(err)
	}
	return nil
}

// setRetention changes a stream's retention policy in the metadata group.
func (n *Node) setRetention(ctx context.Context, name string, retention transport.RetentionPolicy) error {
	st, _, err := n.stream(name)
	if err != nil {
		return err
	}
	if err := validRetention(retention); err != nil {
		return wire.Errorf(transport.CodeInvalidArgument, "%v", err)
	}
	if !n.control.IsLeader() {
		return n.metaNotLeader(n.control.Leader())
	}
	if err := n.control.SetRetention(ctx, st.String(), retentionFromWire(retention)); err != nil {
		return n.metaError(err)
	}
	return nil
}

// streamNames returns the name of every stream in the catalog.
func (n *Node) streamNames() []string {
	var names []string
	for _, m := range n.catalog.Streams() {
		names = append(names, m.Name)
	}
	return names
}

// describeStream describes a stream and its partitions as this node
// knows them; with only, that partition alone, which this node must lead.
func (n *Node) describeStream(name string, only *int32) (transport.StreamInfo, error) {
	st, sm, err := n.stream(name)
	if err != nil {
		return transport.StreamInfo{}, err
	}
	info := transport.StreamInfo{Stream: sm.Name, Replicas: int32(sm.Replicas), Retention: retentionToWire(sm.Retention),
		Local: sm.Local, LeaderRegion: sm.LeaderRegion}
	if only != nil && (*only < 0 || int(*only) >= sm.Partitions) {
		return transport.StreamInfo{}, wire.Errorf(transport.CodeInvalidArgument, "stream %s has partitions 0..%d, not %d", sm.Name, sm.Partitions-1, *only)
	}
	for i, p := range st.Partitions(sm.Partitions) {
		if only != nil {
			if int(*only) != i {
				continue
			}
			if _, err := n.localLeader(p.String()); err != nil {
				return transport.StreamInfo{}, err
			}
		}
		pi := transport.PartitionInfo{Partition: int32(i), Replicas: sm.Placement[i], Regions: n.regionsOf(sm.Placement[i]), Subscriptions: []transport.SubscriptionInfo{}}
		if lp, ok := n.partition(p.String()); ok {
			id, _ := lp.group.Leader()
			pi.Leader = meta.NodeOf(id)
			lp.Describe(&pi)
			// Only a committed configuration: a removal not yet
			// committed may still fail, and a node told its member is
			// gone deletes the member's copy.
			pi.Members = n.committedConfig(lp)
		}
		info.Partitions = append(info.Partitions, pi)
	}
	return info, nil
}

// regionsOf returns the regions of nodes, as the catalog has them; nil
// when none has a region.
func (n *Node) regionsOf(nodes []string) []string {
	out := make([]string, len(nodes))
	known := false
	for i, id := range nodes {
		if info, ok := n.catalog.Node(id); ok && info.Region != "" {
			out[i], known = info.Region, true
		}
	}
	if !known {
		return nil
	}
	return out
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
	info.FreeDisk, info.MinFreeDisk = n.disk.reading()
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
			if n.asleepHere(p.String()) {
				ps.Leader, ps.Asleep = "", true
			}
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

package meta

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fabriq-io/fabriq/cluster"
	"github.com/fabriq-io/fabriq/geofabric"
)

// bootstrapLoop waits until gossip shows BootstrapExpect live nodes and,
// if this node is among the BootstrapExpect lowest ids, bootstraps the
// metadata group with them. Every such node computes the same set and
// bootstraps with the same configuration, which Raft allows; the others
// wait for the leader to add them. A group that has a configuration
// already is left alone.
func (s *Service) bootstrapLoop() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if servers, err := s.group.Servers(s.ctx); err == nil && len(servers) > 0 {
			return
		}
		if set, ok := bootstrapSet(s.cfg.Gossip.Members(), s.cfg.BootstrapExpect); ok {
			if slices.ContainsFunc(set, func(sv cluster.Server) bool { return sv.ID == s.cfg.Self.ID }) {
				if err := s.group.Bootstrap(s.ctx, set); err != nil {
					s.logger.Error("bootstrapping the metadata group failed", "err", err)
				} else {
					s.logger.Info("bootstrapped the metadata group", "voters", len(set))
				}
			}
			return
		}
		select {
		case <-s.ctx.Done():
			return
		case <-s.cfg.Gossip.Changed():
		case <-tick.C:
		}
	}
}

// bootstrapSet returns the voters that bootstrap the metadata group: the
// expect live members of lowest id, once there are that many.
func bootstrapSet(members []cluster.Member, expect int) ([]cluster.Server, bool) {
	var live []cluster.Member
	for _, m := range members {
		if m.State == cluster.MemberAlive {
			live = append(live, m)
		}
	}
	if len(live) < expect {
		return nil, false
	}
	slices.SortFunc(live, func(a, b cluster.Member) int { return strings.Compare(a.ID, b.ID) })
	var set []cluster.Server
	for _, m := range live[:expect] {
		set = append(set, cluster.Server{ID: m.ID, Address: m.RaftAddr, Voter: true})
	}
	return set, true
}

// leaderLoop runs on every node and does the metadata leader's work while
// this node leads: it records the nodes gossip sees in the catalog and
// the metadata group, and moves the replicas of dead nodes.
func (s *Service) leaderLoop() {
	w := s.group.WatchLeader()
	defer w.Stop()
	tick := time.NewTicker(leaderTick)
	defer tick.Stop()
	leader := false
	var changes <-chan struct{}
	if s.cfg.Gossip != nil {
		changes = s.cfg.Gossip.Changed()
	}
	for {
		select {
		case <-s.ctx.Done():
			return
		case l, ok := <-w.C:
			if !ok {
				return
			}
			leader = l.IsLeader
		case <-changes:
		case <-tick.C:
		}
		if leader {
			s.reconcileMembers()
			s.ensureDefaults()
			s.replaceDead()
		}
	}
}

// ensureDefaults creates DefaultTenant/DefaultFabric while the catalog
// lacks them (a new cluster, or one upgraded from a version without
// fabrics, once every node reads them).
func (s *Service) ensureDefaults() {
	if _, ok := s.catalog.Fabric(geofabric.DefaultTenant + "/" + geofabric.DefaultFabric); ok {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
	defer cancel()
	if err := s.ensureDefaultFabric(ctx); err != nil {
		s.noteOnce("default-fabric", true, "cannot create the default fabric yet", "err", err)
		return
	}
	s.noteOnce("default-fabric", false, "")
	s.logger.Info("created the default fabric", "fabric", geofabric.DefaultTenant+"/"+geofabric.DefaultFabric)
}

// liveNodes returns the nodes to register: those gossip sees alive, as
// they advertise themselves; this node alone without gossip.
func (s *Service) liveNodes() []Node {
	if s.cfg.Gossip == nil {
		return []Node{s.cfg.Self}
	}
	var want []Node
	for _, m := range s.cfg.Gossip.Members() {
		if m.State == cluster.MemberAlive {
			want = append(want, Node{ID: m.ID, ClientAddr: m.ClientAddr, RaftAddr: m.RaftAddr, Region: m.Region})
		}
	}
	slices.SortFunc(want, func(a, b Node) int { return strings.Compare(a.ID, b.ID) })
	return want
}

// reconcileMembers registers the live nodes in the catalog and adds them
// to the metadata group.
func (s *Service) reconcileMembers() {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
	defer cancel()
	want := s.liveNodes()
	for _, n := range Registrations(want, s.catalog.Node) {
		if _, err := s.apply(ctx, RegisterNode(n)); err != nil {
			s.logger.Warn("registering a node failed", "node", n.ID, "err", err)
			return
		}
	}
	servers, err := s.group.Servers(ctx)
	if err != nil {
		return
	}
	for _, c := range MetaChanges(want, servers, MaxVoters) {
		add, what := s.group.AddNonvoter, "non-voter"
		if c.Voter {
			add, what = s.group.AddVoter, "voter"
		}
		if err := add(ctx, c.ID, c.Addr); err != nil {
			s.logger.Warn("adding a metadata "+what+" failed", "node", c.ID, "err", err)
		}
	}
}

// replaceDead moves the replicas of nodes dead for longer than
// ReplaceDeadAfter to live nodes: for each partition that may move one
// (FindRepairs) and has settled its last change (Settled, one batched
// call per node for the whole round), one entry swaps a dead node for the
// least loaded live node (Target). The partition's leader then changes its
// group to match.
func (s *Service) replaceDead() {
	if s.cfg.Gossip == nil || s.cfg.ReplaceDeadAfter <= 0 {
		return
	}
	members := s.cfg.Gossip.Members()
	dead := DeadNodes(members, s.cfg.Self.ID, time.Now(), s.cfg.ReplaceDeadAfter)
	if len(dead) == 0 {
		return
	}
	live := LiveNodes(members, s.cfg.Self.ID)
	streams := s.catalog.Streams()
	repairs, lost := FindRepairs(streams, dead, live)
	s.noteLost(lost)
	if len(repairs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
	defer cancel()
	leaders, views := s.settledViews(ctx, repairs)
	load := Load(streams)
	for _, r := range repairs {
		if err := Settled(r.Members, r.Placement, r.Leaving, leaders[r.Name], views.of(r.Name)); err != nil {
			if lv, ok := views.of(r.Name)[leaders[r.Name]]; !ok || !lv.Leader {
				// No leader known, or the one known does not lead: the
				// partition may sleep, or its leader's node be the dead
				// one. Waking it lets the group elect and settle.
				s.cfg.Host.Wake(r.Name)
			}
			s.noteOnce("unsettled "+r.Key(), true, "partition has a dead replica but has not finished its last membership change; not moving it yet",
				"stream", r.Stream, "partition", r.Partition, "reason", err)
			continue
		}
		s.noteOnce("unsettled "+r.Key(), false, "")
		if !s.move(ctx, r, live, load) {
			return
		}
	}
}

// move proposes the move of one of a partition's dead replicas to the
// least loaded live node, and counts it in load. It reports false when
// the metadata group failed: the round ends.
func (s *Service) move(ctx context.Context, r Repair, live []string, load map[string]int) bool {
	regionOf := map[string]string{}
	for _, n := range s.catalog.Nodes() {
		regionOf[n.ID] = n.Region
	}
	spread := s.spreadOf(r.Stream)
	for _, old := range r.Leaving {
		to, ok := Target(r.Placement, old, live, load, regionOf, spread)
		if !ok {
			s.noteOnce("full "+r.Key(), true, "no live node to move a replica to",
				"stream", r.Stream, "partition", r.Partition, "from", old, "replicas", r.Placement)
			continue
		}
		s.noteOnce("full "+r.Key(), false, "")
		if _, err := s.apply(ctx, ReplaceReplica{Stream: r.Stream, Partition: r.Partition, Old: old, New: to}); err != nil {
			s.logger.Warn("moving a replica failed", "stream", r.Stream, "partition", r.Partition, "from", old, "err", err)
			return false
		}
		s.logger.Info("replica moved off a dead node", "stream", r.Stream, "partition", r.Partition, "from", old, "to", to)
		load[to]++
		load[old]--
		return true // one move per partition per round
	}
	return true
}

// spreadOf returns where a stream's replicas may go, from the catalog.
func (s *Service) spreadOf(stream string) Spread {
	st, ok := s.catalog.Stream(stream)
	if !ok {
		return Spread{}
	}
	f, _ := s.catalog.Fabric(fabricOf(stream))
	return SpreadOf(st, f.Regions)
}

// noteLost logs, once per partition until it recovers, the partitions
// whose live replicas are not a majority.
func (s *Service) noteLost(lost []Repair) {
	keys := map[string]bool{}
	for _, r := range lost {
		keys["lost "+r.Key()] = true
		s.noteOnce("lost "+r.Key(), true, "partition has lost the majority of its replicas; not moving them",
			"stream", r.Stream, "partition", r.Partition, "replicas", r.Placement)
	}
	for k := range s.notes {
		if strings.HasPrefix(k, "lost ") && !keys[k] {
			delete(s.notes, k)
		}
	}
}

// noteOnce logs msg as a warning the first time a condition (key) holds,
// and forgets it when it no longer does (on is false), so that a
// condition that lasts is logged once, not every round.
func (s *Service) noteOnce(key string, on bool, msg string, args ...any) {
	if !on {
		delete(s.notes, key)
		return
	}
	if !s.notes[key] {
		s.notes[key] = true
		s.logger.Warn(msg, args...)
	}
}

// balanceLoop evens out partition leaders: every BalanceInterval, a node
// that leads more than its share hands leaderships to replicas that lead
// less (BalanceLeaders), up to balanceMovesPerRound of them,
// balanceMovesAtOnce at a time. A node that led a thousand partitions
// after its peers restarted needed 45 minutes to shed them one a round;
// a bounded batch evens them out in under a minute and keeps the
// elections it costs (one per move, planned) few at any moment.
func (s *Service) balanceLoop() {
	tick := time.NewTicker(s.cfg.BalanceInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		if s.cfg.Gossip != nil {
			s.balance()
		}
	}
}

// balance makes one round of balanceLoop.
func (s *Service) balance() {
	leaders := map[string]string{}
	replicas := map[string][]string{}
	preferred := map[string][]string{}
	members := map[string][]string{}
	inUse := map[string]bool{}
	regionOf := map[string]string{}
	for _, n := range s.catalog.Nodes() {
		regionOf[n.ID] = n.Region
	}
	for _, st := range s.catalog.Streams() {
		names, err := st.PartitionNames()
		if err != nil {
			continue
		}
		for i, name := range names {
			if id := s.cfg.Host.LeaderOf(name); id != "" && i < len(st.Placement) {
				leaders[name] = id
				if id == s.cfg.Self.ID && s.cfg.Host.InUse(name) {
					inUse[name] = true
				}
				replicas[name] = st.Placement[i]
				members[name] = st.Members(i)
				if st.LeaderRegion != "" {
					preferred[name] = slices.DeleteFunc(slices.Clone(st.Placement[i]), func(n string) bool { return regionOf[n] != st.LeaderRegion })
				}
			}
		}
	}
	moves := BalanceLeaders(s.cfg.Self.ID, leaders, replicas, preferred, LiveNodes(s.cfg.Gossip.Members(), s.cfg.Self.ID), inUse, balanceMovesPerRound)
	var g errgroup.Group
	g.SetLimit(balanceMovesAtOnce)
	var done atomic.Int64
	for _, move := range moves {
		info, known := s.catalog.Node(move.To)
		if !known {
			continue
		}
		to := move.To
		for _, id := range members[move.Partition] {
			if NodeOf(id) == move.To {
				to = id
			}
		}
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(s.ctx, transferTimeout)
			defer cancel()
			if err := s.cfg.Host.TransferLeadership(ctx, move.Partition, to, info.RaftAddr); err != nil {
				s.logger.Debug("leader balancing transfer failed", "partition", move.Partition, "to", move.To, "err", err)
			} else {
				s.logger.Debug("leadership handed over", "partition", move.Partition, "to", move.To)
				done.Add(1)
			}
			return nil
		})
	}
	g.Wait()
	if n := done.Load(); n > 0 {
		s.logger.Info("leaderships handed over to even out leaders or to their leader region", "moved", n, "planned", len(moves))
	}
}

package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fabriq-io/fabriq/cluster"
	"github.com/fabriq-io/fabriq/cluster/meta"
	"github.com/fabriq-io/fabriq/geofabric"
)

// member is a node as gossip knows it.
type member struct {
	meta.Node
	State string    // alive, dead, left
	Since time.Time // when this node saw State begin
}

// gossip is what the node needs of cluster membership and of the leader
// routing table that travels with it (cluster's Membership and routes).
type gossip interface {
	// members returns every node gossip knows, itself included.
	members() []member
	// changed is signalled (without blocking the sender) whenever
	// membership changes.
	changed() <-chan struct{}
	// announce tells the cluster that leader leads partition in term.
	announce(partition, leader string, term uint64)
	// route returns a partition's leader as last announced.
	route(partition string) (leader string, term uint64, ok bool)
	// forget drops a deleted partition's route.
	forget(partition string)
	// leave tells the others this node is going, then stops gossiping.
	leave(ctx context.Context) error
	close() error
}

// alive returns the members gossip sees alive, sorted by id.
func alive(g gossip) []member {
	var out []member
	for _, m := range g.members() {
		if m.State == "alive" {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b member) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// bootstrapLoop waits until gossip shows BootstrapExpect nodes and, if
// this node is among the BootstrapExpect lowest ids, bootstraps the
// metadata group with them. Every such node computes the same set and
// bootstraps with the same configuration, which Raft allows; the others
// wait for the leader to add them. A group that already has state is left
// alone.
func (n *Node) bootstrapLoop() {
	defer n.wg.Done()
	ctx := n.ctx
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if servers, err := n.meta.Servers(ctx); err == nil && len(servers) > 0 {
			return
		}
		if ms := alive(n.gossip); len(ms) >= n.cfg.BootstrapExpect {
			set := ms[:n.cfg.BootstrapExpect]
			if slices.ContainsFunc(set, func(m member) bool { return m.ID == n.cfg.NodeID }) {
				var servers []cluster.Server
				for _, m := range set {
					servers = append(servers, cluster.Server{ID: m.ID, Address: m.RaftAddr, Voter: true})
				}
				if err := n.meta.Bootstrap(ctx, servers); err != nil {
					n.logger.Error("bootstrapping the metadata group failed", "err", err)
				} else {
					n.logger.Info("bootstrapped the metadata group", "voters", len(servers))
				}
			}
			return
		}
		select {
		case <-n.stop:
			return
		case <-n.gossip.changed():
		case <-tick.C:
		}
	}
}

// maxMetaVoters bounds the metadata group's voters; other nodes replicate
// it as non-voters.
const maxMetaVoters = 5

// metaLeaderLoop runs on every node and does the metadata leader's work
// while this node is the leader: it records the nodes gossip sees (their
// addresses) in the catalog, and adds them to the metadata group.
func (n *Node) metaLeaderLoop() {
	defer n.wg.Done()
	w := n.meta.WatchLeader()
	defer w.Stop()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	leader := false
	var changes <-chan struct{}
	if n.gossip != nil {
		changes = n.gossip.changed()
	}
	for {
		select {
		case <-n.stop:
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
			n.reconcileMembers()
			n.replaceDead()
		}
	}
}

// replaceDead moves the replicas of nodes dead for longer than
// ReplaceDeadAfter to live nodes: for each partition, one metadata entry
// swaps the dead node for the least loaded live node not yet holding a
// replica. The partition's leader then changes its Raft group to match.
func (n *Node) replaceDead() {
	if n.gossip == nil || n.cfg.ReplaceDeadAfter <= 0 {
		return
	}
	dead := map[string]bool{}
	for _, m := range n.gossip.members() {
		if m.State != "alive" && time.Since(m.Since) > n.cfg.ReplaceDeadAfter {
			dead[m.ID] = true
		}
	}
	if len(dead) == 0 {
		return
	}
	live := alive(n.gossip)
	// This node is alive, whatever its own gossip table says of it (a
	// record left suspect by a refuted suspicion must not keep it from
	// taking replicas).
	if !slices.ContainsFunc(live, func(m member) bool { return m.ID == n.cfg.NodeID }) {
		if self, ok := n.catalog.Node(n.cfg.NodeID); ok {
			live = append(live, member{Node: self, State: "alive"})
		}
	}
	delete(dead, n.cfg.NodeID)
	load := map[string]int{}
	for _, s := range n.catalog.Streams() {
		for _, p := range s.Placement {
			for _, id := range p {
				load[id]++
			}
		}
	}
	ctx, cancel := context.WithTimeout(n.ctx, applyTimeout)
	defer cancel()
	for _, s := range n.catalog.Streams() {
		for i, replicas := range s.Placement {
			// A partition whose live replicas are not a majority cannot
			// change its Raft group: moving replicas would not bring it
			// back and would hand its place to empty copies. At most one
			// replica of a partition moves per round, so the group
			// changes one member at a time.
			liveCount := 0
			for _, id := range replicas {
				if !dead[id] && slices.ContainsFunc(live, func(m member) bool { return m.ID == id }) {
					liveCount++
				}
			}
			key := fmt.Sprintf("%s/%d", s.Name, i)
			if liveCount < len(replicas)/2+1 {
				if slices.ContainsFunc(replicas, func(id string) bool { return dead[id] }) && !n.majorityLost[key] {
					n.logger.Warn("partition has lost the majority of its replicas; not moving them", "stream", s.Name, "partition", i, "replicas", replicas)
					n.majorityLost[key] = true
				}
				continue
			}
			delete(n.majorityLost, key)
			if !slices.ContainsFunc(replicas, func(id string) bool { return dead[id] }) {
				continue
			}
			var leaving []string
			for _, id := range replicas {
				if dead[id] {
					leaving = append(leaving, id)
				}
			}
			if err := n.settled(s, i, leaving); err != nil {
				if !n.majorityLost[key+" unsettled"] {
					n.logger.Warn("partition has a dead replica but has not finished its last membership change; not moving it yet", "stream", s.Name, "partition", i, "reason", err)
					n.majorityLost[key+" unsettled"] = true
				}
				continue
			}
			delete(n.majorityLost, key+" unsettled")
			for _, old := range replicas {
				if !dead[old] {
					continue
				}
				var best *member
				for j := range live {
					cand := &live[j]
					if slices.Contains(replicas, cand.ID) {
						continue
					}
					if best == nil || load[cand.ID] < load[best.ID] {
						best = cand
					}
				}
				if best == nil {
					if !n.majorityLost[key+" full"] {
						n.logger.Warn("no live node to move a replica to", "stream", s.Name, "partition", i, "from", old, "replicas", replicas)
						n.majorityLost[key+" full"] = true
					}
					continue
				}
				delete(n.majorityLost, key+" full")
				data, err := meta.Encode(meta.ReplaceReplica{Stream: s.Name, Partition: i, Old: old, New: best.ID})
				if err != nil {
					return
				}
				if _, err := n.meta.Apply(ctx, data); err != nil {
					n.logger.Warn("moving a replica failed", "stream", s.Name, "partition", i, "from", old, "err", err)
					return
				}
				n.logger.Info("replica moved off a dead node", "stream", s.Name, "partition", i, "from", old, "to", best.ID)
				load[best.ID]++
				load[old]--
				break // one move per partition per round
			}
		}
	}
}

// reconcileMembers registers live nodes in the catalog and the metadata
// group. Without gossip the node registers itself.
func (n *Node) reconcileMembers() {
	ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
	defer cancel()
	self := meta.Node{ID: n.cfg.NodeID, ClientAddr: n.cfg.AdvertiseClientAddr, RaftAddr: n.cfg.AdvertiseRaftAddr, Region: n.cfg.Region}
	want := []meta.Node{self}
	if n.gossip != nil {
		want = want[:0]
		for _, m := range alive(n.gossip) {
			want = append(want, m.Node)
		}
	}
	for _, ni := range want {
		if have, ok := n.catalog.Node(ni.ID); ok && have == ni {
			continue
		}
		data, err := meta.Encode(meta.RegisterNode(ni))
		if err != nil {
			return
		}
		if _, err := n.meta.Apply(ctx, data); err != nil {
			n.logger.Warn("registering a node failed", "node", ni.ID, "err", err)
			return
		}
	}
	servers, err := n.meta.Servers(ctx)
	if err != nil {
		return
	}
	voters := 0
	have := map[string]cluster.Server{}
	for _, s := range servers {
		have[s.ID] = s
		if s.Voter {
			voters++
		}
	}
	for _, ni := range want {
		s, ok := have[ni.ID]
		switch {
		case !ok && voters < maxMetaVoters, ok && s.Address != ni.RaftAddr && s.Voter:
			// A new node, or a known one back at another address.
			if err := n.meta.AddVoter(ctx, ni.ID, ni.RaftAddr); err != nil {
				n.logger.Warn("adding a metadata voter failed", "node", ni.ID, "err", err)
				continue
			}
			if !ok {
				voters++
			}
		case !ok, ok && s.Address != ni.RaftAddr:
			if err := n.meta.AddNonvoter(ctx, ni.ID, ni.RaftAddr); err != nil {
				n.logger.Warn("adding a metadata non-voter failed", "node", ni.ID, "err", err)
			}
		}
	}
}

// balanceInterval is how often a node checks whether it leads more than
// its share of partitions.
const balanceInterval = 5 * time.Second

// balanceLoop evens out partition leaders: every balanceInterval, a node
// that leads more than its share hands one leadership to a replica that
// leads less. One move per round per node keeps the cluster calm.
func (n *Node) balanceLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(balanceInterval)
	defer tick.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-tick.C:
		}
		if n.gossip == nil {
			continue
		}
		leaders := map[string]string{}
		replicas := map[string][]string{}
		for _, s := range n.catalog.Streams() {
			st, err := geofabric.ParseStream(s.Name)
			if err != nil {
				continue
			}
			for i, p := range st.Partitions(s.Partitions) {
				if id, _ := n.leaderOf(p.String()); id != "" && i < len(s.Placement) {
					leaders[p.String()] = id
					replicas[p.String()] = s.Placement[i]
				}
			}
		}
		var live []string
		for _, m := range alive(n.gossip) {
			live = append(live, m.ID)
		}
		move, ok := meta.BalanceLeaders(n.cfg.NodeID, leaders, replicas, live)
		if !ok {
			continue
		}
		lp, ok := n.partition(move.Partition)
		info, known := n.catalog.Node(move.To)
		if !ok || !known || !lp.group.IsLeader() {
			continue
		}
		ctx, cancel := context.WithTimeout(n.ctx, transferTimeout)
		to := move.To
		for _, id := range n.replicasOf(move.Partition) {
			if meta.NodeOf(id) == move.To {
				to = id
			}
		}
		if err := lp.group.TransferLeadershipTo(ctx, to, info.RaftAddr); err != nil {
			n.logger.Debug("leader balancing transfer failed", "partition", move.Partition, "to", move.To, "err", err)
		} else {
			n.logger.Info("leadership handed over to even out leaders", "partition", move.Partition, "to", move.To)
		}
		cancel()
	}
}

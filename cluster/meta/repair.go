package meta

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/fabriq-io/fabriq/cluster"
)

// The metadata leader's decisions, as pure functions of what it knows: the
// catalog, what gossip says of the nodes, and what the partitions' copies
// report (View). The leader's loop (leader.go) gathers the inputs and
// carries the decisions out.

// DeadNodes returns the nodes gossip has seen down (dead or left) for
// longer than after, at now. self is never dead: this node runs.
func DeadNodes(members []cluster.Member, self string, now time.Time, after time.Duration) map[string]bool {
	dead := map[string]bool{}
	for _, m := range members {
		if m.ID != self && m.State != cluster.MemberAlive && now.Sub(m.Since) > after {
			dead[m.ID] = true
		}
	}
	return dead
}

// LiveNodes returns the ids of the members gossip sees alive, sorted, with
// self among them whatever gossip says of it (a record left suspect by a
// refuted suspicion must not keep this node from taking replicas).
func LiveNodes(members []cluster.Member, self string) []string {
	var live []string
	for _, m := range members {
		if m.State == cluster.MemberAlive {
			live = append(live, m.ID)
		}
	}
	if !slices.Contains(live, self) {
		live = append(live, self)
	}
	slices.Sort(live)
	return slices.Compact(live)
}

// Repair is a partition with replicas on dead nodes.
type Repair struct {
	Stream    string   // the full stream name
	Partition int      // the partition's number
	Name      string   // the partition's name
	Placement []string // its replicas' nodes
	Members   []string // its replicas' member ids, as Placement
	Leaving   []string // the dead nodes among Placement, in its order
}

// Key names the partition in logs and in the leader's once-only notes.
func (r Repair) Key() string { return fmt.Sprintf("%s/%d", r.Stream, r.Partition) }

// FindRepairs returns the partitions with a replica on a dead node, by
// stream and partition: those whose live replicas are a majority, which
// may move one replica (repairs), and the others (lost), whose group
// cannot change: moving replicas would not bring them back and would hand
// their place to empty copies. A replica counts as live when its node is
// in live and not dead; a node down for less than the replacement delay
// is neither. A stream whose name does not parse is left out.
func FindRepairs(streams []Stream, dead map[string]bool, live []string) (repairs, lost []Repair) {
	for _, s := range streams {
		names, err := s.PartitionNames()
		if err != nil {
			continue
		}
		for i, placement := range s.Placement {
			if i >= len(names) {
				break
			}
			r := Repair{Stream: s.Name, Partition: i, Name: names[i], Placement: placement, Members: s.Members(i)}
			alive := 0
			for _, id := range placement {
				if dead[id] {
					r.Leaving = append(r.Leaving, id)
				} else if slices.Contains(live, id) {
					alive++
				}
			}
			switch {
			case len(r.Leaving) == 0:
			case alive < len(placement)/2+1:
				lost = append(lost, r)
			default:
				repairs = append(repairs, r)
			}
		}
	}
	return repairs, lost
}

// Target returns the node to move the replica on node leaving of
// placement to: a live node (live, in its order) that holds none and that
// the stream's spread allows (regionOf gives nodes' regions); among them
// one of the leader's region when no other replica is there, then one of
// a region the other replicas do not use, then the least loaded.
func Target(placement []string, leaving string, live []string, load map[string]int, regionOf map[string]string, spread Spread) (string, bool) {
	used := map[string]bool{}
	for _, id := range placement {
		if id != leaving {
			used[regionOf[id]] = true
		}
	}
	needLeader := spread.Leader != "" && !used[spread.Leader]
	rank := func(id string) [3]int {
		r := regionOf[id]
		return [3]int{boolRank(needLeader && r != spread.Leader), boolRank(used[r]), load[id]}
	}
	best := ""
	for _, id := range live {
		if slices.Contains(placement, id) || !spread.allows(regionOf[id]) {
			continue
		}
		if best == "" || less(rank(id), rank(best)) {
			best = id
		}
	}
	return best, best != ""
}

// boolRank is 1 for true: the worse rank.
func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// less orders ranks field by field.
func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// View is what one node's copy of a partition reports of itself.
type View struct {
	// Member is the copy's member id; empty when the node runs no copy.
	Member string `msgpack:"m,omitempty"`
	// Leader reports whether the copy leads its group.
	Leader bool `msgpack:"l,omitempty"`
	// Members is the group's configuration as the copy holds it, when
	// that configuration is committed as the copy knows it and no change
	// is in flight; nil otherwise.
	Members []string `msgpack:"c,omitempty"`
}

// Settled reports whether a partition has finished its last membership
// change: its leader's committed configuration holds exactly the members
// the catalog places (want), and so does the committed configuration of
// every placed node's copy but those of except (the nodes whose member is
// about to be replaced). leader is the node that leads the partition as
// this node knows it, views what each node reports of its copy.
//
// A move or a renewal waits for it, so a group changes one member at a
// time, and only once every member has caught up with the change before:
// a member that has not (one added a moment ago) rejects the votes of
// members its old configuration does not know (hashicorp/raft does), and
// replacing a second member then can leave a majority that never elects
// a leader (chaos runs seeds 115060, 452601, 709589).
func Settled(want, placement, except []string, leader string, views map[string]View) error {
	if leader == "" {
		return errors.New("its leader is not known")
	}
	lv, ok := views[leader]
	switch {
	case !ok:
		return fmt.Errorf("its leader %s did not answer", leader)
	case !lv.Leader:
		return fmt.Errorf("node %s no longer leads it", leader)
	case lv.Members == nil:
		return fmt.Errorf("its leader %s has no committed configuration without a change in flight", leader)
	}
	if !SameMembers(lv.Members, want) {
		return fmt.Errorf("its members are %v, the catalog places %v", lv.Members, want)
	}
	for _, node := range placement {
		if slices.Contains(except, node) {
			continue
		}
		v, ok := views[node]
		if !ok {
			return fmt.Errorf("node %s did not answer", node)
		}
		if !SameMembers(v.Members, want) {
			return fmt.Errorf("node %s has not caught up with the group's members (it has %v)", node, v.Members)
		}
	}
	return nil
}

// SameMembers reports whether a and b hold the same ids, in any order.
func SameMembers(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// Registrations returns the nodes of want whose record in the catalog is
// missing or different, in want's order.
func Registrations(want []Node, catalog func(id string) (Node, bool)) []Node {
	var out []Node
	for _, n := range want {
		if have, ok := catalog(n.ID); !ok || have != n {
			out = append(out, n)
		}
	}
	return out
}

// MetaChange adds a node to the metadata group, or gives it a new
// address.
type MetaChange struct {
	ID, Addr string // the node id and its Raft address
	Voter    bool   // a voter, or else a non-voter
}

// MetaChanges returns the changes that bring the live nodes (want) into
// the metadata group (servers): a node it does not have joins as a voter
// while there are fewer than maxVoters, as a non-voter after; a member
// back at another address is added again at it, as what it was.
func MetaChanges(want []Node, servers []cluster.Server, maxVoters int) []MetaChange {
	voters := 0
	have := map[string]cluster.Server{}
	for _, s := range servers {
		have[s.ID] = s
		if s.Voter {
			voters++
		}
	}
	var out []MetaChange
	for _, n := range want {
		s, ok := have[n.ID]
		switch {
		case ok && s.Address == n.RaftAddr:
		case ok:
			out = append(out, MetaChange{ID: n.ID, Addr: n.RaftAddr, Voter: s.Voter})
		case voters < maxVoters:
			out = append(out, MetaChange{ID: n.ID, Addr: n.RaftAddr, Voter: true})
			voters++
		default:
			out = append(out, MetaChange{ID: n.ID, Addr: n.RaftAddr})
		}
	}
	return out
}

// Hosts returns the hosts of a node's advertised addresses: a request
// that speaks for the node must come from one of them.
func (n Node) Hosts() []string {
	var out []string
	for _, a := range []string{n.ClientAddr, n.RaftAddr} {
		if h, _, err := net.SplitHostPort(a); err == nil {
			out = append(out, h)
		}
	}
	return out
}

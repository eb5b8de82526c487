package meta

import (
	"fmt"
	"slices"
	"strings"
)

// Spread says where a stream's replicas may go: the regions they may use
// (empty is every region: a global stream of a fabric without regions),
// and the region that should hold the leader, and so a replica.
type Spread struct {
	Regions []string
	Leader  string
}

// allows reports whether a replica may go to a node of region.
func (sp Spread) allows(region string) bool {
	return len(sp.Regions) == 0 || slices.Contains(sp.Regions, region)
}

// where names the spread's regions for an error.
func (sp Spread) where() string {
	if len(sp.Regions) == 0 {
		return "the cluster"
	}
	return "region " + strings.Join(sp.Regions, ", ")
}

// SpreadOf returns where a stream's replicas may go: its own region for a
// local stream, its fabric's regions (regions) for a global one.
func SpreadOf(st Stream, regions []string) Spread {
	if st.Local != "" {
		return Spread{Regions: []string{st.Local}, Leader: st.LeaderRegion}
	}
	return Spread{Regions: regions, Leader: st.LeaderRegion}
}

// Place chooses the replicas of each of a new stream's partitions:
// distinct nodes of the regions spread allows, spread over as many of
// them as there are, one in the leader's region first when it has one,
// the least loaded first (load counts the replicas a node already holds;
// ties go by node id), so replicas spread evenly. It updates load. An
// impossible placement is an error matching ErrInvalid.
func Place(nodes []Node, load map[string]int, partitions, replicas int, spread Spread) ([][]string, error) {
	if replicas < 1 {
		return nil, fmt.Errorf("%w: replicas must be at least 1, not %d", ErrInvalid, replicas)
	}
	var allowed []Node
	for _, n := range nodes {
		if spread.allows(n.Region) {
			allowed = append(allowed, n)
		}
	}
	if replicas > len(allowed) {
		return nil, fmt.Errorf("%w: a replication factor of %d needs %d live nodes in %s; there are %d",
			ErrInvalid, replicas, replicas, spread.where(), len(allowed))
	}
	leaderHere := spread.Leader != "" && slices.ContainsFunc(allowed, func(n Node) bool { return n.Region == spread.Leader })
	if spread.Leader != "" && !leaderHere {
		return nil, fmt.Errorf("%w: no live node in the leader region %s", ErrInvalid, spread.Leader)
	}
	out := make([][]string, partitions)
	for p := range out {
		regions := map[string]bool{}
		var chosen []string
		for i := range replicas {
			var best *Node
			for j := range allowed {
				c := &allowed[j]
				if slices.Contains(chosen, c.ID) || (i == 0 && leaderHere && c.Region != spread.Leader) {
					continue
				}
				if best == nil || better(c, best, regions, load) {
					best = c
				}
			}
			chosen = append(chosen, best.ID)
			regions[best.Region] = true
			load[best.ID]++
		}
		out[p] = chosen
	}
	return out, nil
}

// better reports whether a is a better next replica than b: a region the
// partition does not use yet first, then the lighter load, then the id.
func better(a, b *Node, regions map[string]bool, load map[string]int) bool {
	if ra, rb := regions[a.Region], regions[b.Region]; ra != rb {
		return !ra
	}
	if load[a.ID] != load[b.ID] {
		return load[a.ID] < load[b.ID]
	}
	return strings.Compare(a.ID, b.ID) < 0
}

// Load counts the replicas the streams place on each node.
func Load(streams []Stream) map[string]int {
	load := map[string]int{}
	for _, s := range streams {
		for _, p := range s.Placement {
			for _, id := range p {
				load[id]++
			}
		}
	}
	return load
}

// LeaderMove is a leadership hand-over that evens out leader counts.
type LeaderMove struct {
	Partition string // the partition's name
	To        string // a node id
}

// BalanceLeaders picks up to limit partitions that self leads and should
// hand over, each move counted before the next is picked. First,
// partitions led away from their leader region: each to the live replica
// there that leads the fewest. Then, while self leads more than its share
// (the partitions divided by the live nodes, rounded up), to the replica
// that leads the fewest, if that one is below its share and, for a
// partition with a leader region, is there. leaders maps partition to
// leading node; replicas maps partition to its replicas' nodes; preferred
// maps a partition with a leader region to its replicas' nodes there;
// live lists the live nodes. Partitions in use (clients attached: inUse)
// are picked after every idle one: a move interrupts a busy partition's
// sends for a moment and spreads busy partitions no better, while an
// idle one's costs nothing.
func BalanceLeaders(self string, leaders map[string]string, replicas, preferred map[string][]string, live []string, inUse map[string]bool, limit int) []LeaderMove {
	if len(live) == 0 {
		return nil
	}
	count := map[string]int{}
	for _, l := range leaders {
		count[l]++
	}
	var parts []string
	for p, l := range leaders {
		if l == self {
			parts = append(parts, p)
		}
	}
	slices.SortFunc(parts, func(a, b string) int {
		if inUse[a] != inUse[b] {
			if inUse[a] {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	fewest := func(p string, ok func(string) bool) string {
		var to string
		for _, r := range replicas[p] {
			if r == self || !slices.Contains(live, r) || !ok(r) {
				continue
			}
			if to == "" || count[r] < count[to] || (count[r] == count[to] && r < to) {
				to = r
			}
		}
		return to
	}
	var moves []LeaderMove
	moved := map[string]bool{}
	move := func(p, to string) {
		moves = append(moves, LeaderMove{Partition: p, To: to})
		moved[p] = true
		count[self]--
		count[to]++
	}
	for _, p := range parts {
		if len(moves) == limit {
			return moves
		}
		if pref := preferred[p]; len(pref) > 0 && !slices.Contains(pref, self) {
			if to := fewest(p, func(r string) bool { return slices.Contains(pref, r) }); to != "" {
				move(p, to)
			}
		}
	}
	share := (len(leaders) + len(live) - 1) / len(live)
	for _, p := range parts {
		if len(moves) == limit || count[self] <= share {
			break
		}
		if moved[p] {
			continue
		}
		pref := preferred[p]
		to := fewest(p, func(r string) bool {
			return count[r] < share && (len(pref) == 0 || slices.Contains(pref, r))
		})
		if to != "" {
			move(p, to)
		}
	}
	return moves
}

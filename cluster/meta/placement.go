package meta

import (
	"fmt"
	"slices"
	"strings"
)

// Place chooses the replicas of each of a new stream's partitions:
// distinct nodes, spread over as many regions as there are, the least
// loaded first (load counts the replicas a node already holds; ties go by
// node id), so replicas spread evenly. It updates load. An impossible
// placement is an error matching ErrInvalid.
func Place(nodes []Node, load map[string]int, partitions, replicas int) ([][]string, error) {
	if replicas < 1 {
		return nil, fmt.Errorf("%w: replicas must be at least 1, not %d", ErrInvalid, replicas)
	}
	if replicas > len(nodes) {
		return nil, fmt.Errorf("%w: a replication factor of %d needs %d nodes; the cluster has %d",
			ErrInvalid, replicas, replicas, len(nodes))
	}
	out := make([][]string, partitions)
	for p := range out {
		regions := map[string]bool{}
		var chosen []string
		for range replicas {
			var best *Node
			for i := range nodes {
				c := &nodes[i]
				if slices.Contains(chosen, c.ID) {
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

// BalanceLeaders picks at most one partition that self leads and should
// hand over: when self leads more than its share (the partitions divided
// by the live nodes, rounded up), to the replica that leads the fewest, if
// that one is below its share. leaders maps partition to leading node;
// replicas maps partition to its replicas' nodes; live lists the live
// nodes.
func BalanceLeaders(self string, leaders map[string]string, replicas map[string][]string, live []string) (LeaderMove, bool) {
	if len(live) == 0 {
		return LeaderMove{}, false
	}
	count := map[string]int{}
	for _, l := range leaders {
		count[l]++
	}
	share := (len(leaders) + len(live) - 1) / len(live)
	if count[self] <= share {
		return LeaderMove{}, false
	}
	parts := make([]string, 0, len(leaders))
	for p, l := range leaders {
		if l == self {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	for _, p := range parts {
		var to string
		for _, r := range replicas[p] {
			if r == self || !slices.Contains(live, r) || count[r] >= share {
				continue
			}
			if to == "" || count[r] < count[to] || (count[r] == count[to] && r < to) {
				to = r
			}
		}
		if to != "" {
			return LeaderMove{Partition: p, To: to}, true
		}
	}
	return LeaderMove{}, false
}

package broker

import (
	"slices"
	"strings"

	"github.com/fabriq-io/fabriq/cluster/meta"
	"github.com/fabriq-io/fabriq/transport"
)

// place chooses the replicas of each of a new stream's partitions: distinct
// nodes, spread over as many regions as there are, the least loaded first
// (load counts the replicas a node already holds; ties go by node id), so
// replicas spread evenly. It updates load.
func place(nodes []meta.Node, load map[string]int, partitions, replicas int) ([][]string, error) {
	if replicas < 1 {
		return nil, wireError(transport.CodeInvalidArgument, "replicas must be at least 1, not %d", replicas)
	}
	if replicas > len(nodes) {
		return nil, wireError(transport.CodeInvalidArgument,
			"a replication factor of %d needs %d nodes; the cluster has %d", replicas, replicas, len(nodes))
	}
	out := make([][]string, partitions)
	for p := range out {
		regions := map[string]bool{}
		var chosen []string
		for range replicas {
			var best *meta.Node
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
func better(a, b *meta.Node, regions map[string]bool, load map[string]int) bool {
	if ra, rb := regions[a.Region], regions[b.Region]; ra != rb {
		return !ra
	}
	if load[a.ID] != load[b.ID] {
		return load[a.ID] < load[b.ID]
	}
	return strings.Compare(a.ID, b.ID) < 0
}

// leaderMove is a leadership hand-over that evens out leader counts.
type leaderMove struct {
	partition string
	to        string
}

// balanceLeaders picks at most one partition that self leads and should
// hand over: when self leads more than its share (the partitions divided
// by the live nodes, rounded up), to the replica that leads the fewest,
// if that one is below its share. leaders maps partition to leader;
// replicas maps partition to its replicas; live lists the live nodes.
func balanceLeaders(self string, leaders map[string]string, replicas map[string][]string, live []string) (leaderMove, bool) {
	if len(live) == 0 {
		return leaderMove{}, false
	}
	count := map[string]int{}
	for _, l := range leaders {
		count[l]++
	}
	share := (len(leaders) + len(live) - 1) / len(live)
	if count[self] <= share {
		return leaderMove{}, false
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
			return leaderMove{partition: p, to: to}, true
		}
	}
	return leaderMove{}, false
}

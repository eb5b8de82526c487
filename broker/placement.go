package broker

import (
	"slices"
	"strings"

	"github.com/fabriq-io/fabriq/transport"
)

// place chooses the replicas of each of a new stream's partitions: distinct
// nodes, the least loaded first (load counts the replicas a node already
// holds; ties go by node id), so replicas spread evenly. It updates load.
func place(nodes []nodeInfo, load map[string]int, partitions, replicas int) ([][]string, error) {
	if replicas < 1 {
		return nil, wireError(transport.CodeInvalidArgument, "replicas must be at least 1, not %d", replicas)
	}
	if replicas > len(nodes) {
		return nil, wireError(transport.CodeInvalidArgument,
			"a replication factor of %d needs %d nodes; the cluster has %d", replicas, replicas, len(nodes))
	}
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	out := make([][]string, partitions)
	for p := range out {
		slices.SortStableFunc(ids, func(a, b string) int {
			if load[a] != load[b] {
				return load[a] - load[b]
			}
			return strings.Compare(a, b)
		})
		out[p] = slices.Clone(ids[:replicas])
		for _, id := range out[p] {
			load[id]++
		}
	}
	return out, nil
}

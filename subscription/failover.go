package subscription

import (
	"cmp"
	"slices"
	"sort"
)

// Candidate is a consumer of a failover subscription.
type Candidate struct {
	Name     string
	Priority int // 0 is the best level
}

// Rank orders failover candidates by priority level, then by name (FO-2),
// and keeps only the best priority level: the others are never masters.
func Rank(cands []Candidate) []Candidate {
	out := slices.Clone(cands)
	slices.SortFunc(out, func(a, b Candidate) int {
		if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	for i := range out {
		if out[i].Priority != out[0].Priority {
			return out[:i]
		}
	}
	return out
}

// ringPoints is how many points each consumer has on a hash ring (FO-4,
// KS-3).
const ringPoints = 100

// Master returns the name of the active consumer of one partition of a
// failover subscription, "" without candidates. For a partitioned stream
// partition i's master is the ranked candidate i mod n (FO-3); for an
// unpartitioned stream (partition < 0) it is the owner of the stream
// name's hash on a ring of 100 points per candidate (FO-4), so that many
// streams spread over the consumers.
func Master(cands []Candidate, partition int, stream string) string {
	ranked := Rank(cands)
	if len(ranked) == 0 {
		return ""
	}
	if partition >= 0 {
		return ranked[partition%len(ranked)].Name
	}
	names := make([]string, len(ranked))
	for i, c := range ranked {
		names[i] = c.Name
	}
	return newRing(names, func(h uint32) uint32 { return h }).owner(Hash(stream))
}

// ring is a consistent-hash ring of consumers' points.
type ring struct {
	points []point
}

type point struct {
	at   uint32
	name string
}

// newRing places ringPoints points per name at scale(Hash(name + i)).
// Points that collide order by name, so the ring is the same whatever
// order the names come in.
func newRing(names []string, scale func(uint32) uint32) *ring {
	r := &ring{points: make([]point, 0, len(names)*ringPoints)}
	for _, n := range names {
		for i := range ringPoints {
			r.points = append(r.points, point{at: scale(Hash(pointName(n, i))), name: n})
		}
	}
	slices.SortFunc(r.points, func(a, b point) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	return r
}

// owner returns the name of the first point at or after h, wrapping.
func (r *ring) owner(h uint32) string {
	if len(r.points) == 0 {
		return ""
	}
	i := sort.Search(len(r.points), func(i int) bool { return r.points[i].at >= h })
	if i == len(r.points) {
		i = 0
	}
	return r.points[i].name
}

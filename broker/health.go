package broker

import (
	"slices"
)

// Readiness is whether a node serves its part of the cluster, and if not
// why: what an orchestrator's readiness probe asks (/readyz).
type Readiness struct {
	// Serving: the node has started (joined, registered in the catalog)
	// and is not stopping.
	Serving bool `json:"serving"`
	// MetadataLeader is the node that leads the metadata group, as this
	// node knows it; empty when it knows none.
	MetadataLeader string `json:"metadata_leader"`
	// Partitions counts the partitions this node has a copy of, awake or
	// asleep.
	Partitions int `json:"partitions"`
	// Asleep counts those of them whose copy sleeps (Config.SleepAfter):
	// closed until asked for, they need no leader now.
	Asleep int `json:"asleep"`
	// Leaderless names the others whose group knows no leader.
	Leaderless []string `json:"leaderless,omitempty"`
	// Halted names the copies stopped on this node (disk full or
	// failing), waiting to be opened again; they do not make the node
	// unready on their own, since their groups may be led elsewhere.
	Halted []string `json:"halted,omitempty"`
}

// Ready reports whether the node is ready: serving, with a metadata
// leader, and every partition it has a copy of led, or asleep.
func (r Readiness) Ready() bool {
	return r.Serving && r.MetadataLeader != "" && len(r.Leaderless) == 0
}

// Readiness returns the node's readiness now; it reads only what the node
// holds in memory, so it answers at once.
func (n *Node) Readiness() Readiness {
	var r Readiness
	if !n.serving.Load() {
		return r
	}
	r.Serving = true
	r.MetadataLeader = n.control.Leader()
	n.mu.Lock()
	defer n.mu.Unlock()
	r.Partitions = len(n.partitions) + len(n.asleep)
	r.Asleep = len(n.asleep)
	for name, lp := range n.partitions {
		if id, _ := lp.group.Leader(); id == "" {
			r.Leaderless = append(r.Leaderless, name)
		}
	}
	for name := range n.halted {
		r.Halted = append(r.Halted, name)
	}
	slices.Sort(r.Leaderless)
	slices.Sort(r.Halted)
	return r
}

package meta

import (
	"slices"
	"strings"

	"github.com/fabriq-io/fabriq/cluster"
)

// What a node runs, decided from the catalog: pure functions the broker
// carries out on its partition copies.

// Assignment is a partition the catalog places on a node: what it runs,
// as which member.
type Assignment struct {
	// Member is the node's member id in the partition's group.
	Member string
	// Members lists the member ids of every replica, in placement order.
	Members []string
	// Bootstrap lists the nodes of the stream's initial placement while
	// the partition's group may still be bootstrapped by them (no replica
	// has moved or been renewed): a member among them bootstraps the
	// group with the others; any other joins when its leader adds it.
	Bootstrap []string
}

// Assignments returns what the streams place on node, by partition name.
// A stream whose name does not parse is left out and returned in bad.
func Assignments(streams []Stream, node string) (placed map[string]Assignment, bad []string) {
	placed = map[string]Assignment{}
	for _, s := range streams {
		names, err := s.PartitionNames()
		if err != nil {
			bad = append(bad, s.Name)
			continue
		}
		for i, name := range names {
			if i >= len(s.Placement) {
				continue
			}
			j := slices.Index(s.Placement[i], node)
			if j < 0 {
				continue
			}
			a := Assignment{Member: MemberID(node, s.SinceOf(i, j)), Members: s.Members(i)}
			if i < len(s.Initial) {
				a.Bootstrap = s.Initial[i]
			}
			placed[name] = a
		}
	}
	return placed, bad
}

// Drop is a copy to close.
type Drop struct {
	Partition string // the partition's name
	// Remove says its data goes too: its stream is deleted.
	Remove bool
	// Retired says the copy is one of the retired ones.
	Retired bool
}

// Plan is what a node does to run what the catalog places on it.
type Plan struct {
	// Retire lists running copies whose replica moved away: they run on,
	// retired, until their group removes their member.
	Retire []string
	// HandOver lists retired copies that lead their group: they hand
	// their leadership over.
	HandOver []string
	// Drop lists the copies to close: of deleted streams (their data
	// goes), and of partitions placed here as another member (a replica
	// given back: the new member's copy sets the old one aside).
	Drop []Drop
	// Open lists the partitions placed here that no running copy serves
	// as the member placed.
	Open []string
}

// PlanNode decides what a node does, given what the catalog places on it
// (placed), the member each running copy serves as (running), whether each
// retired copy leads (retired), and which partitions the catalog knows
// (exists: false once a stream is deleted). Every list is sorted.
func PlanNode(placed map[string]Assignment, running map[string]string, retired map[string]bool, exists func(partition string) bool) Plan {
	var p Plan
	for name, member := range running {
		a, ok := placed[name]
		switch {
		case ok && a.Member == member:
			continue
		case !exists(name):
			p.Drop = append(p.Drop, Drop{Partition: name, Remove: true})
		case ok:
			// Given back: the group removed the old member before the
			// catalog could give the partition back.
			p.Drop = append(p.Drop, Drop{Partition: name})
		default:
			p.Retire = append(p.Retire, name)
		}
		p.Open = appendIf(p.Open, name, ok)
	}
	// A retired copy stops once its partition is given back or deleted;
	// otherwise the node's sweep deletes it when its group removed it.
	for name, leads := range retired {
		_, ok := placed[name]
		switch {
		case !exists(name):
			p.Drop = append(p.Drop, Drop{Partition: name, Remove: true, Retired: true})
		case ok:
			p.Drop = append(p.Drop, Drop{Partition: name, Retired: true})
		case leads:
			p.HandOver = append(p.HandOver, name)
		}
	}
	for name := range placed {
		if _, ok := running[name]; !ok {
			p.Open = append(p.Open, name)
		}
	}
	slices.Sort(p.Retire)
	slices.Sort(p.HandOver)
	slices.Sort(p.Open)
	// A name is at most once running and once retired, appended in
	// that order.
	slices.SortStableFunc(p.Drop, func(a, b Drop) int { return strings.Compare(a.Partition, b.Partition) })
	return p
}

func appendIf(s []string, v string, ok bool) []string {
	if ok {
		return append(s, v)
	}
	return s
}

// MemberChange is one change a partition's leader makes to its group.
type MemberChange struct {
	Remove bool   // a removal, or else an addition as a voter
	ID     string // the member id
	Addr   string // its node's Raft address, for an addition
}

// MemberChanges returns, in order, the changes that make a group's
// configuration (servers) match its placed members (want), as its leader
// (self, a member id) makes them. addr gives a node's Raft address (false
// if the catalog does not know the node), alive whether gossip sees it
// alive.
//
// Members no longer placed whose node is down, or whose node is given a
// new member (a renewed copy, at the same address: two members cannot
// share one), go first: they count in no majority, and the group takes a
// new server at an address only once the old one is gone. Then the
// missing members (or those at a new address) are added. Members no
// longer placed on live nodes go last: their copies run retired and keep
// answering, so the group never has fewer members able to answer while
// the new ones catch up.
func MemberChanges(servers []cluster.Server, want []string, self string, addr func(node string) (string, bool), alive func(node string) bool) []MemberChange {
	have := map[string]string{}
	for _, s := range servers {
		have[s.ID] = s.Address
	}
	placedNodes := map[string]bool{}
	for _, id := range want {
		placedNodes[NodeOf(id)] = true
	}
	var first, later []MemberChange
	for _, s := range servers {
		if slices.Contains(want, s.ID) || s.ID == self {
			continue
		}
		if node := NodeOf(s.ID); !placedNodes[node] && alive(node) {
			later = append(later, MemberChange{Remove: true, ID: s.ID})
		} else {
			first = append(first, MemberChange{Remove: true, ID: s.ID})
		}
	}
	for _, id := range want {
		a, ok := addr(NodeOf(id))
		if !ok || have[id] == a {
			continue
		}
		first = append(first, MemberChange{ID: id, Addr: a})
	}
	return append(first, later...)
}

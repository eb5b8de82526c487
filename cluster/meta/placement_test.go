package meta

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestPlacementSpreadsReplicas(t *testing.T) {
	nodes := []Node{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	load := map[string]int{}
	got, err := Place(nodes, load, 4, 2, Spread{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[[a b] [c a] [b c] [a b]]" {
		t.Fatalf("placement %v", got)
	}
	for _, p := range got {
		if p[0] == p[1] {
			t.Fatalf("replicas on one node: %v", p)
		}
	}
	if load["a"] != 3 || load["b"] != 3 || load["c"] != 2 {
		t.Fatalf("load %v", load)
	}
	if l := Load([]Stream{{Placement: got}, {Placement: [][]string{{"c"}}}}); fmt.Sprint(l) != "map[a:3 b:3 c:3]" {
		t.Fatalf("Load %v", l)
	}
}

func TestPlacementRefusesTooManyReplicas(t *testing.T) {
	if _, err := Place([]Node{{ID: "a"}}, map[string]int{}, 1, 3, Spread{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("err %v", err)
	}
	if _, err := Place([]Node{{ID: "a"}}, map[string]int{}, 1, 0, Spread{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("zero replicas: %v", err)
	}
}

func TestPlacementSpreadsRegions(t *testing.T) {
	nodes := []Node{{ID: "a", Region: "eu"}, {ID: "b", Region: "eu"}, {ID: "c", Region: "us"}, {ID: "d", Region: "us"}, {ID: "e", Region: "ap"}}
	got, err := Place(nodes, map[string]int{}, 5, 3, Spread{})
	if err != nil {
		t.Fatal(err)
	}
	region := map[string]string{}
	for _, n := range nodes {
		region[n.ID] = n.Region
	}
	for _, p := range got {
		seen := map[string]bool{}
		for _, id := range p {
			if seen[region[id]] {
				t.Fatalf("partition %v has two replicas in region %s", p, region[id])
			}
			seen[region[id]] = true
		}
	}
}

func TestBalanceLeaders(t *testing.T) {
	replicas := map[string][]string{"p0": {"a", "b", "c"}, "p1": {"a", "b", "c"}, "p2": {"a", "b", "c"}}
	live := []string{"a", "b", "c"}
	one := func(p, to string) []LeaderMove { return []LeaderMove{{Partition: p, To: to}} }
	for _, tc := range []struct {
		name      string
		leaders   map[string]string
		preferred map[string][]string
		live      []string
		inUse     map[string]bool
		want      []LeaderMove
	}{
		{"a leads all: two go, one to each replica leading fewest", map[string]string{"p0": "a", "p1": "a", "p2": "a"}, nil, live, nil,
			[]LeaderMove{{Partition: "p0", To: "b"}, {Partition: "p1", To: "c"}}},
		{"balanced", map[string]string{"p0": "a", "p1": "b", "p2": "c"}, nil, live, nil, nil},
		{"the only lighter node is dead", map[string]string{"p0": "a", "p1": "a", "p2": "b"}, nil, []string{"a", "b"}, nil, nil},
		{"no live nodes", map[string]string{"p0": "a"}, nil, nil, nil, nil},
		{"balanced, but p1 is led away from its leader region", map[string]string{"p0": "b", "p1": "a", "p2": "c"},
			map[string][]string{"p1": {"c"}}, live, nil, one("p1", "c")},
		{"led away from its leader region, which is down", map[string]string{"p0": "b", "p1": "a", "p2": "c"},
			map[string][]string{"p1": {"c"}}, []string{"a", "b"}, nil, nil},
		{"a leads too much, but never moves a partition out of its leader region", map[string]string{"p0": "a", "p1": "a", "p2": "a"},
			map[string][]string{"p0": {"a"}, "p1": {"a", "c"}}, live, nil, []LeaderMove{{Partition: "p1", To: "c"}, {Partition: "p2", To: "b"}}},
		{"a leads all, p0 and p1 in use: the idle p2 goes first, then p0", map[string]string{"p0": "a", "p1": "a", "p2": "a"}, nil, live,
			map[string]bool{"p0": true, "p1": true}, []LeaderMove{{Partition: "p2", To: "b"}, {Partition: "p0", To: "c"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := BalanceLeaders("a", tc.leaders, replicas, tc.preferred, tc.live, tc.inUse, 10)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("moves %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A node that leads everything hands over just enough, no more than the
// limit a round, and every node ends at its share.
func TestBalanceLeadersInRounds(t *testing.T) {
	live := []string{"a", "b", "c"}
	leaders := map[string]string{}
	replicas := map[string][]string{}
	for i := range 1000 {
		p := fmt.Sprint("p", i)
		leaders[p], replicas[p] = "a", live
	}
	rounds := 0
	for ; rounds < 100; rounds++ {
		moves := BalanceLeaders("a", leaders, replicas, nil, live, nil, 64)
		if len(moves) == 0 {
			break
		}
		if len(moves) > 64 {
			t.Fatalf("round %d: %d moves, limit 64", rounds, len(moves))
		}
		for _, m := range moves {
			if leaders[m.Partition] != "a" {
				t.Fatalf("round %d moves %s, led by %s", rounds, m.Partition, leaders[m.Partition])
			}
			leaders[m.Partition] = m.To
		}
	}
	count := map[string]int{}
	for _, l := range leaders {
		count[l]++
	}
	if count["a"] != 334 || count["b"] != 333 || count["c"] != 333 || rounds != 11 {
		t.Fatalf("after %d rounds: %v, want a 334, b and c 333 after 11", rounds, count)
	}
}

// A local stream stays in its region; a global one of a fabric with
// regions spreads over them and nowhere else; the leader region holds the
// first replica; too few nodes where the stream may go is an error that
// names the region.
func TestPlacementHonoursRegions(t *testing.T) {
	nodes := []Node{{ID: "a", Region: "eu"}, {ID: "b", Region: "eu"}, {ID: "c", Region: "us"}, {ID: "d", Region: "us"}, {ID: "e", Region: "ap"}}
	region := map[string]string{}
	for _, n := range nodes {
		region[n.ID] = n.Region
	}
	got, err := Place(nodes, map[string]int{}, 4, 2, Spread{Regions: []string{"us"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range got {
		if region[p[0]] != "us" || region[p[1]] != "us" {
			t.Fatalf("local stream of us placed on %v", got)
		}
	}
	got, err = Place(nodes, map[string]int{}, 4, 2, Spread{Regions: []string{"eu", "us"}, Leader: "us"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range got {
		if region[p[0]] != "us" || region[p[1]] != "eu" {
			t.Fatalf("global stream of eu, us led in us placed on %v", got)
		}
	}
	if _, err := Place(nodes, map[string]int{}, 1, 3, Spread{Regions: []string{"eu"}}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "region eu") {
		t.Fatalf("three replicas in a region of two nodes: %v", err)
	}
	if _, err := Place(nodes, map[string]int{}, 1, 1, Spread{Regions: []string{"eu"}, Leader: "us"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a leader region with no node the stream may use: %v", err)
	}
}

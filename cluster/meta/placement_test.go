package meta

import (
	"errors"
	"fmt"
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
	for _, tc := range []struct {
		name      string
		leaders   map[string]string
		preferred map[string][]string
		live      []string
		want      LeaderMove
		ok        bool
	}{
		{"a leads all: one goes to the replica leading fewest", map[string]string{"p0": "a", "p1": "a", "p2": "a"}, nil, live, LeaderMove{Partition: "p0", To: "b"}, true},
		{"balanced", map[string]string{"p0": "a", "p1": "b", "p2": "c"}, nil, live, LeaderMove{}, false},
		{"the only lighter node is dead", map[string]string{"p0": "a", "p1": "a", "p2": "b"}, nil, []string{"a", "b"}, LeaderMove{}, false},
		{"no live nodes", map[string]string{"p0": "a"}, nil, nil, LeaderMove{}, false},
		{"balanced, but p1 is led away from its leader region", map[string]string{"p0": "b", "p1": "a", "p2": "c"},
			map[string][]string{"p1": {"c"}}, live, LeaderMove{Partition: "p1", To: "c"}, true},
		{"led away from its leader region, which is down", map[string]string{"p0": "b", "p1": "a", "p2": "c"},
			map[string][]string{"p1": {"c"}}, []string{"a", "b"}, LeaderMove{}, false},
		{"a leads too much, but never moves a partition out of its leader region", map[string]string{"p0": "a", "p1": "a", "p2": "a"},
			map[string][]string{"p0": {"a"}, "p1": {"a", "c"}}, live, LeaderMove{Partition: "p1", To: "c"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := BalanceLeaders("a", tc.leaders, replicas, tc.preferred, tc.live)
			if ok != tc.ok || m != tc.want {
				t.Fatalf("move %+v %v, want %+v %v", m, ok, tc.want, tc.ok)
			}
		})
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

package meta

import (
	"errors"
	"fmt"
	"testing"
)

func TestPlacementSpreadsReplicas(t *testing.T) {
	nodes := []Node{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	load := map[string]int{}
	got, err := Place(nodes, load, 4, 2)
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
	if _, err := Place([]Node{{ID: "a"}}, map[string]int{}, 1, 3); !errors.Is(err, ErrInvalid) {
		t.Fatalf("err %v", err)
	}
	if _, err := Place([]Node{{ID: "a"}}, map[string]int{}, 1, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("zero replicas: %v", err)
	}
}

func TestPlacementSpreadsRegions(t *testing.T) {
	nodes := []Node{{ID: "a", Region: "eu"}, {ID: "b", Region: "eu"}, {ID: "c", Region: "us"}, {ID: "d", Region: "us"}, {ID: "e", Region: "ap"}}
	got, err := Place(nodes, map[string]int{}, 5, 3)
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
		name    string
		leaders map[string]string
		live    []string
		want    LeaderMove
		ok      bool
	}{
		{"a leads all: one goes to the replica leading fewest", map[string]string{"p0": "a", "p1": "a", "p2": "a"}, live, LeaderMove{Partition: "p0", To: "b"}, true},
		{"balanced", map[string]string{"p0": "a", "p1": "b", "p2": "c"}, live, LeaderMove{}, false},
		{"the only lighter node is dead", map[string]string{"p0": "a", "p1": "a", "p2": "b"}, []string{"a", "b"}, LeaderMove{}, false},
		{"no live nodes", map[string]string{"p0": "a"}, nil, LeaderMove{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := BalanceLeaders("a", tc.leaders, replicas, tc.live)
			if ok != tc.ok || m != tc.want {
				t.Fatalf("move %+v %v, want %+v %v", m, ok, tc.want, tc.ok)
			}
		})
	}
}

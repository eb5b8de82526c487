package broker

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fabriq-io/fabriq/cluster/meta"
	"github.com/fabriq-io/fabriq/transport"
)

func TestPlacementSpreadsReplicas(t *testing.T) {
	nodes := []meta.Node{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	load := map[string]int{}
	got, err := place(nodes, load, 4, 2)
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
}

func TestPlacementRefusesTooManyReplicas(t *testing.T) {
	_, err := place([]meta.Node{{ID: "a"}}, map[string]int{}, 1, 3)
	var te *transport.Error
	if !errors.As(err, &te) || te.Code != transport.CodeInvalidArgument {
		t.Fatalf("err %v", err)
	}
	if _, err := place([]meta.Node{{ID: "a"}}, map[string]int{}, 1, 0); err == nil {
		t.Fatal("zero replicas accepted")
	}
}

func TestPlacementSpreadsRegions(t *testing.T) {
	nodes := []meta.Node{{ID: "a", Region: "eu"}, {ID: "b", Region: "eu"}, {ID: "c", Region: "us"}, {ID: "d", Region: "us"}, {ID: "e", Region: "ap"}}
	got, err := place(nodes, map[string]int{}, 5, 3)
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
	// a leads all three: it hands one to the replica leading fewest.
	m, ok := balanceLeaders("a", map[string]string{"p0": "a", "p1": "a", "p2": "a"}, replicas, live)
	if !ok || m.partition != "p0" || m.to != "b" {
		t.Fatalf("move %+v %v", m, ok)
	}
	// Balanced: nothing to do.
	if _, ok := balanceLeaders("a", map[string]string{"p0": "a", "p1": "b", "p2": "c"}, replicas, live); ok {
		t.Fatal("moved a balanced leadership")
	}
	// The only lighter node is dead: nothing to do.
	if _, ok := balanceLeaders("a", map[string]string{"p0": "a", "p1": "a", "p2": "b"}, replicas, []string{"a", "b"}); ok {
		t.Fatal("moved leadership when the light node is dead")
	}
}

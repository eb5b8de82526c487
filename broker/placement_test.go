package broker

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fabriq-io/fabriq/transport"
)

func TestPlacementSpreadsReplicas(t *testing.T) {
	nodes := []nodeInfo{{ID: "a"}, {ID: "b"}, {ID: "c"}}
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
	_, err := place([]nodeInfo{{ID: "a"}}, map[string]int{}, 1, 3)
	var te *transport.Error
	if !errors.As(err, &te) || te.Code != transport.CodeInvalidArgument {
		t.Fatalf("err %v", err)
	}
	if _, err := place([]nodeInfo{{ID: "a"}}, map[string]int{}, 1, 0); err == nil {
		t.Fatal("zero replicas accepted")
	}
}

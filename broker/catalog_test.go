package broker

import (
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

func applyMeta(t *testing.T, c *catalog, index uint64, typ entryType, body any) any {
	t.Helper()
	data, err := encodeEntry(typ, body)
	if err != nil {
		t.Fatal(err)
	}
	return c.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data})
}

// A partition whose replica moved never bootstraps again: an initial
// replica that lost its copy and gets the partition back must join the
// existing group, not start an empty one (found by the chaos suite: a
// node moved off a partition and back onto it bootstrapped a new group
// with the other empty replica and elected itself, with an empty log).
func TestReplicaMoveEndsBootstrap(t *testing.T) {
	c := newCatalog(nil)
	applyMeta(t, c, 1, metaCreateStream, streamMeta{Name: "persistent://t/f/s", Partitions: 2, Replicas: 3,
		Placement: [][]string{{"n3", "n4", "n5"}, {"n1", "n2", "n3"}}, Initial: [][]string{{"n3", "n4", "n5"}, {"n1", "n2", "n3"}}})
	if ok := applyMeta(t, c, 2, metaReplaceReplica, replaceReplicaEntry{Stream: "persistent://t/f/s", Partition: 0, Old: "n4", New: "n1"}); ok != true {
		t.Fatalf("replace: %v", ok)
	}
	applyMeta(t, c, 3, metaReplaceReplica, replaceReplicaEntry{Stream: "persistent://t/f/s", Partition: 0, Old: "n5", New: "n4"})
	s, _ := c.stream("persistent://t/f/s")
	if got := s.Placement[0]; len(got) != 3 || got[0] != "n3" || got[1] != "n1" || got[2] != "n4" {
		t.Fatalf("placement %v", got)
	}
	if len(s.Initial[0]) != 0 {
		t.Fatalf("partition 0 moved, yet %v may still bootstrap it", s.Initial[0])
	}
	if len(s.Initial[1]) != 3 {
		t.Fatalf("partition 1 never moved; its initial replicas are %v", s.Initial[1])
	}
	// n4 was given partition 0 back at index 3: a new member of the
	// group, not the one it was.
	if got, want := s.replicaIDs(0), []string{"n3", "n1@2", "n4@3"}; !slices.Equal(got, want) {
		t.Fatalf("members of partition 0: %v, want %v", got, want)
	}
	if got, want := s.replicaIDs(1), []string{"n1", "n2", "n3"}; !slices.Equal(got, want) {
		t.Fatalf("members of partition 1: %v, want %v", got, want)
	}
	if nodeOfReplica("n4@3") != "n4" || nodeOfReplica("n4") != "n4" {
		t.Fatal("nodeOfReplica does not strip the placement index")
	}
}

// A node whose copy is damaged keeps its place as a new member; a renewal
// naming a member that is not there changes nothing.
func TestRenewReplica(t *testing.T) {
	c := newCatalog(nil)
	applyMeta(t, c, 1, metaCreateStream, streamMeta{Name: "persistent://t/f/s", Partitions: 1, Replicas: 3,
		Placement: [][]string{{"n1", "n2", "n3"}}})
	if ok := applyMeta(t, c, 5, metaRenewReplica, renewReplicaEntry{Stream: "persistent://t/f/s", Partition: 0, Member: "n2"}); ok != true {
		t.Fatalf("renew: %v", ok)
	}
	s, _ := c.stream("persistent://t/f/s")
	if got, want := s.replicaIDs(0), []string{"n1", "n2@5", "n3"}; !slices.Equal(got, want) {
		t.Fatalf("members %v, want %v", got, want)
	}
	if len(s.Initial[0]) != 0 {
		t.Fatalf("a renewed partition may still be bootstrapped by %v", s.Initial[0])
	}
	if ok := applyMeta(t, c, 6, metaRenewReplica, renewReplicaEntry{Stream: "persistent://t/f/s", Partition: 0, Member: "n2"}); ok != false {
		t.Fatalf("renewing a member that was renewed already: %v", ok)
	}
	s, _ = c.stream("persistent://t/f/s")
	if got := s.replicaIDs(0)[1]; got != "n2@5" {
		t.Fatalf("member %s after a stale renewal", got)
	}
}

package broker

import (
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/fabriq-io/fabriq/transport"
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

// A stream keeps the retention policy it was created with until one
// replaces it; a policy for a stream that does not exist changes nothing.
func TestCatalogRetention(t *testing.T) {
	c := newCatalog(nil)
	want := transport.RetentionPolicy{RetentionTimeMs: 60_000, BacklogQuotaBytes: 1 << 20}
	applyMeta(t, c, 1, metaCreateStream, streamMeta{Name: "persistent://t/f/s", Partitions: 1, Replicas: 1,
		Placement: [][]string{{"n1"}}, Retention: want})
	if s, _ := c.stream("persistent://t/f/s"); s.Retention != want {
		t.Fatalf("created with %+v, want %+v", s.Retention, want)
	}
	want = transport.RetentionPolicy{RetentionTimeMs: -1, RetentionBytes: -1}
	if ok := applyMeta(t, c, 2, metaSetRetention, setRetentionEntry{Stream: "persistent://t/f/s", Retention: want}); ok != true {
		t.Fatalf("set retention answered %v", ok)
	}
	if s, _ := c.stream("persistent://t/f/s"); s.Retention != want {
		t.Fatalf("after set %+v, want %+v", s.Retention, want)
	}
	if ok := applyMeta(t, c, 3, metaSetRetention, setRetentionEntry{Stream: "persistent://t/f/gone", Retention: want}); ok != false {
		t.Fatalf("set retention of a missing stream answered %v", ok)
	}
	snap, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	r := newCatalog(nil)
	if err := r.Restore(nopCloser(sink.buf)); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.stream("persistent://t/f/s"); s.Retention != want {
		t.Fatalf("restored %+v, want %+v", s.Retention, want)
	}
}

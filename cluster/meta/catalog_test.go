package meta

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

func mustApply(t *testing.T, c *Catalog, index uint64, e Entry) Result {
	t.Helper()
	data, err := Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	res, ok := c.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(Result)
	if !ok {
		t.Fatalf("apply of %T answered no Result", e)
	}
	return res
}

// A partition whose replica moved never bootstraps again: an initial
// replica that lost its copy and gets the partition back must join the
// existing group, not start an empty one (found by the chaos suite: a
// node moved off a partition and back onto it bootstrapped a new group
// with the other empty replica and elected itself, with an empty log).
func TestReplicaMoveEndsBootstrap(t *testing.T) {
	c := NewCatalog(nil, nil)
	mustApply(t, c, 1, CreateStream{Name: "persistent://t/f/s", Partitions: 2, Replicas: 3,
		Placement: [][]string{{"n3", "n4", "n5"}, {"n1", "n2", "n3"}}})
	if res := mustApply(t, c, 2, ReplaceReplica{Stream: "persistent://t/f/s", Partition: 0, Old: "n4", New: "n1"}); !res.Done {
		t.Fatalf("replace: %+v", res)
	}
	mustApply(t, c, 3, ReplaceReplica{Stream: "persistent://t/f/s", Partition: 0, Old: "n5", New: "n4"})
	s, _ := c.Stream("persistent://t/f/s")
	if got := s.Placement[0]; !slices.Equal(got, []string{"n3", "n1", "n4"}) {
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
	if got, want := s.Members(0), []string{"n3", "n1@2", "n4@3"}; !slices.Equal(got, want) {
		t.Fatalf("members of partition 0: %v, want %v", got, want)
	}
	if got, want := s.Members(1), []string{"n1", "n2", "n3"}; !slices.Equal(got, want) {
		t.Fatalf("members of partition 1: %v, want %v", got, want)
	}
	if NodeOf("n4@3") != "n4" || NodeOf("n4") != "n4" || MemberIndex("n4@3") != 3 || MemberIndex("n4") != 0 {
		t.Fatal("member ids do not parse")
	}
	// A move already made, or of a replica that is not there, changes
	// nothing.
	if res := mustApply(t, c, 4, ReplaceReplica{Stream: "persistent://t/f/s", Partition: 0, Old: "n5", New: "n2"}); res.Done {
		t.Fatal("moved a replica that is not there")
	}
}

// A node whose copy is damaged keeps its place as a new member; a renewal
// naming a member that is not there changes nothing.
func TestRenewReplica(t *testing.T) {
	c := NewCatalog(nil, nil)
	mustApply(t, c, 1, CreateStream{Name: "persistent://t/f/s", Partitions: 1, Replicas: 3,
		Placement: [][]string{{"n1", "n2", "n3"}}})
	if res := mustApply(t, c, 5, RenewReplica{Stream: "persistent://t/f/s", Partition: 0, Member: "n2"}); !res.Done {
		t.Fatalf("renew: %+v", res)
	}
	s, _ := c.Stream("persistent://t/f/s")
	if got, want := s.Members(0), []string{"n1", "n2@5", "n3"}; !slices.Equal(got, want) {
		t.Fatalf("members %v, want %v", got, want)
	}
	if len(s.Initial[0]) != 0 {
		t.Fatalf("a renewed partition may still be bootstrapped by %v", s.Initial[0])
	}
	if res := mustApply(t, c, 6, RenewReplica{Stream: "persistent://t/f/s", Partition: 0, Member: "n2"}); res.Done {
		t.Fatal("renewed a member that was renewed already")
	}
	s, _ = c.Stream("persistent://t/f/s")
	if got := s.Members(0)[1]; got != "n2@5" {
		t.Fatalf("member %s after a stale renewal", got)
	}
}

// A stream keeps the retention policy it was created with until one
// replaces it; a policy for a stream that does not exist changes nothing;
// a snapshot carries it.
func TestCatalogRetention(t *testing.T) {
	c := NewCatalog(nil, nil)
	want := Retention{TimeMs: 60_000, BacklogQuotaBytes: 1 << 20}
	mustApply(t, c, 1, CreateStream{Name: "persistent://t/f/s", Partitions: 1, Replicas: 1,
		Placement: [][]string{{"n1"}}, Retention: want})
	if s, _ := c.Stream("persistent://t/f/s"); s.Retention != want {
		t.Fatalf("created with %+v, want %+v", s.Retention, want)
	}
	want = Retention{TimeMs: -1, Bytes: -1}
	if res := mustApply(t, c, 2, SetRetention{Stream: "persistent://t/f/s", Retention: want}); !res.Done {
		t.Fatalf("set retention answered %+v", res)
	}
	if s, _ := c.Stream("persistent://t/f/s"); s.Retention != want {
		t.Fatalf("after set %+v, want %+v", s.Retention, want)
	}
	if res := mustApply(t, c, 3, SetRetention{Stream: "persistent://t/f/gone", Retention: want}); res.Done {
		t.Fatal("set the retention of a missing stream")
	}
	r := NewCatalog(nil, nil)
	if err := r.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, c))}); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.Stream("persistent://t/f/s"); s.Retention != want || r.Applied() != 3 {
		t.Fatalf("restored %+v at %d, want %+v at 3", s.Retention, r.Applied(), want)
	}
}

// Creating a stream that exists, or deleting one that does not, is not
// done; the epoch is the creating entry's index.
func TestCreateDeleteStream(t *testing.T) {
	c := NewCatalog(nil, nil)
	create := CreateStream{Name: "persistent://t/f/s", Partitions: 1, Replicas: 1, Placement: [][]string{{"n1"}}}
	if !mustApply(t, c, 4, create).Done || mustApply(t, c, 5, create).Done {
		t.Fatal("a stream was created twice, or not at all")
	}
	if s, _ := c.Stream(create.Name); s.Epoch != 4 || !slices.Equal(s.Initial[0], []string{"n1"}) {
		t.Fatalf("stream %+v", s)
	}
	if !mustApply(t, c, 6, DeleteStream{Name: create.Name}).Done || mustApply(t, c, 7, DeleteStream{Name: create.Name}).Done {
		t.Fatal("a stream was deleted twice, or not at all")
	}
	if !mustApply(t, c, 8, create).Done {
		t.Fatal("a deleted stream's name cannot be used again")
	}
	if s, _ := c.Stream(create.Name); s.Epoch != 8 {
		t.Fatalf("the stream created again has epoch %d", s.Epoch)
	}
}

// An entry of an unknown type flagged ignorable is skipped (the index
// still counts as applied); one without the flag, or one that does not
// decode, stops the node, and the catalog is left as it was.
func TestUnknownEntryTypes(t *testing.T) {
	c := NewCatalog(nil, nil)
	mustApply(t, c, 1, RegisterNode{ID: "n1"})
	res := c.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: []byte{byte(IgnoreUnknownTypeFlag | 42), 0xc0}})
	if r, ok := res.(Result); !ok || !r.Skipped || c.Applied() != 2 {
		t.Fatalf("ignorable entry: %+v, applied %d", res, c.Applied())
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"unknown", []byte{42, 0xc0}, "unknown metadata entry type 42"},
		{"empty", nil, "empty metadata entry"},
		{"garbage", []byte{byte(TypeRegisterNode), 0xc1}, "RegisterNode body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, tc.want) {
					t.Fatalf("panic %v, want one saying %q", r, tc.want)
				}
				if c.Applied() != 2 {
					t.Fatalf("applied %d after a refused entry", c.Applied())
				}
			}()
			c.Apply(&raft.Log{Index: 3, Type: raft.LogCommand, Data: tc.data})
		})
	}
	// Raft's own entries are not the catalog's.
	if res := c.Apply(&raft.Log{Index: 3, Type: raft.LogNoop}); res != nil || c.Applied() != 2 {
		t.Fatalf("a no-op entry answered %v", res)
	}
}

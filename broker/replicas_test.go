package broker

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fabriq-io/fabriq/cluster"
)

// A node's members of a partition only get newer: a newer member sets an
// older one's copy aside, and a claim by an older member (a catalog
// replaying the metadata log passes through old placements) touches
// nothing, whether the newer copy is in place or set aside.
func TestClaimPartitionDirOnlyMovesForward(t *testing.T) {
	data := t.TempDir()
	n := &Node{cfg: Config{NodeID: "n3", DataDir: data}, logger: slog.New(slog.DiscardHandler)}
	root := filepath.Join(data, "partitions", "t", "f")
	dir := filepath.Join(root, "s-partition-0")
	list := func() []string {
		var names []string
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			owner, _ := dirOwner(filepath.Join(root, e.Name()), "n3")
			names = append(names, e.Name()+"="+owner)
		}
		return names
	}
	if err := n.claimPartitionDir(dir, "n3@54", nil); err != nil {
		t.Fatal(err)
	}
	if err := n.claimPartitionDir(dir, "n3@101", nil); err != nil {
		t.Fatal(err)
	}
	want := []string{"s-partition-0=n3@101", "s-partition-0@n3@54=n3@54"}
	if got := list(); !slices.Equal(got, want) {
		t.Fatalf("after the newer member: %v, want %v", got, want)
	}
	if err := n.claimPartitionDir(dir, "n3@54", nil); !errors.Is(err, errStaleMember) {
		t.Fatalf("an older member's claim: %v", err)
	}
	if got := list(); !slices.Equal(got, want) {
		t.Fatalf("an older member's claim changed the copies: %v", got)
	}
	// The newest copy set aside (the node was moved away again) still
	// outranks an old placement.
	if err := n.claimPartitionDir(dir, "n3@120", nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, dir+"@n3@120"); err != nil {
		t.Fatal(err)
	}
	if err := n.claimPartitionDir(dir, "n3@101", nil); !errors.Is(err, errStaleMember) {
		t.Fatalf("a claim older than a copy set aside: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused claim created %s", dir)
	}
	// A pre-existing copy without a marker belongs to the initial member.
	legacy := filepath.Join(root, "t-partition-0")
	if err := os.MkdirAll(filepath.Join(legacy, "log"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := n.claimPartitionDir(legacy, "n3", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(legacy, "log")); err != nil {
		t.Fatalf("the initial member's own copy was set aside: %v", err)
	}
}

// The copies set aside in a fabric's directory are found by the leaf they
// were set aside from, whatever the member's name holds, and a leaf that
// begins like another is not taken for it.
func TestCopiesSetAside(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"s-partition-1", "s-partition-1@n3@54", "s-partition-1@n3@60", "s-partition-10", "s-partition-10@n2@7", "other"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got := copiesSetAside(root)
	want := map[string][]string{
		"s-partition-1":  {filepath.Join(root, "s-partition-1@n3@54"), filepath.Join(root, "s-partition-1@n3@60")},
		"s-partition-10": {filepath.Join(root, "s-partition-10@n2@7")},
	}
	if len(got) != len(want) {
		t.Fatalf("copies set aside %v, want %v", got, want)
	}
	for leaf, paths := range want {
		if !slices.Equal(got[leaf], paths) {
			t.Errorf("copies of %s: %v, want %v", leaf, got[leaf], paths)
		}
	}
	if got := copiesSetAside(filepath.Join(root, "missing")); len(got) != 0 {
		t.Errorf("a missing directory: %v", got)
	}
}

// A stopping node spreads the leaderships it hands over across the live
// voters, never to itself, a non-voter or a dead node.
func TestHandOversSpread(t *testing.T) {
	h := newHandOvers([]string{"a", "b", "c"}) // d is dead
	servers := []cluster.Server{
		{ID: "a", Address: "a:1", Voter: true},
		{ID: "b@2", Address: "b:1", Voter: true},
		{ID: "c", Address: "c:1", Voter: true},
		{ID: "d", Address: "d:1", Voter: true},
		{ID: "e", Address: "e:1", Voter: false},
	}
	for range 1000 {
		to, ok := h.pick("a", servers)
		if !ok || to.ID == "a" || to.ID == "d" || to.ID == "e" {
			t.Fatalf("picked %+v %v", to, ok)
		}
	}
	if got := h.counts(); got["b"] != 500 || got["c"] != 500 || len(got) != 2 {
		t.Fatalf("hand-overs %v, want 500 each to b and c", got)
	}
	if to, ok := h.pick("a", servers[:1]); ok {
		t.Fatalf("picked %+v with no other voter", to)
	}
}

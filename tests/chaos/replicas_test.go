package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeLog makes node's copy of a partition's log with the given segment
// contents.
func writeLog(t *testing.T, n *Node, partition string, segments ...string) {
	t.Helper()
	dir := filepath.Join(n.Dir, "partitions", "t", "f", partition, "log")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range segments {
		if err := os.WriteFile(filepath.Join(dir, strings.Repeat("0", 19)+string(rune('0'+i))+".log"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Index and checkpoint files may differ; only segments count.
	os.WriteFile(filepath.Join(dir, "checkpoint"), []byte(n.ID), 0o644)
}

func TestReplicasCompare(t *testing.T) {
	root := t.TempDir()
	c := &Cluster{}
	for _, id := range []string{"n1", "n2", "n3"} {
		c.Nodes = append(c.Nodes, &Node{ID: id, Dir: filepath.Join(root, id)})
	}
	for _, n := range c.Nodes {
		writeLog(t, n, "s", "batch-1", "batch-2")
	}
	if r := CompareReplicas(c, "t", "f", nil); !r.Valid || r.Partitions != 1 || r.Copies != 3 {
		t.Fatalf("identical copies: %+v", r)
	}
	// One replica's last segment lost a byte: the checker must say so.
	writeLog(t, c.Nodes[2], "s", "batch-1", "batch-")
	if r := CompareReplicas(c, "t", "f", nil); r.Valid || len(r.Examples) != 1 || !strings.Contains(r.Examples[0], "[n3]") {
		t.Fatalf("a differing copy: %+v", r)
	}
	// A copy left on a node that no longer holds the partition is not
	// compared.
	if r := CompareReplicas(c, "t", "f", map[string][]string{"s": {"n1", "n2"}}); !r.Valid || r.Copies != 2 {
		t.Fatalf("copies of current replicas only: %+v", r)
	}
}

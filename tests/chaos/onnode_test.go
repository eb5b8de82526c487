package chaos

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabriq-io/fabriq/storage"
)

// writeCopy makes node's copy of partition name holding payloads from
// offset 0 on.
func writeCopy(t *testing.T, n *Node, name string, payloads ...string) {
	t.Helper()
	l, err := storage.Open(filepath.Join(n.Dir, "partitions", "t", "f", name, "log"), storage.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var msgs []storage.Message
	for _, p := range payloads {
		msgs = append(msgs, storage.Message{Payload: []byte(p)})
	}
	if _, err := l.Append(1, msgs); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
}

func TestOnNodesCheck(t *testing.T) {
	root := t.TempDir()
	c := &Cluster{}
	for _, id := range []string{"n1", "n2", "n3"} {
		c.Nodes = append(c.Nodes, &Node{ID: id, Dir: filepath.Join(root, id)})
	}
	w := Workload{Name: "q", Stream: "persistent://t/f/s", Partitions: 2, Producers: 1, Consumers: 1}
	var ops []Op
	for i, v := range []string{"a", "b", "c"} {
		ops = append(ops, Op{Process: 0, Kind: OK, F: "send", Value: v, Partition: 1, Offset: int64(i)})
	}
	// A send whose outcome is unknown need not be anywhere.
	ops = append(ops, Op{Process: 0, Kind: Info, F: "send", Value: "d", Offset: -1})
	placement := map[string][]string{"s-partition-1": {"n1", "n2", "n3"}}
	for _, n := range c.Nodes {
		writeCopy(t, n, "s-partition-1", "a", "b", "c")
	}
	if r := CheckOnNodes(c, []Workload{w}, ops, placement); !r.Valid || r.Copies != 3 || r.Checked != 9 {
		t.Fatalf("every copy holds every acknowledged message: %+v", r)
	}
	// One replica lacks the last acknowledged message, another holds a
	// different payload at an acknowledged offset.
	c2 := &Cluster{}
	for _, id := range []string{"m1", "m2", "m3"} {
		c2.Nodes = append(c2.Nodes, &Node{ID: id, Dir: filepath.Join(root, id)})
	}
	writeCopy(t, c2.Nodes[0], "s-partition-1", "a", "b", "c")
	writeCopy(t, c2.Nodes[1], "s-partition-1", "a", "b")
	writeCopy(t, c2.Nodes[2], "s-partition-1", "a", "B", "c")
	placement = map[string][]string{"s-partition-1": {"m1", "m2", "m3"}}
	r := CheckOnNodes(c2, []Workload{w}, ops, placement)
	if r.Valid || r.Missing != 2 || len(r.Examples) != 2 || !strings.Contains(r.Examples[0], "m2") || !strings.Contains(r.Examples[1], "m3") {
		t.Fatalf("a copy missing a message and one holding another payload: %+v", r)
	}
	// A copy left on a node that no longer holds the partition is not read.
	placement = map[string][]string{"s-partition-1": {"m1"}}
	if r := CheckOnNodes(c2, []Workload{w}, ops, placement); !r.Valid || r.Copies != 1 {
		t.Fatalf("current replicas only: %+v", r)
	}
}

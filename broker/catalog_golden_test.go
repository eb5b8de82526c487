package broker

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fabriq-io/fabriq/transport"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of the metadata entries and snapshot")

// goldenMetaDir holds the metadata group's entries and snapshot as this
// version writes them; later versions must read them back.
const goldenMetaDir = "testdata/meta"

// goldenMetaEntries is one entry of each metadata type, numbered as the
// Raft indexes the snapshot golden applies them at.
func goldenMetaEntries() []struct {
	name  string
	index uint64
	typ   entryType
	body  any
} {
	policy := transport.RetentionPolicy{
		RetentionTimeMs: 3_600_000, RetentionBytes: 1 << 30, BacklogQuotaBytes: 1 << 20,
		BacklogQuotaPolicy: transport.ConsumerBacklogEviction, MessageTTLMs: 86_400_000,
	}
	return []struct {
		name  string
		index uint64
		typ   entryType
		body  any
	}{
		{"register-node", 3, metaRegisterNode, nodeInfo{ID: "n1", ClientAddr: "10.0.0.1:6650", RaftAddr: "10.0.0.1:7650", Region: "eu"}},
		{"create-stream", 7, metaCreateStream, streamMeta{Name: "persistent://t/f/s", Partitions: 2, Replicas: 3,
			Placement: [][]string{{"n1", "n2", "n3"}, {"n2", "n3", "n1"}}, Retention: policy}},
		{"delete-stream", 8, metaDeleteStream, deleteStreamEntry{Name: "persistent://t/f/gone"}},
		{"replace-replica", 9, metaReplaceReplica, replaceReplicaEntry{Stream: "persistent://t/f/s", Partition: 1, Old: "n1", New: "n4"}},
		{"renew-replica", 12, metaRenewReplica, renewReplicaEntry{Stream: "persistent://t/f/s", Partition: 0, Member: "n2"}},
		{"set-retention", 15, metaSetRetention, setRetentionEntry{Stream: "persistent://t/f/s", Retention: transport.RetentionPolicy{RetentionTimeMs: -1, RetentionBytes: -1}}},
	}
}

// checkGolden compares b with the golden file name, or rewrites it with
// -update.
func checkGolden(t *testing.T, name string, b []byte) {
	t.Helper()
	path := filepath.Join(goldenMetaDir, name)
	if *updateGolden {
		if err := os.MkdirAll(goldenMetaDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("%s changed:\n got %x\nwant %x", name, b, want)
	}
}

// The metadata entries and snapshot this version writes are what the
// golden files hold: raft.db files and catalog snapshots on disk hold
// these bytes, and every later version must read them.
func TestCatalogGolden(t *testing.T) {
	c := newCatalog(nil)
	for i, n := range []nodeInfo{
		{ID: "n2", ClientAddr: "10.0.0.2:6650", RaftAddr: "10.0.0.2:7650", Region: "us"},
		{ID: "n3", ClientAddr: "10.0.0.3:6650", RaftAddr: "10.0.0.3:7650"},
	} {
		applyMeta(t, c, uint64(i+1), metaRegisterNode, n)
	}
	applyMeta(t, c, 5, metaCreateStream, streamMeta{Name: "persistent://t/f/gone", Partitions: 1, Replicas: 1, Placement: [][]string{{"n2"}}})
	for _, e := range goldenMetaEntries() {
		data, err := encodeEntry(e.typ, e.body)
		if err != nil {
			t.Fatal(err)
		}
		checkGolden(t, e.name+".entry", data)
		applyMeta(t, c, e.index, e.typ, e.body)
	}
	snap, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &bufferSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	// msgpack writes a map's keys in Go's map order: the snapshot's
	// bytes vary, so its content is compared.
	if *updateGolden {
		checkGolden(t, "catalog.snapshot", sink.Bytes())
		return
	}
	want, err := os.ReadFile(filepath.Join(goldenMetaDir, "catalog.snapshot"))
	if err != nil {
		t.Fatal(err)
	}
	var got, golden map[string]any
	if err := msgpack.Unmarshal(sink.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if err := msgpack.Unmarshal(want, &golden); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, golden) {
		t.Fatalf("catalog snapshot changed:\n got %v\nwant %v", got, golden)
	}
}

// bufferSink is a raft.SnapshotSink in memory.
type bufferSink struct{ bytes.Buffer }

func (*bufferSink) Close() error  { return nil }
func (*bufferSink) ID() string    { return "buffer" }
func (*bufferSink) Cancel() error { return nil }

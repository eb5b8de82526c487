package meta

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"
)

// The files in testdata were written by the broker's catalog before the
// metadata state machine moved here (broker/catalog_golden_test.go at the
// commit that added them): raft.db files and catalog snapshots on disk
// hold these bytes. This version must read them as they were meant, and
// write the same bytes.

var goldenPolicy = Retention{
	TimeMs: 3_600_000, Bytes: 1 << 30, BacklogQuotaBytes: 1 << 20,
	BacklogQuotaPolicy: 1, // consumer_backlog_eviction
	MessageTTLMs:       86_400_000,
}

// goldenEntries is one entry of each type, with the Raft index the
// snapshot golden applied it at.
var goldenEntries = []struct {
	file  string
	index uint64
	entry Entry
}{
	{"register-node", 3, RegisterNode{ID: "n1", ClientAddr: "10.0.0.1:6650", RaftAddr: "10.0.0.1:7650", Region: "eu"}},
	{"create-stream", 7, CreateStream{Name: "persistent://t/f/s", Partitions: 2, Replicas: 3,
		Placement: [][]string{{"n1", "n2", "n3"}, {"n2", "n3", "n1"}}, Retention: goldenPolicy}},
	{"delete-stream", 8, DeleteStream{Name: "persistent://t/f/gone"}},
	{"replace-replica", 9, ReplaceReplica{Stream: "persistent://t/f/s", Partition: 1, Old: "n1", New: "n4"}},
	{"renew-replica", 12, RenewReplica{Stream: "persistent://t/f/s", Partition: 0, Member: "n2"}},
	{"set-retention", 15, SetRetention{Stream: "persistent://t/f/s", Retention: Retention{TimeMs: -1, Bytes: -1}}},
}

// goldenFabricEntries are the entries of tenants and fabrics, written
// by this version when they came: their bytes must not change either.
// The snapshot golden predates them.
var goldenFabricEntries = []struct {
	file  string
	entry Entry
}{
	{"create-tenant", CreateTenant{Name: "t"}},
	{"delete-tenant", DeleteTenant{Name: "t"}},
	{"create-fabric", CreateFabric{Name: "t/f", Regions: []string{"eu", "us"},
		Defaults: StreamDefaults{Partitions: 4, Replicas: 3, Retention: goldenPolicy}}},
	{"delete-fabric", DeleteFabric{Name: "t/f"}},
	{"set-fabric-regions", SetFabricRegions{Name: "t/f", Regions: []string{"eu", "us"}}},
}

// The entries of tenants and fabrics decode to what they were written
// with and encode to the same bytes.
func TestGoldenFabricEntries(t *testing.T) {
	for _, g := range goldenFabricEntries {
		t.Run(g.file, func(t *testing.T) {
			enc, err := Encode(g.entry)
			if err != nil {
				t.Fatal(err)
			}
			data := readGolden(t, g.file+".entry")
			if got := decodeEntry(t, data, g.entry); !reflect.DeepEqual(got, g.entry) {
				t.Fatalf("decoded %+v, want %+v", got, g.entry)
			}
			if !bytes.Equal(enc, data) {
				t.Fatalf("encodes to\n %x\nwritten as\n %x", enc, data)
			}
		})
	}
}

func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeEntry decodes the body of an entry of the type of like.
func decodeEntry(t *testing.T, data []byte, like Entry) Entry {
	t.Helper()
	if Type(data[0]) != like.entryType() {
		t.Fatalf("type byte %d, want %d (%v)", data[0], like.entryType(), like.entryType())
	}
	v := reflect.New(reflect.TypeOf(like))
	if err := msgpack.Unmarshal(data[1:], v.Interface()); err != nil {
		t.Fatal(err)
	}
	return v.Elem().Interface().(Entry)
}

// Every golden entry decodes into the entry struct of its type with the
// values it was written with, and the struct encodes to the same bytes.
// CreateStream is the exception: older versions wrote the whole stream,
// with an epoch and an initial placement that were always empty and that
// nothing reads; this version leaves them out, and every other key keeps
// its bytes.
func TestGoldenEntries(t *testing.T) {
	for _, g := range goldenEntries {
		t.Run(g.file, func(t *testing.T) {
			data := readGolden(t, g.file+".entry")
			if got := decodeEntry(t, data, g.entry); !reflect.DeepEqual(got, g.entry) {
				t.Fatalf("decoded %+v, want %+v", got, g.entry)
			}
			enc, err := Encode(g.entry)
			if err != nil {
				t.Fatal(err)
			}
			if g.entry.entryType() != TypeCreateStream {
				if !bytes.Equal(enc, data) {
					t.Fatalf("encodes to\n %x\nwritten as\n %x", enc, data)
				}
				return
			}
			var old, now map[string]msgpack.RawMessage
			if err := msgpack.Unmarshal(data[1:], &old); err != nil {
				t.Fatal(err)
			}
			if err := msgpack.Unmarshal(enc[1:], &now); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"e", "in"} {
				if _, ok := now[k]; ok {
					t.Fatalf("CreateStream writes %q", k)
				}
				delete(old, k)
			}
			if !reflect.DeepEqual(old, now) {
				t.Fatalf("CreateStream encodes to %x, older versions wrote %x", enc, data)
			}
		})
	}
}

// goldenCatalog applies the entries the snapshot golden was made of, read
// from the golden files where there is one.
func goldenCatalog(t *testing.T) *Catalog {
	t.Helper()
	c := NewCatalog(nil, nil)
	prelude := []struct {
		index uint64
		entry Entry
	}{
		{1, RegisterNode{ID: "n2", ClientAddr: "10.0.0.2:6650", RaftAddr: "10.0.0.2:7650", Region: "us"}},
		{2, RegisterNode{ID: "n3", ClientAddr: "10.0.0.3:6650", RaftAddr: "10.0.0.3:7650"}},
		{5, CreateStream{Name: "persistent://t/f/gone", Partitions: 1, Replicas: 1, Placement: [][]string{{"n2"}}}},
	}
	for _, p := range prelude {
		mustApply(t, c, p.index, p.entry)
	}
	for _, g := range goldenEntries {
		c.Apply(&raft.Log{Index: g.index, Type: raft.LogCommand, Data: readGolden(t, g.file+".entry")})
	}
	return c
}

// The catalog built from the golden entries snapshots to what the golden
// snapshot holds, and the golden snapshot restores to that catalog.
// Older versions wrote the nodes and streams in Go's map order, so the
// golden file's bytes are one order among many: the content is compared,
// then the bytes once the golden state is written again (in key order,
// every time).
func TestGoldenSnapshot(t *testing.T) {
	c := goldenCatalog(t)
	golden := readGolden(t, "catalog.snapshot")
	got := snapshotBytes(t, c)
	var gotAny, goldenAny map[string]any
	if err := msgpack.Unmarshal(got, &gotAny); err != nil {
		t.Fatal(err)
	}
	if err := msgpack.Unmarshal(golden, &goldenAny); err != nil {
		t.Fatal(err)
	}
	// The golden predates tenants and fabrics: the stream's come along,
	// adopted, and are checked below.
	delete(gotAny, "tenants")
	delete(gotAny, "fabrics")
	if !reflect.DeepEqual(gotAny, goldenAny) {
		t.Fatalf("snapshot holds\n %v\nwritten as\n %v", gotAny, goldenAny)
	}
	st, err := decodeState(bytes.NewReader(golden))
	if err != nil {
		t.Fatal(err)
	}
	again, err := encodeState(&st)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, got) {
		t.Fatalf("the golden state encodes to\n %x\nthe catalog to\n %x", again, got)
	}
	r := NewCatalog(nil, nil)
	if err := r.Restore(nopCloser{bytes.NewReader(golden)}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Streams(), c.Streams()) || !reflect.DeepEqual(r.Nodes(), c.Nodes()) || r.Applied() != 15 {
		t.Fatalf("restored %+v %+v at %d", r.Streams(), r.Nodes(), r.Applied())
	}
	want := Stream{
		Epoch: 7, Name: "persistent://t/f/s", Partitions: 2, Replicas: 3,
		Placement: [][]string{{"n1", "n2", "n3"}, {"n2", "n3", "n4"}},
		Initial:   [][]string{nil, nil},
		Since:     [][]uint64{{0, 12, 0}, {0, 0, 9}},
		Retention: Retention{TimeMs: -1, Bytes: -1},
	}
	if s, _ := r.Stream(want.Name); !reflect.DeepEqual(s, want) {
		t.Fatalf("restored stream\n %+v\nwant\n %+v", s, want)
	}
	if _, ok := r.Stream("persistent://t/f/gone"); ok || len(r.Nodes()) != 3 {
		t.Fatalf("restored %d nodes and the deleted stream", len(r.Nodes()))
	}
	if f, ok := r.Fabric("t/f"); !ok || !slices.Equal(r.Tenants(), []string{"t"}) || f.Name != "t/f" || len(f.Regions) != 0 {
		t.Fatalf("restored tenants %v and fabric %+v (%v): want t and t/f, adopted from the stream", r.Tenants(), f, ok)
	}
}

func snapshotBytes(t *testing.T, c *Catalog) []byte {
	t.Helper()
	snap, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &bufferSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

// bufferSink is a raft.SnapshotSink in memory.
type bufferSink struct{ bytes.Buffer }

func (*bufferSink) Close() error  { return nil }
func (*bufferSink) ID() string    { return "buffer" }
func (*bufferSink) Cancel() error { return nil }

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

package broker

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fabriq-io/fabriq/subscription"
	"github.com/fabriq-io/fabriq/transport"
)

var updateGolden = flag.Bool("update-golden", false, "write the partition state machine's golden encodings to fsm/testdata")

// goldenDir holds the bytes of one entry of every partition entry type and
// of snapshot states, as the state machine encodes them: the format of
// every replica's Raft log and snapshots.
var goldenDir = filepath.Join("fsm", "testdata")

// goldenEntries are the entries whose encoding is pinned; every field that
// can be set is set, and the "-minimal" ones leave the optional ones out.
func goldenEntries() []struct {
	name string
	typ  entryType
	body any
} {
	return []struct {
		name string
		typ  entryType
		body any
	}{
		{"send", entrySend, sendEntry{PublishTime: 1_700_000_000_123, Batches: []batchEntry{
			{Producer: "p1", Messages: []transport.MessageData{
				{Key: "k1", OrderingKey: []byte("ok"), Properties: map[string]string{"b": "2", "a": "1"}, EventTime: 17, PublishTime: 1_700_000_000_000, SequenceID: 7, Payload: []byte("hello")},
				{SequenceID: 8, Payload: []byte{0, 1, 2}},
			}},
			{Producer: "p2"}, // a producer opening
		}}},
		{"send-minimal", entrySend, sendEntry{}},
		{"create-subscription", entryCreateSubscription, createSubscriptionEntry{Name: "s1", Mode: transport.KeyShared, Initial: transport.Earliest}},
		{"acks", entryAcks, ackEntry{Acks: []subAcks{
			{Sub: "s1", Offsets: []uint64{1, 2, 300}, Cumulative: true, Redelivered: []uint64{3, 70000}},
			{Sub: "s2", Offsets: []uint64{4}},
		}}},
		{"delete-subscription", entryDeleteSubscription, deleteSubscriptionEntry{Name: "s1"}},
		{"seek", entrySeek, seekEntry{Name: "s1", Offset: 1 << 40}},
		{"join", entryJoin, joinEntry{Sub: "s1", Mode: transport.KeyShared, Initial: transport.Earliest, KeyMode: transport.Sticky, OutOfOrder: true,
			Member:  memberState{Name: "c1", Priority: -3, Ranges: []transport.HashRange{{Start: 0, End: 100}, {Start: 200, End: 65535}}, Gen: 9},
			MaxSubs: 1000}},
		{"join-minimal", entryJoin, joinEntry{Sub: "s2", Mode: transport.Failover, Member: memberState{Name: "c2"}}},
		{"leave", entryLeave, leaveEntry{Sub: "s1", Members: []memberState{{Name: "c1", Gen: 9}, {Name: "c2"}}}},
		{"retain", entryRetain, retainEntry{Start: 4096, AckBelow: 5000}},
		{"retain-minimal", entryRetain, retainEntry{Start: 12}},
	}
}

// goldenState is a snapshot state with every field set; its maps have
// several keys, so its encoding depends on map order.
func goldenState() *fsmState {
	return &fsmState{
		Next: 5000,
		Producers: map[string]*producerState{
			"p1": {LastSeq: 90, Recent: []seqRange{{First: 1, Last: 40, Offset: 10}, {First: 42, Last: 90, Offset: 60}}, LastTime: 1_700_000_000_123},
			"p2": {LastSeq: 0, Recent: []seqRange{{First: 0, Last: 0, Offset: 4999}}, LastTime: 1_700_000_000_456},
			"p3": {},
		},
		Subs: map[string]*subState{
			"s1": {Mode: transport.KeyShared, Cursor: &subscription.Cursor{Floor: 4100, Acked: []subscription.Range{{Start: 4200, End: 4300}}},
				KeyMode: transport.Sticky, OutOfOrder: true,
				Members: []memberState{
					{Name: "c1", Priority: 2, Ranges: []transport.HashRange{{Start: 0, End: 32767}}, Gen: 11},
					{Name: "c2", Ranges: []transport.HashRange{{Start: 32768, End: 65535}}, Gen: 12},
				},
				Redeliveries: map[uint64]uint32{4100: 2, 4101: 1}},
			"s2": {Mode: transport.Exclusive, Cursor: subscription.NewCursor(4096)},
		},
		Start: 4096,
	}
}

// goldenStateSingle is a snapshot state whose maps have one key at most,
// so that its encoding is deterministic.
func goldenStateSingle() *fsmState {
	return &fsmState{
		Next:      300,
		Producers: map[string]*producerState{"p1": {LastSeq: 299, Recent: []seqRange{{First: 0, Last: 299, Offset: 0}}, LastTime: 1_700_000_000_123}},
		Subs: map[string]*subState{
			"s1": {Mode: transport.Failover, Cursor: &subscription.Cursor{Floor: 10, Acked: []subscription.Range{{Start: 12, End: 12}}},
				Members:      []memberState{{Name: "c1", Priority: 1, Gen: 3}},
				Redeliveries: map[uint64]uint32{10: 4}},
		},
		Start: 0,
	}
}

// golden compares data with the golden file name, or writes it with
// -update-golden.
func golden(t *testing.T, name string, data []byte, exact bool) {
	t.Helper()
	path := filepath.Join(goldenDir, name+".golden")
	if *updateGolden {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if exact {
		if !bytes.Equal(data, want) {
			t.Fatalf("%s: encoded\n%x\nwant\n%x", name, data, want)
		}
		return
	}
	got, exp := untyped(t, data), untyped(t, want)
	if !reflect.DeepEqual(got, exp) {
		t.Fatalf("%s: encoded\n%v\nwant\n%v", name, got, exp)
	}
}

// untyped decodes msgpack without a schema: maps of any keys, in no
// order, so that encodings that differ only in map order compare equal.
func untyped(t *testing.T, data []byte) any {
	t.Helper()
	dec := msgpack.NewDecoder(bytes.NewReader(data))
	dec.SetMapDecoder(func(d *msgpack.Decoder) (any, error) { return d.DecodeUntypedMap() })
	v, err := dec.DecodeInterface()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The partition state machine's entries and snapshot state encode as the
// golden files say: the format on every replica's disk.
func TestFSMGoldenEncoding(t *testing.T) {
	for _, g := range goldenEntries() {
		golden(t, "entry-"+g.name, mustEntry(t, g.typ, g.body), true)
	}
	for _, s := range []struct {
		name  string
		state *fsmState
		exact bool
	}{{"state", goldenState(), false}, {"state-single", goldenStateSingle(), true}} {
		// As Snapshot encodes it.
		data, err := msgpack.Marshal(s.state)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, s.name, data, s.exact)
	}
}

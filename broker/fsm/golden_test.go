package fsm

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fabriq-io/fabriq/subscription"
)

// The files in testdata were written by the state machine before it had
// entry and state types of its own (it used the wire's), with every field
// set: they are the format of every replica's Raft log and snapshots.
// Each is decoded with today's types and compared field by field with
// what was encoded, then encoded again and compared byte for byte where
// the encoding is deterministic (entries sort map keys; a state's maps
// are encoded in map order, so only a state whose maps have one key each
// is). Changing a tag, a field's order or type, or an enum's value fails
// here.

// goldenEntry is an entry of the golden files: its type and what it
// holds.
type goldenEntry struct {
	name string
	typ  entryType
	want any
	// roundTrip decodes a body into a command of want's type and encodes
	// it again with Encode.
	roundTrip func(body []byte) (got any, again []byte, err error)
}

func golden[R any](name string, typ entryType, want Command[R]) goldenEntry {
	return goldenEntry{name: name, typ: typ, want: want, roundTrip: func(body []byte) (any, []byte, error) {
		p := reflect.New(reflect.TypeOf(want))
		if err := decodeBody(body, p.Interface()); err != nil {
			return nil, nil, err
		}
		got := p.Elem().Interface().(Command[R])
		again, err := Encode(got)
		return got, again, err
	}}
}

func goldenEntries() []goldenEntry {
	return []goldenEntry{
		golden("send", entrySend, Send{PublishTime: 1_700_000_000_123, Batches: []Batch{
			{Producer: "p1", Messages: []Message{
				{Key: "k1", OrderingKey: []byte("ok"), Properties: map[string]string{"b": "2", "a": "1"}, EventTime: 17, PublishTime: 1_700_000_000_000, SequenceID: 7, Payload: []byte("hello")},
				{SequenceID: 8, Payload: []byte{0, 1, 2}},
			}},
			{Producer: "p2"}, // a producer opening
		}}),
		golden("send-minimal", entrySend, Send{}),
		golden("create-subscription", entryCreateSubscription, createSubscription{Name: "s1", Mode: KeyShared, Initial: Earliest}),
		golden("acks", entryAcks, Acks{Acks: []SubAcks{
			{Sub: "s1", Offsets: []uint64{1, 2, 300}, Cumulative: true, Redelivered: []uint64{3, 70000}},
			{Sub: "s2", Offsets: []uint64{4}},
		}}),
		golden("delete-subscription", entryDeleteSubscription, DeleteSubscription{Name: "s1"}),
		golden("seek", entrySeek, Seek{Name: "s1", Offset: 1 << 40}),
		golden("join", entryJoin, Join{Sub: "s1", Mode: KeyShared, Initial: Earliest, KeyMode: Sticky, OutOfOrder: true,
			Member:  Member{Name: "c1", Priority: -3, Ranges: []HashRange{{Start: 0, End: 100}, {Start: 200, End: 65535}}, Gen: 9},
			MaxSubs: 1000}),
		golden("join-minimal", entryJoin, Join{Sub: "s2", Mode: Failover, Member: Member{Name: "c2"}}),
		golden("leave", entryLeave, Leave{Sub: "s1", Members: []Member{{Name: "c1", Gen: 9}, {Name: "c2"}}}),
		golden("retain", entryRetain, Retain{Start: 4096, AckBelow: 5000}),
		golden("retain-minimal", entryRetain, Retain{Start: 12}),
	}
}

// goldenState is the snapshot state of state.golden.
func goldenState() state {
	return state{
		Next: 5000,
		Producers: map[string]*producer{
			"p1": {LastSeq: 90, Recent: []seqRange{{First: 1, Last: 40, Offset: 10}, {First: 42, Last: 90, Offset: 60}}, LastTime: 1_700_000_000_123},
			"p2": {LastSeq: 0, Recent: []seqRange{{First: 0, Last: 0, Offset: 4999}}, LastTime: 1_700_000_000_456},
			"p3": {},
		},
		Subs: map[string]*Subscription{
			"s1": {Mode: KeyShared, Cursor: &subscription.Cursor{Floor: 4100, Acked: []subscription.Range{{Start: 4200, End: 4300}}},
				KeyMode: Sticky, OutOfOrder: true,
				Members: []Member{
					{Name: "c1", Priority: 2, Ranges: []HashRange{{Start: 0, End: 32767}}, Gen: 11},
					{Name: "c2", Ranges: []HashRange{{Start: 32768, End: 65535}}, Gen: 12},
				},
				Redeliveries: map[uint64]uint32{4100: 2, 4101: 1}},
			"s2": {Mode: Exclusive, Cursor: subscription.NewCursor(4096)},
		},
		Start: 4096,
	}
}

// goldenStateSingle is the snapshot state of state-single.golden.
func goldenStateSingle() state {
	return state{
		Next:      300,
		Producers: map[string]*producer{"p1": {LastSeq: 299, Recent: []seqRange{{First: 0, Last: 299, Offset: 0}}, LastTime: 1_700_000_000_123}},
		Subs: map[string]*Subscription{
			"s1": {Mode: Failover, Cursor: &subscription.Cursor{Floor: 10, Acked: []subscription.Range{{Start: 12, End: 12}}},
				Members:      []Member{{Name: "c1", Priority: 1, Gen: 3}},
				Redeliveries: map[uint64]uint32{10: 4}},
		},
	}
}

func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".golden"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameFields fails unless got and want hold the same value in every field.
func sameFields(t *testing.T, name string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s decodes as\n%#v\nwant\n%#v", name, got, want)
	}
}

func TestGoldenEntries(t *testing.T) {
	for _, g := range goldenEntries() {
		t.Run(g.name, func(t *testing.T) {
			data := readGolden(t, "entry-"+g.name)
			if entryType(data[0]) != g.typ {
				t.Fatalf("type byte %d, want %d", data[0], g.typ)
			}
			got, again, err := g.roundTrip(data[1:])
			if err != nil {
				t.Fatal(err)
			}
			sameFields(t, g.name, got, g.want)
			if !bytes.Equal(again, data) {
				t.Fatalf("encoded again\n%x\nwant\n%x", again, data)
			}
		})
	}
}

func TestGoldenStates(t *testing.T) {
	for _, g := range []struct {
		name  string
		want  state
		exact bool
	}{{"state", goldenState(), false}, {"state-single", goldenStateSingle(), true}} {
		t.Run(g.name, func(t *testing.T) {
			data := readGolden(t, g.name)
			var got state
			if err := msgpack.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			sameFields(t, g.name, got, g.want)
			// As Snapshot encodes it.
			again, err := msgpack.Marshal(&got)
			if err != nil {
				t.Fatal(err)
			}
			if g.exact && !bytes.Equal(again, data) {
				t.Fatalf("encoded again\n%x\nwant\n%x", again, data)
			}
			if u, w := untyped(t, again), untyped(t, data); !reflect.DeepEqual(u, w) {
				t.Fatalf("encoded again\n%v\nwant\n%v", u, w)
			}
		})
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

// A message in an entry of an older version may carry a producer name
// ("pn"), which the log never read: decoding skips it.
func TestGoldenSkipsProducerName(t *testing.T) {
	old := map[string]any{"sq": uint64(5), "d": []byte("x"), "pn": "someone"}
	b, err := msgpack.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	for name, decode := range map[string]func([]byte, any) error{"entries' decoder": decodeBody, "library's": msgpack.Unmarshal} {
		var m Message
		if err := decode(b, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameFields(t, "a message with a producer name, "+name, m, Message{SequenceID: 5, Payload: []byte("x")})
	}
}

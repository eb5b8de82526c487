package fsm

import (
	"bytes"
	"math"
	"reflect"
	"testing"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// A send's entry decodes to what the library decodes it to, field for
// field (nil and empty alike), and its messages' payloads and ordering keys
// are the entry's own bytes, not copies.
func TestSendDecodesAsTheLibraryDoesWithoutCopies(t *testing.T) {
	big := bytes.Repeat([]byte("p"), 70_000) // a bin32 length
	send := Send{PublishTime: 1_700_000_000_000, Batches: []Batch{
		{Producer: "opening"},
		{Producer: "p1", Messages: []Message{
			{Key: "k1", OrderingKey: []byte("ok"), Properties: map[string]string{"b": "2", "a": "1"}, EventTime: -17, PublishTime: 5, SequenceID: math.MaxUint64, Payload: []byte("hello")},
			{SequenceID: 1},                    // no payload
			{SequenceID: 2, Payload: []byte{}}, // an empty one
			{SequenceID: 3, Key: "ключ", Payload: big},
			{SequenceID: 4, Properties: map[string]string{}, Payload: bytes.Repeat([]byte{0}, 300)},
		}},
	}}
	entry, err := Encode(send)
	if err != nil {
		t.Fatal(err)
	}
	body := entry[1:]
	var got, want Send
	if err := decodeBody(body, &got); err != nil {
		t.Fatal(err)
	}
	if err := msgpack.Unmarshal(body, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%+v\nthe library decodes\n%+v", got, want)
	}
	within := func(b []byte) bool {
		start := uintptr(unsafe.Pointer(unsafe.SliceData(body)))
		p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		return p >= start && p+uintptr(len(b)) <= start+uintptr(len(body))
	}
	for _, m := range got.Batches[1].Messages {
		if len(m.Payload) > 0 && !within(m.Payload) {
			t.Errorf("message %d: its payload was copied out of the entry", m.SequenceID)
		}
		if len(m.OrderingKey) > 0 && !within(m.OrderingKey) {
			t.Errorf("message %d: its ordering key was copied out of the entry", m.SequenceID)
		}
	}

	// A cut entry fails, as with the library, and nothing panics.
	for cut := range len(body) - len(big) {
		var s Send
		if decodeBody(body[:cut], &s) == nil {
			t.Fatalf("an entry cut at %d of %d bytes decoded", cut, len(body))
		}
	}
}

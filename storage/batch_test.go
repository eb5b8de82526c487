package storage

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math"
	"reflect"
	"testing"
)

// testMessage returns a message whose every field depends on i.
func testMessage(i int) Message {
	m := Message{
		PublishTime:  1_700_000_000_000 + int64(i),
		EventTime:    int64(i % 7),
		ProducerName: fmt.Sprintf("producer-%d", i%3),
		SequenceID:   uint64(i),
		Key:          fmt.Sprintf("key-%d", i%11),
		Payload:      bytes.Repeat([]byte{byte(i)}, 10+i%50),
	}
	if i%2 == 0 {
		m.OrderingKey = []byte(fmt.Sprintf("ok-%d", i))
	}
	if i%3 == 0 {
		m.Properties = map[string]string{"a": "1", "z": fmt.Sprint(i), "m": ""}
	}
	return m
}

func testMessages(from, n int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i] = testMessage(from + i)
	}
	return msgs
}

// sameMessage compares every field but the offset.
func sameMessage(t *testing.T, want, got Message) {
	t.Helper()
	want.Offset, got.Offset = 0, 0
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("message differs:\nwant %+v\ngot  %+v", want, got)
	}
}

func TestBatchRoundTrip(t *testing.T) {
	msgs := testMessages(0, 24)
	msgs = append(msgs, Message{PublishTime: -5, EventTime: math.MinInt64, SequenceID: math.MaxUint64,
		OrderingKey: make([]byte, 300), Payload: make([]byte, 70_000)})
	b := appendBatch(nil, 1000, 7, msgs)
	h, got, err := decodeBatch(b, MaxBatchBytesLimit)
	if err != nil {
		t.Fatal(err)
	}
	if h.baseOffset != 1000 || h.raftIndex != 7 || h.count != 25 || h.maxTime != msgs[23].PublishTime {
		t.Fatalf("header %+v", h)
	}
	for i := range msgs {
		if got[i].Offset != 1000+uint64(i) {
			t.Fatalf("message %d has offset %d", i, got[i].Offset)
		}
		sameMessage(t, msgs[i], got[i])
	}
}

// Replicas must write identical bytes for identical batches, whatever the
// order a map gives its keys in.
func TestBatchEncodingIsDeterministic(t *testing.T) {
	props := map[string]string{}
	for i := range 50 {
		props[fmt.Sprintf("k%02d", i)] = fmt.Sprint(i)
	}
	msgs := []Message{{Payload: []byte("x"), Properties: props}}
	first := appendBatch(nil, 0, 1, msgs)
	for range 20 {
		if !bytes.Equal(first, appendBatch(nil, 0, 1, msgs)) {
			t.Fatal("two encodings of one batch differ")
		}
	}
}

func TestBatchRejectsDamage(t *testing.T) {
	good := appendBatch(nil, 0, 1, testMessages(0, 3))
	tests := []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"flipped payload byte", func(b []byte) []byte { b[len(b)-3] ^= 0x40; return b }},
		{"flipped crc", func(b []byte) []byte { b[5] ^= 1; return b }},
		{"cut short", func(b []byte) []byte { return b[:len(b)-1] }},
		{"huge length", func(b []byte) []byte { b[0] = 0xff; return b }},
		{"zero length", func(b []byte) []byte { b[0], b[1], b[2], b[3] = 0, 0, 0, 0; return b }},
		{"bad version", func(b []byte) []byte { b[8] = 9; return b }},
		{"header only", func(b []byte) []byte { return b[:batchHeaderSize-1] }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.damage(bytes.Clone(good))
			if _, _, err := decodeBatch(b, MaxBatchBytesLimit); err == nil || !isBatchError(err) {
				t.Fatalf("decodeBatch accepted damaged bytes: %v", err)
			}
		})
	}
}

func TestDecodeRecordsLimits(t *testing.T) {
	msgs := testMessages(0, 10)
	b := appendBatch(nil, 100, 1, msgs)
	h, err := checkBatch(b, MaxBatchBytesLimit)
	if err != nil {
		t.Fatal(err)
	}
	// From the middle of the batch, at most 3.
	out, _, err := decodeRecords(b, h, 104, 3, math.MaxInt, 0, nil)
	if err != nil || len(out) != 3 || out[0].Offset != 104 || out[2].Offset != 106 {
		t.Fatalf("got %d messages from %v, err %v", len(out), out, err)
	}
	// A byte budget smaller than one record still yields one message.
	out, _, err = decodeRecords(b, h, 100, 10, 1, 0, nil)
	if err != nil || len(out) != 1 {
		t.Fatalf("got %d messages, err %v", len(out), err)
	}
}

// FuzzDecodeBatch feeds arbitrary bytes to the batch decoder, both as they
// are and with a correct checksum so that the record parser is reached. It
// must never panic, and whatever decodes must encode back to a batch that
// decodes to the same messages.
func FuzzDecodeBatch(f *testing.F) {
	f.Add(appendBatch(nil, 0, 1, testMessages(0, 1)))
	f.Add(appendBatch(nil, 42, 9, testMessages(5, 4)))
	f.Add(appendBatch(nil, 1<<40, 1<<50, []Message{{}}))
	f.Add([]byte{})
	f.Add(make([]byte, batchHeaderSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1 << 20
		fuzzOne(t, data, limit)
		if len(data) >= batchHeaderSize {
			fixed := bytes.Clone(data)
			putLength(fixed)
			fuzzOne(t, fixed, limit)
		}
	})
}

// putLength rewrites a candidate batch's length and checksum to match its
// bytes.
func putLength(b []byte) {
	n := uint32(len(b) - 4)
	b[0], b[1], b[2], b[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	c := crc32.Checksum(b[8:], crcTable)
	b[4], b[5], b[6], b[7] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
}

func fuzzOne(t *testing.T, data []byte, limit int) {
	h, msgs, err := decodeBatch(data, limit)
	if err != nil {
		return
	}
	if uint32(len(msgs)) != h.count {
		t.Fatalf("decoded %d messages, header says %d", len(msgs), h.count)
	}
	again := appendBatch(nil, h.baseOffset, h.raftIndex, msgs)
	_, msgs2, err := decodeBatch(again, MaxBatchBytesLimit)
	if err != nil {
		t.Fatalf("re-encoded batch does not decode: %v", err)
	}
	for i := range msgs {
		if msgs[i].Offset != msgs2[i].Offset {
			t.Fatalf("offset %d became %d", msgs[i].Offset, msgs2[i].Offset)
		}
		sameMessage(t, msgs[i], msgs2[i])
	}
}

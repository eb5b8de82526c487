package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// samples returns one populated command of every type, every field set.
func samples() []Command {
	start := uint64(12)
	data := func(i int) MessageData {
		return MessageData{
			Key:          fmt.Sprint("key-", i),
			OrderingKey:  []byte{'o', byte(i)},
			Properties:   map[string]string{"a": "1", "b": fmt.Sprint(i)},
			EventTime:    1_700_000_000_000 + int64(i),
			PublishTime:  1_700_000_000_100 + int64(i),
			ProducerName: "producer-1",
			SequenceID:   uint64(100 + i),
			Payload:      bytes.Repeat([]byte{byte(i)}, 10+i),
		}
	}
	return []Command{
		&Connect{ProtocolVersion: ProtocolVersion, ClientName: "fabriq-go", ClientVersion: "0.1.0", AuthToken: "token"},
		&Connected{ProtocolVersion: ProtocolVersion, ServerVersion: "0.1.0", NodeID: "node-1", MaxFrameSize: DefaultMaxFrameSize},
		&Ping{},
		&Pong{},
		&Lookup{RequestID: 1, Stream: "persistent://t/f/s-partition-0"},
		&LookupResult{RequestID: 1, Here: true, Address: "10.0.0.1:6650", NodeID: "node-2"},
		&PartitionedMetadata{RequestID: 2, Stream: "persistent://t/f/s"},
		&PartitionedMetadataResult{RequestID: 2, Partitions: 4},
		&CreateProducer{RequestID: 3, ProducerID: 7, Stream: "persistent://t/f/s-partition-1", ProducerName: "p"},
		&ProducerReady{RequestID: 3, ProducerName: "p", LastSequenceID: -1},
		&Send{ProducerID: 7, Messages: []MessageData{data(0), data(1)}},
		&SendReceipt{ProducerID: 7, SequenceID: 100, Offsets: []uint64{0, 1 << 40}},
		&SendError{ProducerID: 7, SequenceID: 100, Code: CodeNotLeader, Message: "not leader", LeaderHint: "10.0.0.2:6650"},
		&Subscribe{
			RequestID: 4, ConsumerID: 9, Stream: "persistent://t/f/s-partition-0", Subscription: "sub",
			Mode: KeyShared, ConsumerName: "c", InitialPosition: Earliest, PriorityLevel: 2,
			KeyShared:  &KeySharedPolicy{Mode: Sticky, Ranges: []HashRange{{0, 100}, {200, 65535}}, AllowOutOfOrder: true},
			NonDurable: true, StartOffset: &start,
		},
		&SubscribeReady{RequestID: 4, ConsumerName: "c"},
		&Flow{ConsumerID: 9, Permits: 1000},
		&Message{ConsumerID: 9, Messages: []Delivered{{Offset: 5, RedeliveryCount: 1, Data: data(2)}, {Offset: 6, Data: data(3)}}},
		&Ack{RequestID: 5, ConsumerID: 9, Offsets: []uint64{5, 6}, Cumulative: true},
		&Nack{ConsumerID: 9, Offsets: []uint64{7}},
		&RedeliverUnacked{ConsumerID: 9, Offsets: []uint64{8, 9}},
		&Seek{RequestID: 6, ConsumerID: 9, Offset: 42, ByTime: true, PublishTime: 1_700_000_000_000},
		&Unsubscribe{RequestID: 7, ConsumerID: 9, Force: true},
		&CloseProducer{RequestID: 8, ProducerID: 7},
		&CloseConsumer{RequestID: 9, ConsumerID: 9},
		&ActiveConsumerChange{ConsumerID: 9, Active: true},
		&CreateStream{RequestID: 10, Stream: "persistent://t/f/s", Partitions: 3, Replicas: 3},
		&CreateStream{RequestID: 10, Stream: "persistent://t/f/s", Partitions: 1, Replicas: 3, Retention: &RetentionPolicy{
			RetentionTimeMs: 3600_000, RetentionBytes: -1, BacklogQuotaBytes: 1 << 30, BacklogQuotaPolicy: ConsumerBacklogEviction, MessageTTLMs: 60_000}},
		&SetRetention{RequestID: 18, Stream: "persistent://t/f/s", Retention: RetentionPolicy{RetentionTimeMs: -1, RetentionBytes: 1 << 40}},
		&CreateTenant{RequestID: 19, Tenant: "acme"},
		&DeleteTenant{RequestID: 20, Tenant: "acme"},
		&ListTenants{RequestID: 21},
		&ListTenantsResult{RequestID: 21, Tenants: []string{"acme", "public"}},
		&CreateFabric{RequestID: 22, Fabric: "acme/eu", Regions: []string{"eu-1", "eu-2"},
			Defaults: StreamDefaults{Partitions: 4, Replicas: 3, Retention: &RetentionPolicy{RetentionTimeMs: 60_000}}},
		&DeleteFabric{RequestID: 23, Fabric: "acme/eu"},
		&ListFabrics{RequestID: 24, Tenant: "acme"},
		&ListFabricsResult{RequestID: 24, Fabrics: []FabricInfo{{Fabric: "acme/eu", Regions: []string{"eu-1"}, Streams: 2}}},
		&DescribeFabric{RequestID: 25, Fabric: "acme/eu"},
		&DescribeFabricResult{RequestID: 25, Info: FabricInfo{Fabric: "acme/eu", Defaults: StreamDefaults{Replicas: 3}}},
		&WatchStreams{RequestID: 26, WatchID: 1, Fabric: "acme/eu", Pattern: "persistent://acme/eu/finance-.*"},
		&WatchStreamsResult{RequestID: 26, Streams: []string{"persistent://acme/eu/finance-1"}, Hash: "00aa"},
		&StreamsChanged{WatchID: 1, Streams: []string{"persistent://acme/eu/finance-1", "persistent://acme/eu/finance-2"}, Hash: "00bb"},
		&CloseWatch{RequestID: 27, WatchID: 1},
		&SetFabricRegions{RequestID: 28, Fabric: "acme/eu", Regions: []string{"eu-1", "eu-3"}},
		&ResetCursor{RequestID: 29, Partition: "persistent://acme/eu/s-partition-1", Subscription: "sub", Offset: 42},
		&ResetCursor{RequestID: 30, Partition: "persistent://acme/eu/s", Subscription: "sub", Time: new(int64(1_700_000_000_000))},
		&DeleteSubscription{RequestID: 31, Partition: "persistent://acme/eu/s", Subscription: "sub", Force: true},
		&DeleteStream{RequestID: 11, Stream: "persistent://t/f/s", Force: true},
		&ListStreams{RequestID: 12, Fabric: "t/f"},
		&ListStreamsResult{RequestID: 12, Streams: []string{"persistent://t/f/a", "persistent://t/f/b"}},
		&DescribeStream{RequestID: 13, Stream: "persistent://t/f/s"},
		&DescribeStreamResult{RequestID: 13, Info: StreamInfo{
			Stream: "persistent://t/f/s", Replicas: 3, Retention: RetentionPolicy{RetentionTimeMs: 1000, BacklogQuotaBytes: 5},
			Partitions: []PartitionInfo{{
				Partition: 0, Leader: "node-1", Replicas: []string{"node-1", "node-2", "node-3"},
				StartOffset: 10, NextOffset: 20, LogBytes: 4096, BacklogQuotaExceeded: true,
				Subscriptions: []SubscriptionInfo{{
					Name: "sub", Mode: "key_shared", Backlog: 4, MarkDelete: 15,
					Consumers: []ConsumerInfo{{Name: "c", Role: "master", Unacked: 2, Permits: 998}},
				}},
			}},
		}},
		&Success{RequestID: 14},
		&Error{RequestID: 15, Code: CodeNotLeader, Message: "not the leader", LeaderHint: "10.0.0.2:6650"},
		&ClusterStatus{RequestID: 16},
		&RenewReplica{RequestID: 17, Partition: "persistent://t/f/s-partition-1", Member: "n3@42"},
		&ClusterStatusResult{RequestID: 16, Status: ClusterInfo{
			Node: "node-1", MetaLeader: "node-2",
			Nodes: []NodeStatus{{ID: "node-1", State: "alive", Region: "eu", ClientAddr: "10.0.0.1:6650", RaftAddr: "10.0.0.1:7650"}},
			Partitions: []PartitionStatus{{Partition: "persistent://t/f/s", Leader: "node-2", Term: 4,
				Replicas: []ReplicaStatus{{Node: "node-1", Lag: 0}, {Node: "node-3", Lag: -1}}}},
		}},
	}
}

func TestSamplesCoverEveryType(t *testing.T) {
	seen := map[CommandType]bool{}
	for _, cmd := range samples() {
		seen[cmd.Type()] = true
	}
	for typ := range 256 {
		known := newCommand(CommandType(typ)) != nil
		if known != seen[CommandType(typ)] {
			t.Errorf("type %d: known %v, sampled %v", typ, known, seen[CommandType(typ)])
		}
		if known && newCommand(CommandType(typ)).Type() != CommandType(typ) {
			t.Errorf("newCommand(%d) returns a %s", typ, newCommand(CommandType(typ)).Type())
		}
		if known && strings.HasPrefix(CommandType(typ).String(), "CommandType(") {
			t.Errorf("type %d has no name", typ)
		}
	}
	if got := CommandType(200).String(); got != "CommandType(200)" {
		t.Errorf("CommandType(200).String() = %q", got)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, cmd := range samples() {
		t.Run(cmd.Type().String(), func(t *testing.T) {
			b, err := AppendFrame(nil, cmd)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ReadFrame(bytes.NewReader(b), 0)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, cmd) {
				t.Fatalf("decoded\n%#v\nwant\n%#v", got, cmd)
			}
			var w bytes.Buffer
			if err := WriteFrame(&w, cmd); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(w.Bytes(), b) {
				t.Fatalf("WriteFrame wrote % x, AppendFrame % x", w.Bytes(), b)
			}
		})
	}
}

func TestZeroValuesRoundTrip(t *testing.T) {
	for typ := range 256 {
		cmd := newCommand(CommandType(typ))
		if cmd == nil {
			continue
		}
		t.Run(cmd.Type().String(), func(t *testing.T) {
			b, err := AppendFrame(nil, cmd)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ReadFrame(bytes.NewReader(b), 0)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, cmd) {
				t.Fatalf("decoded\n%#v\nwant\n%#v", got, cmd)
			}
		})
	}
}

func TestFrameBytes(t *testing.T) {
	tests := []struct {
		name string
		cmd  Command
		want []byte
	}{
		// [3, {}]
		{"ping", &Ping{}, []byte{0, 0, 0, 3, 0x92, 0x03, 0x80}},
		// [16, {"id": 7, "p": 1000}]
		{"flow", &Flow{ConsumerID: 7, Permits: 1000}, []byte{
			0, 0, 0, 12, 0x92, 0x10, 0x82,
			0xa2, 'i', 'd', 0x07,
			0xa1, 'p', 0xcd, 0x03, 0xe8,
		}},
		// [33, {"c": 2, "m": "bad"}]
		{"error", &Error{Code: CodeProtocol, Message: "bad"}, []byte{
			0, 0, 0, 12, 0x92, 0x21, 0x82,
			0xa1, 'c', 0x02,
			0xa1, 'm', 0xa3, 'b', 'a', 'd',
		}},
		// [11, {"id": 1, "m": [{"p": {"a": "", "b": ""}, "sq": 2, "d": nil}]}]:
		// properties in key order, omitted fields absent.
		{"send", &Send{ProducerID: 1, Messages: []MessageData{{Properties: map[string]string{"b": "", "a": ""}, SequenceID: 2}}}, []byte{
			0, 0, 0, 27, 0x92, 0x0b, 0x82,
			0xa2, 'i', 'd', 0x01,
			0xa1, 'm', 0x91, 0x83,
			0xa1, 'p', 0x82, 0xa1, 'a', 0xa0, 0xa1, 'b', 0xa0,
			0xa2, 's', 'q', 0x02,
			0xa1, 'd', 0xc0,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AppendFrame([]byte("prefix"), tt.cmd)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:6], []byte("prefix")) || !bytes.Equal(got[6:], tt.want) {
				t.Fatalf("got  % x\nwant % x", got[6:], tt.want)
			}
			if n := int(got[6])<<24 | int(got[7])<<16 | int(got[8])<<8 | int(got[9]); n != len(tt.want)-4 {
				t.Fatalf("length prefix %d, body %d", n, len(tt.want)-4)
			}
		})
	}
}

// frame prefixes body with its length.
func frame(body ...byte) []byte {
	n := len(body)
	return append([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, body...)
}

// mp encodes v with msgpack, for hand-made bodies.
func mp(t testing.TB, vs ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestReadFrameErrors(t *testing.T) {
	ping, _ := AppendFrame(nil, &Ping{})
	flow, _ := AppendFrame(nil, &Flow{ConsumerID: 1, Permits: 2})
	nest := append(bytes.Repeat([]byte{0x91}, 40), 0xc0)
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty stream", nil, io.EOF},
		{"half a header", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"header only", []byte{0, 0, 0, 3}, io.ErrUnexpectedEOF},
		{"truncated body", flow[:len(flow)-2], io.ErrUnexpectedEOF},
		{"zero length", []byte{0, 0, 0, 0}, ErrMalformed},
		{"too large", []byte{0, 0x60, 0, 0, 1, 2, 3}, ErrFrameTooLarge},
		{"reserved code", frame(0xc1), ErrMalformed},
		{"not an array", frame(0x80), ErrMalformed},
		{"array of 1", frame(0x91, 0x03), ErrMalformed},
		{"array of 3", frame(0x93, 0x03, 0x80, 0x80), ErrMalformed},
		{"array16 of 3", frame(0xdc, 0x00, 0x03, 0x03, 0x80, 0x80), ErrMalformed},
		{"array32 of 4G", frame(0xdd, 0xff, 0xff, 0xff, 0xff, 0x03, 0x80), ErrMalformed},
		{"type zero", frame(0x92, 0x00, 0x80), ErrMalformed},
		{"first unknown type", frame(0x92, firstUnknownType(), 0x80), ErrMalformed},
		{"type 255", frame(0x92, 0xcc, 0xff, 0x80), ErrMalformed},
		{"type 259 as uint16", frame(0x92, 0xcd, 0x01, 0x03, 0x80), ErrMalformed},
		{"negative type", frame(0x92, 0xff, 0x80), ErrMalformed},
		{"type is a string", frame(0x92, 0xa1, 'x', 0x80), ErrMalformed},
		{"body is a string", frame(0x92, 0x10, 0xa1, 'x'), ErrMalformed},
		{"field of the wrong type", frame(append([]byte{0x92, 0x10, 0x81, 0xa1, 'p'}, mp(t, "many")...)...), ErrMalformed},
		{"body missing", frame(0x92, 0x03), ErrMalformed},
		{"trailing byte", frame(append(ping[4:], 0x00)...), ErrMalformed},
		{"string longer than the frame", frame(0x92, 0x05, 0x81, 0xa1, 's', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'), ErrMalformed},
		{"array longer than the frame", frame(0x92, 0x11, 0x81, 0xa1, 'm', 0xdd, 0xff, 0xff, 0xff, 0xff, 0x80), ErrMalformed},
		{"map longer than the frame", frame(0x92, 0x10, 0xdf, 0x7f, 0xff, 0xff, 0xff, 0xa1, 'p', 0x01), ErrMalformed},
		{"nested too deep", frame(append([]byte{0x92, 0x03, 0x81, 0xa1, 'x'}, nest...)...), ErrMalformed},
		{"field name not a string", frame(0x92, 0x10, 0x81, 0x01, 0x02), ErrMalformed},
		{"ext longer than the frame", frame(0x92, 0x03, 0x81, 0xa1, 'x', 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, err := ReadFrame(bytes.NewReader(tt.in), 1<<20)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, %v; want %v", cmd, err, tt.want)
			}
			if cmd != nil {
				t.Fatalf("a command with an error: %#v", cmd)
			}
		})
	}
}

// headerOnly yields a frame header and fails the test if more is read.
type headerOnly struct {
	t      *testing.T
	header []byte
}

func (r *headerOnly) Read(p []byte) (int, error) {
	if len(r.header) == 0 {
		r.t.Error("ReadFrame read past the header of an oversized frame")
		return 0, io.ErrNoProgress
	}
	n := copy(p, r.header)
	r.header = r.header[n:]
	return n, nil
}

func TestReadFrameRefusesOversizeBeforeReading(t *testing.T) {
	tests := []struct {
		name  string
		size  uint32
		limit int
	}{
		{"1 GiB, default limit", 1 << 30, 0},
		{"max uint32", math.MaxUint32, MaxFrameSizeLimit},
		{"one above a small limit", 65, 64},
		{"default limit plus one", DefaultMaxFrameSize + 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &headerOnly{t: t, header: []byte{byte(tt.size >> 24), byte(tt.size >> 16), byte(tt.size >> 8), byte(tt.size)}}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := ReadFrame(r, tt.limit)
			runtime.ReadMemStats(&after)
			var fse *FrameSizeError
			if !errors.As(err, &fse) || !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("got %v, want a *FrameSizeError", err)
			}
			limit := int64(tt.limit)
			if limit == 0 {
				limit = DefaultMaxFrameSize
			}
			if fse.Size != int64(tt.size) || fse.Max != limit {
				t.Fatalf("error carries size %d, limit %d", fse.Size, fse.Max)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<10 {
				t.Fatalf("allocated %d bytes for a refused frame", alloc)
			}
		})
	}
}

// stalling yields its data and then reports it would block.
type stalling struct{ data []byte }

func (r *stalling) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, errors.New("would block")
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestReadFrameGrowsWithTheBytesThatArrive(t *testing.T) {
	// A peer announces 5 MiB and sends 10 bytes: the buffer must not be 5
	// MiB.
	const size = 5 << 20
	r := &stalling{data: append([]byte{size >> 24, size >> 16 & 0xff, size >> 8 & 0xff, size & 0xff}, make([]byte, 10)...)}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadFrame(r, 0)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "would block") {
		t.Fatalf("got %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<10 {
		t.Fatalf("allocated %d bytes for 10 bytes of body", alloc)
	}
}

func TestLargeFrameRoundTrip(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 5<<20/16) // 5 MiB
	cmd := &Send{ProducerID: 1, Messages: []MessageData{{SequenceID: 1, Payload: payload}}}
	b, err := AppendFrame(nil, cmd)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadFrame(bytes.NewReader(b), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, cmd) {
		t.Fatal("5 MiB payload changed on the way")
	}
}

func TestLongerEncodingsAreAccepted(t *testing.T) {
	// Encoders write the shortest form; other forms are valid msgpack.
	tests := []struct {
		name string
		body []byte
	}{
		{"envelope as array16", []byte{0xdc, 0x00, 0x02, 0x10, 0x81, 0xa1, 'p', 0x05}},
		{"envelope as array32", []byte{0xdd, 0x00, 0x00, 0x00, 0x02, 0x10, 0x81, 0xa1, 'p', 0x05}},
		{"type as uint16", []byte{0x92, 0xcd, 0x00, 0x10, 0x81, 0xa1, 'p', 0x05}},
		{"body as map16, field name as str8", []byte{0x92, 0x10, 0xde, 0x00, 0x01, 0xd9, 0x01, 'p', 0x05}},
		{"value as int64", []byte{0x92, 0x10, 0x81, 0xa1, 'p', 0xd3, 0, 0, 0, 0, 0, 0, 0, 0x05}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadFrame(bytes.NewReader(frame(tt.body...)), 0)
			if err != nil {
				t.Fatal(err)
			}
			if want := (&Flow{Permits: 5}); !reflect.DeepEqual(got, want) {
				t.Fatalf("got %#v", got)
			}
		})
	}
}

func TestUnknownFieldsAreIgnored(t *testing.T) {
	body := mp(t, []any{uint8(TypeFlow), map[string]any{
		"id":     uint64(3),
		"future": map[string]any{"nested": []any{1, "two", []byte{3}, nil, 4.5}},
		"p":      int64(10),
		"x":      "ignored",
	}})
	got, err := ReadFrame(bytes.NewReader(frame(body...)), 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (&Flow{ConsumerID: 3, Permits: 10}); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
}

func TestPayloadsDoNotAliasTheFrame(t *testing.T) {
	cmd := &Send{ProducerID: 1, Messages: []MessageData{{Key: "k", SequenceID: 1, Payload: []byte("payload-one")}}}
	b, _ := AppendFrame(nil, cmd)
	got, err := ReadFrame(bytes.NewReader(b), 0)
	if err != nil {
		t.Fatal(err)
	}
	// Overwrite the caller's bytes, then make the pooled buffers serve
	// other frames.
	for i := range b {
		b[i] = 0xff
	}
	for i := range 10 {
		other, _ := AppendFrame(nil, &Send{ProducerID: 2, Messages: []MessageData{{Key: "zz", Payload: bytes.Repeat([]byte{byte(i)}, 11)}}})
		if _, err := ReadFrame(bytes.NewReader(other), 0); err != nil {
			t.Fatal(err)
		}
	}
	m := got.(*Send).Messages[0]
	if string(m.Payload) != "payload-one" || m.Key != "k" {
		t.Fatalf("decoded fields changed: %q %q", m.Key, m.Payload)
	}
}

func TestDecodeBudget(t *testing.T) {
	// 60,000 one-byte empty maps would be 60,000 128-byte Delivered structs.
	body := append([]byte{0x92, byte(TypeMessage), 0x81, 0xa1, 'm', 0xdc, 0xea, 0x60}, bytes.Repeat([]byte{0x80}, 60000)...)
	if _, err := ReadFrame(bytes.NewReader(frame(body...)), 0); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "allocate") {
		t.Fatalf("array of empty maps: got %v", err)
	}
	// The same count of nils into []Delivered is refused as well.
	body = append([]byte{0x92, byte(TypeMessage), 0x81, 0xa1, 'm', 0xdc, 0xea, 0x60}, bytes.Repeat([]byte{0xc0}, 60000)...)
	if _, err := ReadFrame(bytes.NewReader(frame(body...)), 0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("array of nils: got %v", err)
	}
	// A map that announces many entries of empty strings.
	body = append([]byte{0x92, byte(TypeSend), 0x81, 0xa1, 'm', 0x91, 0x81, 0xa1, 'p', 0xde, 0x7f, 0xff}, bytes.Repeat([]byte{0xa0}, 2*0x7fff)...)
	if _, err := ReadFrame(bytes.NewReader(frame(body...)), 0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("map of empty strings: got %v", err)
	}

	// What honest encoding produces always passes: many empty messages,
	// many one-byte offsets, many empty stream names, many small
	// properties.
	props := map[string]string{} // two-byte names, empty values: the costliest
	for i := range 20000 {
		props[string([]byte{byte(i >> 8), byte(i)})] = ""
	}
	honest := []Command{
		&Send{ProducerID: 1, Messages: make([]MessageData, 5000)},
		&Message{ConsumerID: 1, Messages: make([]Delivered, 5000)},
		&Ack{ConsumerID: 1, Offsets: make([]uint64, 50000)},
		&ListStreamsResult{Streams: make([]string, 50000)},
		&Send{Messages: []MessageData{{Properties: props}}},
		&DescribeStreamResult{Info: StreamInfo{Partitions: make([]PartitionInfo, 3000)}},
		&Subscribe{KeyShared: &KeySharedPolicy{Ranges: make([]HashRange, 10000)}},
	}
	for _, cmd := range honest {
		b, err := AppendFrame(nil, cmd)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ReadFrame(bytes.NewReader(b), 0); err != nil {
			t.Errorf("%s of %d bytes: %v", cmd.Type(), len(b), err)
		}
	}
}

// foreign is a Command that is not one of the package's.
type foreign struct{}

func (foreign) Type() CommandType { return TypePing }

func TestAppendFrameRefusesNonCommands(t *testing.T) {
	tests := []struct {
		name string
		cmd  Command
	}{
		{"nil", nil},
		{"nil pointer", (*Flow)(nil)},
		{"foreign type", foreign{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := AppendFrame([]byte("x"), tt.cmd)
			if !errors.Is(err, ErrMalformed) || string(b) != "x" {
				t.Fatalf("got %q, %v", b, err)
			}
			if err := WriteFrame(io.Discard, tt.cmd); !errors.Is(err, ErrMalformed) {
				t.Fatalf("WriteFrame: %v", err)
			}
		})
	}
}

func TestShapesCoverEveryCommand(t *testing.T) {
	for typ, s := range shapes {
		if (s == nil) != (newCommand(CommandType(typ)) == nil) {
			t.Errorf("type %d: shape %v", typ, s)
		}
	}
	// The biggest struct decoded per array element bounds the amplification
	// the budget guards against.
	if got := shapes[TypeMessage].fields["m"].size; got != int64(reflect.TypeFor[Delivered]().Size()) {
		t.Errorf("Message.m element size %d", got)
	}
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		err  error
		want ErrorCode
	}{
		{nil, 0},
		{&FrameSizeError{Size: 10, Max: 5}, CodeTooLarge},
		{fmt.Errorf("x: %w", ErrMalformed), CodeProtocol},
		{ErrUnexpected, CodeProtocol},
		{ErrClosed, CodeClosed},
		{io.EOF, CodeClosed},
		{fmt.Errorf("wrapped: %w", &Error{Code: CodeNotLeader}), CodeNotLeader},
		{errors.New("other"), CodeUnknown},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.err), func(t *testing.T) {
			if got := CodeOf(tt.err); got != tt.want {
				t.Fatalf("CodeOf(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// firstUnknownType returns the lowest command type that names no command.
func firstUnknownType() byte {
	t := byte(1)
	for newCommand(CommandType(t)) != nil {
		t++
	}
	return t
}

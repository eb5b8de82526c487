package pulsar

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/fabriq-io/fabriq/pulsarwire"
	"github.com/fabriq-io/fabriq/pulsarwire/pb"
	"github.com/fabriq-io/fabriq/transport"
)

func pframe(t *testing.T, b *pb.BaseCommand, md *pb.MessageMetadata, payload []byte) []byte {
	t.Helper()
	out, err := pulsarwire.AppendFrame(nil, b, md, payload)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// answers decodes what the codec wrote.
func answers(t *testing.T, b []byte) []*pb.BaseCommand {
	t.Helper()
	var out []*pb.BaseCommand
	r := bytes.NewReader(b)
	for r.Len() > 0 {
		f, _, err := pulsarwire.ReadFrame(r, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f.Command)
	}
	return out
}

func TestSniff(t *testing.T) {
	connect := pframe(t, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("Pulsar-Go-version:0.19.0"), ProtocolVersion: proto.Int32(20),
		AuthMethodName: proto.String("token"), AuthData: []byte("jwt")}}, nil, nil)
	s := Sniff(Config{Addr: "10.0.0.1:6650", MaxMessageBytes: 1 << 20})
	cmd, _, err := s.Read(bufio.NewReader(bytes.NewReader(connect)), 1<<20)
	hello, ok := cmd.(*transport.Connect)
	if err != nil || !ok || hello.AuthToken != "jwt" || hello.ProtocolVersion != transport.ProtocolVersion {
		t.Fatalf("a Pulsar CONNECT: %#v %v", cmd, err)
	}
	out, err := s.Append(nil, &transport.Connected{ServerVersion: "v1"}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if a := answers(t, out); a[0].GetType() != pb.BaseCommand_CONNECTED || a[0].GetConnected().GetProtocolVersion() != 20 ||
		a[0].GetConnected().GetMaxMessageSize() != 1<<20 {
		t.Fatalf("CONNECTED: %v", a)
	}

	// fabriq's own frames pass through another codec untouched.
	native, err := transport.AppendFrame(nil, &transport.Connect{ProtocolVersion: transport.ProtocolVersion, ClientName: "go"})
	if err != nil {
		t.Fatal(err)
	}
	s = Sniff(Config{})
	cmd, _, err = s.Read(bufio.NewReader(bytes.NewReader(native)), 1<<20)
	if hello, ok := cmd.(*transport.Connect); err != nil || !ok || hello.ClientName != "go" {
		t.Fatalf("a fabriq Connect: %#v %v", cmd, err)
	}
	if out, _ := s.Append(nil, &transport.Pong{}, 1<<20); !bytes.Equal(out, mustFrame(t, &transport.Pong{})) {
		t.Fatalf("a fabriq Pong written as %x", out)
	}
}

// Lengths that no Pulsar frame has are fabriq's to refuse at once: the
// client that sent them may send nothing more, and the sniff must not
// wait for a fifth byte.
func TestSniffShortInput(t *testing.T) {
	for _, b := range [][]byte{{0, 0, 0, 0}, {0xff, 0xff, 0xff, 0xff}} {
		s := Sniff(Config{})
		_, _, err := s.Read(bufio.NewReader(&onlyOnce{t: t, b: b}), 1<<20)
		if err == nil {
			t.Fatalf("% x read as a command", b)
		}
		if out, _ := s.Append(nil, &transport.Pong{}, 1<<20); !bytes.Equal(out, mustFrame(t, &transport.Pong{})) {
			t.Fatalf("after % x the codec speaks Pulsar", b)
		}
	}
}

// onlyOnce gives its bytes to the first read, and fails the test on a
// second: a client that sent them and waits would never answer it.
type onlyOnce struct {
	t    *testing.T
	b    []byte
	done bool
}

func (o *onlyOnce) Read(p []byte) (int, error) {
	if o.done {
		o.t.Errorf("read again after % x: the sniff waits for bytes the client never sends", o.b)
		return 0, io.EOF
	}
	o.done = true
	return copy(p, o.b), nil
}

func mustFrame(t *testing.T, cmd transport.Command) []byte {
	b, err := transport.AppendFrame(nil, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A request fabriq does not serve is refused in its turn: it reads as a
// Ping, and the Pong answering it goes out as an ERROR with its id, while
// the client's own PING still gets a PONG.
func TestRefusedInOrder(t *testing.T) {
	c := newCodec(Config{})
	// GET_SCHEMA (34) with request id 9, a type pulsar.proto leaves out.
	body := protowire.AppendTag(nil, 1, protowire.VarintType)
	body = protowire.AppendVarint(body, 9)
	raw := protowire.AppendTag(nil, 1, protowire.VarintType)
	raw = protowire.AppendVarint(raw, 34)
	raw = protowire.AppendTag(raw, 34, protowire.BytesType)
	raw = protowire.AppendBytes(raw, body)
	getSchema := append([]byte{0, 0, 0, 0, 0, 0, 0, 0}, raw...)
	putSizes(getSchema)
	ping := pframe(t, &pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}}, nil, nil)
	r := bufio.NewReader(bytes.NewReader(append(getSchema, ping...)))
	for range 2 {
		cmd, _, err := c.Read(r, 1<<20)
		if _, ok := cmd.(*transport.Ping); err != nil || !ok {
			t.Fatalf("read %#v %v, want a Ping", cmd, err)
		}
	}
	var out []byte
	for range 2 {
		var err error
		if out, err = c.Append(out, &transport.Pong{}, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	a := answers(t, out)
	if a[0].GetType() != pb.BaseCommand_ERROR || a[0].GetError().GetRequestId() != 9 || a[1].GetType() != pb.BaseCommand_PONG {
		t.Fatalf("answers %v, want ERROR for request 9 then PONG", a)
	}
}

func putSizes(b []byte) {
	n := len(b) - 8
	b[0], b[1], b[2], b[3] = byte((n+4)>>24), byte((n+4)>>16), byte((n+4)>>8), byte(n+4)
	b[4], b[5], b[6], b[7] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
}

// A send's messages get sequence ids S*2^20+i, and its receipt gives S
// back with the batch's highest id and the first offset.
func TestSendSequenceIDs(t *testing.T) {
	c := newCodec(Config{MaxMessageBytes: 1 << 20})
	producer := pframe(t, &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String("persistent://t/f/s-partition-2"), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1)}}, nil, nil)
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(7), PublishTime: proto.Uint64(1)}
	send := pframe(t, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(7)}}, md, []byte("x"))
	r := bufio.NewReader(bytes.NewReader(append(producer, send...)))
	if _, _, err := c.Read(r, 1<<20); err != nil {
		t.Fatal(err)
	}
	out, err := c.Append(nil, &transport.ProducerReady{RequestID: 1, ProducerName: "p", LastSequenceID: 7<<20 + 3}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if ps := answers(t, out)[0].GetProducerSuccess(); ps.GetLastSequenceId() != 10 {
		t.Fatalf("last sequence id %d, want 10", ps.GetLastSequenceId())
	}
	cmd, _, err := c.Read(r, 1<<20)
	s, ok := cmd.(*transport.Send)
	if err != nil || !ok || len(s.Messages) != 1 || s.Messages[0].SequenceID != 7<<20 {
		t.Fatalf("send: %#v %v", cmd, err)
	}
	out, err = c.Append(nil, &transport.SendReceipt{ProducerID: 1, SequenceID: 7 << 20, Offsets: []uint64{42}}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	rc := answers(t, out)[0].GetSendReceipt()
	if rc.GetSequenceId() != 7 || rc.GetHighestSequenceId() != 7 || rc.GetMessageId().GetEntryId() != 42 ||
		rc.GetMessageId().GetPartition() != 2 || rc.GetMessageId().GetLedgerId() != pulsarwire.LedgerID {
		t.Fatalf("receipt %v", rc)
	}
}

// Refusals take the shape their request asks for.
func TestFailureShapes(t *testing.T) {
	c := newCodec(Config{})
	lookup := pframe(t, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{Topic: proto.String("x"), RequestId: proto.Uint64(1)}}, nil, nil)
	meta := pframe(t, &pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(), PartitionMetadata: &pb.CommandPartitionedTopicMetadata{Topic: proto.String("x"), RequestId: proto.Uint64(2)}}, nil, nil)
	r := bufio.NewReader(bytes.NewReader(append(lookup, meta...)))
	for range 2 {
		if _, _, err := c.Read(r, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	out, _ := c.Append(nil, &transport.Error{RequestID: 1, Code: transport.CodeAuthorizationFailed, Message: "no"}, 1<<20)
	out, _ = c.Append(out, &transport.PartitionedMetadataResult{RequestID: 2, Partitions: 1}, 1<<20)
	out, _ = c.Append(out, &transport.Error{RequestID: 3, Code: transport.CodeStreamNotFound, Message: "gone"}, 1<<20)
	a := answers(t, out)
	if l := a[0].GetLookupTopicResponse(); l.GetResponse() != pb.CommandLookupTopicResponse_Failed || l.GetError() != pb.ServerError_AuthorizationError {
		t.Fatalf("a refused lookup: %v", a[0])
	}
	if m := a[1].GetPartitionMetadataResponse(); m.GetPartitions() != 0 || m.GetResponse() != pb.CommandPartitionedTopicMetadataResponse_Success {
		t.Fatalf("one partition reads as an unpartitioned topic: %v", a[1])
	}
	if e := a[2].GetError(); a[2].GetType() != pb.BaseCommand_ERROR || e.GetError() != pb.ServerError_TopicNotFound || e.GetRequestId() != 3 {
		t.Fatalf("another refusal: %v", a[2])
	}
}

// A frame that breaks the format is an error of the connection that sent
// it, which the session answers as it answers fabriq's malformed frames.
func TestMalformed(t *testing.T) {
	c := newCodec(Config{})
	bad := []byte{0, 0, 0, 8, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff}
	if _, _, err := c.Read(bufio.NewReader(bytes.NewReader(bad)), 1<<20); !errors.Is(err, transport.ErrMalformed) {
		t.Fatalf("a bad command: %v", err)
	}
	var fse *transport.FrameSizeError
	if _, _, err := c.Read(bufio.NewReader(bytes.NewReader([]byte{0, 0x20, 0, 0, 0, 0, 0, 0})), 1<<20); !errors.As(err, &fse) {
		t.Fatalf("a frame above the limit: %v", err)
	}
}

// A seek to Pulsar's earliest id goes to the start, to its latest id to
// the end; other ids name offsets.
func TestSeekIDs(t *testing.T) {
	c := newCodec(Config{})
	for _, tc := range []struct {
		ledger, entry uint64
		batch         int32
		want          uint64
	}{
		{math.MaxUint64, math.MaxUint64, -1, 0},
		{math.MaxInt64, math.MaxInt64, -1, math.MaxUint64},
		{1, 40, -1, 40},
		{1, 40, 3, 43},
	} {
		f := pframe(t, &pb.BaseCommand{Type: pb.BaseCommand_SEEK.Enum(), Seek: &pb.CommandSeek{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(5),
			MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(tc.ledger), EntryId: proto.Uint64(tc.entry), BatchIndex: proto.Int32(tc.batch)}}}, nil, nil)
		cmd, _, err := c.Read(bufio.NewReader(bytes.NewReader(f)), 1<<20)
		s, ok := cmd.(*transport.Seek)
		if err != nil || !ok || s.Offset != tc.want || !s.Evict {
			t.Fatalf("seek to (%d, %d, %d): %#v %v, want offset %d", tc.ledger, tc.entry, tc.batch, cmd, err, tc.want)
		}
		c.take(5)
	}
}

// A compressed batch is charged at what it holds once decompressed, not
// at its size on the wire; a send the codec cannot take is refused with
// SEND_ERROR, and the connection goes on.
func TestSendCharges(t *testing.T) {
	c := newCodec(Config{MaxMessageBytes: 1 << 20})
	var body []byte
	for range 1000 {
		smm, _ := proto.Marshal(&pb.SingleMessageMetadata{PayloadSize: proto.Int32(100)})
		body = binary.BigEndian.AppendUint32(body, uint32(len(smm)))
		body = append(body, smm...)
		body = append(body, make([]byte, 100)...)
	}
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	w.Write(body)
	w.Close()
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1),
		NumMessagesInBatch: proto.Int32(1000), Compression: pb.CompressionType_ZLIB.Enum(), UncompressedSize: proto.Uint32(uint32(len(body)))}
	send := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1)}}
	f := pframe(t, send, md, z.Bytes())
	cmd, n, err := c.Read(bufio.NewReader(bytes.NewReader(f)), 1<<20)
	if _, ok := cmd.(*transport.Send); err != nil || !ok {
		t.Fatalf("a zlib batch: %#v %v", cmd, err)
	}
	if n < 100_000 || len(f) > 10_000 {
		t.Fatalf("a batch of %d bytes on the wire holding 100 KB charged %d", len(f), n)
	}
	// A sequence id above what fabriq maps.
	big := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1 << 50)}}
	md1 := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1 << 50), PublishTime: proto.Uint64(1)}
	cmd, _, err = c.Read(bufio.NewReader(bytes.NewReader(pframe(t, big, md1, []byte("x")))), 1<<20)
	if _, ok := cmd.(*transport.Ping); err != nil || !ok {
		t.Fatalf("a sequence id of 2^50: %#v %v, want it refused in a Ping's place", cmd, err)
	}
	out, _ := c.Append(nil, &transport.Pong{}, 1<<20)
	if a := answers(t, out)[0]; a.GetType() != pb.BaseCommand_SEND_ERROR || a.GetSendError().GetSequenceId() != 1<<50 {
		t.Fatalf("the refusal: %v", a)
	}
}

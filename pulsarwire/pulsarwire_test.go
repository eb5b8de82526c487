package pulsarwire

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"google.golang.org/protobuf/proto"

	"github.com/fabriq-io/fabriq/pulsarwire/pb"
)

func sendCommand() *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(3), SequenceId: proto.Uint64(10)}}
}

func TestFrameRoundTrip(t *testing.T) {
	ping := &pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}}
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(10), PublishTime: proto.Uint64(1), PartitionKey: proto.String("k")}
	b, err := AppendFrame(nil, ping, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err = AppendFrame(b, sendCommand(), md, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(bytes.NewReader(b))
	f, n, err := ReadFrame(r, 1<<20)
	if err != nil || f.Command.GetType() != pb.BaseCommand_PING || f.Metadata != nil || n <= 8 {
		t.Fatalf("first frame: %v %d %v", f, n, err)
	}
	f, _, err = ReadFrame(r, 1<<20)
	if err != nil || f.Command.GetSend().GetSequenceId() != 10 || f.Metadata.GetPartitionKey() != "k" || string(f.Payload) != "hello" {
		t.Fatalf("second frame: %v %v", f, err)
	}
	if _, _, err := ReadFrame(r, 1<<20); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
	if !IsPulsar(b) {
		t.Fatal("IsPulsar does not know a Pulsar frame")
	}
	if IsPulsar([]byte{0, 0, 0, 9, 0x92, 1}) {
		t.Fatal("IsPulsar takes fabriq's frame for Pulsar's")
	}
}

// A frame larger than the first chunk the reader allocates is read whole,
// and not a byte of the next.
func TestLargeFrames(t *testing.T) {
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1)}
	var b []byte
	for _, size := range []int{firstChunk - 100, firstChunk + 1, 300_001, 1 << 20} {
		var err error
		if b, err = AppendFrame(b, sendCommand(), md, bytes.Repeat([]byte{byte(size)}, size)); err != nil {
			t.Fatal(err)
		}
	}
	r := bytes.NewReader(b)
	for _, size := range []int{firstChunk - 100, firstChunk + 1, 300_001, 1 << 20} {
		f, _, err := ReadFrame(r, 2<<20)
		if err != nil || len(f.Payload) != size || f.Payload[size-1] != byte(size) {
			t.Fatalf("a frame of %d payload bytes: %v", size, err)
		}
	}
}

// A flipped bit of a message frame is a checksum error; sizes beyond the
// frame or the limit are refused before they are allocated.
func TestFrameRefusals(t *testing.T) {
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1)}
	good, err := AppendFrame(nil, sendCommand(), md, []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(good)
	bad[len(bad)-2] ^= 1
	if _, _, err := ReadFrame(bytes.NewReader(bad), 1<<20); !errors.Is(err, ErrChecksum) {
		t.Fatalf("a flipped payload bit: %v", err)
	}
	var fse *FrameSizeError
	if _, _, err := ReadFrame(bytes.NewReader(good), 10); !errors.As(err, &fse) {
		t.Fatalf("above the limit: %v", err)
	}
	huge := binary.BigEndian.AppendUint32(nil, 1<<30)
	if _, _, err := ReadFrame(bytes.NewReader(huge), 1<<20); !errors.As(err, &fse) {
		t.Fatalf("a 1 GiB frame announced: %v", err)
	}
	// A command size past the frame's end.
	lying := bytes.Clone(good)
	binary.BigEndian.PutUint32(lying[4:], 1<<20)
	if _, _, err := ReadFrame(bytes.NewReader(lying), 1<<21); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a command size past the end: %v", err)
	}
	// Cut short.
	if _, _, err := ReadFrame(bytes.NewReader(good[:len(good)-3]), 1<<20); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut short: %v", err)
	}
}

// batch builds a batch payload as Pulsar clients do.
func batch(t *testing.T, msgs ...string) []byte {
	var b []byte
	for i, m := range msgs {
		smm := &pb.SingleMessageMetadata{PayloadSize: proto.Int32(int32(len(m))), PartitionKey: proto.String(fmt.Sprint("k", i)),
			SequenceId: proto.Uint64(uint64(100 + i)), Properties: []*pb.KeyValue{{Key: proto.String("i"), Value: proto.String(fmt.Sprint(i))}}}
		raw, err := proto.Marshal(smm)
		if err != nil {
			t.Fatal(err)
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(raw)))
		b = append(b, raw...)
		b = append(b, m...)
	}
	return b
}

func compress(t *testing.T, c pb.CompressionType, b []byte) []byte {
	switch c {
	case pb.CompressionType_LZ4:
		out := make([]byte, lz4.CompressBlockBound(len(b)))
		n, err := lz4.CompressBlock(b, out, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out[:n]
	case pb.CompressionType_ZSTD:
		enc, _ := zstd.NewWriter(nil)
		return enc.EncodeAll(b, nil)
	case pb.CompressionType_ZLIB:
		var buf bytes.Buffer
		w := zlib.NewWriter(&buf)
		w.Write(b)
		w.Close()
		return buf.Bytes()
	case pb.CompressionType_SNAPPY:
		return snappy.Encode(nil, b)
	}
	return b
}

func TestBatches(t *testing.T) {
	body := batch(t, "zero", "one", "two")
	for _, c := range []pb.CompressionType{pb.CompressionType_NONE, pb.CompressionType_LZ4, pb.CompressionType_ZSTD, pb.CompressionType_ZLIB, pb.CompressionType_SNAPPY} {
		md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(100), PublishTime: proto.Uint64(1),
			NumMessagesInBatch: proto.Int32(3), Compression: c.Enum(), UncompressedSize: proto.Uint32(uint32(len(body))), EventTime: proto.Uint64(77)}
		msgs, err := Messages(md, compress(t, c, body), 1<<20)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if len(msgs) != 3 {
			t.Fatalf("%s: %d messages", c, len(msgs))
		}
		for i, m := range msgs {
			if string(m.Payload) != []string{"zero", "one", "two"}[i] || m.Key != fmt.Sprint("k", i) || m.SequenceID != uint64(100+i) ||
				m.Properties["i"] != fmt.Sprint(i) || m.EventTime != 77 {
				t.Fatalf("%s: message %d: %+v", c, i, m)
			}
		}
		// A batch that says it is larger than the limit is refused before
		// it is decompressed.
		if c != pb.CompressionType_NONE {
			if _, err := Messages(md, compress(t, c, body), len(body)-1); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s above the limit: %v", c, err)
			}
		}
	}
	// One message, not a batch.
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(5), PublishTime: proto.Uint64(1), PartitionKey: proto.String("k"),
		OrderingKey: []byte("ok")}
	msgs, err := Messages(md, []byte("alone"), 1<<20)
	if err != nil || len(msgs) != 1 || string(msgs[0].Payload) != "alone" || msgs[0].Key != "k" || string(msgs[0].OrderingKey) != "ok" || msgs[0].SequenceID != 5 {
		t.Fatalf("a single message: %+v %v", msgs, err)
	}
	// Batches that lie about their sizes.
	for name, md := range map[string]*pb.MessageMetadata{
		"more messages than bytes": {NumMessagesInBatch: proto.Int32(1000)},
		"no messages":              {NumMessagesInBatch: proto.Int32(0)},
		"one more message":         {NumMessagesInBatch: proto.Int32(4)},
	} {
		md.ProducerName, md.SequenceId, md.PublishTime = proto.String("p"), proto.Uint64(1), proto.Uint64(1)
		if _, err := Messages(md, body, 1<<20); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzReadFrame feeds arbitrary bytes to the frame reader and the batch
// parser: they must refuse, never panic or allocate past the limit.
func FuzzReadFrame(f *testing.F) {
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1), NumMessagesInBatch: proto.Int32(2)}
	good, _ := AppendFrame(nil, sendCommand(), md, []byte{0, 0, 0, 2, 0x18, 1, 'a', 0, 0, 0, 2, 0x18, 1, 'b'})
	f.Add(good)
	f.Add([]byte{0, 0, 0, 6, 0, 0, 0, 2, 8, 18})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, _, err := ReadFrame(bytes.NewReader(b), 1<<16)
		if err != nil || fr.Metadata == nil {
			return
		}
		_, _ = Messages(fr.Metadata, fr.Payload, 1<<16)
	})
}

// Payloads whose metadata lies about their uncompressed size are refused
// without building what they claim or what they hold.
func TestDecompressionBombs(t *testing.T) {
	zeros := make([]byte, 10<<20)
	bomb := compress(t, pb.CompressionType_ZSTD, zeros)
	if _, err := Decompress(pb.CompressionType_ZSTD, bomb, 100, 1<<20); !errors.Is(err, ErrMalformed) {
		t.Fatalf("zstd of 10 MiB claiming 100 bytes: %v", err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	Decompress(pb.CompressionType_ZSTD, bomb, 100, 1<<20)
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Fatalf("refusing a zstd bomb allocated %d bytes", grew)
	}
	if _, err := Decompress(pb.CompressionType_LZ4, []byte("tiny"), 1<<20, 2<<20); !errors.Is(err, ErrMalformed) {
		t.Fatalf("4 bytes of LZ4 claiming 1 MiB: %v", err)
	}
}

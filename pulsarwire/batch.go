package pulsarwire

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"google.golang.org/protobuf/proto"

	"github.com/fabriq-io/fabriq/pulsarwire/pb"
	"github.com/fabriq-io/fabriq/transport"
)

// maxBatchMessages bounds the messages of one batch.
const maxBatchMessages = 100_000

// Messages returns the messages a send frame carries, as fabriq stores
// them: one, or each of a batch (its payload decompressed first, to at
// most maxBytes). Keys, ordering keys, properties, event times and
// sequence ids come from the message's metadata, or in a batch from each
// message's own (a message without a sequence id of its own takes the
// batch's plus its place).
func Messages(md *pb.MessageMetadata, payload []byte, maxBytes int) ([]transport.MessageData, error) {
	body, err := Decompress(md.GetCompression(), payload, int(md.GetUncompressedSize()), maxBytes)
	if err != nil {
		return nil, err
	}
	if md.NumMessagesInBatch == nil {
		return []transport.MessageData{{
			Key: md.GetPartitionKey(), OrderingKey: md.GetOrderingKey(), Properties: properties(md.GetProperties()),
			EventTime: int64(md.GetEventTime()), SequenceID: md.GetSequenceId(), Payload: body,
		}}, nil
	}
	n := md.GetNumMessagesInBatch()
	// Each message takes at least 6 bytes: its metadata's size and a
	// payload_size field.
	if n <= 0 || n > maxBatchMessages || int64(n)*6 > int64(len(body)) {
		return nil, fmt.Errorf("%w: a batch of %d messages in %d bytes", ErrMalformed, n, len(body))
	}
	out := make([]transport.MessageData, 0, n)
	rest := body
	for i := range n {
		if len(rest) < 4 {
			return nil, fmt.Errorf("%w: batch message %d cut short", ErrMalformed, i)
		}
		size := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if int64(size) > int64(len(rest)) {
			return nil, fmt.Errorf("%w: batch message %d: metadata of %d bytes with %d left", ErrMalformed, i, size, len(rest))
		}
		smm := &pb.SingleMessageMetadata{}
		if err := proto.Unmarshal(rest[:size], smm); err != nil {
			return nil, fmt.Errorf("%w: batch message %d: %v", ErrMalformed, i, err)
		}
		rest = rest[size:]
		ps := smm.GetPayloadSize()
		if ps < 0 || int64(ps) > int64(len(rest)) {
			return nil, fmt.Errorf("%w: batch message %d: payload of %d bytes with %d left", ErrMalformed, i, ps, len(rest))
		}
		m := transport.MessageData{
			Key: smm.GetPartitionKey(), OrderingKey: smm.GetOrderingKey(), Properties: properties(smm.GetProperties()),
			EventTime: int64(smm.GetEventTime()), SequenceID: md.GetSequenceId() + uint64(i),
			Payload: bytes.Clone(rest[:ps]),
		}
		if smm.SequenceId != nil {
			m.SequenceID = smm.GetSequenceId()
		}
		if m.EventTime == 0 {
			m.EventTime = int64(md.GetEventTime())
		}
		rest = rest[ps:]
		out = append(out, m)
	}
	return out, nil
}

func properties(kvs []*pb.KeyValue) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

// Metadata returns the metadata of one message delivered alone.
func Metadata(m *transport.MessageData) *pb.MessageMetadata {
	md := &pb.MessageMetadata{
		ProducerName: proto.String(m.ProducerName),
		SequenceId:   proto.Uint64(m.SequenceID),
		PublishTime:  proto.Uint64(uint64(max(m.PublishTime, 0))),
	}
	if m.Key != "" {
		md.PartitionKey = proto.String(m.Key)
	}
	if len(m.OrderingKey) > 0 {
		md.OrderingKey = m.OrderingKey
	}
	if m.EventTime > 0 {
		md.EventTime = proto.Uint64(uint64(m.EventTime))
	}
	for k, v := range m.Properties {
		md.Properties = append(md.Properties, &pb.KeyValue{Key: proto.String(k), Value: proto.String(v)})
	}
	return md
}

// Decompress returns payload decompressed: size bytes, as the metadata
// says, refused above maxBytes before anything is allocated for them.
func Decompress(c pb.CompressionType, payload []byte, size, maxBytes int) ([]byte, error) {
	if c == pb.CompressionType_NONE {
		return payload, nil
	}
	if size < 0 || size > maxBytes {
		return nil, fmt.Errorf("%w: %s payload of %d bytes uncompressed, above the limit of %d", ErrMalformed, c, size, maxBytes)
	}
	var out []byte
	var err error
	switch c {
	case pb.CompressionType_LZ4:
		// LZ4 expands at most about 255 times: a larger claim is a lie,
		// refused before its buffer is made.
		if int64(size) > 255*int64(len(payload))+16 {
			return nil, fmt.Errorf("%w: LZ4 payload of %d bytes cannot hold %d", ErrMalformed, len(payload), size)
		}
		out = make([]byte, size)
		var n int
		n, err = lz4.UncompressBlock(payload, out)
		out = out[:max(n, 0)]
	case pb.CompressionType_ZLIB:
		var r io.ReadCloser
		if r, err = zlib.NewReader(bytes.NewReader(payload)); err == nil {
			out, err = io.ReadAll(io.LimitReader(r, int64(size)+1))
			r.Close()
		}
	case pb.CompressionType_ZSTD:
		out, err = zstdDecoder().DecodeAll(payload, make([]byte, 0, size))
	case pb.CompressionType_SNAPPY:
		var n int
		if n, err = snappy.DecodedLen(payload); err == nil && n != size {
			err = fmt.Errorf("decoded length %d", n)
		}
		if err == nil {
			out, err = snappy.Decode(make([]byte, size), payload)
		}
	default:
		return nil, fmt.Errorf("%w: unknown compression %d", ErrMalformed, c)
	}
	if err == nil && len(out) != size {
		err = fmt.Errorf("%d bytes, not %d", len(out), size)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s payload: %v", ErrMalformed, c, err)
	}
	return out, nil
}

var zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
	// DecodeAll is safe for concurrent use; the window bounds memory.
	// DecodeAll stops at the capacity it is given (the size the metadata
	// claims), never past it.
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxWindow(8<<20), zstd.WithDecoderMaxMemory(64<<20),
		zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		panic(err) // options are constants
	}
	return d
})

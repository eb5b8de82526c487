package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
)

// Message is one message in the log.
type Message struct {
	// Offset is assigned by Append; Append ignores the field.
	Offset uint64
	// PublishTime and EventTime are milliseconds since the Unix epoch; zero
	// means unset.
	PublishTime int64
	EventTime   int64
	// ProducerName and SequenceID identify the message for deduplication.
	ProducerName string
	SequenceID   uint64
	Key          string
	OrderingKey  []byte
	Properties   map[string]string
	Payload      []byte
}

// Batch layout on disk (all integers big-endian):
//
//	length       u32  bytes that follow this field
//	crc          u32  CRC-32C (Castagnoli) of the bytes that follow this field
//	version      u8   batchVersion
//	flags        u8   zero
//	baseOffset   u64  offset of the first message
//	raftIndex    u64  Raft index of the entry that produced the batch
//	count        u32  number of messages
//	maxTime      i64  largest publish time in the batch
//	records      count × record
//
// record:
//
//	uvarint len, then len bytes of: varint publishTime, varint eventTime,
//	uvarint sequenceID, bytes producerName, bytes key, bytes orderingKey,
//	uvarint nProperties, nProperties × (bytes name, bytes value), bytes payload
//
// where bytes is a uvarint length followed by the data. Properties are
// written in name order so that replicas write identical bytes.
const (
	batchVersion    = 1
	batchHeaderSize = 4 + 4 + 1 + 1 + 8 + 8 + 4 + 8
	// minBatchLength is the smallest legal value of the length field.
	minBatchLength = batchHeaderSize - 4
	// minRecordSize is the size of a record with every field empty.
	minRecordSize = 9
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// batchHeader is the fixed part of a batch.
type batchHeader struct {
	length     uint32
	crc        uint32
	baseOffset uint64
	raftIndex  uint64
	count      uint32
	maxTime    int64
}

// size is the number of bytes the whole batch takes on disk.
func (h batchHeader) size() int64 { return int64(h.length) + 4 }

// next is the offset after the batch's last message.
func (h batchHeader) next() uint64 { return h.baseOffset + uint64(h.count) }

// errBatch describes why bytes are not a valid batch; the segment code turns
// it into a *CorruptError with the file and position.
type errBatch string

func (e errBatch) Error() string { return string(e) }

// parseHeader decodes the fixed header without checking the checksum. It
// refuses lengths outside minBatchLength..maxLen before anyone allocates.
func parseHeader(b []byte, maxLen int) (batchHeader, error) {
	if len(b) < batchHeaderSize {
		return batchHeader{}, errBatch("short batch header")
	}
	h := batchHeader{
		length:     binary.BigEndian.Uint32(b[0:]),
		crc:        binary.BigEndian.Uint32(b[4:]),
		baseOffset: binary.BigEndian.Uint64(b[10:]),
		raftIndex:  binary.BigEndian.Uint64(b[18:]),
		count:      binary.BigEndian.Uint32(b[26:]),
		maxTime:    int64(binary.BigEndian.Uint64(b[30:])),
	}
	if h.length < minBatchLength || int64(h.length) > int64(maxLen) {
		return h, errBatch(fmt.Sprintf("batch length %d out of range", h.length))
	}
	if b[8] != batchVersion {
		return h, errBatch(fmt.Sprintf("unknown batch version %d", b[8]))
	}
	if b[9] != 0 {
		return h, errBatch(fmt.Sprintf("unknown batch flags %#x", b[9]))
	}
	if h.count == 0 {
		return h, errBatch("batch without messages")
	}
	if h.count > (h.length-minBatchLength)/minRecordSize {
		return h, errBatch(fmt.Sprintf("batch count %d cannot fit in %d bytes", h.count, h.length))
	}
	return h, nil
}

// checkBatch verifies a whole batch (header and records) and returns its
// header. b must hold exactly the batch.
func checkBatch(b []byte, maxLen int) (batchHeader, error) {
	h, err := parseHeader(b, maxLen)
	if err != nil {
		return h, err
	}
	if int64(len(b)) != h.size() {
		return h, errBatch(fmt.Sprintf("batch is %d bytes, header says %d", len(b), h.size()))
	}
	if got := crc32.Checksum(b[8:], crcTable); got != h.crc {
		return h, errBatch(fmt.Sprintf("checksum mismatch: stored %#08x, computed %#08x", h.crc, got))
	}
	return h, nil
}

// encodedRecordSize is an upper bound of a message's encoded record size.
func encodedRecordSize(m *Message) int {
	n := 6*binary.MaxVarintLen64 + len(m.ProducerName) + len(m.Key) + len(m.OrderingKey) + len(m.Payload)
	for k, v := range m.Properties {
		n += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	return n + binary.MaxVarintLen64
}

// appendBatch encodes msgs as one batch at baseOffset and appends it to dst.
func appendBatch(dst []byte, baseOffset, raftIndex uint64, msgs []Message) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, batchHeaderSize)...)
	maxTime := msgs[0].PublishTime
	var names []string
	for i := range msgs {
		m := &msgs[i]
		maxTime = max(maxTime, m.PublishTime)
		names = names[:0]
		for k := range m.Properties {
			names = append(names, k)
		}
		slices.Sort(names)
		n := varintLen(m.PublishTime) + varintLen(m.EventTime) + uvarintLen(m.SequenceID) +
			fieldLen(len(m.ProducerName)) + fieldLen(len(m.Key)) + fieldLen(len(m.OrderingKey)) +
			uvarintLen(uint64(len(names))) + fieldLen(len(m.Payload))
		for _, k := range names {
			n += fieldLen(len(k)) + fieldLen(len(m.Properties[k]))
		}
		dst = slices.Grow(dst, uvarintLen(uint64(n))+n)
		dst = binary.AppendUvarint(dst, uint64(n))
		dst = binary.AppendVarint(dst, m.PublishTime)
		dst = binary.AppendVarint(dst, m.EventTime)
		dst = binary.AppendUvarint(dst, m.SequenceID)
		dst = appendString(dst, m.ProducerName)
		dst = appendString(dst, m.Key)
		dst = appendBytes(dst, m.OrderingKey)
		dst = binary.AppendUvarint(dst, uint64(len(names)))
		for _, k := range names {
			dst = appendString(dst, k)
			dst = appendString(dst, m.Properties[k])
		}
		dst = appendBytes(dst, m.Payload)
	}
	h := dst[start:]
	binary.BigEndian.PutUint32(h[0:], uint32(len(h)-4))
	h[8] = batchVersion
	h[9] = 0
	binary.BigEndian.PutUint64(h[10:], baseOffset)
	binary.BigEndian.PutUint64(h[18:], raftIndex)
	binary.BigEndian.PutUint32(h[26:], uint32(len(msgs)))
	binary.BigEndian.PutUint64(h[30:], uint64(maxTime))
	binary.BigEndian.PutUint32(h[4:], crc32.Checksum(h[8:], crcTable))
	return dst
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func varintLen(v int64) int {
	u := uint64(v) << 1
	if v < 0 {
		u = ^u
	}
	return uvarintLen(u)
}

func fieldLen(n int) int { return uvarintLen(uint64(n)) + n }

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBytes(dst []byte, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// recordReader walks the records of a checked batch.
type recordReader struct {
	b   []byte // remaining bytes of the current field list
	err error
}

func (r *recordReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errBatch("bad varint in record")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errBatch("bad varint in record")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// bytes returns the next length-prefixed field, aliasing the batch buffer.
func (r *recordReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errBatch("record field runs past its record")
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// decodeRecords decodes the records of the checked batch b (header
// included) and appends to out every message at or after from, at most
// maxCount of them. taken counts the record bytes already read into out;
// once out holds a message, decoding stops before taken would pass
// maxBytes. It returns out and the new taken. Payloads and ordering keys
// alias b.
func decodeRecords(b []byte, h batchHeader, from uint64, maxCount, maxBytes, taken int, out []Message) ([]Message, int, error) {
	r := recordReader{b: b[batchHeaderSize:]}
	for i := uint32(0); i < h.count; i++ {
		body := r.bytes()
		if r.err != nil {
			return out, taken, errBatch("record runs past its batch")
		}
		off := h.baseOffset + uint64(i)
		if off < from {
			continue
		}
		if maxCount <= 0 || (len(out) > 0 && taken+len(body) > maxBytes) {
			return out, taken, nil
		}
		m, err := decodeRecord(body)
		if err != nil {
			return out, taken, err
		}
		m.Offset = off
		out = append(out, m)
		taken += len(body)
		maxCount--
	}
	if len(r.b) != 0 {
		return out, taken, errBatch("trailing bytes after the last record")
	}
	return out, taken, nil
}

// checkRecords verifies that the records of the checked batch b decode,
// without building messages.
func checkRecords(b []byte, h batchHeader) error {
	r := recordReader{b: b[batchHeaderSize:]}
	for i := uint32(0); i < h.count; i++ {
		rec := recordReader{b: r.bytes()}
		if r.err != nil {
			return errBatch("record runs past its batch")
		}
		rec.varint()
		rec.varint()
		rec.uvarint()
		rec.bytes()
		rec.bytes()
		rec.bytes()
		np := rec.uvarint()
		for j := uint64(0); j < np && rec.err == nil; j++ {
			rec.bytes()
			rec.bytes()
		}
		rec.bytes()
		if rec.err == nil && len(rec.b) != 0 {
			rec.err = errBatch("trailing bytes in record")
		}
		if rec.err != nil {
			return rec.err
		}
	}
	if len(r.b) != 0 {
		return errBatch("trailing bytes after the last record")
	}
	return nil
}

func decodeRecord(body []byte) (Message, error) {
	r := recordReader{b: body}
	var m Message
	m.PublishTime = r.varint()
	m.EventTime = r.varint()
	m.SequenceID = r.uvarint()
	m.ProducerName = string(r.bytes())
	m.Key = string(r.bytes())
	if ok := r.bytes(); len(ok) > 0 {
		m.OrderingKey = ok
	}
	np := r.uvarint()
	if r.err == nil && np > uint64(len(r.b))/2 {
		r.err = errBatch("property count runs past its record")
	}
	if r.err == nil && np > 0 {
		m.Properties = make(map[string]string, np)
		for j := uint64(0); j < np && r.err == nil; j++ {
			k := string(r.bytes())
			m.Properties[k] = string(r.bytes())
		}
	}
	if p := r.bytes(); len(p) > 0 {
		m.Payload = p
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errBatch("trailing bytes in record")
	}
	if r.err != nil {
		return Message{}, r.err
	}
	return m, nil
}

// decodeBatch checks b as one whole batch and decodes all its messages.
func decodeBatch(b []byte, maxLen int) (batchHeader, []Message, error) {
	h, err := checkBatch(b, maxLen)
	if err != nil {
		return h, nil, err
	}
	msgs, _, err := decodeRecords(b, h, h.baseOffset, int(h.count), math.MaxInt, 0, make([]Message, 0, min(h.count, 1024)))
	if err == nil && uint32(len(msgs)) != h.count {
		err = errBatch("batch holds fewer records than its count")
	}
	return h, msgs, err
}

// isBatchError reports whether err describes malformed batch bytes.
func isBatchError(err error) bool {
	var e errBatch
	return errors.As(err, &e)
}

package pulsarwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/fabriq-io/fabriq/pulsarwire/pb"
)

// Errors of a frame.
var (
	// ErrMalformed: the bytes are not one frame of the protocol.
	ErrMalformed = errors.New("pulsarwire: malformed frame")
	// ErrChecksum: a message frame's CRC32C does not match its bytes.
	ErrChecksum = errors.New("pulsarwire: checksum mismatch")
)

// FrameSizeError reports a frame above the reader's limit.
type FrameSizeError struct {
	Size, Max int64
}

func (e *FrameSizeError) Error() string {
	return fmt.Sprintf("pulsarwire: frame of %d bytes is above the limit of %d", e.Size, e.Max)
}

// magicCRC32C opens the checksummed part of a message frame.
const magicCRC32C = 0x0e01

// magicBrokerEntry opens broker entry metadata, which a broker sends only
// to clients that asked for it (fabriq never does); a client never sends
// it.
const magicBrokerEntry = 0x0e02

// LedgerID is the ledger of every message id fabriq writes.
const LedgerID = 1

// maxCommandSize bounds a frame's command: commands are small, and the
// largest fabriq reads (a subscribe, a producer) hold names and a few
// properties.
const maxCommandSize = 1 << 20

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Frame is one frame: its command, and for a message frame the message
// metadata and payload (Metadata nil otherwise).
type Frame struct {
	Command  *pb.BaseCommand
	Metadata *pb.MessageMetadata
	Payload  []byte
}

// ReadFrame reads one frame from r. maxSize bounds the frame (total size);
// nothing is allocated for a frame above it.
func ReadFrame(r io.Reader, maxSize int) (*Frame, int, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.EOF {
			return nil, 0, io.EOF
		}
		return nil, 0, fmt.Errorf("pulsarwire: read frame header: %w", err)
	}
	total := binary.BigEndian.Uint32(hdr[:])
	if int64(total) > int64(maxSize) {
		return nil, 0, &FrameSizeError{Size: int64(total), Max: int64(maxSize)}
	}
	if total < 4 {
		return nil, 0, fmt.Errorf("%w: total size %d", ErrMalformed, total)
	}
	buf, err := readBody(r, int(total))
	if err != nil {
		return nil, 0, fmt.Errorf("pulsarwire: read frame: %w", errUnexpected(err))
	}
	f, err := ParseFrame(buf)
	return f, int(total) + 4, err
}

// firstChunk is what readBody allocates first: a peer that announces a
// large frame and stalls holds no more than that and what it sent.
const firstChunk = 64 << 10

// readBody reads n bytes, growing its buffer as they arrive.
func readBody(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, firstChunk))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, min(n, 2*cap(buf))-len(buf))...)[:len(buf)]
		}
		m, err := io.ReadFull(r, buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		if err != nil {
			return nil, err
		}
	}
	return buf, nil
}

func errUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ParseFrame parses a frame's bytes after its total size.
func ParseFrame(b []byte) (*Frame, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: no command size", ErrMalformed)
	}
	cmdSize := binary.BigEndian.Uint32(b)
	b = b[4:]
	if cmdSize == 0 || cmdSize > maxCommandSize || int64(cmdSize) > int64(len(b)) {
		return nil, fmt.Errorf("%w: command size %d in a frame of %d bytes", ErrMalformed, cmdSize, len(b)+4)
	}
	cmd := &pb.BaseCommand{}
	if err := proto.Unmarshal(b[:cmdSize], cmd); err != nil {
		return nil, fmt.Errorf("%w: command: %v", ErrMalformed, err)
	}
	f := &Frame{Command: cmd}
	rest := b[cmdSize:]
	if len(rest) == 0 {
		return f, nil
	}
	if len(rest) >= 2 && binary.BigEndian.Uint16(rest) == magicBrokerEntry {
		return nil, fmt.Errorf("%w: broker entry metadata from a client", ErrMalformed)
	}
	if len(rest) >= 2 && binary.BigEndian.Uint16(rest) == magicCRC32C {
		if len(rest) < 6 {
			return nil, fmt.Errorf("%w: a checksum cut short", ErrMalformed)
		}
		sum := binary.BigEndian.Uint32(rest[2:])
		rest = rest[6:]
		if crc32.Checksum(rest, crcTable) != sum {
			return nil, ErrChecksum
		}
	}
	if len(rest) < 4 {
		return nil, fmt.Errorf("%w: no metadata size", ErrMalformed)
	}
	mdSize := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	if int64(mdSize) > int64(len(rest)) {
		return nil, fmt.Errorf("%w: metadata size %d with %d bytes left", ErrMalformed, mdSize, len(rest))
	}
	md := &pb.MessageMetadata{}
	if err := proto.Unmarshal(rest[:mdSize], md); err != nil {
		return nil, fmt.Errorf("%w: message metadata: %v", ErrMalformed, err)
	}
	f.Metadata = md
	f.Payload = rest[mdSize:]
	return f, nil
}

// AppendFrame appends a frame of cmd to dst, a message frame when md is
// not nil (checksummed), and returns the extended slice.
func AppendFrame(dst []byte, cmd *pb.BaseCommand, md *pb.MessageMetadata, payload []byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0) // total size, command size
	var err error
	dst, err = proto.MarshalOptions{}.MarshalAppend(dst, cmd)
	if err != nil {
		return dst[:start], fmt.Errorf("pulsarwire: encode %s: %w", cmd.GetType(), err)
	}
	binary.BigEndian.PutUint32(dst[start+4:], uint32(len(dst)-start-8))
	if md != nil {
		dst = binary.BigEndian.AppendUint16(dst, magicCRC32C)
		sumAt := len(dst)
		dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0) // checksum, metadata size
		mdAt := len(dst)
		dst, err = proto.MarshalOptions{}.MarshalAppend(dst, md)
		if err != nil {
			return dst[:start], fmt.Errorf("pulsarwire: encode message metadata: %w", err)
		}
		binary.BigEndian.PutUint32(dst[sumAt+4:], uint32(len(dst)-mdAt))
		dst = append(dst, payload...)
		binary.BigEndian.PutUint32(dst[sumAt:], crc32.Checksum(dst[sumAt+4:], crcTable))
	}
	total := len(dst) - start - 4
	if int64(total) > int64(^uint32(0)) {
		return dst[:start], &FrameSizeError{Size: int64(total), Max: int64(^uint32(0))}
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(total))
	return dst, nil
}

// IsPulsar reports whether the first bytes a client sent start a frame of
// this protocol rather than fabriq's own: both open with a 4-byte length,
// then fabriq's with a msgpack array (0x9_) and Pulsar's with the
// command's 4-byte size, whose first byte is 0 for any command below
// 16 MiB.
func IsPulsar(first5 []byte) bool {
	return len(first5) >= 5 && first5[4] == 0
}

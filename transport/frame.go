package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"reflect"
	"slices"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// Frame limits.
const (
	// DefaultMaxFrameSize is the default limit on a frame's length (the
	// bytes after the length prefix): the broker's 5 MiB message limit plus
	// 64 KiB for the command around it.
	DefaultMaxFrameSize = 5<<20 + 64<<10
	// MaxFrameSizeLimit is the largest Config.MaxFrameSize allowed.
	MaxFrameSizeLimit = 256 << 20
)

// headerSize is the length prefix: a big-endian uint32.
const headerSize = 4

// Errors returned by this package. Test for them with errors.Is. A peer's
// Error frame is returned as an *Error, which matches
// errors.Is(err, &Error{Code: c}) for its code.
var (
	// ErrFrameTooLarge is matched by every *FrameSizeError: a frame whose
	// length is above the limit. On reading, nothing of its body has been
	// read or allocated, so the stream cannot be resynchronised and the
	// connection must be closed. On sending, nothing has been written.
	ErrFrameTooLarge = errors.New("transport: frame too large")
	// ErrMalformed is returned for a frame that is not one valid command: a
	// zero length; a body that is not a msgpack array of [type, body]; an
	// unknown command type; a body that does not decode into its command;
	// bytes after it; lengths, nesting or a decoded size the frame cannot
	// honestly hold. The connection must be closed. Encoding a value that is
	// not a command of this package returns it too.
	ErrMalformed = errors.New("transport: malformed frame")
	// ErrUnexpected is returned for a well-formed command that the protocol
	// does not allow where it came: anything but Connect as a client's first
	// command, anything but Connected or Error as the answer to it.
	ErrUnexpected = errors.New("transport: unexpected command")
	// ErrClosed is returned by a Conn's methods once it is closed, by Close
	// or after a failed write.
	ErrClosed = errors.New("transport: connection closed")
)

// FrameSizeError reports a frame above the size limit. It matches
// ErrFrameTooLarge.
type FrameSizeError struct {
	Size int64 // the frame's length, without the 4-byte prefix
	Max  int64 // the limit it is above
}

func (e *FrameSizeError) Error() string {
	return fmt.Sprintf("transport: frame of %d bytes is above the limit of %d", e.Size, e.Max)
}

// Is makes errors.Is(err, ErrFrameTooLarge) true for every *FrameSizeError.
func (e *FrameSizeError) Is(target error) bool { return target == ErrFrameTooLarge }

// CodeOf returns the wire error code that describes err, for an Error frame
// sent to the peer: a peer's *Error keeps its code, an oversized frame is
// CodeTooLarge, a malformed or unexpected one CodeProtocol, a closed
// connection CodeClosed, a deadline CodeTimeout, anything else CodeUnknown.
// CodeOf(nil) is zero.
func CodeOf(err error) ErrorCode {
	var e *Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, ErrFrameTooLarge):
		return CodeTooLarge
	case errors.Is(err, ErrMalformed), errors.Is(err, ErrUnexpected):
		return CodeProtocol
	case errors.Is(err, ErrClosed), errors.Is(err, net.ErrClosed), errors.Is(err, io.EOF):
		return CodeClosed
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return CodeTimeout
	}
	return CodeUnknown
}

// commandTypes maps each CommandType to the Go type newCommand returns, so
// that encoding can refuse a Command that is not one of ours.
var commandTypes = func() (types [256]reflect.Type) {
	for t := range len(types) {
		if cmd := newCommand(CommandType(t)); cmd != nil {
			types[t] = reflect.TypeOf(cmd)
		}
	}
	return types
}()

// checkCommand reports a value that cannot be encoded as a command.
func checkCommand(cmd Command) error {
	if cmd == nil {
		return fmt.Errorf("%w: nil command", ErrMalformed)
	}
	v := reflect.ValueOf(cmd)
	if v.Type() != commandTypes[cmd.Type()] {
		return fmt.Errorf("%w: %T is not a protocol command", ErrMalformed, cmd)
	}
	if v.IsNil() {
		return fmt.Errorf("%w: nil %T", ErrMalformed, cmd)
	}
	return nil
}

// appendBuffer lets a msgpack.Encoder append to a byte slice.
type appendBuffer struct{ b []byte }

func (a *appendBuffer) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

func (a *appendBuffer) WriteByte(c byte) error {
	a.b = append(a.b, c)
	return nil
}

func (a *appendBuffer) WriteString(s string) (int, error) {
	a.b = append(a.b, s...)
	return len(s), nil
}

// encoder is a pooled msgpack encoder writing into its appendBuffer. Map
// keys are sorted so that equal commands are equal bytes, and integers take
// their shortest form.
type encoder struct {
	buf appendBuffer
	enc *msgpack.Encoder
}

var encoders = sync.Pool{New: func() any {
	e := new(encoder)
	e.enc = msgpack.NewEncoder(&e.buf)
	e.enc.SetSortMapKeys(true)
	e.enc.UseCompactInts(true)
	return e
}}

// AppendFrame appends cmd, framed, to dst and returns the extended slice.
// It enforces no size limit but the 32-bit length prefix; Conn.Send checks
// its configured limit.
func AppendFrame(dst []byte, cmd Command) ([]byte, error) {
	if err := checkCommand(cmd); err != nil {
		return dst, err
	}
	start := len(dst)
	e := encoders.Get().(*encoder)
	e.buf.b = append(dst, 0, 0, 0, 0)
	err := e.enc.EncodeArrayLen(2)
	if err == nil {
		err = e.enc.EncodeUint(uint64(cmd.Type()))
	}
	if err == nil {
		err = e.enc.Encode(cmd)
	}
	b := e.buf.b
	e.buf.b = nil
	encoders.Put(e)
	if err != nil {
		return dst, fmt.Errorf("transport: encode %s: %w", cmd.Type(), err)
	}
	n := len(b) - start - headerSize
	if uint64(n) > math.MaxUint32 {
		return dst, &FrameSizeError{Size: int64(n), Max: math.MaxUint32}
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return b, nil
}

// WriteFrame writes cmd, framed, to w in one Write.
func WriteFrame(w io.Writer, cmd Command) error {
	bp := getBuffer()
	defer putBuffer(bp)
	b, err := AppendFrame((*bp)[:0], cmd)
	*bp = b
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("transport: write frame: %w", err)
	}
	return nil
}

// Buffers for frames being read or written are pooled; one that grew past
// maxPooledBuffer is left to the garbage collector instead.
const (
	maxPooledBuffer = 1 << 20
	firstChunk      = 64 << 10
)

var buffers = sync.Pool{New: func() any {
	b := make([]byte, 0, 4<<10)
	return &b
}}

func getBuffer() *[]byte { return buffers.Get().(*[]byte) }

func putBuffer(bp *[]byte) {
	if cap(*bp) <= maxPooledBuffer {
		*bp = (*bp)[:0]
		buffers.Put(bp)
	}
}

// ReadFrame reads one frame from r and decodes its command. A maxSize of
// zero or less means DefaultMaxFrameSize.
//
// The length is checked against maxSize before anything is allocated for
// the body, and the body buffer grows only as its bytes arrive, so a peer
// that announces a large frame and stalls costs no more than what it sent.
// Decoded byte slices and strings never share memory with the frame.
//
// At a clean end of stream, before a frame begins, ReadFrame returns io.EOF
// itself. Other read errors are wrapped (a frame cut short matches
// io.ErrUnexpectedEOF); a frame above maxSize is a *FrameSizeError; a frame
// that is not a valid command matches ErrMalformed.
func ReadFrame(r io.Reader, maxSize int) (Command, error) {
	cmd, _, err := readFrame(r, maxSize)
	return cmd, err
}

// readFrame is ReadFrame that also returns the frame's length (without
// the prefix).
func readFrame(r io.Reader, maxSize int) (Command, int, error) {
	if maxSize <= 0 {
		maxSize = DefaultMaxFrameSize
	}
	bp := getBuffer()
	defer putBuffer(bp)
	hdr := (*bp)[:headerSize]
	if _, err := io.ReadFull(r, hdr); err != nil {
		if err == io.EOF {
			return nil, 0, io.EOF
		}
		return nil, 0, fmt.Errorf("transport: read frame header: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr)
	if n == 0 {
		return nil, 0, fmt.Errorf("%w: zero length", ErrMalformed)
	}
	if uint64(n) > uint64(maxSize) {
		return nil, 0, &FrameSizeError{Size: int64(n), Max: int64(maxSize)}
	}
	body, err := readBody(r, (*bp)[:0], int(n))
	*bp = body
	if err != nil {
		return nil, 0, err
	}
	cmd, err := decode(body)
	return cmd, int(n), err
}

// readBody reads n bytes into buf, growing it as the bytes arrive rather
// than trusting n up front.
func readBody(r io.Reader, buf []byte, n int) ([]byte, error) {
	for len(buf) < n {
		if cap(buf) == len(buf) {
			buf = slices.Grow(buf, min(max(len(buf), firstChunk), n-len(buf)))
		}
		chunk := buf[len(buf):min(cap(buf), n)]
		got, err := io.ReadFull(r, chunk)
		buf = buf[:len(buf)+got]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return buf, fmt.Errorf("transport: read frame body: %w", err)
		}
	}
	return buf, nil
}

// decoder is a pooled msgpack decoder reading from its bytes.Reader.
type decoder struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

var decoders = sync.Pool{New: func() any {
	d := new(decoder)
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}}

// errDecoderPanic marks a panic recovered from the msgpack decoder. The
// check in decode is meant to make it impossible; the fuzz test looks for
// it.
var errDecoderPanic = errors.New("decoder panic")

// decode decodes one frame body. check validates it first, so that msgpack
// never sees a length, a nesting depth or a decoded size the body cannot
// back.
func decode(body []byte) (cmd Command, err error) {
	t, err := check(body)
	if err != nil {
		return nil, err
	}
	cmd = newCommand(t)
	d := decoders.Get().(*decoder)
	d.r.Reset(body)
	defer func() {
		if p := recover(); p != nil {
			// The decoder's state is unknown: do not pool it.
			cmd, err = nil, fmt.Errorf("%w: %s: %w: %v", ErrMalformed, t, errDecoderPanic, p)
			return
		}
		d.r.Reset(nil)
		decoders.Put(d)
	}()
	if _, err := d.dec.DecodeArrayLen(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if _, err := d.dec.DecodeUint64(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := d.dec.Decode(cmd); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, t, err)
	}
	if d.r.Len() != 0 {
		return nil, fmt.Errorf("%w: %s: %d bytes after the command", ErrMalformed, t, d.r.Len())
	}
	return cmd, nil
}

package transport

import "bufio"

// Codec turns commands into the bytes of a wire protocol and back. A Conn
// uses fabriq's own frames (FrameCodec) unless its Config names another:
// the broker serves clients of another protocol (Pulsar's) by translating
// its frames to and from these commands, so that one session engine
// serves both.
//
// Append may be called from several goroutines at once (Conn.SendAll
// encodes before it takes the write lock); Read from the connection's
// single reader.
type Codec interface {
	// Append appends the frames that say cmd to dst: one, several, or none
	// for a command the peer's protocol has no frame for. A command above
	// maxSize is refused with a *FrameSizeError.
	Append(dst []byte, cmd Command, maxSize int) ([]byte, error)
	// Read reads the next command and returns it with the bytes it took on
	// the wire (about the memory it holds). Errors are as ReadFrame's.
	Read(r *bufio.Reader, maxSize int) (Command, int, error)
}

// FrameCodec is fabriq's own protocol: one msgpack frame a command.
type FrameCodec struct{}

// Append appends cmd's frame.
func (FrameCodec) Append(dst []byte, cmd Command, maxSize int) ([]byte, error) {
	start := len(dst)
	b, err := AppendFrame(dst, cmd)
	if err != nil {
		return b, err
	}
	if n := len(b) - start - headerSize; n > maxSize {
		return b[:start], &FrameSizeError{Size: int64(n), Max: int64(maxSize)}
	}
	return b, nil
}

// Read reads one frame.
func (FrameCodec) Read(r *bufio.Reader, maxSize int) (Command, int, error) {
	return readFrame(r, maxSize)
}

package fsm

import (
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// decodeBody decodes an entry's body into v. A Send's messages take their
// payloads and ordering keys from body itself, without a copy (Message's
// DecodeMsgpack): the decoder the library builds over a byte slice copies
// each, and on every replica that copy was a tenth of what a node
// allocated per message, all of it work for the garbage collector. body
// must not change while what was decoded from it is in use; a Raft entry's
// data never does.
func decodeBody(body []byte, v any) error {
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.UsePreallocateValues(true) // as msgpack.Unmarshal
	dec.Reset(&sliceReader{b: body})
	return dec.Decode(v)
}

// sliceReader is the reader decodeBody decodes from. msgpack's decoder
// reads a reader that can unread a byte directly, without a buffer of its
// own, so what it has not read yet is b[off:], and a Message can take its
// byte fields from there.
type sliceReader struct {
	b   []byte
	off int
}

func (r *sliceReader) Read(p []byte) (int, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}

func (r *sliceReader) ReadByte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *sliceReader) UnreadByte() error {
	if r.off == 0 {
		return errors.New("fsm: unread before the start of an entry")
	}
	r.off--
	return nil
}

// next returns the next n bytes, not copied.
func (r *sliceReader) next(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, io.ErrUnexpectedEOF
	}
	b := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return b, nil
}

// length reads the length a string or binary header gives, as the
// library accepts either for a []byte or a string: -1 for nil.
func (r *sliceReader) length(c byte) (int, error) {
	var size int
	switch {
	case c == msgpcode.Nil:
		return -1, nil
	case msgpcode.IsFixedString(c):
		return int(c & msgpcode.FixedStrMask), nil
	case c == msgpcode.Str8 || c == msgpcode.Bin8:
		size = 1
	case c == msgpcode.Str16 || c == msgpcode.Bin16:
		size = 2
	case c == msgpcode.Str32 || c == msgpcode.Bin32:
		size = 4
	default:
		return 0, fmt.Errorf("msgpack: invalid code=%x decoding bytes length", c)
	}
	b, err := r.next(size)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, x := range b {
		n = n<<8 | int(x)
	}
	return n, nil
}

// bytes reads a string or binary value, not copied; nil for nil.
func (r *sliceReader) bytes() ([]byte, error) {
	c, err := r.ReadByte()
	if err != nil {
		return nil, err
	}
	n, err := r.length(c)
	if err != nil || n < 0 {
		return nil, err
	}
	return r.next(n)
}

// plainMessage is Message without its decoder: the library's, by
// reflection, for a decoder that does not read from a sliceReader.
type plainMessage Message

// DecodeMsgpack implements msgpack.CustomDecoder: it decodes what the
// library would into a Message, with Payload and OrderingKey slices of
// the entry when the decoder reads one (decodeBody).
func (m *Message) DecodeMsgpack(dec *msgpack.Decoder) error {
	r, ok := dec.Buffered().(*sliceReader)
	if !ok {
		return dec.Decode((*plainMessage)(m))
	}
	n, err := dec.DecodeMapLen()
	if err != nil {
		return err
	}
	*m = Message{}
	for range max(n, 0) {
		key, err := r.bytes()
		if err != nil {
			return err
		}
		switch string(key) {
		case "k":
			m.Key, err = dec.DecodeString()
		case "ok":
			m.OrderingKey, err = r.bytes()
		case "p":
			err = dec.Decode(&m.Properties)
		case "et":
			m.EventTime, err = dec.DecodeInt64()
		case "pt":
			m.PublishTime, err = dec.DecodeInt64()
		case "sq":
			m.SequenceID, err = dec.DecodeUint64()
		case "d":
			m.Payload, err = r.bytes()
		default: // "pn" of older versions, or a field of a newer one
			err = dec.Skip()
		}
		if err != nil {
			return fmt.Errorf("fsm: decode message field %q: %w", key, err)
		}
	}
	return nil
}

package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"testing"
)

// FuzzReadFrame feeds arbitrary bytes to ReadFrame, as they are and with a
// length prefix that matches them, so that the body decoder is reached. It
// must never panic, never read past the frame limit, allocate no more than
// the decode budget allows, and fail only with the package's errors or the
// reader's. What decodes must encode to a frame that decodes to an equal
// command, and encoding must then be stable.
func FuzzReadFrame(f *testing.F) {
	for _, cmd := range samples() {
		b, err := AppendFrame(nil, cmd)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 64 << 10
		fuzzFrame(t, data, limit)
		if len(data) >= headerSize {
			fixed := bytes.Clone(data)
			binary.BigEndian.PutUint32(fixed, uint32(len(fixed)-headerSize))
			fuzzFrame(t, fixed, limit)
		}
	})
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// fuzzAllocSlack covers allocations that are not the decoder's: pooled
// buffers and decoders made again after a garbage collection emptied their
// pools, and the test's own.
const fuzzAllocSlack = 1 << 20

func fuzzFrame(t *testing.T, data []byte, limit int) {
	r := &countingReader{r: bytes.NewReader(data)}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cmd, err := ReadFrame(r, limit)
	runtime.ReadMemStats(&after)
	if r.n > headerSize+limit {
		t.Fatalf("read %d bytes with a limit of %d", r.n, limit)
	}
	// msgpack may briefly hold a slice twice while it grows it.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(2*decodeBudget(limit)+fuzzAllocSlack) {
		t.Fatalf("allocated %d bytes decoding %d", alloc, len(data))
	}
	if err != nil {
		switch {
		case errors.Is(err, errDecoderPanic):
			t.Fatalf("the check let through a frame that panics the decoder: %v", err)
		case errors.Is(err, ErrMalformed), errors.Is(err, ErrFrameTooLarge),
			err == io.EOF, errors.Is(err, io.ErrUnexpectedEOF):
		default:
			t.Fatalf("unexpected error: %v", err)
		}
		if cmd != nil {
			t.Fatalf("a command with an error: %#v", cmd)
		}
		return
	}
	again, err := AppendFrame(nil, cmd)
	if err != nil {
		t.Fatalf("decoded %#v does not encode: %v", cmd, err)
	}
	cmd2, err := ReadFrame(bytes.NewReader(again), MaxFrameSizeLimit)
	if err != nil {
		t.Fatalf("re-encoded %s does not decode: %v", cmd.Type(), err)
	}
	if !reflect.DeepEqual(normalized(cmd), normalized(cmd2)) {
		t.Fatalf("decoded\n%#v\nre-encoded and decoded\n%#v", cmd, cmd2)
	}
	third, err := AppendFrame(nil, cmd2)
	if err != nil || !bytes.Equal(third, again) {
		t.Fatalf("encoding is not stable: % x\nthen % x (%v)", again, third, err)
	}
}

// normalized returns a copy of cmd with empty slices and maps made nil:
// fields tagged omitempty do not keep the difference on the wire.
func normalized(cmd Command) Command {
	v := reflect.New(reflect.TypeOf(cmd).Elem())
	v.Elem().Set(reflect.ValueOf(cmd).Elem())
	normalize(v.Elem())
	return v.Interface().(Command)
}

func normalize(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			p := reflect.New(v.Type().Elem())
			p.Elem().Set(v.Elem())
			normalize(p.Elem())
			v.Set(p)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			normalize(v.Field(i))
		}
	case reflect.Map:
		if v.Len() == 0 {
			v.SetZero()
		}
	case reflect.Slice:
		if v.Len() == 0 {
			v.SetZero()
			return
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		s := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(s, v)
		for i := range s.Len() {
			normalize(s.Index(i))
		}
		v.Set(s)
	}
}

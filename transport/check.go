package transport

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"strings"
)

// Before msgpack decodes a frame body, check walks it once, without
// allocating, and refuses it unless:
//
//   - it is one msgpack value, an array of [known type, body], with no bytes
//     after it;
//   - every length it declares (string, binary, extension, array, map) fits
//     in the bytes that remain, counting at least one byte per array element
//     and two per map entry;
//   - it nests no deeper than maxDepth;
//   - what the decoder will allocate for it, estimated from the Go types it
//     decodes into, stays within decodeBudget.
//
// msgpack preallocates a slice of the length an array declares (and a map of
// up to a million entries), so without the second rule a 20-byte frame could
// ask for gigabytes; without the third, skipping an unknown field recurses
// once per level; without the fourth, a frame of one-byte empty maps decoded
// into 128-byte structs would cost 128 times its size.

const (
	// maxDepth bounds nesting. The deepest command, DescribeStreamResult,
	// nests 10 levels.
	maxDepth = 32
	// budgetPerByte and budgetSlack set decodeBudget. A frame that honest
	// encoding produces costs at most about 24 bytes per byte (a message
	// whose properties are all two-letter names with empty values); the
	// usual Send or Message costs less than 2.
	budgetPerByte = 32
	budgetSlack   = 64 << 10
	// mapEntryFactor scales a map entry's key and value sizes into what the
	// runtime allocates for it, table overhead included.
	mapEntryFactor = 3
)

// decodeBudget is the most check lets the decoder allocate for a body of n
// bytes.
func decodeBudget(n int) int64 { return budgetPerByte*int64(n) + budgetSlack }

type shapeKind uint8

const (
	anyShape    shapeKind = iota // an unknown field: skipped, allocates nothing
	scalarShape                  // bool, integer, float: no allocation
	bytesShape                   // string or []byte: its length
	sliceShape                   // a slice: length times element size
	mapShape                     // a map: entries times entry size
	structShape                  // a struct: fields by name or position
	ptrShape                     // a pointer: its element, when not nil
)

// A shape is what the decoder builds from a wire value: enough of the Go
// type to know what it will allocate.
type shape struct {
	kind   shapeKind
	size   int64             // slice: element size; map: entry size; pointer: element size
	elem   *shape            // slice, map value, pointer target
	key    *shape            // map key
	fields map[string]*shape // struct fields by wire name
	list   []*shape          // struct fields in order, for array-encoded structs
}

var anything = &shape{kind: anyShape}

// shapes holds the shape of each command type's struct.
var shapes = func() (shapes [256]*shape) {
	for t, typ := range commandTypes {
		if typ != nil {
			shapes[t] = shapeOf(typ.Elem(), 0)
		}
	}
	return shapes
}()

// shapeOf describes t. It panics on a kind the protocol does not use, so
// that adding such a field to a command fails every test at once instead of
// escaping the check.
func shapeOf(t reflect.Type, depth int) *shape {
	if depth > maxDepth {
		panic(fmt.Sprintf("transport: type %s nests too deep", t))
	}
	switch t.Kind() {
	case reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return &shape{kind: scalarShape}
	case reflect.String:
		return &shape{kind: bytesShape}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return &shape{kind: bytesShape}
		}
		return &shape{kind: sliceShape, size: int64(t.Elem().Size()), elem: shapeOf(t.Elem(), depth+1)}
	case reflect.Map:
		return &shape{
			kind: mapShape,
			size: mapEntryFactor * int64(t.Key().Size()+t.Elem().Size()),
			key:  shapeOf(t.Key(), depth+1),
			elem: shapeOf(t.Elem(), depth+1),
		}
	case reflect.Pointer:
		return &shape{kind: ptrShape, size: int64(t.Elem().Size()), elem: shapeOf(t.Elem(), depth+1)}
	case reflect.Struct:
		s := &shape{kind: structShape, fields: make(map[string]*shape)}
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			if f.Anonymous {
				panic(fmt.Sprintf("transport: embedded field %s.%s is not supported", t, f.Name))
			}
			name, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fs := shapeOf(f.Type, depth+1)
			s.fields[name] = fs
			s.list = append(s.list, fs)
		}
		return s
	}
	panic(fmt.Sprintf("transport: %s fields are not supported in commands", t))
}

// checker walks a body. It never allocates.
type checker struct {
	b      []byte
	pos    int
	cost   int64
	budget int64
}

// check validates a frame body and returns its command type.
func check(b []byte) (CommandType, error) {
	c := checker{b: b, budget: decodeBudget(len(b))}
	code, err := c.byte()
	if err != nil {
		return 0, err
	}
	n := uint64(code) & 0x0f // a fixarray, as encoders write it
	switch {
	case code&0xf0 == 0x90:
	case code == 0xdc || code == 0xdd: // array 16, 32
		if n, err = c.uint(2 << (code - 0xdc)); err != nil {
			return 0, err
		}
	default:
		return 0, malformed("body is not an array of [type, command] (code %#x)", code)
	}
	if n != 2 {
		return 0, malformed("body is an array of %d elements, not [type, command]", n)
	}
	code, err = c.byte()
	if err != nil {
		return 0, err
	}
	t := uint64(code)
	switch {
	case code <= 0x7f: // positive fixint
	case code >= 0xcc && code <= 0xcf: // uint 8, 16, 32, 64
		if t, err = c.uint(1 << (code - 0xcc)); err != nil {
			return 0, err
		}
	default:
		return 0, malformed("command type is not an unsigned integer (code %#x)", code)
	}
	if t >= uint64(len(shapes)) || shapes[t] == nil {
		return 0, malformed("unknown command type %d", t)
	}
	if err := c.value(shapes[t], 1); err != nil {
		return 0, fmt.Errorf("%w (%s)", err, CommandType(t))
	}
	if rest := len(b) - c.pos; rest != 0 {
		return 0, malformed("%d bytes after the %s command", rest, CommandType(t))
	}
	return CommandType(t), nil
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

func (c *checker) remaining() int { return len(c.b) - c.pos }

func (c *checker) byte() (byte, error) {
	if c.pos >= len(c.b) {
		return 0, malformed("truncated at byte %d", c.pos)
	}
	b := c.b[c.pos]
	c.pos++
	return b, nil
}

func (c *checker) skip(n uint64) error {
	if n > uint64(c.remaining()) {
		return malformed("%d bytes declared at byte %d, %d remain", n, c.pos, c.remaining())
	}
	c.pos += int(n)
	return nil
}

// uint reads a big-endian unsigned integer of width bytes (1, 2, 4 or 8).
func (c *checker) uint(width int) (uint64, error) {
	if width > c.remaining() {
		return 0, malformed("truncated at byte %d", c.pos)
	}
	p := c.b[c.pos : c.pos+width]
	c.pos += width
	switch width {
	case 1:
		return uint64(p[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(p)), nil
	}
	return binary.BigEndian.Uint64(p), nil
}

func (c *checker) charge(n int64) error {
	c.cost += n
	if c.cost > c.budget {
		return malformed("decoding would allocate more than %d bytes for a %d-byte frame", c.budget, len(c.b))
	}
	return nil
}

// value checks one value that decodes into s.
func (c *checker) value(s *shape, depth int) error {
	if depth > maxDepth {
		return malformed("nested deeper than %d at byte %d", maxDepth, c.pos)
	}
	code, err := c.byte()
	if err != nil {
		return err
	}
	for s.kind == ptrShape {
		if code != 0xc0 { // msgpack allocates the target unless the value is nil
			if err := c.charge(s.size); err != nil {
				return err
			}
		}
		s = s.elem
	}
	switch {
	case code <= 0x7f || code >= 0xe0: // fixint
		return nil
	case code <= 0x8f: // fixmap
		return c.mapBody(s, uint64(code&0x0f), depth)
	case code <= 0x9f: // fixarray
		return c.arrayBody(s, uint64(code&0x0f), depth)
	case code <= 0xbf: // fixstr
		return c.bytes(s, uint64(code&0x1f))
	}
	switch code {
	case 0xc0, 0xc2, 0xc3: // nil, false, true
		return nil
	case 0xca, 0xce, 0xd2: // float 32, uint 32, int 32
		return c.skip(4)
	case 0xcb, 0xcf, 0xd3: // float 64, uint 64, int 64
		return c.skip(8)
	case 0xcc, 0xd0: // uint 8, int 8
		return c.skip(1)
	case 0xcd, 0xd1: // uint 16, int 16
		return c.skip(2)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16: type byte, data
		return c.skip(1 + 1<<(code-0xd4))
	}
	var width int // the length that follows code
	switch code {
	case 0xc4, 0xc5, 0xc6: // bin 8, 16, 32
		width = 1 << (code - 0xc4)
	case 0xd9, 0xda, 0xdb: // str 8, 16, 32
		width = 1 << (code - 0xd9)
	case 0xc7, 0xc8, 0xc9: // ext 8, 16, 32
		width = 1 << (code - 0xc7)
	case 0xdc, 0xdd: // array 16, 32
		width = 2 << (code - 0xdc)
	case 0xde, 0xdf: // map 16, 32
		width = 2 << (code - 0xde)
	default:
		return malformed("reserved code %#x at byte %d", code, c.pos-1)
	}
	n, err := c.uint(width)
	if err != nil {
		return err
	}
	switch code {
	case 0xc7, 0xc8, 0xc9: // a type byte, then the data
		return c.skip(n + 1)
	case 0xdc, 0xdd:
		return c.arrayBody(s, n, depth)
	case 0xde, 0xdf:
		return c.mapBody(s, n, depth)
	}
	return c.bytes(s, n)
}

func (c *checker) bytes(s *shape, n uint64) error {
	if err := c.skip(n); err != nil {
		return err
	}
	if s.kind == bytesShape {
		return c.charge(int64(n))
	}
	return nil
}

func (c *checker) arrayBody(s *shape, n uint64, depth int) error {
	if n > uint64(c.remaining()) {
		return malformed("array of %d elements at byte %d, %d bytes remain", n, c.pos, c.remaining())
	}
	switch s.kind {
	case sliceShape:
		if err := c.charge(int64(n) * s.size); err != nil {
			return err
		}
		for range n {
			if err := c.value(s.elem, depth+1); err != nil {
				return err
			}
		}
		return nil
	case structShape: // fields by position
		for i := range n {
			f := anything
			if i < uint64(len(s.list)) {
				f = s.list[i]
			}
			if err := c.value(f, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	for range n {
		if err := c.value(anything, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (c *checker) mapBody(s *shape, n uint64, depth int) error {
	if n > uint64(c.remaining())/2 {
		return malformed("map of %d entries at byte %d, %d bytes remain", n, c.pos, c.remaining())
	}
	switch s.kind {
	case structShape:
		for range n {
			name, err := c.key()
			if err != nil {
				return err
			}
			f := s.fields[string(name)]
			if f == nil {
				f = anything // an unknown field, skipped
			}
			if err := c.value(f, depth+1); err != nil {
				return err
			}
		}
		return nil
	case mapShape:
		if err := c.charge(int64(n) * s.size); err != nil {
			return err
		}
		for range n {
			if err := c.value(s.key, depth+1); err != nil {
				return err
			}
			if err := c.value(s.elem, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	for range 2 * n {
		if err := c.value(anything, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// key reads a struct field name: a string, binary or nil, as msgpack
// accepts.
func (c *checker) key() ([]byte, error) {
	code, err := c.byte()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case code >= 0xa0 && code <= 0xbf:
		n = uint64(code & 0x1f)
	case code == 0xc0:
		return nil, nil
	case code >= 0xc4 && code <= 0xc6:
		n, err = c.uint(1 << (code - 0xc4))
	case code >= 0xd9 && code <= 0xdb:
		n, err = c.uint(1 << (code - 0xd9))
	default:
		return nil, malformed("field name is not a string (code %#x) at byte %d", code, c.pos-1)
	}
	if err != nil {
		return nil, err
	}
	start := c.pos
	if err := c.skip(n); err != nil {
		return nil, err
	}
	return c.b[start:c.pos], nil
}

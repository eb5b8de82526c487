package subscription

import "sort"

// Range is an inclusive range of offsets.
type Range struct {
	Start uint64 `msgpack:"s" json:"start"`
	End   uint64 `msgpack:"e" json:"end"`
}

// Cursor is a subscription's acknowledgement state (CUR-1): every offset
// below Floor is acknowledged (Floor-1 is Pulsar's mark-delete position),
// and Acked holds the acknowledged offsets at or above Floor as sorted,
// disjoint, non-adjacent ranges, every one of them kept. The fields are
// exported for encoding; change a Cursor only through its methods.
type Cursor struct {
	Floor uint64  `msgpack:"f"`
	Acked []Range `msgpack:"a,omitempty"`
}

// NewCursor returns a cursor with everything below floor acknowledged.
func NewCursor(floor uint64) *Cursor { return &Cursor{Floor: floor} }

// IsAcked reports whether offset o is acknowledged.
func (c *Cursor) IsAcked(o uint64) bool {
	if o < c.Floor {
		return true
	}
	i := c.find(o)
	return i < len(c.Acked) && c.Acked[i].Start <= o
}

// find returns the index of the first range whose End is at or above o.
func (c *Cursor) find(o uint64) int {
	return sort.Search(len(c.Acked), func(i int) bool { return c.Acked[i].End >= o })
}

// Ack acknowledges offset o and reports whether that changed anything.
func (c *Cursor) Ack(o uint64) bool {
	if c.IsAcked(o) {
		return false
	}
	i := c.find(o)
	joinLeft := i > 0 && c.Acked[i-1].End+1 == o
	joinRight := i < len(c.Acked) && c.Acked[i].Start == o+1
	switch {
	case joinLeft && joinRight:
		c.Acked[i-1].End = c.Acked[i].End
		c.Acked = append(c.Acked[:i], c.Acked[i+1:]...)
	case joinLeft:
		c.Acked[i-1].End = o
	case joinRight:
		c.Acked[i].Start = o
	default:
		c.Acked = append(c.Acked, Range{})
		copy(c.Acked[i+1:], c.Acked[i:])
		c.Acked[i] = Range{Start: o, End: o}
	}
	c.normalize()
	return true
}

// AckCumulative acknowledges every offset up to and including o and
// reports whether that changed anything.
func (c *Cursor) AckCumulative(o uint64) bool {
	if o < c.Floor {
		return false
	}
	c.Floor = o + 1
	i := sort.Search(len(c.Acked), func(i int) bool { return c.Acked[i].End >= c.Floor })
	c.Acked = c.Acked[i:]
	if len(c.Acked) > 0 && c.Acked[0].Start < c.Floor {
		c.Acked[0].Start = c.Floor
	}
	c.normalize()
	return true
}

// normalize folds a range that starts at the floor into the floor.
func (c *Cursor) normalize() {
	if len(c.Acked) > 0 && c.Acked[0].Start == c.Floor {
		c.Floor = c.Acked[0].End + 1
		c.Acked = c.Acked[1:]
	}
	if len(c.Acked) == 0 {
		c.Acked = nil
	}
}

// NextUnacked returns the first offset at or after from that is not
// acknowledged.
func (c *Cursor) NextUnacked(from uint64) uint64 {
	o := max(from, c.Floor)
	i := c.find(o)
	if i < len(c.Acked) && c.Acked[i].Start <= o {
		return c.Acked[i].End + 1
	}
	return o
}

// Backlog returns how many offsets below next are not acknowledged (CUR-5).
func (c *Cursor) Backlog(next uint64) uint64 {
	if next <= c.Floor {
		return 0
	}
	n := next - c.Floor
	for _, r := range c.Acked {
		if r.Start >= next {
			break
		}
		n -= min(r.End, next-1) - r.Start + 1
	}
	return n
}

// Reset moves the cursor so that offset floor is the first unacknowledged
// one, forgetting every acknowledgement at or above it (seek, CUR-4).
func (c *Cursor) Reset(floor uint64) {
	c.Floor = floor
	c.Acked = nil
}

// Clone returns a deep copy.
func (c *Cursor) Clone() *Cursor {
	return &Cursor{Floor: c.Floor, Acked: append([]Range(nil), c.Acked...)}
}

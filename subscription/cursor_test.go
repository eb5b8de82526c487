package subscription

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// CUR-1: mark-delete plus every acked range above it.
func TestCursorAcks(t *testing.T) {
	tests := []struct {
		name      string
		floor     uint64
		ack       []uint64
		cum       int64 // cumulative ack after the individual ones, -1 for none
		wantFloor uint64
		wantAcked []Range
	}{
		{"nothing", 0, nil, -1, 0, nil},
		{"in order", 0, []uint64{0, 1, 2}, -1, 3, nil},
		{"gap", 0, []uint64{0, 2, 3, 5}, -1, 1, []Range{{2, 3}, {5, 5}}},
		{"fill the gap", 0, []uint64{2, 3, 5, 4, 0, 1}, -1, 6, nil},
		{"join both sides", 10, []uint64{12, 14, 13}, -1, 10, []Range{{12, 14}}},
		{"below floor ignored", 10, []uint64{3, 9}, -1, 10, nil},
		{"cumulative swallows ranges", 0, []uint64{2, 5, 9}, 5, 6, []Range{{9, 9}}},
		{"cumulative then adjacent range folds", 0, []uint64{7, 8}, 6, 9, nil},
		{"cumulative below floor", 5, nil, 3, 5, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCursor(tt.floor)
			for _, o := range tt.ack {
				c.Ack(o)
			}
			if tt.cum >= 0 {
				c.AckCumulative(uint64(tt.cum))
			}
			if c.Floor != tt.wantFloor || !reflect.DeepEqual(c.Acked, tt.wantAcked) {
				t.Fatalf("cursor %+v, want floor %d ranges %v", c, tt.wantFloor, tt.wantAcked)
			}
		})
	}
}

// The cursor agrees with a plain set of acked offsets under random acks,
// and never drops a range (CUR-1, beyond Pulsar: no cap).
func TestCursorMatchesSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for trial := range 50 {
		c := NewCursor(0)
		set := map[uint64]bool{}
		floor := uint64(0)
		for range 2000 {
			o := rng.Uint64N(500)
			if rng.IntN(50) == 0 {
				c.AckCumulative(o)
				for i := uint64(0); i <= o; i++ {
					set[i] = true
				}
			} else {
				changed := c.Ack(o)
				if changed == set[o] {
					t.Fatalf("trial %d: Ack(%d) changed=%v but set had it=%v", trial, o, changed, set[o])
				}
				set[o] = true
			}
			for set[floor] {
				floor++
			}
		}
		if c.Floor != floor {
			t.Fatalf("trial %d: floor %d, want %d", trial, c.Floor, floor)
		}
		var backlog uint64
		for o := uint64(0); o < 600; o++ {
			if c.IsAcked(o) != set[o] {
				t.Fatalf("trial %d: IsAcked(%d) = %v", trial, o, !set[o])
			}
			if !set[o] {
				backlog++
			}
			next := o
			for set[next] {
				next++
			}
			if got := c.NextUnacked(o); got != next {
				t.Fatalf("trial %d: NextUnacked(%d) = %d, want %d", trial, o, got, next)
			}
		}
		if got := c.Backlog(600); got != backlog {
			t.Fatalf("trial %d: backlog %d, want %d", trial, got, backlog)
		}
		for i := 1; i < len(c.Acked); i++ {
			if c.Acked[i].Start <= c.Acked[i-1].End+1 {
				t.Fatalf("ranges overlap or touch: %v", c.Acked)
			}
		}
	}
}

// CUR-5: backlog counts the unacked offsets below next.
func TestCursorBacklog(t *testing.T) {
	c := NewCursor(10)
	c.Ack(12)
	c.Ack(13)
	c.Ack(20)
	for _, tt := range []struct{ next, want uint64 }{{5, 0}, {10, 0}, {11, 1}, {13, 2}, {14, 2}, {21, 8}, {30, 17}} {
		if got := c.Backlog(tt.next); got != tt.want {
			t.Errorf("Backlog(%d) = %d, want %d", tt.next, got, tt.want)
		}
	}
}

// CUR-4: a reset forgets acknowledgements at and above the new floor.
func TestCursorReset(t *testing.T) {
	c := NewCursor(0)
	for _, o := range []uint64{0, 1, 5, 6} {
		c.Ack(o)
	}
	c.Reset(1)
	if c.Floor != 1 || c.Acked != nil || c.IsAcked(5) {
		t.Fatalf("after reset %+v", c)
	}
	d := c.Clone()
	d.Ack(1)
	if c.Floor != 1 {
		t.Fatal("clone shares state")
	}
}

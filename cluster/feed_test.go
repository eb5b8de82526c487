package cluster

import (
	"fmt"
	"testing"
	"time"
)

func TestFeed(t *testing.T) {
	type ev struct {
		key string
		n   int
	}
	tests := []struct {
		name  string
		merge func(queued, next ev) ev
		push  []ev
		want  []ev // after the first value, which the goroutine may hold already
	}{
		{"distinct keys keep their order", nil,
			[]ev{{"a", 1}, {"b", 1}, {"c", 1}},
			[]ev{{"b", 1}, {"c", 1}}},
		{"a key keeps its place and its latest value", nil,
			[]ev{{"x", 0}, {"a", 1}, {"b", 1}, {"a", 2}, {"a", 3}},
			[]ev{{"a", 3}, {"b", 1}}},
		{"merge", func(q, n ev) ev { return ev{n.key, q.n + n.n} },
			[]ev{{"x", 0}, {"a", 1}, {"a", 2}, {"a", 3}},
			[]ev{{"a", 6}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFeed[string](tt.merge)
			defer f.stop()
			for _, e := range tt.push {
				f.push(e.key, e)
			}
			recv := func() ev {
				t.Helper()
				select {
				case e := <-f.ch:
					return e
				case <-time.After(5 * time.Second):
					t.Fatal("nothing received")
				}
				return ev{}
			}
			if got := recv(); got != tt.push[0] {
				t.Fatalf("first %v, want %v", got, tt.push[0])
			}
			for _, w := range tt.want {
				if got := recv(); got != w {
					t.Fatalf("got %v, want %v", got, w)
				}
			}
		})
	}
}

func TestFeedStop(t *testing.T) {
	f := newFeed[int, int](nil)
	for i := range 1000 { // a reader that never reads
		f.push(i%10, i)
	}
	f.stop()
	f.stop()
	f.push(1, 1) // after stop: dropped
	n := 0
	for range f.ch {
		n++
	}
	if n > 1 {
		t.Fatalf("%d values after stop", n)
	}
	if len(f.pending) != 0 {
		t.Fatal(fmt.Sprint("pending after stop: ", f.pending))
	}
}

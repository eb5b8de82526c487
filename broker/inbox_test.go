package broker

import (
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/transport"
)

// The inbox holds at most its bound of bytes, plus one frame: the reader
// waits once the bound is reached, and goes on as the handler gives bytes
// back; a frame above the bound is taken when nothing else is held.
func TestInboxBoundsBytes(t *testing.T) {
	b := newInbox(2 * charge(5<<20))
	done := make(chan struct{})
	for range 2 {
		if !b.take(charge(5<<20), done) {
			t.Fatal("take within the bound refused")
		}
		b.put(queued{cmd: &transport.Ping{}, size: charge(5 << 20)})
	}
	took := make(chan bool, 1)
	go func() { took <- b.take(charge(5<<20), done) }()
	select {
	case <-took:
		t.Fatal("a third 5 MiB frame was taken past a bound of two")
	case <-time.After(100 * time.Millisecond):
	}
	q, ok := b.next(done)
	if !ok {
		t.Fatal("no queued frame")
	}
	b.give(q.size)
	select {
	case ok := <-took:
		if !ok {
			t.Fatal("take refused")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reader was not woken when bytes were given back")
	}
	b.give(charge(5 << 20))
	b.give(charge(5 << 20))
	if !b.take(charge(20<<20), done) {
		t.Fatal("a frame above the bound, with nothing held, was refused")
	}
	go func() { took <- b.take(1, done) }()
	close(done)
	if ok := <-took; ok {
		t.Fatal("take past the bound succeeded after done")
	}
	b.end()
	for {
		if _, ok := b.next(make(chan struct{})); !ok {
			break
		}
	}
}

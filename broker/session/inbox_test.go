package session

import (
	"context"
	"errors"
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

// The gate holds at most its bound of bytes, plus one frame, and one give
// wakes every waiter that then fits: many dispatchers may wait on one
// session.
func TestGateWakesEveryWaiter(t *testing.T) {
	g := newGate(100)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	if err := g.take(ctx, 100, done); err != nil {
		t.Fatal(err)
	}
	took := make(chan error, 2)
	for range 2 {
		go func() { took <- g.take(ctx, 50, done) }()
	}
	select {
	case err := <-took:
		t.Fatalf("a take past the bound returned %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	g.give(100)
	for range 2 {
		if err := <-took; err != nil {
			t.Fatalf("a waiter was not let in after a give: %v", err)
		}
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if err := g.take(short, 1<<20, done); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a take past the bound, the gate full: %v, want it to wait until its deadline", err)
	}
	g.give(100)
	if err := g.take(ctx, 1<<20, done); err != nil {
		t.Fatalf("a frame above the bound, nothing queued: %v", err)
	}
	close(done)
	if err := g.take(ctx, 1, done); !errors.Is(err, errSessionClosed) {
		t.Fatalf("a take on a closed session: %v", err)
	}
}

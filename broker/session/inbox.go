package session

import (
	"context"
	"errors"
	"sync"

	"github.com/fabriq-io/fabriq/transport"
)

// frameOverhead is what a queued frame is charged besides its bytes: the
// decoded command's own structures. It also bounds how many tiny frames
// one session can queue.
const frameOverhead = 512

// queued is a frame read from a connection and not yet handled, with the
// bytes it is charged.
type queued struct {
	cmd  transport.Command
	size int
}

// inbox holds what a session has read and not yet handled, bounded by
// bytes: the frames waiting for the session's handler, in the order they
// came, and the bytes of those being handled anywhere. The reader takes
// bytes before it queues a frame and waits while the bound is reached
// (TCP then pushes back on the client); a handler gives them back once
// done. A frame larger than what is left is taken when nothing else is
// held, so the bound is max plus one frame.
//
// One goroutine reads (take, put, end) and one handles in order (next);
// give may come from any goroutine.
type inbox struct {
	max int

	mu    sync.Mutex
	used  int
	items []queued
	ended bool
	// more wakes the handler: a frame was queued or the reader ended.
	more chan struct{}
	// freed wakes the reader: bytes were given back.
	freed chan struct{}
}

func newInbox(max int) *inbox {
	return &inbox{max: max, more: make(chan struct{}, 1), freed: make(chan struct{}, 1)}
}

// charge is what a frame of n bytes is charged.
func charge(n int) int { return n + frameOverhead }

// take reserves n bytes, waiting until they fit or done is closed; it
// reports whether it reserved them.
func (b *inbox) take(n int, done <-chan struct{}) bool {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return true
		}
		b.mu.Unlock()
		select {
		case <-b.freed:
		case <-done:
			return false
		}
	}
}

// give returns bytes taken.
func (b *inbox) give(n int) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	select {
	case b.freed <- struct{}{}:
	default:
	}
}

// put queues a frame, its bytes taken, for the handler.
func (b *inbox) put(q queued) {
	b.mu.Lock()
	b.items = append(b.items, q)
	b.mu.Unlock()
	b.wake()
}

// end tells the handler that nothing more comes.
func (b *inbox) end() {
	b.mu.Lock()
	b.ended = true
	b.mu.Unlock()
	b.wake()
}

func (b *inbox) wake() {
	select {
	case b.more <- struct{}{}:
	default:
	}
}

// next returns the oldest queued frame, waiting for one; false once the
// reader has ended and the queue is empty, or done is closed.
func (b *inbox) next(done <-chan struct{}) (queued, bool) {
	for {
		b.mu.Lock()
		if len(b.items) > 0 {
			q := b.items[0]
			b.items[0] = queued{}
			b.items = b.items[1:]
			if len(b.items) == 0 {
				b.items = nil // let a burst's backing array go
			}
			b.mu.Unlock()
			return q, true
		}
		ended := b.ended
		b.mu.Unlock()
		if ended {
			return queued{}, false
		}
		select {
		case <-b.more:
		case <-done:
			return queued{}, false
		}
	}
}

// gate bounds the bytes of the Message frames a session has queued and
// not yet written, for any number of waiting dispatchers: each give wakes
// every waiter. A frame larger than what is left goes when nothing else
// is queued, so the bound is max plus one frame.
type gate struct {
	max int

	mu   sync.Mutex
	used int
	// changed is closed, and replaced, when bytes are given back.
	changed chan struct{}
}

func newGate(max int) *gate {
	return &gate{max: max, changed: make(chan struct{})}
}

// take reserves n bytes, waiting until they fit, ctx ends or done is
// closed; it returns ctx's error, or errSessionClosed.
func (g *gate) take(ctx context.Context, n int, done <-chan struct{}) error {
	for {
		g.mu.Lock()
		if g.used == 0 || g.used+n <= g.max {
			g.used += n
			g.mu.Unlock()
			return nil
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-done:
			return errSessionClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// give returns bytes taken.
func (g *gate) give(n int) {
	g.mu.Lock()
	g.used -= n
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}

// errSessionClosed is what waits of a closed session return.
var errSessionClosed = errors.New("connection closed")

// messageSize is what a Message frame is charged against its session's
// gate: its payloads and keys, and frameOverhead per message.
func messageSize(m *transport.Message) int {
	n := frameOverhead
	for _, d := range m.Messages {
		n += frameOverhead + len(d.Data.Payload) + len(d.Data.Key) + len(d.Data.OrderingKey)
		for k, v := range d.Data.Properties {
			n += len(k) + len(v)
		}
	}
	return n
}

package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/transport"
)

// stalledOutbox is a consumer's connection that never takes a frame: a
// push waits until its context ends, and says why it ended.
type stalledOutbox struct {
	pushing chan struct{}
	ended   chan error
}

func (o *stalledOutbox) Deliver(ctx context.Context, _ *transport.Message) error {
	o.pushing <- struct{}{}
	<-ctx.Done()
	o.ended <- ctx.Err()
	return ctx.Err()
}
func (o *stalledOutbox) EvictConsumer(uint64)      {}
func (o *stalledOutbox) ActiveChange(uint64, bool) {}
func (o *stalledOutbox) Probe(time.Duration) bool  { return false }
func (o *stalledOutbox) Drop()                     {}

// Closing the dispatchers of a partition that stops leading ends every
// push in flight at once: K consumers that take no frames hold up
// leadership loss and shutdown for one cancellation, not for K push
// timeouts (deliverTimeout each), and their pushes end cancelled, not
// expired.
func TestCloseDispatchersCancelsStalledPushes(t *testing.T) {
	const k = 4
	p := &Partition{logger: slog.New(slog.DiscardHandler)}
	out := &stalledOutbox{pushing: make(chan struct{}, k), ended: make(chan error, k)}
	var ds []*dispatcher
	var wg sync.WaitGroup
	for i := range k {
		d := newDispatcher(p, "s", transport.Shared, true, 0, transport.AutoSplit, false)
		ds = append(ds, d)
		c := &Consumer{id: uint64(i), name: "stalled", out: out}
		wg.Go(func() { d.push(c, &transport.Message{ConsumerID: c.id}) })
	}
	for range k {
		<-out.pushing
	}
	closeDispatchers(ds)
	for i := range k {
		if err := <-out.ended; !errors.Is(err, context.Canceled) {
			t.Errorf("push %d ended with %v, want it cancelled by the close", i, err)
		}
	}
	wg.Wait()
}

// A leader whose Raft log cannot take an entry (a full disk) tells its
// client to try again, as for a leader change: the client retries, where
// an Unknown error would make a consumer give up.
func TestRaftErrorOfFullDiskIsRetryable(t *testing.T) {
	p := &Partition{name: "persistent://t/f/s"}
	err := fmt.Errorf("cluster: group g: apply: %w", &os.PathError{Op: "write", Path: "raft.db", Err: syscall.ENOSPC})
	if got := p.raftError(err); transport.CodeOf(got) != transport.CodeServiceNotReady {
		t.Fatalf("a full disk under Raft: %v, want ServiceNotReady", got)
	}
}

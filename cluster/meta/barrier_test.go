package meta

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// Reads that arrive together share Raft barriers: 100 concurrent Syncs
// on the leader add a few entries to the metadata log, not 100.
func TestConcurrentSyncsShareBarriers(t *testing.T) {
	svcs, _ := startServices(t, []net.Listener{listen(t)})
	s := svcs[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	before := s.group.AppliedIndex()
	const reads = 100
	var wg sync.WaitGroup
	errs := make(chan error, reads)
	for range reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Sync(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Each Sync waits for a barrier begun after it arrived: at most the
	// one running when the burst began and one after it, per batch of
	// arrivals; a burst of goroutines arrives in a few batches. Raft
	// answers a barrier from its state machine's goroutine and moves
	// its applied index from another, so the index may lag the answers.
	eventually(t, "the barriers counted in the applied index", func() bool { return s.group.AppliedIndex() > before })
	if added := s.group.AppliedIndex() - before; added < 1 || added > reads/4 {
		t.Fatalf("%d concurrent Syncs added %d entries to the metadata log", reads, added)
	}
}

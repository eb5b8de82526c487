package partition

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A worker started by every request it finds idle handles each request
// queued by many senders once, never runs two loops at a time, and, once
// stopped, fails what is queued instead of starting again.
func TestWorkerHandlesEveryRequestWithOneLoopAtATime(t *testing.T) {
	var handled sync.Map
	var running, most, loops atomic.Int32
	var w *worker[int]
	halt := make(chan struct{})
	w = newWorker(16, func() {
		loops.Add(1)
		n := running.Add(1)
		for {
			if m := most.Load(); n > m {
				most.CompareAndSwap(m, n)
			}
			select {
			case v := <-w.queue:
				if _, dup := handled.LoadOrStore(v, "ran"); dup {
					t.Errorf("request %d handled twice", v)
				}
			default:
				// End as soon as the queue is empty: the race between
				// a request queued and the loop ending is taken as
				// often as it can be.
				running.Add(-1)
				runtime.Gosched() // a request may come in meanwhile
				if w.rest() {
					return
				}
				n = running.Add(1)
			}
		}
	}, func(v int) { handled.LoadOrStore(v, "drained") }, halt)

	const senders, each = 8, 2000
	// A request left queued with no loop running blocks the senders once
	// the queue is full.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				if !w.put(s*each+i, nil, ctx.Done()) {
					return
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("requests were left queued with no loop running")
	}
	// Every request sent before stop is handled by a loop: stop waits
	// for the last one, and drains nothing.
	w.stop()
	count := 0
	handled.Range(func(k, v any) bool {
		count++
		if v != "ran" {
			t.Errorf("request %v was %s, not run by the loop", k, v)
		}
		return true
	})
	if count != senders*each {
		t.Fatalf("%d requests handled, want %d", count, senders*each)
	}
	if most.Load() != 1 {
		t.Fatalf("%d loops ran at once", most.Load())
	}
	if loops.Load() < 2 {
		t.Fatalf("the loop started %d times: it never ended while idle", loops.Load())
	}

	// Stopped: a request queued is drained by its kick, no loop starts.
	before := loops.Load()
	w.put(-1, nil, nil)
	if v, _ := handled.Load(-1); v != "drained" {
		t.Fatalf("a request queued after stop was %v, not drained", v)
	}
	if loops.Load() != before {
		t.Fatal("a loop started after stop")
	}
}

// Once the partition stops (before Wait stops the worker), a kick that
// finds no loop running fails what is queued itself: no second loop
// starts beside one draining, and nothing waits.
func TestWorkerDrainsOnceThePartitionStops(t *testing.T) {
	halt := make(chan struct{})
	var loops atomic.Int32
	var drained []int
	w := newWorker(4, func() { loops.Add(1) }, func(v int) { drained = append(drained, v) }, halt)
	close(halt)
	w.put(1, nil, nil)
	w.put(2, nil, nil)
	if loops.Load() != 0 {
		t.Fatal("a loop started after the partition stopped")
	}
	if len(drained) != 2 {
		t.Fatalf("drained %v, want both requests", drained)
	}
	w.stop()
}

// A worker holds a queue only while it is used: none before the first
// request, none once its loop ended idle, and a new one for the request
// after that, which its new loop takes.
func TestWorkerHoldsNoQueueWhileUnused(t *testing.T) {
	halt := make(chan struct{})
	got := make(chan int)
	var w *worker[int]
	w = newWorker(8, func() {
		for {
			select {
			case v := <-w.queue:
				got <- v
			default:
				if w.rest() {
					return
				}
			}
		}
	}, func(int) {}, halt)
	held := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.queue != nil
	}
	if held() {
		t.Fatal("a new worker holds a queue")
	}
	for i := range 3 {
		w.put(i, nil, nil)
		if v := <-got; v != i {
			t.Fatalf("the loop took %d, want %d", v, i)
		}
		w.wg.Wait() // the loop ended: nothing else was queued
		if held() {
			t.Fatalf("round %d: the queue outlived its loop", i)
		}
	}
	w.stop()
}

// A timed run that returns false sleeps until woken; a wake during a run
// keeps it awake; runs never overlap; stop waits for the run in progress
// and no run starts after it.
func TestTimedSleepsUntilWokenAndStops(t *testing.T) {
	runs := make(chan chan bool) // each run hands over where it is told what to return
	var inRun atomic.Int32
	tm := newTimed(time.Millisecond, func(time.Time) bool {
		if inRun.Add(1) != 1 {
			t.Error("two runs at once")
		}
		defer inRun.Add(-1)
		answer := make(chan bool)
		runs <- answer
		return <-answer
	})
	tm.start()
	(<-runs) <- true // runs again
	(<-runs) <- false
	// Asleep: no run starts until woken.
	select {
	case <-runs:
		t.Fatal("a run started while asleep")
	case <-time.After(50 * time.Millisecond):
	}
	tm.wake()
	answer := <-runs
	tm.wake() // while running: the run's false does not put it to sleep
	answer <- false
	answer = <-runs
	// stop waits for the run in progress.
	stopped := make(chan struct{})
	go func() {
		tm.stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("stop returned while a run was in progress")
	case <-time.After(50 * time.Millisecond):
	}
	answer <- true
	<-stopped
	tm.wake()
	select {
	case <-runs:
		t.Fatal("a run started after stop")
	case <-time.After(50 * time.Millisecond):
	}
}

// latest runs its function once at a time, always ends on the last value
// handed to it, takes values handed over while it runs together, holds no
// goroutine between changes, and runs nothing after stop.
func TestLatestRunsTheLastValueOnceAtATime(t *testing.T) {
	var running, most atomic.Int32
	ran := make(chan int, 200)
	entered, release := make(chan struct{}), make(chan struct{})
	l := newLatest(func(v int) {
		if n := running.Add(1); n > most.Load() {
			most.Store(n)
		}
		defer running.Add(-1)
		if v == 0 {
			close(entered)
			<-release // the first run holds while the others are handed over
		}
		ran <- v
	})
	l.set(0)
	<-entered
	var wg sync.WaitGroup
	for i := 1; i <= 100; i++ {
		wg.Go(func() { l.set(i) })
	}
	wg.Wait()
	l.set(101) // after every other: the last value
	close(release)
	if v := <-ran; v != 0 {
		t.Fatalf("the first run took %d, want 0", v)
	}
	if v := <-ran; v != 101 {
		t.Fatalf("the second run took %d: the values set during the first should be taken together, as the last, 101", v)
	}
	// A value set later starts a run again; after stop none starts.
	l.set(102)
	if v := <-ran; v != 102 {
		t.Fatalf("the run after a pause took %d, want 102", v)
	}
	l.stop()
	l.set(103)
	l.stop()
	close(ran)
	for v := range ran {
		t.Errorf("a run took %d after the one of 102: runs of values set during the first should be one, and none after stop", v)
	}
	if m := most.Load(); m != 1 {
		t.Errorf("%d runs at once, want 1", m)
	}
}

package partition

import (
	"sync"
	"time"
)

// A node holds a copy of every partition it serves, most of them idle at
// any moment: a goroutine parked per loop and per partition cost a node of
// a thousand partitions 6,000 stacks, which the garbage collector scans on
// every cycle. So the partition's loops hold no goroutine while they have
// nothing to do: the write and ack paths run in a worker started by the
// request that finds none running and ended after workerLinger without
// one, and the timed loops (retention, the sweep) run on timers
// (time.AfterFunc), which take a goroutine only while they run.

// workerLinger is how long a worker waits for more work before it ends: a
// busy partition keeps its worker, an idle one holds none.
const workerLinger = 5 * time.Second

// worker runs one loop of the partition in a goroutine while it has work.
// Every request queued is followed by kick, which starts the loop unless it
// runs; the loop, finding its queue empty for workerLinger, asks rest
// whether it may end, which it may only while its queue is still empty
// (under the lock kick takes), so a request queued meanwhile finds either
// the loop running or none and starts one. Once the partition stops
// (halt is closed), no loop starts: the running one drains its queue until
// rest lets it end, and a kick that finds none running drains the queue
// itself (drain), so a request is answered by the one loop, in order, or
// failed, and never waits with no loop to take it.
type worker struct {
	run   func()
	drain func()
	halt  <-chan struct{} // the partition's stop

	mu      sync.Mutex
	running bool
	stopped bool
	wg      sync.WaitGroup
}

func newWorker(run, drain func(), halt <-chan struct{}) *worker {
	return &worker{run: run, drain: drain, halt: halt}
}

// kick starts the loop unless it runs; once the partition stops, it drains
// the queue instead.
func (w *worker) kick() {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return
	}
	if w.stopped || closed(w.halt) {
		w.mu.Unlock()
		w.drain()
		return
	}
	w.running = true
	w.wg.Add(1) // never during stop's Wait: stopped is set first, under mu
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		w.run()
	}()
}

// rest reports whether the loop may end: whether empty, asked under the
// lock kick takes, says nothing is queued. If it may, the worker no longer
// runs, and it must return.
func (w *worker) rest(empty func() bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !empty() {
		return false
	}
	w.running = false
	return true
}

// halted is the loop's end once the partition stops: it drains the queue
// until rest finds it empty, and must return.
func (w *worker) halted(empty func() bool) {
	for {
		w.drain()
		if w.rest(empty) {
			return
		}
	}
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// stop lets no loop start again, waits for the running one to end, and
// drains what is left.
func (w *worker) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.wg.Wait()
	w.drain()
}

// timed runs fn every interval on a timer: no goroutine waits between two
// runs. fn returning false puts it to sleep until wake; a wake while fn
// runs keeps it awake. Runs never overlap.
type timed struct {
	every time.Duration
	fn    func(now time.Time) bool

	mu       sync.Mutex
	t        *time.Timer
	running  bool
	woken    bool // woken while running
	sleeping bool
	stopped  bool
	wg       sync.WaitGroup
}

func newTimed(every time.Duration, fn func(now time.Time) bool) *timed {
	return &timed{every: every, fn: fn}
}

// start arms the first run, every from now.
func (t *timed) start() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.t != nil {
		return
	}
	t.t = time.AfterFunc(t.every, t.tick)
}

func (t *timed) tick() {
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return
	}
	t.running = true
	t.wg.Add(1) // never during stop's Wait: stopped is set first, under mu
	t.mu.Unlock()
	defer t.wg.Done()
	again := t.fn(time.Now())
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running = false
	if t.stopped {
		return
	}
	if again || t.woken {
		t.t.Reset(t.every)
	} else {
		t.sleeping = true
	}
	t.woken = false
}

// wake arms a sleeping timer (the next run is every from now), or keeps
// a running one from going to sleep.
func (t *timed) wake() {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.stopped || t.t == nil:
	case t.sleeping:
		t.sleeping = false
		t.t.Reset(t.every)
	case t.running:
		t.woken = true
	}
}

// stop ends the runs and waits for the one running, if any.
func (t *timed) stop() {
	t.mu.Lock()
	t.stopped = true
	if t.t != nil {
		t.t.Stop()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

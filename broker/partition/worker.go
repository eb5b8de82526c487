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
// one, the timed loops (retention, the sweep) run on timers
// (time.AfterFunc), which take a goroutine only while they run, and
// leadership changes are handled by latest, whose goroutine runs only
// while a change waits. A worker's queue, too, exists only while it is
// used: a channel's buffer of pointers is scanned whole by every
// collection, empty or not, and the three queues of an idle partition
// were a fifth of an idle node's live heap.

// workerLinger is how long a worker waits for more work before it ends: a
// busy partition keeps its worker, an idle one holds none.
const workerLinger = 5 * time.Second

// worker runs one loop of the partition in a goroutine while its queue of
// requests (of type T) has work. Requests are queued with put, which
// kicks: it starts the loop unless it runs; the loop takes requests with next,
// which, finding the queue empty for workerLinger, asks rest whether it may
// end, which it may only while the queue is still empty (under the lock
// kick takes), so a request queued meanwhile finds either the loop running
// or none and starts one. Once the partition stops (halt is closed), no
// loop starts: the running one fails what is queued until rest lets it
// end, and a kick that finds none running fails it itself (drain), so a
// request is answered by the one loop, in order, or failed, and never
// waits with no loop to take it.
//
// The queue is made by the first put that finds none, and dropped by rest
// when the loop ends with the queue empty and no put under way (users),
// so a request is never left in a dropped queue. The loop reads queue
// without the lock: it is set only while no loop runs, before the kick
// that starts one.
type worker[T any] struct {
	depth int
	run   func()
	fail  func(T)         // answers a request the stopped partition will not take
	halt  <-chan struct{} // the partition's stop

	mu      sync.Mutex
	queue   chan T // nil while unused
	users   int    // puts holding the queue
	running bool
	stopped bool
	wg      sync.WaitGroup
}

func newWorker[T any](depth int, run func(), fail func(T), halt <-chan struct{}) *worker[T] {
	return &worker[T]{depth: depth, run: run, fail: fail, halt: halt}
}

// put queues r and kicks the loop, waiting while the queue is full until
// stop or cancel is closed (either may be nil); it reports whether r was
// queued.
func (w *worker[T]) put(r T, stop, cancel <-chan struct{}) bool {
	w.mu.Lock()
	if w.queue == nil {
		w.queue = make(chan T, w.depth)
	}
	q := w.queue
	w.users++
	w.mu.Unlock()
	queued := false
	select {
	case q <- r:
		queued = true
	case <-stop:
	case <-cancel:
	}
	w.mu.Lock()
	w.users--
	w.mu.Unlock()
	if queued {
		w.kick()
	}
	return queued
}

// kick starts the loop unless it runs; once the partition stops, it drains
// the queue instead.
func (w *worker[T]) kick() {
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

// next returns the loop's next request, waiting for it on idle (the loop's
// timer); false when the loop must return: the partition stopped and the
// queue is drained, or nothing came for workerLinger and rest let it end.
// Once the stop is seen, nothing more is taken.
func (w *worker[T]) next(idle *time.Timer) (T, bool) {
	var none T
	for {
		if closed(w.halt) {
			w.halted()
			return none, false
		}
		idle.Reset(workerLinger)
		select {
		case r := <-w.queue:
			return r, true
		case <-w.halt:
			w.halted()
			return none, false
		case <-idle.C:
			if w.rest() {
				return none, false
			}
		}
	}
}

// rest reports whether the loop may end: whether the queue, looked at
// under the lock kick takes, is empty. If it may, the worker no longer
// runs, and the loop must return; the queue is dropped unless a put holds
// it.
func (w *worker[T]) rest() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) > 0 {
		return false
	}
	w.running = false
	if w.users == 0 {
		w.queue = nil
	}
	return true
}

// halted is the loop's end once the partition stops: it drains the queue
// until rest finds it empty, and the loop must return.
func (w *worker[T]) halted() {
	for {
		w.drain()
		if w.rest() {
			return
		}
	}
}

// drain fails what is queued.
func (w *worker[T]) drain() {
	w.mu.Lock()
	q := w.queue
	w.mu.Unlock()
	for {
		select {
		case r := <-q:
			w.fail(r)
		default:
			return
		}
	}
}

// stop lets no loop start again, waits for the running one to end, and
// drains what is left.
func (w *worker[T]) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.wg.Wait()
	w.drain()
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

// latest runs fn with the latest value handed to set, in a goroutine that
// set starts and that ends once no newer value waits: values set while fn
// runs are taken together, as the last of them, and runs never overlap.
// set never blocks (the group's leadership calls it under its lock). After
// stop no run starts.
type latest[T any] struct {
	fn func(T)

	mu      sync.Mutex
	v       T
	pending bool // v has not been run with
	running bool
	stopped bool
	wg      sync.WaitGroup
}

func newLatest[T any](fn func(T)) *latest[T] {
	return &latest[T]{fn: fn}
}

// set hands v over, starting a run unless one runs, which takes v next.
func (l *latest[T]) set(v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	l.v, l.pending = v, true
	if l.running {
		return
	}
	l.running = true
	l.wg.Add(1) // never during stop's Wait: stopped is set first, under mu
	go l.run()
}

func (l *latest[T]) run() {
	defer l.wg.Done()
	for {
		l.mu.Lock()
		if !l.pending || l.stopped {
			l.running = false
			l.mu.Unlock()
			return
		}
		v := l.v
		l.pending = false
		l.mu.Unlock()
		l.fn(v)
	}
}

// stop lets no run start again and waits for the one running.
func (l *latest[T]) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.wg.Wait()
}

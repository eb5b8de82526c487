package cluster

import "sync"

// feed hands keyed values to one reader without ever making the writer
// wait. Values wait in a queue that holds at most one value per key: a value
// pushed for a key that is still queued replaces the queued one in place
// (through merge, when set), so a reader that falls behind receives each
// key's latest value, in the order the keys first changed, instead of every
// intermediate value, and the queue never holds more values than there are
// keys. Its goroutine moves values from the queue to ch one at a time; stop
// ends it and closes ch.
type feed[K comparable, V any] struct {
	ch    chan V
	merge func(queued, next V) V

	mu      sync.Mutex
	keys    []K // queue order
	pending map[K]V
	stopped bool

	wake chan struct{} // one slot: something was pushed
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

// newFeed starts a feed and its goroutine.
func newFeed[K comparable, V any](merge func(queued, next V) V) *feed[K, V] {
	f := &feed[K, V]{
		ch:      make(chan V),
		merge:   merge,
		pending: make(map[K]V),
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go f.run()
	return f
}

// push queues v for key k. It never blocks; after stop it does nothing.
func (f *feed[K, V]) push(k K, v V) {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return
	}
	if queued, ok := f.pending[k]; ok {
		if f.merge != nil {
			v = f.merge(queued, v)
		}
	} else {
		f.keys = append(f.keys, k)
	}
	f.pending[k] = v
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *feed[K, V]) pop() (V, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var zeroK K
	var zeroV V
	if len(f.keys) == 0 {
		return zeroV, false
	}
	k := f.keys[0]
	f.keys[0] = zeroK
	f.keys = f.keys[1:]
	if len(f.keys) == 0 {
		f.keys = nil
	}
	v := f.pending[k]
	delete(f.pending, k)
	return v, true
}

func (f *feed[K, V]) run() {
	defer close(f.done)
	defer close(f.ch)
	for {
		v, ok := f.pop()
		if !ok {
			select {
			case <-f.wake:
				continue
			case <-f.quit:
				return
			}
		}
		select {
		case f.ch <- v:
		case <-f.quit:
			return
		}
	}
}

// stop ends the goroutine, drops what is queued and closes ch. It is
// idempotent and returns once the goroutine has ended.
func (f *feed[K, V]) stop() {
	f.once.Do(func() {
		f.mu.Lock()
		f.stopped = true
		f.keys, f.pending = nil, nil
		f.mu.Unlock()
		close(f.quit)
	})
	<-f.done
}

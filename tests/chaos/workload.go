package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// receiverQueue is each consumer's prefetch per partition.
const receiverQueue = 100

// Workload produces unique messages to a stream and consumes them through
// one subscription, recording every operation.
type Workload struct {
	Name       string
	Stream     string
	Partitions int
	Mode       client.SubscriptionType
	// Keys spreads messages over this many keys (0: no key).
	Keys      int
	Producers int
	Consumers int
	// Interval paces each producer.
	Interval time.Duration
	// Burst, when above 0, makes the producers asynchronous and batched:
	// each Interval a producer queues Burst sends without waiting, and
	// its consumers ack without waiting for one ack before the next.
	Burst int
	// FirstProcess numbers this workload's clients in the history.
	FirstProcess int
	// Transient makes the clients come and go: each producer opens a
	// producer for each send and closes it, and each consumer subscribes
	// every Interval, receives until nothing comes for transientQuiet,
	// and closes; in between nothing is attached, and the partitions go
	// to sleep (--sleep-after).
	Transient bool
}

// SleepAfter is the --sleep-after the chaos cluster runs with: a
// Transient workload's clients come every three of these.
const SleepAfter = 2 * time.Second

// transientQuiet is how long a transient consumer waits for a message
// before it closes.
const transientQuiet = time.Second

// Create makes the workload's stream (3 replicas), and its tenant and
// fabric, retrying while the cluster settles.
func (w Workload) Create(ctx context.Context, url string) error {
	c, err := client.New(client.Options{URL: url, OperationTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := geofabric.ParseStream(w.Stream)
	if err != nil {
		return err
	}
	steps := []struct {
		do     func() error
		exists transport.ErrorCode
	}{
		{func() error { return c.CreateTenant(ctx, st.Tenant) }, transport.CodeTenantExists},
		{func() error { return c.CreateFabric(ctx, st.FabricName(), client.FabricOptions{}) }, transport.CodeFabricExists},
		{func() error { return c.CreateStream(ctx, w.Stream, w.Partitions, 3) }, transport.CodeStreamExists},
	}
	for _, step := range steps {
		if err := retryUntil(ctx, w.Stream, step.do, step.exists); err != nil {
			return err
		}
	}
	return nil
}

// retryUntil runs do until it succeeds or fails with exists.
func retryUntil(ctx context.Context, stream string, do func() error, exists transport.ErrorCode) error {
	for {
		err := do()
		if err == nil || transport.CodeOf(err) == exists {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create %s: %w", stream, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Produce runs the producers until ctx ends.
func (w Workload) Produce(ctx context.Context, url string, h *History) error {
	var wg sync.WaitGroup
	errs := make(chan error, w.Producers)
	for i := range w.Producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.producer(ctx, url, h, i); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

func (w Workload) producer(ctx context.Context, url string, h *History, i int) error {
	c, err := client.New(client.Options{URL: url, OperationTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	proc := w.FirstProcess + i
	if w.Transient {
		return w.produceTransient(ctx, c, h, i)
	}
	var p *client.Producer
	for p == nil {
		p, err = c.CreateProducer(ctx, client.ProducerOptions{Stream: w.Stream, SendTimeout: 10 * time.Second, DisableBatching: w.Burst == 0})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			h.Add(Op{Process: proc, Kind: Fail, F: "open", Offset: -1, Error: err.Error()})
		}
	}
	defer p.Close()
	if w.Burst > 0 {
		return w.produceAsync(ctx, h, p, i)
	}
	tick := time.NewTicker(w.Interval)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		w.sendOne(h, p, i, n)
	}
}

// sendOne sends producer i's n-th message through p and records it.
func (w Workload) sendOne(h *History, p *client.Producer, i, n int) {
	proc := w.FirstProcess + i
	v := fmt.Sprintf("%s-%d-%d", w.Name, i, n)
	key := ""
	if w.Keys > 0 {
		key = fmt.Sprint("k", n%w.Keys)
	}
	h.Add(Op{Process: proc, Kind: Invoke, F: "send", Value: v, Key: key, Offset: -1})
	// A send is given its own bound, not ctx: a send cut short by the end
	// of the run would be recorded as unknown for nothing.
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	id, err := p.Send(sctx, &client.ProducerMessage{Key: key, Payload: []byte(v)})
	cancel()
	if err != nil {
		h.Add(Op{Process: proc, Kind: Info, F: "send", Value: v, Key: key, Offset: -1, Error: err.Error()})
		return
	}
	h.Add(Op{Process: proc, Kind: OK, F: "send", Value: v, Key: key, Partition: id.Partition, Offset: int64(id.Offset)})
}

// produceTransient sends one message each Interval until ctx ends, each
// through a producer opened for it and closed after.
func (w Workload) produceTransient(ctx context.Context, c *client.Client, h *History, i int) error {
	proc := w.FirstProcess + i
	tick := time.NewTicker(w.Interval)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: w.Stream, SendTimeout: 10 * time.Second, DisableBatching: true})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			h.Add(Op{Process: proc, Kind: Fail, F: "open", Offset: -1, Error: err.Error()})
			continue
		}
		w.sendOne(h, p, i, n)
		p.Close()
	}
}

// produceAsync queues Burst sends each Interval until ctx ends, then waits
// for the outcome of every send queued.
func (w Workload) produceAsync(ctx context.Context, h *History, p *client.Producer, i int) error {
	proc := w.FirstProcess + i
	tick := time.NewTicker(w.Interval)
	defer tick.Stop()
	var outcomes sync.WaitGroup
	defer outcomes.Wait()
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		for range w.Burst {
			v := fmt.Sprintf("%s-%d-%d", w.Name, i, n)
			n++
			key := ""
			if w.Keys > 0 {
				key = fmt.Sprint("k", n%w.Keys)
			}
			h.Add(Op{Process: proc, Kind: Invoke, F: "send", Value: v, Key: key, Offset: -1})
			outcomes.Add(1)
			// Not ctx: a send queued before the end of the run keeps
			// its own bound (the producer's send timeout).
			p.SendAsync(context.Background(), &client.ProducerMessage{Key: key, Payload: []byte(v)}, func(id client.MessageID, _ *client.ProducerMessage, err error) {
				defer outcomes.Done()
				if err != nil {
					h.Add(Op{Process: proc, Kind: Info, F: "send", Value: v, Key: key, Offset: -1, Error: err.Error()})
					return
				}
				h.Add(Op{Process: proc, Kind: OK, F: "send", Value: v, Key: key, Partition: id.Partition, Offset: int64(id.Offset)})
			})
		}
	}
}

// Consume runs the consumers until ctx ends; progress is told each
// delivery.
func (w Workload) Consume(ctx context.Context, url string, h *History) error {
	var wg sync.WaitGroup
	errs := make(chan error, w.Consumers)
	for i := range w.Consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.consumer(ctx, url, h, i); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

func (w Workload) consumer(ctx context.Context, url string, h *History, i int) error {
	c, err := client.New(client.Options{URL: url, OperationTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	name := fmt.Sprintf("%s-c%d", w.Name, i)
	proc := w.FirstProcess + w.Producers + i
	if w.Transient {
		for ctx.Err() == nil {
			if err := w.consumeOnce(ctx, c, h, name, proc); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
			case <-time.After(w.Interval):
			}
		}
		return nil
	}
	var cons *client.Consumer
	for cons == nil {
		cons, err = c.Subscribe(ctx, client.ConsumerOptions{Stream: w.Stream, Subscription: "chaos", Type: w.Mode, Name: name,
			SubscriptionInitialPosition: client.Earliest, AckWithReceipt: true, ReceiverQueueSize: receiverQueue})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			h.Add(Op{Process: proc, Kind: Fail, F: "open", Consumer: name, Offset: -1, Error: err.Error()})
			select { // refused (an exclusive subscription held) or no leader yet
			case <-ctx.Done():
				return nil
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	defer cons.Close()
	// An asynchronous workload acks up to maxAcksInFlight messages at
	// once, each in its own goroutine, all waited for before Close.
	var acks sync.WaitGroup
	defer acks.Wait()
	inFlight := make(chan struct{}, maxAcksInFlight)
	for {
		m, err := cons.Receive(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("consumer %s: %w", name, err)
		}
		v := string(m.Payload)
		h.Add(Op{Process: proc, Kind: OK, F: "receive", Value: v, Key: m.Key, Partition: m.ID.Partition, Offset: int64(m.ID.Offset), Consumer: name})
		ack := func() { ackOne(ctx, h, cons, m, proc, name) }
		if w.Burst == 0 {
			ack()
			continue
		}
		select {
		case inFlight <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		acks.Go(func() {
			defer func() { <-inFlight }()
			ack()
		})
	}
}

// consumeOnce subscribes, receives and acks until nothing comes for
// transientQuiet, and closes (Transient).
func (w Workload) consumeOnce(ctx context.Context, c *client.Client, h *History, name string, proc int) error {
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: w.Stream, Subscription: "chaos", Type: w.Mode, Name: name,
		SubscriptionInitialPosition: client.Earliest, AckWithReceipt: true, ReceiverQueueSize: receiverQueue})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		h.Add(Op{Process: proc, Kind: Fail, F: "open", Consumer: name, Offset: -1, Error: err.Error()})
		return nil
	}
	defer cons.Close()
	for {
		rctx, cancel := context.WithTimeout(ctx, transientQuiet)
		m, err := cons.Receive(rctx)
		cancel()
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("consumer %s: %w", name, err)
		}
		h.Add(Op{Process: proc, Kind: OK, F: "receive", Value: string(m.Payload), Key: m.Key, Partition: m.ID.Partition, Offset: int64(m.ID.Offset), Consumer: name})
		ackOne(ctx, h, cons, m, proc, name)
	}
}

// ackOne acknowledges m and records the ack and its outcome.
func ackOne(ctx context.Context, h *History, cons *client.Consumer, m *client.Message, proc int, name string) {
	v := string(m.Payload)
	h.Add(Op{Process: proc, Kind: Invoke, F: "ack", Value: v, Key: m.Key, Partition: m.ID.Partition, Offset: int64(m.ID.Offset), Consumer: name})
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := cons.Ack(actx, m)
	cancel()
	kind, msg := OK, ""
	if err != nil {
		kind, msg = Info, err.Error()
	}
	h.Add(Op{Process: proc, Kind: kind, F: "ack", Value: v, Key: m.Key, Partition: m.ID.Partition, Offset: int64(m.ID.Offset), Consumer: name, Error: msg})
}

// maxAcksInFlight bounds the acks one consumer of an asynchronous
// workload waits for at once.
const maxAcksInFlight = 64

// Undelivered follows a history as it grows and counts the acknowledged
// sends not yet received, reading each record once.
type Undelivered struct {
	next      int
	acked     map[string]bool
	delivered map[string]bool
	missing   int
}

// Update reads the records added since the last call and returns how many
// acknowledged sends are undelivered and how many records it has read.
func (u *Undelivered) Update(h *History) (missing, records int) {
	if u.acked == nil {
		u.acked, u.delivered = map[string]bool{}, map[string]bool{}
	}
	for _, op := range h.OpsFrom(u.next) {
		u.next++
		switch {
		case op.F == "send" && op.Kind == OK && !u.acked[op.Value]:
			u.acked[op.Value] = true
			if !u.delivered[op.Value] {
				u.missing++
			}
		case op.F == "receive" && op.Kind == OK && !u.delivered[op.Value]:
			u.delivered[op.Value] = true
			if u.acked[op.Value] {
				u.missing--
			}
		}
	}
	return u.missing, u.next
}

// own returns the workload's operations.
func (w Workload) own(ops []Op) []Op {
	var out []Op
	for _, op := range ops {
		if op.Process >= w.FirstProcess && op.Process < w.FirstProcess+w.Producers+w.Consumers {
			out = append(out, op)
		}
	}
	return out
}

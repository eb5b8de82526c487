package broker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/fabriq-io/fabriq/storage"
	"github.com/fabriq-io/fabriq/subscription"
	"github.com/fabriq-io/fabriq/transport"
)

const (
	// maxPush is the most messages one Message frame carries.
	maxPush = 500
	// maxPushBytes bounds the payload bytes one Message frame carries, past
	// its first message.
	maxPushBytes = 1 << 20
	// deliverTimeout bounds one push to a consumer's connection.
	deliverTimeout = 10 * time.Second
	// sharedBurst is how many messages a shared subscription sends one
	// consumer before moving on (SH-3).
	sharedBurst = 20
)

// outbox is where a consumer's messages go: its session.
type outbox interface {
	// deliver sends a Message frame; an error means the connection is gone.
	deliver(ctx context.Context, m *transport.Message) error
	// evictConsumer forgets a consumer the partition dropped and tells the
	// client (CloseConsumer), which then looks the leader up again.
	evictConsumer(id uint64)
	// activeChange tells a failover consumer it became active or inactive
	// (FO-6).
	activeChange(id uint64, active bool)
	// probe pings the client and reports whether it answered in time.
	probe(timeout time.Duration) bool
	// drop closes the client's connection.
	drop()
}

// consumer is a consumer attached to a subscription on the partition's
// leader.
type consumer struct {
	id       uint64
	name     string
	priority int32
	out      outbox
	permits  int64
	unacked  int
	active   bool // failover: this consumer was last told it is active
}

// dispatcher sends a subscription's messages to its consumers. It runs on
// the partition's leader only, and holds no replicated state: the cursor
// is the state machine's, so a new leader's dispatcher starts from it.
//
// The modes differ only in which consumer gets the next frame: exclusive
// has one consumer (EX-1); shared goes round robin among the consumers
// with permits, best priority level first, 20 messages at a time (SH-3);
// failover sends only to the master (FO-1..FO-4). Key_shared is not here
// yet.
type dispatcher struct {
	p    *partition
	name string
	mode transport.SubscriptionMode
	// durable is false for a reader (SUB-5): it has no cursor in the state
	// machine and keeps nothing but its read position.
	durable bool

	mu        sync.Mutex
	consumers []*consumer
	readPos   uint64               // next offset to read from the log
	pending   map[uint64]*consumer // delivered and not acknowledged
	resend    []uint64             // offsets to deliver again before reading on
	// redelivered counts the deliveries after the first of unacknowledged
	// offsets. It lives on the leader only: after a leader change counts
	// start again (replicating them is SH-7's work).
	redelivered map[uint64]uint32
	epoch       uint64 // bumped whenever readPos is reset

	// rr is the shared mode's round-robin position.
	rr int
	// partition and stream place a failover subscription's partition
	// (index -1 for an unpartitioned stream).
	partition int
	stream    string

	wake chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
}

func newDispatcher(p *partition, name string, mode transport.SubscriptionMode, durable bool, start uint64) *dispatcher {
	return &dispatcher{
		p:           p,
		name:        name,
		mode:        mode,
		durable:     durable,
		readPos:     start,
		pending:     map[uint64]*consumer{},
		redelivered: map[uint64]uint32{},
		wake:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
	}
}

func (d *dispatcher) start() {
	d.wg.Add(1)
	go d.run()
}

// close stops the loop and waits for it.
func (d *dispatcher) close() {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	d.wg.Wait()
}

// notify wakes the loop without blocking.
func (d *dispatcher) notify() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *dispatcher) run() {
	defer d.wg.Done()
	for {
		select {
		case <-d.stop:
			return
		case <-d.wake:
		}
		for d.dispatchOnce() {
			select {
			case <-d.stop:
				return
			default:
			}
		}
	}
}

// add attaches a consumer. Exclusive allows one (EX-1).
func (d *dispatcher) add(c *consumer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.consumers) > 0 && d.mode == transport.Exclusive {
		return wireError(transport.CodeConsumerBusy, msgExclusiveBusy)
	}
	first := len(d.consumers) == 0
	d.consumers = append(d.consumers, c)
	if first {
		d.rewind()
	}
	d.electLocked()
	d.notify()
	return nil
}

// master returns the failover master (FO-2..FO-4), nil in other modes or
// without consumers.
func (d *dispatcher) master() *consumer {
	if d.mode != transport.Failover || len(d.consumers) == 0 {
		return nil
	}
	cands := make([]subscription.Candidate, len(d.consumers))
	for i, c := range d.consumers {
		cands[i] = subscription.Candidate{Name: c.name, Priority: int(c.priority)}
	}
	name := subscription.Master(cands, d.partition, d.stream)
	for _, c := range d.consumers {
		if c.name == name {
			return c
		}
	}
	return nil
}

// electLocked tells failover consumers whether they are active (FO-6), and
// restarts delivery at the first unacknowledged message when the master
// changes (FO-5).
func (d *dispatcher) electLocked() {
	if d.mode != transport.Failover {
		return
	}
	m := d.master()
	changed := false
	for _, c := range d.consumers {
		active := c == m
		if active != c.active {
			c.active = active
			c.out.activeChange(c.id, active)
			changed = changed || active
		}
	}
	if changed {
		d.rewind()
	}
}

// pick returns the consumer that gets the next frame and how many
// messages it may take, or nil.
func (d *dispatcher) pick() (*consumer, int) {
	switch d.mode {
	case transport.Failover:
		if m := d.master(); m != nil && m.permits > 0 {
			return m, int(min(m.permits, maxPush))
		}
		return nil, 0
	case transport.Shared:
		best := int32(-1)
		for _, c := range d.consumers {
			if c.permits > 0 && (best < 0 || c.priority < best) {
				best = c.priority
			}
		}
		if best < 0 {
			return nil, 0
		}
		for range d.consumers {
			d.rr = (d.rr + 1) % len(d.consumers)
			if c := d.consumers[d.rr]; c.permits > 0 && c.priority == best {
				return c, int(min(c.permits, sharedBurst))
			}
		}
		return nil, 0
	}
	for _, c := range d.consumers {
		if c.permits > 0 {
			return c, int(min(c.permits, maxPush))
		}
	}
	return nil, 0
}

// rewind restarts delivery at the first unacknowledged message (EX-3). A
// reader has no cursor: it goes on from where it is.
func (d *dispatcher) rewind() {
	if !d.durable {
		return
	}
	c, _, ok := d.p.fsm.cursor(d.name)
	if !ok {
		return
	}
	d.readPos = c.NextUnacked(c.Floor)
	clear(d.pending)
	clear(d.redelivered)
	d.resend = nil
	for _, c := range d.consumers {
		c.unacked = 0
	}
	d.epoch++
}

// remove detaches a consumer; what it held unacknowledged goes back to the
// dispatcher. It reports whether the subscription has no consumer left.
func (d *dispatcher) remove(c *consumer) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := slices.Index(d.consumers, c)
	if i < 0 {
		return len(d.consumers) == 0
	}
	d.consumers = slices.Delete(d.consumers, i, i+1)
	for off, holder := range d.pending {
		if holder == c {
			delete(d.pending, off)
			d.resend = append(d.resend, off)
		}
	}
	slices.Sort(d.resend)
	d.electLocked()
	d.notify()
	return len(d.consumers) == 0
}

// holder returns the first attached consumer, nil if none.
func (d *dispatcher) holder() *consumer {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.consumers) == 0 {
		return nil
	}
	return d.consumers[0]
}

// detachAll removes every consumer and returns them.
func (d *dispatcher) detachAll() []*consumer {
	d.mu.Lock()
	defer d.mu.Unlock()
	cs := d.consumers
	d.consumers = nil
	clear(d.pending)
	d.resend = nil
	return cs
}

// consumerCount returns how many consumers are attached.
func (d *dispatcher) consumerCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.consumers)
}

// flow grants a consumer permits (SH-2).
func (d *dispatcher) flow(c *consumer, permits int64) {
	d.mu.Lock()
	c.permits = min(c.permits+permits, maxPermits)
	d.mu.Unlock()
	d.notify()
}

// acked forgets delivered messages once their acks are committed.
func (d *dispatcher) acked(offsets []uint64, cumulative bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if cumulative && len(offsets) > 0 {
		top := offsets[len(offsets)-1]
		for off, c := range d.pending {
			if off <= top {
				delete(d.pending, off)
				c.unacked--
			}
		}
		for off := range d.redelivered {
			if off <= top {
				delete(d.redelivered, off)
			}
		}
		return
	}
	for _, off := range offsets {
		if c, ok := d.pending[off]; ok {
			delete(d.pending, off)
			c.unacked--
		}
		delete(d.redelivered, off)
	}
}

// redeliver sends the given unacknowledged messages again, or all of them
// when offsets is empty.
func (d *dispatcher) redeliver(c *consumer, offsets []uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(offsets) == 0 {
		for off, holder := range d.pending {
			if holder == c {
				offsets = append(offsets, off)
			}
		}
	}
	for _, off := range offsets {
		if holder, ok := d.pending[off]; ok && holder == c {
			delete(d.pending, off)
			c.unacked--
			d.resend = append(d.resend, off)
		}
	}
	slices.Sort(d.resend)
	d.resend = slices.Compact(d.resend)
	d.notify()
}

// seekReader moves a reader to an offset: readers have no cursor to reset.
func (d *dispatcher) seekReader(offset uint64) {
	d.mu.Lock()
	d.readPos = offset
	d.resend = nil
	d.epoch++
	d.mu.Unlock()
	d.notify()
}

// reset restarts every consumer from the cursor after a seek (CUR-4).
func (d *dispatcher) reset() {
	d.mu.Lock()
	d.rewind()
	d.mu.Unlock()
	d.notify()
}

// dispatchOnce sends one frame of messages if a consumer has permits and
// there is something to send; it reports whether it sent anything.
func (d *dispatcher) dispatchOnce() bool {
	d.mu.Lock()
	c, limit := d.pick()
	if c == nil {
		d.mu.Unlock()
		return false
	}
	epoch, readPos := d.epoch, d.readPos
	resend := slices.Clone(d.resend)
	d.mu.Unlock()

	// Read outside the lock: the log has its own.
	var batch []storage.Message
	var used []uint64 // offsets taken off the resend list
	for _, off := range resend {
		if len(batch) == limit {
			break
		}
		used = append(used, off)
		msgs, err := d.p.log.Read(off, 1, maxPushBytes)
		if err != nil || len(msgs) == 0 {
			continue // trimmed by retention: nothing to resend
		}
		batch = append(batch, msgs[0])
	}
	resent := len(batch)
	if len(batch) < limit {
		msgs, err := d.p.log.Read(readPos, limit-len(batch), maxPushBytes)
		if errors.Is(err, storage.ErrTrimmed) {
			info := d.p.log.Info()
			d.mu.Lock()
			if d.epoch == epoch && d.readPos < info.StartOffset {
				d.readPos = info.StartOffset
			}
			d.mu.Unlock()
			return true
		}
		if err != nil {
			d.p.logger.Error("dispatcher read failed", "subscription", d.name, "offset", readPos, "err", err)
			return false
		}
		batch = append(batch, msgs...)
	}
	if len(batch) == 0 && len(used) == 0 {
		return false
	}

	d.mu.Lock()
	if d.epoch != epoch || !slices.Contains(d.consumers, c) {
		d.mu.Unlock()
		return true // things moved while we read: start over
	}
	frame := &transport.Message{ConsumerID: c.id}
	next := d.readPos
	// Remove exactly what was taken: others may have been added since.
	d.resend = slices.DeleteFunc(d.resend, func(o uint64) bool { return slices.Contains(used, o) })
	for i, m := range batch {
		if i >= resent {
			next = m.Offset + 1
		}
		var count uint32
		if i < resent && d.durable {
			d.redelivered[m.Offset]++
			count = d.redelivered[m.Offset]
		}
		if d.durable {
			if _, held := d.pending[m.Offset]; held || d.p.fsm.isAcked(d.name, m.Offset) {
				continue
			}
			d.pending[m.Offset] = c
			c.unacked++
		}
		frame.Messages = append(frame.Messages, transport.Delivered{
			Offset:          m.Offset,
			RedeliveryCount: count,
			Data: transport.MessageData{
				Key:          m.Key,
				OrderingKey:  m.OrderingKey,
				Properties:   m.Properties,
				EventTime:    m.EventTime,
				PublishTime:  m.PublishTime,
				ProducerName: m.ProducerName,
				SequenceID:   m.SequenceID,
				Payload:      m.Payload,
			},
		})
	}
	d.readPos = next
	c.permits -= int64(len(frame.Messages))
	d.mu.Unlock()
	if len(frame.Messages) == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), deliverTimeout)
	defer cancel()
	if err := c.out.deliver(ctx, frame); err != nil {
		// The session notices its connection is gone and removes the
		// consumer, which puts these messages back.
		d.p.logger.Debug("delivery failed", "subscription", d.name, "consumer", c.name, "err", err)
	}
	return true
}

// describe reports the attached consumers.
func (d *dispatcher) describe() []transport.ConsumerInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]transport.ConsumerInfo, 0, len(d.consumers))
	for i, c := range d.consumers {
		role := ""
		switch {
		case d.mode == transport.Exclusive && i == 0:
			role = "active"
		case d.mode == transport.Failover && c.active:
			role = "master"
		case d.mode == transport.Failover:
			role = "standby"
		}
		out = append(out, transport.ConsumerInfo{Name: c.name, Role: role, Unacked: int64(c.unacked), Permits: c.permits})
	}
	return out
}

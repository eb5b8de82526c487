package broker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/fabriq-io/fabriq/storage"
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
)

// outbox is where a consumer's messages go: its session.
type outbox interface {
	// deliver sends a Message frame; an error means the connection is gone.
	deliver(ctx context.Context, m *transport.Message) error
	// evictConsumer forgets a consumer the partition dropped and tells the
	// client (CloseConsumer), which then looks the leader up again.
	evictConsumer(id uint64)
}

// consumer is a consumer attached to a subscription on the partition's
// leader.
type consumer struct {
	id      uint64
	name    string
	out     outbox
	permits int64
	unacked int
}

// dispatcher sends a subscription's messages to its consumers. It runs on
// the partition's leader only, and holds no replicated state: the cursor
// is the state machine's, so a new leader's dispatcher starts from it.
//
// This is the exclusive mode (one consumer; EX-1..EX-5); the other modes
// plug in as other choices of consumer and of what to resend.
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
	epoch     uint64               // bumped whenever readPos is reset

	wake chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
}

func newDispatcher(p *partition, name string, mode transport.SubscriptionMode, durable bool, start uint64) *dispatcher {
	return &dispatcher{
		p:       p,
		name:    name,
		mode:    mode,
		durable: durable,
		readPos: start,
		pending: map[uint64]*consumer{},
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
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
	if len(d.consumers) > 0 {
		return wireError(transport.CodeConsumerBusy, msgExclusiveBusy)
	}
	d.consumers = append(d.consumers, c)
	d.rewind()
	d.notify()
	return nil
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
	d.notify()
	return len(d.consumers) == 0
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
	c.permits += permits
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
		return
	}
	for _, off := range offsets {
		if c, ok := d.pending[off]; ok {
			delete(d.pending, off)
			c.unacked--
		}
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
	var c *consumer
	for _, cand := range d.consumers {
		if cand.permits > 0 {
			c = cand
			break
		}
	}
	if c == nil {
		d.mu.Unlock()
		return false
	}
	limit := int(min(c.permits, maxPush))
	epoch, readPos := d.epoch, d.readPos
	resend := slices.Clone(d.resend)
	d.mu.Unlock()

	// Read outside the lock: the log has its own.
	var batch []storage.Message
	taken := 0
	for _, off := range resend {
		if len(batch) == limit {
			break
		}
		msgs, err := d.p.log.Read(off, 1, maxPushBytes)
		if err != nil || len(msgs) == 0 {
			continue // trimmed by retention: nothing to resend
		}
		batch = append(batch, msgs[0])
		taken++
	}
	resent := taken
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
	if len(batch) == 0 && resent == 0 {
		return false
	}

	d.mu.Lock()
	if d.epoch != epoch || !slices.Contains(d.consumers, c) {
		d.mu.Unlock()
		return true // things moved while we read: start over
	}
	frame := &transport.Message{ConsumerID: c.id}
	next := d.readPos
	d.resend = d.resend[min(resent, len(d.resend)):]
	for i, m := range batch {
		if i >= resent {
			next = m.Offset + 1
		}
		if d.durable {
			if _, held := d.pending[m.Offset]; held || d.p.fsm.isAcked(d.name, m.Offset) {
				continue
			}
			d.pending[m.Offset] = c
			c.unacked++
		}
		frame.Messages = append(frame.Messages, transport.Delivered{
			Offset: m.Offset,
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
		if d.mode == transport.Exclusive && i == 0 {
			role = "active"
		}
		out = append(out, transport.ConsumerInfo{Name: c.name, Role: role, Unacked: int64(c.unacked), Permits: c.permits})
	}
	return out
}

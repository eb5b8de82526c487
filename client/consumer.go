package client

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// SubscriptionType is a subscription's mode.
type SubscriptionType int

// Subscription types; Exclusive is the default (SUB-3).
const (
	Exclusive SubscriptionType = iota
	Shared
	Failover
	KeyShared
)

// String returns the type as the CLI writes it.
func (t SubscriptionType) String() string {
	switch t {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	case Failover:
		return "failover"
	case KeyShared:
		return "key_shared"
	}
	return fmt.Sprintf("SubscriptionType(%d)", int(t))
}

// InitialPosition is where a new subscription starts (CUR-3).
type InitialPosition int

// Initial positions; Latest is the default.
const (
	Latest InitialPosition = iota
	Earliest
)

// ConsumerOptions configures a consumer; zero fields take their defaults.
type ConsumerOptions struct {
	// Stream is the stream, named as in ProducerOptions.Stream.
	Stream string
	// Subscription names the subscription; required.
	Subscription string
	// Type is the subscription's mode. Default Exclusive.
	Type SubscriptionType
	// Name is the consumer's name. Default: generated.
	Name string
	// SubscriptionInitialPosition applies when the subscription is
	// created. Default Latest.
	SubscriptionInitialPosition InitialPosition
	// ReceiverQueueSize is how many messages each partition may push ahead
	// of Receive (SH-2). Default 1000.
	ReceiverQueueSize int
	// AckWithReceipt makes Ack wait until the broker committed the ack.
	AckWithReceipt bool
	// NackRedeliveryDelay is how long after Nack a message is delivered
	// again (SH-6). Default 1 minute.
	NackRedeliveryDelay time.Duration
	// AckTimeout, when set, redelivers a message that stayed unacked that
	// long after Receive returned it (SH-6). Default off.
	AckTimeout time.Duration
	// PriorityLevel ranks shared and failover consumers: 0 is the best
	// level, served first (SH-3, FO-2).
	PriorityLevel int
	// KeySharedPolicy configures a key_shared consumer; nil is auto_split
	// in order.
	KeySharedPolicy *KeySharedPolicy
	// DLQ, when set, sends messages delivered too often to a dead-letter
	// stream (SH-7).
	DLQ *DLQPolicy
	// EventListener hears when a failover consumer becomes active or
	// inactive on a partition (FO-6).
	EventListener ConsumerEventListener
}

// Consumer receives messages of a subscription from every partition of a
// stream.
type Consumer struct {
	c      *Client
	opts   ConsumerOptions
	stream geofabric.Stream
	name   string
	parts  []*partitionConsumer

	mu    sync.Mutex
	queue []*queued
	ready chan struct{} // signalled when the queue gains a message
	// reader is set for a Reader: a non-durable subscription (SUB-5).
	reader *readerStart
	closed bool
	failed error // set by fail; Receive returns it
	// nacks are the pending Nack timers, stopped by Close.
	nacks   map[*time.Timer]struct{}
	done    chan struct{}
	chOnce  sync.Once
	ch      chan *Message
	pumpWG  sync.WaitGroup
	closing atomic.Bool
	// bgWG owns the event and ack-timeout goroutines.
	bgWG          sync.WaitGroup
	pendingEvents []event
	eventReady    chan struct{}
	unacked       map[MessageID]time.Time // AckTimeout's watch
	dlqMu         sync.Mutex
	dlq           *Producer
}

// queued is a received message with the epoch of the subscription it
// came from: messages of an older epoch are dropped, the broker sends
// them again.
type queued struct {
	m     *Message
	pc    *partitionConsumer
	epoch uint64
}

// Subscribe attaches a consumer to every partition of a stream.
func (c *Client) Subscribe(ctx context.Context, opts ConsumerOptions) (*Consumer, error) {
	return c.subscribe(ctx, opts, nil)
}

func (c *Client) subscribe(ctx context.Context, opts ConsumerOptions, reader *readerStart) (*Consumer, error) {
	st, err := geofabric.ParseStream(opts.Stream)
	if err != nil {
		return nil, err
	}
	if err := geofabric.CheckClientName("subscription", opts.Subscription); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if opts.Name != "" {
		if err := geofabric.CheckClientName("consumer", opts.Name); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
	}
	if opts.ReceiverQueueSize <= 0 {
		opts.ReceiverQueueSize = 1000
	}
	if opts.NackRedeliveryDelay <= 0 {
		opts.NackRedeliveryDelay = time.Minute
	}
	if err := validateConsumerOptions(&opts); err != nil {
		return nil, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	n, err := c.partitions(ctx, st)
	if err != nil {
		return nil, err
	}
	cons := &Consumer{c: c, opts: opts, stream: st, name: opts.Name, reader: reader, ready: make(chan struct{}, 1), done: make(chan struct{}),
		nacks: map[*time.Timer]struct{}{}, eventReady: make(chan struct{}, 1), unacked: map[MessageID]time.Time{}}
	if cons.name == "" {
		cons.name = randomName(c.opts.Name)
	}
	cons.parts, err = attachParts(ctx, c, st, n, 1,
		func(name string, i int) *partitionConsumer { return newPartitionConsumer(cons, name, i) },
		func(ctx context.Context, pc *partitionConsumer) error { return pc.connect(ctx) })
	if err != nil {
		return nil, err
	}
	if err := c.register(cons); err != nil {
		cons.closeParts()
		return nil, err
	}
	if opts.EventListener != nil {
		cons.bgWG.Add(1)
		go cons.events()
	}
	if opts.AckTimeout > 0 {
		cons.bgWG.Add(1)
		go cons.ackTimeouts()
	}
	return cons, nil
}

// Name returns the consumer's name.
func (cons *Consumer) Name() string { return cons.name }

// Subscription returns the subscription's name.
func (cons *Consumer) Subscription() string { return cons.opts.Subscription }

func (cons *Consumer) push(q *queued) {
	cons.mu.Lock()
	cons.queue = append(cons.queue, q)
	cons.mu.Unlock()
	select {
	case cons.ready <- struct{}{}:
	default:
	}
}

// Receive returns the next message, waiting until one arrives or ctx ends.
func (cons *Consumer) Receive(ctx context.Context) (*Message, error) {
	for {
		cons.mu.Lock()
		if cons.closed {
			cons.mu.Unlock()
			return nil, ErrClosed
		}
		if cons.failed != nil {
			err := cons.failed
			cons.mu.Unlock()
			return nil, err
		}
		var q *queued
		if len(cons.queue) > 0 {
			q = cons.queue[0]
			cons.queue[0] = nil
			cons.queue = cons.queue[1:]
		}
		more := len(cons.queue) > 0
		cons.mu.Unlock()
		if more {
			select {
			case cons.ready <- struct{}{}:
			default:
			}
		}
		if q != nil {
			// Outside the lock: it may send a Flow.
			if !q.pc.consumed(q.epoch, q.m.ID.Offset) {
				continue
			}
			if d := cons.opts.DLQ; d != nil && q.m.RedeliveryCount >= d.MaxDeliveries {
				if err := cons.deadLetter(ctx, q.m); err != nil {
					// Kept unacked: it comes back and is tried again.
					cons.c.logger.Warn("dead-letter failed; the message will be redelivered", "message", q.m.ID, "err", err)
					cons.Nack(q.m)
				}
				continue
			}
			cons.track(q.m.ID)
			return q.m, nil
		}
		select {
		case <-cons.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-cons.done:
			return nil, ErrClosed
		}
	}
}

// fail records an error no reconnect can cure (the stream or subscription
// is gone, another consumer holds it): Receive returns it from now on.
func (cons *Consumer) fail(err error) {
	cons.mu.Lock()
	if cons.failed == nil {
		cons.failed = err
	}
	cons.mu.Unlock()
	select {
	case cons.ready <- struct{}{}:
	default:
	}
}

// Chan returns a channel that receives the consumer's messages; it closes
// when the consumer does. Use either Chan or Receive, not both.
func (cons *Consumer) Chan() <-chan *Message {
	cons.chOnce.Do(func() {
		cons.ch = make(chan *Message)
		cons.pumpWG.Add(1)
		go func() {
			defer cons.pumpWG.Done()
			defer close(cons.ch)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				select {
				case <-cons.done:
					cancel()
				case <-ctx.Done():
				}
			}()
			for {
				m, err := cons.Receive(ctx)
				if err != nil {
					return
				}
				select {
				case cons.ch <- m:
				case <-cons.done:
					return
				}
			}
		}()
	})
	return cons.ch
}

func (cons *Consumer) part(id MessageID) (*partitionConsumer, error) {
	if id.Partition < 0 || id.Partition >= len(cons.parts) || id.Stream != cons.stream.String() {
		return nil, fmt.Errorf("client: message id %s is not of stream %s", id, cons.stream)
	}
	return cons.parts[id.Partition], nil
}

// Ack acknowledges a message.
func (cons *Consumer) Ack(ctx context.Context, m *Message) error { return cons.AckID(ctx, m.ID) }

// AckID acknowledges a message by id.
func (cons *Consumer) AckID(ctx context.Context, id MessageID) error {
	pc, err := cons.part(id)
	if err != nil {
		return err
	}
	cons.untrack(id, false)
	return pc.ack(ctx, id.Offset, false)
}

// AckCumulative acknowledges a message and every message before it on its
// partition. Shared and key_shared subscriptions refuse it (SH-1, KS-5).
func (cons *Consumer) AckCumulative(ctx context.Context, m *Message) error {
	if cons.opts.Type == Shared || cons.opts.Type == KeyShared {
		return fmt.Errorf("%w: cumulative ack on a %s subscription", ErrNotAllowed, cons.opts.Type)
	}
	pc, err := cons.part(m.ID)
	if err != nil {
		return err
	}
	cons.untrack(m.ID, true)
	return pc.ack(ctx, m.ID.Offset, true)
}

// Nack asks for a message to be delivered again, after
// NackRedeliveryDelay (SH-6).
func (cons *Consumer) Nack(m *Message) {
	pc, err := cons.part(m.ID)
	if err != nil {
		return
	}
	cons.untrack(m.ID, false)
	cons.mu.Lock()
	defer cons.mu.Unlock()
	if cons.closed {
		return
	}
	var t *time.Timer
	// The timer's function takes the lock, so it sees t set.
	t = time.AfterFunc(cons.opts.NackRedeliveryDelay, func() {
		cons.mu.Lock()
		delete(cons.nacks, t)
		closed := cons.closed
		cons.mu.Unlock()
		if !closed {
			pc.nack(m.ID.Offset)
		}
	})
	cons.nacks[t] = struct{}{}
}

// Seek moves the subscription of the message's partition so that the
// message (inclusive) is the next delivered (CUR-4).
func (cons *Consumer) Seek(ctx context.Context, id MessageID) error {
	pc, err := cons.part(id)
	if err != nil {
		return err
	}
	return pc.seek(ctx, &transport.Seek{Offset: id.Offset})
}

// SeekByTime moves every partition's subscription to the first message
// published at or after t.
func (cons *Consumer) SeekByTime(ctx context.Context, t time.Time) error {
	for _, pc := range cons.parts {
		if err := pc.seek(ctx, &transport.Seek{ByTime: true, PublishTime: t.UnixMilli()}); err != nil {
			return err
		}
	}
	return nil
}

// Unsubscribe deletes the subscription on every partition, then closes
// the consumer (SUB-4).
func (cons *Consumer) Unsubscribe(ctx context.Context) error {
	for _, pc := range cons.parts {
		if err := pc.unsubscribe(ctx); err != nil {
			return err
		}
	}
	return cons.Close()
}

// Close detaches the consumer; what it received and did not acknowledge
// is delivered again to the subscription's next consumer.
func (cons *Consumer) Close() error {
	if cons.closing.Swap(true) {
		return nil
	}
	cons.mu.Lock()
	cons.closed = true
	cons.queue = nil
	for t := range cons.nacks {
		t.Stop()
	}
	clear(cons.nacks)
	cons.mu.Unlock()
	close(cons.done)
	cons.closeParts()
	cons.pumpWG.Wait()
	cons.bgWG.Wait()
	cons.dlqMu.Lock()
	if cons.dlq != nil {
		cons.dlq.Close()
	}
	cons.dlqMu.Unlock()
	cons.c.unregister(cons)
	return nil
}

func (cons *Consumer) closeParts() {
	for _, pc := range cons.parts {
		pc.close()
	}
}

// partitionConsumer is a consumer on one partition.
type partitionConsumer struct {
	cons      *Consumer
	partition string
	index     int
	lost      chan *cnx
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	mu    sync.Mutex
	x     *cnx
	id    uint64
	epoch uint64
	taken int // messages received by the app since the last Flow
	// next is, for a reader, the offset to resume at after a reconnect;
	// hasNext says it is set.
	next    uint64
	hasNext bool
	closed  bool
	active  atomic.Bool

	// acks are individual acks waiting to go in one frame (ackGroupMax,
	// ackGroupDelay); ackTimer sends them, ackMu guards both.
	ackMu    sync.Mutex
	acks     []uint64
	ackTimer *time.Timer
}

// Individual acks without receipts are grouped, as Pulsar clients group
// them: a partition consumer sends its waiting acks in one frame once
// ackGroupMax wait or ackGroupDelay after the first. An ack with a
// receipt, a cumulative ack and Close send the waiting ones first. An ack
// lost with its connection is redelivered, as before.
const (
	ackGroupMax   = 1000
	ackGroupDelay = 5 * time.Millisecond
)

func newPartitionConsumer(cons *Consumer, partition string, index int) *partitionConsumer {
	ctx, cancel := context.WithCancel(context.Background())
	return &partitionConsumer{cons: cons, partition: partition, index: index, lost: make(chan *cnx, 1), ctx: ctx, cancel: cancel}
}

func (pc *partitionConsumer) start() {
	pc.wg.Add(1)
	go pc.loop()
}

// connect looks up the leader, subscribes and grants the first permits.
func (pc *partitionConsumer) connect(ctx context.Context) error {
	c := pc.cons.c
	o := &pc.cons.opts
	var x *cnx
	var id uint64
	err := c.atLeader(ctx, pc.partition, func(at *cnx) error {
		x, id = at, c.requestID()
		if !x.addConsumer(id, pc) {
			return errConnLost
		}
		_, err := x.request(ctx, pc.subscribe(id))
		if err != nil {
			x.removeConsumer(id)
			if ctx.Err() != nil {
				// Given up unanswered: the broker may still attach it.
				x.abandonConsumer(id)
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	if x.consumer(id) != pc {
		// The broker closed it while the subscribe was answered (its
		// partition moved): attach again.
		return errConnLost
	}
	pc.mu.Lock()
	if pc.closed {
		pc.mu.Unlock()
		x.removeConsumer(id)
		x.abandonConsumer(id)
		return ErrClosed
	}
	pc.x, pc.id = x, id
	pc.epoch++
	pc.taken = 0
	pc.mu.Unlock()
	return x.send(ctx, &transport.Flow{ConsumerID: id, Permits: int64(o.ReceiverQueueSize)})
}

// subscribe is the Subscribe request of consumer id on this partition.
func (pc *partitionConsumer) subscribe(id uint64) *transport.Subscribe {
	c := pc.cons.c
	o := &pc.cons.opts
	sub := &transport.Subscribe{
		RequestID:       c.requestID(),
		ConsumerID:      id,
		Stream:          pc.partition,
		Subscription:    o.Subscription,
		Mode:            transport.SubscriptionMode(o.Type),
		ConsumerName:    pc.cons.name,
		InitialPosition: transport.InitialPosition(o.SubscriptionInitialPosition),
		PriorityLevel:   int32(o.PriorityLevel),
		KeyShared:       keySharedWire(o.KeySharedPolicy),
	}
	if r := pc.cons.reader; r != nil {
		sub.NonDurable = true
		pc.mu.Lock()
		switch {
		case pc.hasNext:
			start := pc.next
			sub.StartOffset = &start
		case r.id != nil && r.id.Partition == pc.index:
			start := r.id.Offset
			sub.StartOffset = &start
		}
		pc.mu.Unlock()
	}
	return sub
}

func (pc *partitionConsumer) loop() {
	defer pc.wg.Done()
	for {
		select {
		case <-pc.ctx.Done():
			return
		case x := <-pc.lost:
			pc.mu.Lock()
			stale := pc.x != x
			if !stale {
				pc.x = nil
			}
			pc.mu.Unlock()
			if stale {
				continue
			}
			for n := 0; ; n++ {
				ctx, cancel := context.WithTimeout(pc.ctx, pc.cons.c.opts.OperationTimeout)
				err := pc.connect(ctx)
				cancel()
				if err == nil {
					break
				}
				if pc.ctx.Err() != nil {
					return
				}
				level := slog.LevelDebug
				if (n+1)%reconnectWarnEvery == 0 {
					level = slog.LevelWarn
				}
				pc.cons.c.logger.Log(pc.ctx, level, "consumer reconnect failed", "partition", pc.partition, "attempt", n+1, "err", err)
				// Busy may be this consumer's own old connection, which the
				// broker has not seen die yet: that clears up.
				if code := transport.CodeOf(err); !retryable(err) && code != transport.CodeConsumerBusy && code != transport.CodeSubscriptionBusy {
					pc.cons.fail(fmt.Errorf("client: consumer of %s cannot reattach: %w", pc.partition, err))
					return
				}
				if backoff(pc.ctx, n) != nil {
					return
				}
			}
		}
	}
}

// reconnectWarnEvery: a consumer's failed reconnects are logged at debug
// level, every reconnectWarnEvery-th at warn, so that one that cannot
// reattach is seen without flooding the log through a failover.
const reconnectWarnEvery = 10

func (pc *partitionConsumer) connectionLost(x *cnx) {
	select {
	case pc.lost <- x:
	default:
	}
}

func (pc *partitionConsumer) activeChange(active bool) {
	if pc.active.Swap(active) != active {
		pc.cons.roleChanged(pc.index, active)
	}
}

// messages queues what the broker pushed.
func (pc *partitionConsumer) messages(x *cnx, m *transport.Message) {
	pc.mu.Lock()
	if pc.x != x {
		pc.mu.Unlock()
		return
	}
	epoch := pc.epoch
	pc.mu.Unlock()
	stream := pc.cons.stream.String()
	for _, d := range m.Messages {
		pc.cons.push(&queued{pc: pc, epoch: epoch, m: &Message{
			ID:              MessageID{Stream: stream, Partition: pc.index, Offset: d.Offset},
			Payload:         d.Data.Payload,
			Key:             d.Data.Key,
			OrderingKey:     d.Data.OrderingKey,
			Properties:      d.Data.Properties,
			EventTime:       timeFromMillis(d.Data.EventTime),
			PublishTime:     timeFromMillis(d.Data.PublishTime),
			ProducerName:    d.Data.ProducerName,
			SequenceID:      d.Data.SequenceID,
			RedeliveryCount: d.RedeliveryCount,
		}})
	}
}

// consumed counts a message the app took and tops up permits at half the
// queue (SH-2); it reports false for a message of an older epoch, which
// the broker sends again and which must be dropped.
func (pc *partitionConsumer) consumed(epoch, offset uint64) bool {
	pc.mu.Lock()
	if epoch != pc.epoch {
		pc.mu.Unlock()
		return false
	}
	pc.taken++
	if pc.cons.reader != nil {
		pc.next, pc.hasNext = offset+1, true
	}
	var grant int
	if pc.taken >= max(pc.cons.opts.ReceiverQueueSize/2, 1) {
		grant, pc.taken = pc.taken, 0
	}
	x, id := pc.x, pc.id
	pc.mu.Unlock()
	if grant > 0 && x != nil {
		ctx, cancel := context.WithTimeout(context.Background(), pc.cons.c.opts.OperationTimeout)
		x.send(ctx, &transport.Flow{ConsumerID: id, Permits: int64(grant)})
		cancel()
	}
	return true
}

func (pc *partitionConsumer) conn() (*cnx, uint64, error) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.closed {
		return nil, 0, ErrClosed
	}
	if pc.x == nil {
		return nil, 0, errConnLost
	}
	return pc.x, pc.id, nil
}

func (pc *partitionConsumer) ack(ctx context.Context, offset uint64, cumulative bool) error {
	if !cumulative && !pc.cons.opts.AckWithReceipt {
		return pc.groupAck(ctx, offset)
	}
	if err := pc.flushAcks(ctx); err != nil {
		return err
	}
	x, id, err := pc.conn()
	if err != nil {
		return err
	}
	a := &transport.Ack{ConsumerID: id, Offsets: []uint64{offset}, Cumulative: cumulative}
	if !pc.cons.opts.AckWithReceipt {
		return x.send(ctx, a)
	}
	a.RequestID = pc.cons.c.requestID()
	_, err = x.request(ctx, a)
	return err
}

// groupAck adds an individual ack to the waiting group, and sends the
// group when it is full.
func (pc *partitionConsumer) groupAck(ctx context.Context, offset uint64) error {
	// Under pc.mu: close, which waits for the timer's function, cannot
	// begin between the check and the timer's start.
	pc.mu.Lock()
	switch {
	case pc.closed:
		pc.mu.Unlock()
		return ErrClosed
	case pc.x == nil:
		pc.mu.Unlock()
		return errConnLost
	}
	pc.ackMu.Lock()
	pc.acks = append(pc.acks, offset)
	full := len(pc.acks) >= ackGroupMax
	if !full && pc.ackTimer == nil {
		pc.wg.Add(1)
		pc.ackTimer = time.AfterFunc(ackGroupDelay, func() {
			defer pc.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), pc.cons.c.opts.OperationTimeout)
			defer cancel()
			pc.flushAcks(ctx)
		})
	}
	pc.ackMu.Unlock()
	pc.mu.Unlock()
	if full {
		return pc.flushAcks(ctx)
	}
	return nil
}

// flushAcks sends the waiting acks in one frame.
func (pc *partitionConsumer) flushAcks(ctx context.Context) error {
	pc.ackMu.Lock()
	offsets := pc.acks
	pc.acks = nil
	if pc.ackTimer != nil {
		if pc.ackTimer.Stop() {
			pc.wg.Done() // its function will not run
		}
		pc.ackTimer = nil
	}
	pc.ackMu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	x, id, err := pc.conn()
	if err != nil {
		return err
	}
	return x.send(ctx, &transport.Ack{ConsumerID: id, Offsets: offsets})
}

func (pc *partitionConsumer) nack(offset uint64) {
	x, id, err := pc.conn()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), pc.cons.c.opts.OperationTimeout)
	defer cancel()
	x.send(ctx, &transport.Nack{ConsumerID: id, Offsets: []uint64{offset}})
}

// redeliver asks the broker to deliver unacked messages again.
func (pc *partitionConsumer) redeliver(offsets []uint64) {
	x, id, err := pc.conn()
	if err != nil {
		return // a reconnect redelivers everything unacked anyway
	}
	ctx, cancel := context.WithTimeout(context.Background(), pc.cons.c.opts.OperationTimeout)
	defer cancel()
	x.send(ctx, &transport.RedeliverUnacked{ConsumerID: id, Offsets: offsets})
}

// seek resets the subscription and drops what was queued from before.
func (pc *partitionConsumer) seek(ctx context.Context, s *transport.Seek) error {
	x, id, err := pc.conn()
	if err != nil {
		return err
	}
	s.RequestID, s.ConsumerID = pc.cons.c.requestID(), id
	pc.mu.Lock()
	pc.epoch++ // what is queued now is from before the seek
	pc.taken = 0
	epoch := pc.epoch
	pc.mu.Unlock()
	if _, err := x.request(ctx, s); err != nil {
		return err
	}
	pc.mu.Lock()
	same := pc.epoch == epoch
	pc.mu.Unlock()
	if same {
		// The broker restarts delivery from the cursor; grant the queue
		// again since the dropped messages' permits are spent.
		return x.send(ctx, &transport.Flow{ConsumerID: id, Permits: int64(pc.cons.opts.ReceiverQueueSize)})
	}
	return nil
}

func (pc *partitionConsumer) unsubscribe(ctx context.Context) error {
	x, id, err := pc.conn()
	if err != nil {
		return err
	}
	_, err = x.request(ctx, &transport.Unsubscribe{RequestID: pc.cons.c.requestID(), ConsumerID: id})
	return err
}

func (pc *partitionConsumer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	pc.flushAcks(ctx)
	cancel()
	pc.mu.Lock()
	if pc.closed {
		pc.mu.Unlock()
		return
	}
	pc.closed = true
	x, id := pc.x, pc.id
	pc.x = nil
	pc.mu.Unlock()
	pc.cancel()
	pc.wg.Wait()
	if x != nil {
		x.removeConsumer(id)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		x.request(ctx, &transport.CloseConsumer{RequestID: pc.cons.c.requestID(), ConsumerID: id})
		cancel()
	}
}

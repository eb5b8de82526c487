package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/murmur3"

	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// ProducerOptions configures a producer; zero fields take their defaults.
type ProducerOptions struct {
	// Stream is the stream: persistent://TENANT/FABRIC/STREAM, the same
	// without the scheme, or a short name of public/default ("orders").
	Stream string
	// Name is the producer's name, the key of the broker's
	// deduplication. Default: a generated unique name.
	Name string
	// DisableBatching sends every message in a frame of its own.
	DisableBatching bool
	// KeyBasedBatching makes one batch per key (ordering key first), and
	// one of its own for keyless messages, so a key_shared broker routes
	// each batch whole (KS-6).
	KeyBasedBatching bool
	// BatchingMaxMessages, BatchingMaxSize and BatchingMaxPublishDelay
	// close a batch (MSG-5). Defaults 1000, 128 KiB, 1ms.
	BatchingMaxMessages     int
	BatchingMaxSize         int
	BatchingMaxPublishDelay time.Duration
	// MaxPendingMessages bounds the messages of one partition sent and
	// not yet acknowledged; SendAsync waits for room. Default 1000. Of
	// those, at most 64 batches per partition are on the wire at once
	// (the broker's deduplication window); the others wait their turn.
	MaxPendingMessages int
	// SendTimeout fails sends not acknowledged in time. Default 30s;
	// negative disables it.
	SendTimeout time.Duration
	// MessageRouter picks a message's partition; default by key hash
	// (ordering key first), round robin per batch without a key (MSG-3).
	MessageRouter func(msg *ProducerMessage, partitions int) int
}

func (o *ProducerOptions) setDefaults() {
	if o.BatchingMaxMessages <= 0 {
		o.BatchingMaxMessages = 1000
	}
	if o.BatchingMaxSize <= 0 {
		o.BatchingMaxSize = 128 << 10
	}
	if o.BatchingMaxPublishDelay <= 0 {
		o.BatchingMaxPublishDelay = time.Millisecond
	}
	if o.MaxPendingMessages <= 0 {
		o.MaxPendingMessages = 1000
	}
	if o.SendTimeout == 0 {
		o.SendTimeout = 30 * time.Second
	}
	if o.DisableBatching {
		o.BatchingMaxMessages = 1
	}
}

// Producer sends messages to a stream, to each partition in order.
type Producer struct {
	c      *Client
	opts   ProducerOptions
	stream geofabric.Stream
	name   string
	parts  []*partitionProducer
	// rr and rrCount make the keyless round robin switch partition at
	// batch boundaries.
	rr      atomic.Uint64
	rrCount atomic.Uint64
	closed  atomic.Bool
}

// CreateProducer attaches a producer to every partition of a stream.
func (c *Client) CreateProducer(ctx context.Context, opts ProducerOptions) (*Producer, error) {
	st, err := geofabric.ParseStream(opts.Stream)
	if err != nil {
		return nil, err
	}
	if opts.Name != "" {
		if err := geofabric.CheckClientName("producer", opts.Name); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
	}
	opts.setDefaults()
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	n, err := c.partitions(ctx, st)
	if err != nil {
		return nil, err
	}
	p := &Producer{c: c, opts: opts, stream: st, name: opts.Name}
	if p.name == "" {
		p.name = randomName(c.opts.Name)
	}
	p.parts, err = attachParts(ctx, c, st, n, producerAttachesAtOnce,
		func(name string, i int) *partitionProducer { return newPartitionProducer(p, name, i) },
		func(ctx context.Context, pp *partitionProducer) error { return pp.connect(ctx, true) })
	if err != nil {
		return nil, err
	}
	if err := c.register(p); err != nil {
		p.closeParts()
		return nil, err
	}
	return p, nil
}

// producerAttachesAtOnce bounds the partitions a new producer attaches to
// at once.
const producerAttachesAtOnce = 16

// Name returns the producer's name.
func (p *Producer) Name() string { return p.name }

// Stream returns the stream's name.
func (p *Producer) Stream() string { return p.stream.String() }

// Send sends a message and waits until the broker has it committed. Its
// batch goes at once, without waiting out BatchingMaxPublishDelay: the
// caller waits anyway, and the batch holds whatever other goroutines
// sent meanwhile (as Pulsar's synchronous send does).
func (p *Producer) Send(ctx context.Context, msg *ProducerMessage) (MessageID, error) {
	type result struct {
		id  MessageID
		err error
	}
	ch := make(chan result, 1)
	callback := func(id MessageID, _ *ProducerMessage, err error) { ch <- result{id, err} }
	if p.closed.Load() {
		return MessageID{}, ErrClosed
	}
	pp := p.parts[p.route(msg)]
	pp.sendAsync(ctx, msg, callback)
	pp.mu.Lock()
	pp.flushLocked()
	pp.mu.Unlock()
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return MessageID{}, ctx.Err()
	}
}

// SendAsync queues a message; callback runs once, after the broker
// committed it or when it failed. It waits while MaxPendingMessages are in
// flight, until ctx ends. Callbacks of one partition run in send order, on
// the client's goroutines: they must not block.
//
// A success always carries the offset the broker stored the message at.
// A message resent after a reconnect whose sequence id the broker cannot
// prove stored fails with code OutOfOrderSequence (an earlier send failed
// while later ones succeeded, or it is older than the sends the broker
// remembers for deduplication: it may or may not be in the stream); a
// receipt without an offset for a message fails it with ErrNoOffset.
func (p *Producer) SendAsync(ctx context.Context, msg *ProducerMessage, callback func(MessageID, *ProducerMessage, error)) {
	if p.closed.Load() {
		callback(MessageID{}, msg, ErrClosed)
		return
	}
	p.parts[p.route(msg)].sendAsync(ctx, msg, callback)
}

// route picks the partition of a message (MSG-3).
func (p *Producer) route(msg *ProducerMessage) int {
	n := len(p.parts)
	if n == 1 {
		return 0
	}
	if p.opts.MessageRouter != nil {
		i := p.opts.MessageRouter(msg, n)
		if i >= 0 && i < n {
			return i
		}
		return 0
	}
	key := msg.Key
	if len(msg.OrderingKey) > 0 {
		key = string(msg.OrderingKey)
	}
	if key != "" {
		return int(KeyHash(key) % uint32(n))
	}
	if p.rrCount.Add(1)%uint64(p.opts.BatchingMaxMessages) == 0 {
		p.rr.Add(1)
	}
	return int(p.rr.Load() % uint64(n))
}

// KeyHash is the hash of a key that routing and key_shared use: Murmur3
// x86 32-bit, seed 0, masked with 0x7fffffff (KS-2, MSG-3).
func KeyHash(key string) uint32 { return murmur3.Sum32([]byte(key)) & 0x7fffffff }

// Flush sends every batched message and waits until all are acknowledged.
func (p *Producer) Flush(ctx context.Context) error {
	for _, pp := range p.parts {
		if err := pp.flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Close flushes (within the operation timeout), then detaches the producer.
func (p *Producer) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.c.opts.OperationTimeout)
	err := p.Flush(ctx)
	cancel()
	p.closeParts()
	p.c.unregister(p)
	return err
}

func (p *Producer) closeParts() {
	for _, pp := range p.parts {
		pp.close()
	}
}

// pendingMsg is a message waiting for its receipt.
type pendingMsg struct {
	msg      *ProducerMessage
	data     transport.MessageData
	callback func(MessageID, *ProducerMessage, error)
}

// pendingBatch is a batch sent (or to be sent) and not yet acknowledged.
type pendingBatch struct {
	first  uint64
	msgs   []*pendingMsg
	frame  []transport.MessageData
	sentAt time.Time // last sent (first flushed, until it is sent)
	queued time.Time // first flushed
	// sentTo is the producer id it was last sent under: each attach of
	// the producer has a new one, and gets the batch again.
	sentTo uint64
}

// maxSentBatches bounds a partition producer's batches on the wire: only
// the oldest ones unanswered are sent, the others wait their turn. It is
// the number of sends a broker remembers per producer for deduplication:
// a resent batch that the broker stored can then have at most 63 stored
// after it, so the broker still knows it and answers with its offsets,
// never with OutOfOrderSequence.
const maxSentBatches = 64

// partitionProducer is a producer on one partition.
type partitionProducer struct {
	p         *Producer
	partition string
	index     int
	sem       chan struct{}
	lost      chan *cnx
	pump      chan struct{} // batches are waiting for room on the wire
	stop      chan struct{}
	// ctx ends when the producer closes; cancel ends it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	x        *cnx
	id       uint64
	seq      uint64
	seqKnown bool
	// batch holds the messages not yet sent, by batch key ("" for all
	// of them without key-based batching), in order of first arrival.
	batch      map[string][]*pendingMsg
	batchKeys  []string
	batchCount int
	batchBytes int
	timer      *time.Timer
	inflight   []*pendingBatch
	idle       chan struct{} // closed when nothing is in flight
	closed     bool
	// fullRefusals counts the DiskFull and RateLimited refusals since the
	// last receipt; refusal is the last one, given with ErrSendTimeout
	// meanwhile.
	fullRefusals int
	refusal      error
}

func newPartitionProducer(p *Producer, partition string, index int) *partitionProducer {
	ctx, cancel := context.WithCancel(context.Background())
	return &partitionProducer{
		ctx:       ctx,
		cancel:    cancel,
		p:         p,
		partition: partition,
		index:     index,
		sem:       make(chan struct{}, p.opts.MaxPendingMessages),
		lost:      make(chan *cnx, 1),
		pump:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
	}
}

func (pp *partitionProducer) start() {
	pp.wg.Add(1)
	go pp.loop()
}

// connect looks up the partition's leader and attaches the producer; a
// reconnect then resends everything in flight with its sequence ids.
func (pp *partitionProducer) connect(ctx context.Context, first bool) error {
	c := pp.p.c
	var x *cnx
	var id uint64
	var ready *transport.ProducerReady
	err := c.atLeader(ctx, pp.partition, func(at *cnx) error {
		x, id = at, c.requestID()
		if !x.addProducer(id, pp) {
			return errConnLost
		}
		res, err := x.request(ctx, &transport.CreateProducer{RequestID: c.requestID(), ProducerID: id, Stream: pp.partition, ProducerName: pp.p.name})
		if err != nil {
			x.removeProducer(id)
			return err
		}
		var ok bool
		if ready, ok = res.(*transport.ProducerReady); !ok {
			x.removeProducer(id)
			return fmt.Errorf("client: unexpected answer %T to create producer", res)
		}
		return nil
	})
	if err != nil {
		return err
	}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.closed {
		x.removeProducer(id)
		return ErrClosed
	}
	pp.x, pp.id = x, id
	if !pp.seqKnown {
		pp.seq = uint64(ready.LastSequenceID + 1)
		pp.seqKnown = true
	}
	if !first {
		pp.pumpLocked()
	}
	return nil
}

// loop reconnects after a lost connection and fails sends that time out.
func (pp *partitionProducer) loop() {
	defer pp.wg.Done()
	var tick <-chan time.Time
	if pp.p.opts.SendTimeout > 0 {
		t := time.NewTicker(min(pp.p.opts.SendTimeout/4, time.Second))
		defer t.Stop()
		tick = t.C
	}
	stopCtx := pp.ctx
	for {
		select {
		case <-pp.stop:
			return
		case <-tick:
			pp.expire()
		case <-pp.pump:
			pp.mu.Lock()
			pp.pumpLocked()
			pp.mu.Unlock()
		case x := <-pp.lost:
			pp.mu.Lock()
			stale := pp.x != x
			if !stale {
				pp.x = nil
			}
			pp.mu.Unlock()
			if stale {
				continue
			}
			pp.mu.Lock()
			full, refusal := pp.fullRefusals, pp.refusal
			pp.mu.Unlock()
			if full > 0 {
				// The leader refused a send for lack of disk space: ask
				// again later, with what is in flight, in order.
				if full == 1 {
					pp.p.c.logger.Warn("the partition leader refuses sends for lack of disk space; resending with backoff until the send timeout", "partition", pp.partition, "err", refusal)
				}
				if diskFullBackoff(stopCtx, full-1) != nil {
					return
				}
				pp.expire()
			}
			for n := 0; ; n++ {
				ctx, cancelOp := context.WithTimeout(stopCtx, pp.p.c.opts.OperationTimeout)
				err := pp.connect(ctx, false)
				cancelOp()
				if err == nil {
					break
				}
				if stopCtx.Err() != nil {
					return
				}
				pp.p.c.logger.Debug("producer reconnect failed", "partition", pp.partition, "attempt", n+1, "err", err)
				if !retryable(err) && transport.CodeOf(err) != transport.CodeProducerBusy {
					pp.failAll(err)
				}
				if backoff(stopCtx, n) != nil {
					return
				}
				pp.expire()
			}
		}
	}
}

// connectionLost asks the loop to reconnect; it never blocks.
func (pp *partitionProducer) connectionLost(x *cnx) {
	select {
	case pp.lost <- x:
	default:
	}
}

func (pp *partitionProducer) sendAsync(ctx context.Context, msg *ProducerMessage, callback func(MessageID, *ProducerMessage, error)) {
	select {
	case pp.sem <- struct{}{}:
	case <-ctx.Done():
		callback(MessageID{}, msg, ctx.Err())
		return
	case <-pp.stop:
		callback(MessageID{}, msg, ErrClosed)
		return
	}
	pp.mu.Lock()
	if pp.closed {
		pp.mu.Unlock()
		<-pp.sem
		callback(MessageID{}, msg, ErrClosed)
		return
	}
	m := &pendingMsg{msg: msg, callback: callback, data: transport.MessageData{
		Key:         msg.Key,
		OrderingKey: msg.OrderingKey,
		Properties:  msg.Properties,
		EventTime:   millis(msg.EventTime),
		PublishTime: time.Now().UnixMilli(),
		Payload:     msg.Payload,
	}}
	o := &pp.p.opts
	key := ""
	if o.KeyBasedBatching {
		key = msg.Key
		if len(msg.OrderingKey) > 0 {
			key = string(msg.OrderingKey)
		}
	}
	if pp.batch == nil {
		pp.batch = map[string][]*pendingMsg{}
	}
	if _, ok := pp.batch[key]; !ok {
		pp.batchKeys = append(pp.batchKeys, key)
	}
	pp.batch[key] = append(pp.batch[key], m)
	pp.batchCount++
	pp.batchBytes += len(msg.Payload) + len(msg.Key) + len(msg.OrderingKey)
	if pp.batchCount >= o.BatchingMaxMessages || pp.batchBytes >= o.BatchingMaxSize {
		pp.flushLocked()
	} else if pp.timer == nil {
		pp.timer = time.AfterFunc(o.BatchingMaxPublishDelay, pp.flushTimer)
	}
	pp.mu.Unlock()
}

func (pp *partitionProducer) flushTimer() {
	pp.mu.Lock()
	pp.timer = nil
	pp.flushLocked()
	pp.mu.Unlock()
}

// flushLocked closes the current batches and sends them if connected.
// Sequence ids are given here, batch after batch, so that they increase in
// the order the broker receives them even when key-based batching
// regroups messages: the broker's deduplication drops a sequence id lower
// than one it has stored.
func (pp *partitionProducer) flushLocked() {
	if pp.timer != nil {
		pp.timer.Stop()
		pp.timer = nil
	}
	for _, key := range pp.batchKeys {
		msgs := pp.batch[key]
		now := time.Now()
		b := &pendingBatch{first: pp.seq, msgs: msgs, frame: make([]transport.MessageData, len(msgs)), sentAt: now, queued: now}
		for i, m := range msgs {
			m.data.SequenceID = pp.seq
			pp.seq++
			b.frame[i] = m.data
		}
		pp.inflight = append(pp.inflight, b)
		if pp.idle == nil {
			pp.idle = make(chan struct{})
		}
	}
	pp.pumpLocked()
	clear(pp.batch)
	pp.batchKeys, pp.batchCount, pp.batchBytes = pp.batchKeys[:0], 0, 0
}

// pumpLocked writes to the current connection, if any, the batches among
// the oldest maxSentBatches in flight that the producer's current attach
// has not been sent yet.
func (pp *partitionProducer) pumpLocked() {
	if pp.x == nil {
		return
	}
	for _, b := range pp.inflight[:min(len(pp.inflight), maxSentBatches)] {
		if b.sentTo != pp.id {
			pp.sendLocked(b)
		}
	}
}

// wake asks the loop to send what waits for room on the wire, without
// writing on the caller's goroutine (a connection's reader).
func (pp *partitionProducer) wakeLocked() {
	if len(pp.inflight) < maxSentBatches {
		return
	}
	select {
	case pp.pump <- struct{}{}:
	default:
	}
}

// sendLocked writes a batch to the current connection; a failed write
// closes the connection, which brings a reconnect and a resend.
func (pp *partitionProducer) sendLocked(b *pendingBatch) {
	b.sentAt = time.Now()
	b.sentTo = pp.id
	ctx, cancel := context.WithTimeout(context.Background(), pp.p.c.opts.OperationTimeout)
	defer cancel()
	pp.x.send(ctx, &transport.Send{ProducerID: pp.id, Messages: b.frame})
}

// receipt completes the batch at the head of the in-flight queue.
func (pp *partitionProducer) receipt(x *cnx, r *transport.SendReceipt) {
	pp.mu.Lock()
	if pp.x != x || len(pp.inflight) == 0 || pp.inflight[0].first != r.SequenceID {
		// A receipt for a batch already answered (a resend's duplicate)
		// or failed by timeout.
		pp.mu.Unlock()
		return
	}
	b := pp.inflight[0]
	pp.inflight = pp.inflight[1:]
	pp.fullRefusals, pp.refusal = 0, nil
	pp.idleCheckLocked()
	pp.wakeLocked()
	pp.mu.Unlock()
	for i, m := range b.msgs {
		<-pp.sem
		// Success only with an offset the broker gave for this message.
		if i >= len(r.Offsets) || r.Offsets[i] == noOffset {
			m.callback(MessageID{}, m.msg, ErrNoOffset)
			continue
		}
		m.callback(MessageID{Stream: pp.p.stream.String(), Partition: pp.index, Offset: r.Offsets[i]}, m.msg, nil)
	}
}

// noOffset is the offset that brokers of older versions put in a receipt
// for a message whose offset they did not know.
const noOffset = ^uint64(0)

// sendError handles a refused send: a leader change reconnects and
// resends; anything else fails the batch.
func (pp *partitionProducer) sendError(x *cnx, e *transport.SendError) {
	err := &transport.Error{Code: e.Code, Message: e.Message, LeaderHint: e.LeaderHint}
	if e.Code == transport.CodeDiskFull || e.Code == transport.CodeRateLimited {
		// The broker refuses this producer's later sends as well, so
		// that none is stored ahead of this one: open it again after a
		// backoff and resend everything in flight, in order.
		pp.mu.Lock()
		if pp.x == x {
			pp.fullRefusals++
			pp.refusal = err
		}
		pp.mu.Unlock()
		x.removeProducer(pp.idOf(x))
		pp.connectionLost(x)
		return
	}
	if retryable(err) {
		x.removeProducer(pp.idOf(x))
		pp.connectionLost(x)
		return
	}
	pp.mu.Lock()
	if pp.x != x || len(pp.inflight) == 0 || pp.inflight[0].first != e.SequenceID {
		pp.mu.Unlock()
		return
	}
	b := pp.inflight[0]
	pp.inflight = pp.inflight[1:]
	pp.idleCheckLocked()
	pp.wakeLocked()
	pp.mu.Unlock()
	pp.fail(b, err)
}

func (pp *partitionProducer) idOf(x *cnx) uint64 {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.x == x {
		return pp.id
	}
	return 0
}

func (pp *partitionProducer) fail(b *pendingBatch, err error) {
	for _, m := range b.msgs {
		<-pp.sem
		m.callback(MessageID{}, m.msg, err)
	}
}

func (pp *partitionProducer) idleCheckLocked() {
	if len(pp.inflight) == 0 && pp.idle != nil {
		close(pp.idle)
		pp.idle = nil
	}
}

// expire fails in-flight batches older than the send timeout, oldest
// first.
func (pp *partitionProducer) expire() {
	timeout := pp.p.opts.SendTimeout
	if timeout <= 0 {
		return
	}
	pp.mu.Lock()
	var expired []*pendingBatch
	// Resent batches count from their last send; while the leader
	// refuses them for lack of disk space, from when they were queued.
	for len(pp.inflight) > 0 && (time.Since(pp.inflight[0].sentAt) > timeout ||
		pp.refusal != nil && time.Since(pp.inflight[0].queued) > timeout) {
		expired = append(expired, pp.inflight[0])
		pp.inflight = pp.inflight[1:]
	}
	err := ErrSendTimeout
	if pp.refusal != nil {
		cause := ErrDiskFull
		if transport.CodeOf(pp.refusal) == transport.CodeRateLimited {
			cause = ErrRateLimited
		}
		err = fmt.Errorf("%w: %w (%v)", ErrSendTimeout, cause, pp.refusal)
	}
	pp.idleCheckLocked()
	pp.pumpLocked()
	pp.mu.Unlock()
	for _, b := range expired {
		pp.fail(b, err)
	}
}

// failAll fails everything in flight, for an error no retry can cure.
func (pp *partitionProducer) failAll(err error) {
	pp.mu.Lock()
	pp.flushLocked()
	all := pp.inflight
	pp.inflight = nil
	pp.idleCheckLocked()
	pp.mu.Unlock()
	for _, b := range all {
		pp.fail(b, err)
	}
}

func (pp *partitionProducer) flush(ctx context.Context) error {
	pp.mu.Lock()
	pp.flushLocked()
	idle := pp.idle
	pp.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close stops the producer; what is still in flight fails with ErrClosed.
func (pp *partitionProducer) close() {
	pp.mu.Lock()
	if pp.closed {
		pp.mu.Unlock()
		return
	}
	pp.closed = true
	if pp.timer != nil {
		pp.timer.Stop()
		pp.timer = nil
	}
	x, id := pp.x, pp.id
	pp.x = nil
	pending := pp.inflight
	for _, key := range pp.batchKeys {
		pending = append(pending, &pendingBatch{msgs: pp.batch[key]})
	}
	pp.inflight, pp.batch, pp.batchKeys = nil, nil, nil
	pp.idleCheckLocked()
	pp.mu.Unlock()
	close(pp.stop)
	pp.cancel()
	pp.wg.Wait()
	if x != nil {
		x.removeProducer(id)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		x.request(ctx, &transport.CloseProducer{RequestID: pp.p.c.requestID(), ProducerID: id})
		cancel()
	}
	for _, b := range pending {
		pp.fail(b, ErrClosed)
	}
}

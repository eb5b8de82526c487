package partition

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/storage"
	"github.com/fabriq-io/fabriq/subscription"
	"github.com/fabriq-io/fabriq/transport"
)

const (
	// maxPushBytes bounds the payload bytes one Message frame carries, past
	// its first message.
	maxPushBytes = 1 << 20
	// readAheadMsgs and readAheadBytes bound what a dispatcher reads past
	// its plan and keeps for the next one (dispatcher.readFresh).
	readAheadMsgs  = 500
	readAheadBytes = 256 << 10
	// deliverTimeout bounds one push to a consumer's connection.
	deliverTimeout = 10 * time.Second
	// maxDescribedKeys bounds the draining keys a describe lists.
	maxDescribedKeys = 100
)

// Outbox is where a consumer's messages and events go: its session. Its
// methods are called from the partition's goroutines, consumers' ids are
// the session's own (SubscribeRequest.ID).
type Outbox interface {
	// Deliver sends a Message frame, waiting for room until ctx ends; an
	// error means the connection is gone (or ctx ended).
	Deliver(ctx context.Context, m *transport.Message) error
	// EvictConsumer forgets a consumer the partition dropped and tells the
	// client (CloseConsumer), which then looks the leader up again.
	EvictConsumer(id uint64)
	// ActiveChange tells a failover consumer it became active or inactive
	// (FO-6).
	ActiveChange(id uint64, active bool)
	// Probe pings the client and reports whether it answered in time.
	Probe(timeout time.Duration) bool
	// Drop closes the client's connection.
	Drop()
}

// dispatcher drives one subscription's dispatch engine
// (subscription.Dispatcher) on the partition's leader: it feeds it
// consumers, permits and committed acks, reads from the log what it
// plans, pushes the deliveries it decides to the consumers' sessions,
// tells them their role events and replicates the redelivery counts it
// keeps. The cursor, the redelivery counts and the consumer set with the
// roles it implies are the state machine's, so a new leader's dispatcher
// starts from them (SUB-7); what lives here is only what is in flight.
// One goroutine (run) makes the passes; the engine is used under mu.
type dispatcher struct {
	p    *Partition
	name string
	mode transport.SubscriptionMode
	// durable is false for a reader (SUB-5): it has no cursor in the state
	// machine and keeps nothing but its read position.
	durable bool
	// keyMode and outOfOrder are a key_shared subscription's policy.
	keyMode    transport.KeySharedMode
	outOfOrder bool

	mu      sync.Mutex
	eng     *subscription.Dispatcher
	byKey   map[subscription.ConsumerID]*Consumer
	timer   *time.Timer // wakes the engine when it asked to (Wake)
	timerAt time.Time

	// stalled is set by a key_shared pass that could neither send nor
	// read on: new messages alone cannot change that (KS-9).
	stalled atomic.Bool

	// ahead holds the messages the last read brought past what its plan
	// asked for, in offset order: a shared plan asks for SharedBurst
	// messages at a time, and the next plan usually starts where the
	// last ended. Only the dispatcher's goroutine touches it.
	ahead []storage.Message

	wake chan struct{}
	stop chan struct{}
	// ctx is cancelled by signal: a push in flight ends at once.
	ctx      context.Context
	cancel   context.CancelFunc
	stopOnce sync.Once
	wg       sync.WaitGroup
}

func newDispatcher(p *Partition, name string, mode transport.SubscriptionMode, durable bool, start uint64,
	keyMode transport.KeySharedMode, outOfOrder bool) *dispatcher {
	ctx, cancel := context.WithCancel(context.Background())
	d := &dispatcher{
		ctx: ctx, cancel: cancel, p: p, name: name, mode: mode, durable: durable,
		keyMode: keyMode, outOfOrder: outOfOrder,
		byKey: map[subscription.ConsumerID]*Consumer{},
		wake:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
	}
	cfg := subscription.Config{
		Mode:      subscription.Mode(mode),
		Keys:      keyPolicy(keyMode, outOfOrder),
		Durable:   durable,
		Partition: -1,
		Limits:    p.cfg.Dispatch,
	}
	if pn, err := geofabric.ParsePartition(p.name); err == nil {
		cfg.Partition, cfg.Stream = pn.Index, pn.Stream.String()
	}
	if durable {
		cfg.State = replicatedSub{p: p, sub: name}
	}
	d.eng = subscription.New(cfg, start)
	d.eng.SetGrace(time.Unix(0, p.graceUntil.Load()))
	return d
}

// replicatedSub is a subscription's replicated state as the engine reads
// it: the partition's state machine, and the joins in progress.
type replicatedSub struct {
	p   *Partition
	sub string
}

func (s replicatedSub) IsAcked(offset uint64) bool { return s.p.fsm.IsAcked(s.sub, offset) }

func (s replicatedSub) Resume() (uint64, map[uint64]uint32, bool) {
	st := s.p.fsm.Subscription(s.sub)
	if st == nil {
		return 0, nil, false
	}
	return st.Cursor.NextUnacked(st.Cursor.Floor), st.Redeliveries, true
}

func (s replicatedSub) Members() []subscription.Member {
	ms, _, _, _, _ := s.p.members(s.sub)
	return engineMembers(ms)
}

func (s replicatedSub) Joining(name string) bool { return s.p.isJoining(s.sub, name) }

// engineMembers converts replicated members for the engine.
func engineMembers(ms []memberState) []subscription.Member {
	out := make([]subscription.Member, len(ms))
	for i, m := range ms {
		out[i] = subscription.Member{Name: m.Name, Priority: m.Priority, Ranges: toRanges(m.Ranges)}
	}
	return out
}

// toRanges converts wire ranges.
func toRanges(rs []transport.HashRange) []subscription.HashRange {
	out := make([]subscription.HashRange, len(rs))
	for i, r := range rs {
		out[i] = subscription.HashRange{Start: int(r.Start), End: int(r.End)}
	}
	return out
}

// busyError maps an admission refusal to the wire, with the texts of the
// contract.
func busyError(err error) error {
	var b *subscription.BusyError
	var a *subscription.AssignError
	switch {
	case errors.As(err, &b) && b.Grace:
		return wire.Errorf(transport.CodeConsumerBusy, wire.ExclusiveBusy+" (consumer '%s' keeps its place for the reconnect grace after a leader change)", b.Name)
	case errors.As(err, &b) && b.Exclusive:
		return wire.Errorf(transport.CodeConsumerBusy, wire.ExclusiveBusy)
	case errors.As(err, &b):
		return wire.Errorf(transport.CodeConsumerBusy, wire.ConsumerNameBusy, b.Name)
	case errors.As(err, &a):
		return wire.Errorf(transport.CodeConsumerAssignError, "%v", a)
	}
	return err
}

func (d *dispatcher) start() {
	d.wg.Add(1)
	go d.run()
}

// signal tells the loop to stop and ends a push in flight, without
// waiting.
func (d *dispatcher) signal() {
	d.stopOnce.Do(func() {
		close(d.stop)
		d.cancel()
	})
}

// close stops the loop and waits for it.
func (d *dispatcher) close() {
	d.signal()
	d.wg.Wait()
	d.mu.Lock()
	if d.timer != nil {
		d.timer.Stop()
	}
	d.mu.Unlock()
}

// closeDispatchers stops ds together: every loop is told to stop (its
// push in flight cancelled) before any is waited for, so slow consumers
// cost one cancellation, not one push timeout each.
func closeDispatchers(ds []*dispatcher) {
	for _, d := range ds {
		d.signal()
	}
	for _, d := range ds {
		d.close()
	}
}

// notifyData wakes the loop for new messages, unless it is stalled.
func (d *dispatcher) notifyData() {
	if !d.stalled.Load() {
		d.notify()
	}
}

// notify wakes the loop without blocking.
func (d *dispatcher) notify() {
	d.stalled.Store(false)
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

// settleLocked tells the sessions the engine's role events (FO-6), in
// order, and arms the timer the engine asked for. Called with mu held.
func (d *dispatcher) settleLocked() {
	for _, e := range d.eng.TakeEvents() {
		if c := d.byKey[e.Consumer]; c != nil {
			c.out.ActiveChange(c.id, e.Active)
		}
	}
	if w := d.eng.Wake(); !w.Equal(d.timerAt) {
		if d.timer != nil {
			d.timer.Stop()
		}
		d.timer, d.timerAt = nil, w
		if !w.IsZero() {
			d.timer = time.AfterFunc(time.Until(w), d.notify)
		}
	}
}

// admit runs the engine's admission checks for c (see
// subscription.Admit) and returns the attached holder to probe (EX-2).
func (d *dispatcher) admit(c *Consumer) (*Consumer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	holder, err := d.eng.Admit(c.engine(), time.Now())
	return d.byKey[holder], busyError(err)
}

// add attaches a consumer (the checks run again: two joins may have
// passed them together).
func (d *dispatcher) add(c *Consumer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	c.key = subscription.ConsumerID(consumerKeys.Add(1))
	if err := d.eng.Attach(c.engine(), time.Now()); err != nil {
		return busyError(err)
	}
	d.byKey[c.key] = c
	d.settleLocked()
	d.notify()
	return nil
}

// remove detaches a consumer; what it held unacknowledged goes back to
// the others (SH-5, KS-8). It reports whether the consumer was attached
// and whether none is left.
func (d *dispatcher) remove(c *Consumer) (found, empty bool) {
	d.mu.Lock()
	found, empty = d.eng.Detach(c.key, time.Now())
	if found {
		delete(d.byKey, c.key)
		d.settleLocked()
	}
	counted := d.eng.TakeCounted()
	d.mu.Unlock()
	d.flushCounted(counted)
	d.notify()
	return found, empty
}

// attached reports whether a consumer is attached.
func (d *dispatcher) attached(c *Consumer) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.byKey[c.key] == c
}

// named returns the attached consumer of that name, nil if none.
func (d *dispatcher) named(name string) *Consumer {
	d.mu.Lock()
	defer d.mu.Unlock()
	key, ok := d.eng.Named(name)
	if !ok {
		return nil
	}
	return d.byKey[key]
}

// connectedNames returns the names of the attached consumers.
func (d *dispatcher) connectedNames() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.eng.Connected()
}

// detachAll removes every consumer and returns them.
func (d *dispatcher) detachAll() []*Consumer {
	d.mu.Lock()
	defer d.mu.Unlock()
	var cs []*Consumer
	for _, key := range d.eng.DetachAll() {
		cs = append(cs, d.byKey[key])
	}
	clear(d.byKey)
	return cs
}

// consumerCount returns how many consumers are attached.
func (d *dispatcher) consumerCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.eng.Count()
}

// flow grants a consumer permits (SH-2).
func (d *dispatcher) flow(c *Consumer, permits int64) {
	d.mu.Lock()
	d.eng.Flow(c.key, permits, maxPermits)
	d.mu.Unlock()
	d.notify()
}

// acked forgets delivered messages once their acks are committed; a key
// whose last pending message is acked may move to its new owner (KS-7).
func (d *dispatcher) acked(offsets []uint64, cumulative bool) {
	d.mu.Lock()
	d.eng.Acked(offsets, cumulative)
	d.mu.Unlock()
	d.notify()
}

// redeliver sends the given unacknowledged messages again, or all of them
// when offsets is empty.
func (d *dispatcher) redeliver(c *Consumer, offsets []uint64) {
	d.mu.Lock()
	d.eng.Redeliver(c.key, offsets)
	counted := d.eng.TakeCounted()
	d.mu.Unlock()
	d.flushCounted(counted)
	d.notify()
}

// seekReader moves a reader to an offset: readers have no cursor to reset.
func (d *dispatcher) seekReader(offset uint64) {
	d.mu.Lock()
	d.eng.SeekReader(offset)
	d.mu.Unlock()
	d.notify()
}

// reset restarts every consumer from the cursor after a seek (CUR-4).
func (d *dispatcher) reset() {
	d.mu.Lock()
	d.eng.Reset()
	d.mu.Unlock()
	d.notify()
}

// flushCounted sends redelivery counts to the state machine (SH-7) through
// the ack path, which groups them with acks.
func (d *dispatcher) flushCounted(offs []uint64) {
	if len(offs) > 0 && d.durable {
		d.p.ack(&ackReq{sub: d.name, redelivered: offs})
	}
}

// delivered builds the wire form of a stored message.
func delivered(m storage.Message, count uint32) transport.Delivered {
	return transport.Delivered{
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
	}
}

// dispatchOnce makes one pass: the engine plans, the log is read outside
// the lock, the engine hands out what was read, and the frames go to the
// consumers. It reports whether the pass made progress.
func (d *dispatcher) dispatchOnce() bool {
	d.mu.Lock()
	plan := d.eng.Plan(time.Now())
	d.settleLocked()
	if plan.Stalled {
		// Nothing waiting can go and nothing new may be read: sleep
		// until an ack, permits or a change of consumers, not new data.
		d.stalled.Store(true)
	}
	d.mu.Unlock()
	if plan.Empty() {
		return false
	}
	in, stored, ok := d.read(plan)
	if !ok {
		return false
	}
	if stored == nil {
		return true // the new messages were trimmed: the read position moved
	}
	d.mu.Lock()
	dls, progress := d.eng.Deliver(plan, in, time.Now())
	d.settleLocked()
	type push struct {
		c     *Consumer
		frame *transport.Message
	}
	var pushes []push
	for _, dl := range dls {
		c := d.byKey[dl.Consumer]
		frame := &transport.Message{ConsumerID: c.id, Messages: make([]transport.Delivered, len(dl.Offsets))}
		for i, off := range dl.Offsets {
			frame.Messages[i] = delivered(stored[off], dl.Counts[i])
		}
		pushes = append(pushes, push{c, frame})
	}
	counted := d.eng.TakeCounted()
	d.mu.Unlock()
	d.flushCounted(counted)
	for _, p := range pushes {
		d.push(p.c, p.frame)
	}
	return progress
}

// read reads what plan asks for, outside the lock (the log has its own).
// It returns the messages by offset; nil stored with ok means the new
// messages were trimmed by retention (the engine's read position moved),
// and !ok a read that failed.
func (d *dispatcher) read(plan subscription.Plan) (in subscription.Read, stored map[uint64]storage.Message, ok bool) {
	stored = map[uint64]storage.Message{}
	if !d.readAgain(plan.Again, &in, stored) {
		return in, stored, true
	}
	if plan.Max == 0 {
		return in, stored, true
	}
	msgs, err := d.readFresh(plan.From, plan.Max)
	if errors.Is(err, storage.ErrTrimmed) {
		d.mu.Lock()
		d.eng.Trimmed(plan, d.p.fsm.StartOffset())
		d.mu.Unlock()
		return in, nil, true
	}
	if err != nil {
		d.p.logger.Error("dispatcher read failed", "subscription", d.name, "offset", plan.From, "err", err)
		return in, nil, false
	}
	for _, m := range msgs {
		stored[m.Offset] = m
		in.Fresh = append(in.Fresh, engineMsg(m))
	}
	return in, stored, true
}

// readAgain reads the waiting messages at offsets (ascending) into in and
// stored, a span of the log at a time: a key_shared subscription's
// waiting messages are often neighbours, and a read of one message decodes
// its whole batch. An offset trimmed by retention goes to in.Gone. It
// reports false after a read that failed: what is left is kept for a
// later pass, and nothing newer may be read before it.
func (d *dispatcher) readAgain(offsets []uint64, in *subscription.Read, stored map[uint64]storage.Message) bool {
	for i := 0; i < len(offsets); {
		start, j := offsets[i], i
		for j+1 < len(offsets) && offsets[j+1]-start < readAheadMsgs {
			j++
		}
		msgs, err := d.p.read(start, int(offsets[j]-start+1), maxPushBytes)
		if errors.Is(err, storage.ErrTrimmed) {
			in.Gone = append(in.Gone, start) // trimmed by retention: nothing to resend
			i++
			continue
		}
		if err != nil || len(msgs) == 0 {
			d.p.logger.Error("dispatcher read failed", "subscription", d.name, "offset", start, "err", err)
			return false
		}
		// The read may end early (its byte bound): the next round starts
		// at the first offset it did not reach.
		k := 0
		for ; i <= j; i++ {
			for k < len(msgs) && msgs[k].Offset < offsets[i] {
				k++
			}
			if k == len(msgs) {
				break
			}
			if msgs[k].Offset != offsets[i] {
				d.p.logger.Error("dispatcher read failed", "subscription", d.name, "offset", offsets[i], "err", "not in the log")
				return false
			}
			stored[offsets[i]] = msgs[k]
			in.Again = append(in.Again, engineMsg(msgs[k]))
		}
	}
	return true
}

// readFresh reads up to want messages from offset from: from what the last
// read brought ahead when it starts there, else from the log, reading at
// least readAheadMsgs and keeping what the plan did not ask for (up to
// readAheadBytes). Decoding a batch for a few of its messages, again for
// each plan, cost more than the dispatch itself.
func (d *dispatcher) readFresh(from uint64, want int) ([]storage.Message, error) {
	if len(d.ahead) > 0 && d.ahead[0].Offset == from && from >= d.p.fsm.StartOffset() {
		n := min(want, len(d.ahead))
		out := d.ahead[:n:n]
		d.ahead = d.ahead[n:]
		if len(d.ahead) == 0 {
			d.ahead = nil
		}
		return out, nil
	}
	d.ahead = nil
	msgs, err := d.p.read(from, max(want, readAheadMsgs), maxPushBytes)
	if err != nil || len(msgs) <= want {
		return msgs, err
	}
	rest, size := msgs[want:], 0
	for i, m := range rest {
		size += len(m.Payload) + len(m.Key)
		if size > readAheadBytes {
			rest = rest[:i]
			break
		}
	}
	if len(rest) > 0 {
		d.ahead = rest
	}
	return msgs[:want:want], nil
}

// engineMsg is what the engine needs of a stored message.
func engineMsg(m storage.Message) subscription.Msg {
	return subscription.Msg{Offset: m.Offset, Key: m.Key, OrderingKey: m.OrderingKey}
}

// push sends a frame to a consumer. A failure means its connection is
// gone: the session notices and removes the consumer, which puts the
// messages back.
func (d *dispatcher) push(c *Consumer, frame *transport.Message) {
	ctx, cancel := context.WithTimeout(d.ctx, deliverTimeout)
	defer cancel()
	if err := c.out.Deliver(ctx, frame); err != nil {
		d.p.logger.Debug("delivery failed", "subscription", d.name, "consumer", c.name, "err", err)
		return
	}
	bytes := 0
	for i := range frame.Messages {
		bytes += len(frame.Messages[i].Data.Payload)
	}
	d.p.traffic.MessagesOut.Add(uint64(len(frame.Messages)))
	d.p.traffic.BytesOut.Add(uint64(bytes))
}

// describe reports the subscription's consumers with their roles, the
// members that are away, and the keys waiting for a hand-over.
func (d *dispatcher) describe(si *transport.SubscriptionInfo) {
	d.mu.Lock()
	desc := d.eng.Describe(time.Now())
	d.mu.Unlock()
	for _, cs := range desc.Consumers {
		ci := transport.ConsumerInfo{Name: cs.Name, Role: cs.Role, HashShare: cs.HashShare}
		if cs.Role != subscription.RoleAway {
			ci.Unacked, ci.Permits, ci.Blocked = int64(cs.Unacked), cs.Permits, cs.Blocked
		}
		for _, r := range cs.Ranges {
			ci.HashRanges = append(ci.HashRanges, transport.HashRange{Start: int32(r.Start), End: int32(r.End)})
		}
		si.Consumers = append(si.Consumers, ci)
	}
	si.Blocked = desc.Blocked
	si.LookAhead = int64(desc.LookAhead)
	si.DrainingKeys = desc.DrainingKeys
	if len(si.DrainingKeys) > maxDescribedKeys {
		si.DrainingKeys = si.DrainingKeys[:maxDescribedKeys]
	}
}

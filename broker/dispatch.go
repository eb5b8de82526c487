package broker

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
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
	// maxDescribedKeys bounds the draining keys a describe lists.
	maxDescribedKeys = 100
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
	ranges   []transport.HashRange // sticky key_shared (KS-4)
	out      outbox
	// gen is the generation of the consumer's membership (its join's Raft
	// index); a leave names it.
	gen     uint64
	permits int64
	unacked int
	blocked bool // SH-4: too many unacked; no delivery until half is acked
	active  bool // failover: this consumer was last told it is active
	told    bool // failover: it was told its role at least once
	// since is when the consumer attached here (FO-8).
	since time.Time
}

// held is a delivered, unacknowledged message: who holds it and, on a
// key_shared subscription, its sticky key.
type held struct {
	c   *consumer
	key string
}

// keyHold counts the unacknowledged messages of one key and who holds
// them (KS-7).
type keyHold struct {
	c *consumer
	n int
}

// dispatcher sends a subscription's messages to its consumers. It runs on
// the partition's leader only. The cursor, the redelivery counts and the
// consumer set with the roles it implies are the state machine's, so a new
// leader's dispatcher starts from them (SUB-7); what lives here is only
// what is in flight.
//
// The modes differ in who gets the next message: exclusive has one
// consumer (EX-1); shared goes round robin among the consumers with
// permits, best priority level first, 20 messages at a time (SH-3);
// failover sends only to the master (FO-1..FO-5); key_shared sends each
// message to the owner of its key's hash, once the key is not pending on
// another consumer (KS-3..KS-10).
//
// Roles are computed over the replicated members, connected here or not:
// a member that has not come back after a leader change keeps its role,
// and what that role receives waits, until it returns or the reconnect
// grace removes it.
type dispatcher struct {
	p    *partition
	name string
	mode transport.SubscriptionMode
	// durable is false for a reader (SUB-5): it has no cursor in the state
	// machine and keeps nothing but its read position.
	durable bool
	// keyMode and outOfOrder are a key_shared subscription's policy.
	keyMode    transport.KeySharedMode
	outOfOrder bool

	mu        sync.Mutex
	consumers []*consumer
	readPos   uint64          // next offset to read from the log
	pending   map[uint64]held // delivered and not acknowledged
	resend    []uint64        // offsets to deliver again before reading on, sorted
	// skipped are key_shared messages read past and not delivered yet,
	// their key being blocked (KS-9 bounds them), sorted.
	skipped []uint64
	// keys are the sticky keys of the offsets in resend and skipped.
	keys map[uint64]string
	// holders says which consumer holds unacknowledged messages of a key.
	holders map[string]*keyHold
	// redelivered counts the deliveries after the first of unacknowledged
	// offsets; it starts from the state machine's counts and sends its
	// increments there (SH-7) through counted.
	redelivered map[uint64]uint32
	counted     []uint64
	subBlocked  bool   // SH-4: the subscription has too many unacked
	epoch       uint64 // bumped whenever readPos is reset

	// rr is the shared mode's round-robin position.
	rr int
	// partition and stream place a failover subscription's partition
	// (index -1 for an unpartitioned stream).
	partition int
	stream    string
	// current is the failover consumer told it is active; drainUntil,
	// when set, is when its hand-over to the next master ends (FO-5).
	current    *consumer
	drainUntil time.Time
	drainTimer *time.Timer
	// ring caches the auto_split ring for ringOf's names.
	ring   *subscription.AutoSplit
	ringOf string

	// stalled is set by a key_shared pass that could neither send nor
	// read on: new messages alone cannot change that (KS-9 keeps a stuck
	// key from burning CPU).
	stalled atomic.Bool

	wake chan struct{}
	stop chan struct{}
	// ctx is cancelled by signal: a push in flight ends at once.
	ctx      context.Context
	cancel   context.CancelFunc
	stopOnce sync.Once
	wg       sync.WaitGroup
}

func newDispatcher(p *partition, name string, mode transport.SubscriptionMode, durable bool, start uint64) *dispatcher {
	ctx, cancel := context.WithCancel(context.Background())
	return &dispatcher{
		ctx:         ctx,
		cancel:      cancel,
		p:           p,
		name:        name,
		mode:        mode,
		durable:     durable,
		readPos:     start,
		pending:     map[uint64]held{},
		keys:        map[uint64]string{},
		holders:     map[string]*keyHold{},
		redelivered: map[uint64]uint32{},
		partition:   -1,
		wake:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
	}
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
	if d.drainTimer != nil {
		d.drainTimer.Stop()
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

// add attaches a consumer. Exclusive allows one (EX-1); failover and
// key_shared one per name.
func (d *dispatcher) add(c *consumer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.consumers) > 0 && d.mode == transport.Exclusive {
		return wireError(transport.CodeConsumerBusy, msgExclusiveBusy)
	}
	if d.mode == transport.Failover || d.mode == transport.KeyShared {
		if slices.ContainsFunc(d.consumers, func(o *consumer) bool { return o.name == c.name }) {
			return wireError(transport.CodeConsumerBusy, msgConsumerNameBusy, c.name)
		}
	}
	if d.mode == transport.KeyShared && d.keyMode == transport.Sticky {
		// Checked again here: two joins may have passed the check
		// together (KS-4).
		st := subscription.NewSticky()
		for _, o := range d.consumers {
			_ = st.Add(o.name, toRanges(o.ranges))
		}
		if err := st.Add(c.name, toRanges(c.ranges)); err != nil {
			return wireError(transport.CodeConsumerAssignError, "%v", err)
		}
	}
	first := len(d.consumers) == 0
	c.since = time.Now()
	d.consumers = append(d.consumers, c)
	if first {
		d.rewind()
	}
	d.electLocked(d.rolesLocked())
	d.notify()
	return nil
}

// roles is who may receive what: the subscription's replicated members
// and the consumers connected here. During the reconnect grace after a
// leader change, a member not connected (away) keeps its role and what
// the role receives waits for it (SUB-7); afterwards roles are the
// connected consumers'.
type roles struct {
	connected map[string]*consumer
	names     []string // members and connected, sorted
	cands     []subscription.Candidate
	ring      *subscription.AutoSplit
	sticky    *subscription.Sticky
	away      []string
}

// rolesLocked computes the roles from the state machine's members and the
// connected consumers.
func (d *dispatcher) rolesLocked() *roles {
	r := &roles{connected: make(map[string]*consumer, len(d.consumers))}
	prio := map[string]int32{}
	ranges := map[string][]transport.HashRange{}
	for _, c := range d.consumers {
		if _, ok := r.connected[c.name]; !ok {
			r.connected[c.name] = c
			prio[c.name], ranges[c.name] = c.priority, c.ranges
		}
	}
	if d.durable && d.mode != transport.Shared && d.mode != transport.Exclusive && d.p.inGrace() {
		ms, _, _, _, _ := d.p.members(d.name)
		for _, m := range ms {
			if _, ok := prio[m.Name]; !ok && !d.p.isJoining(d.name, m.Name) {
				prio[m.Name], ranges[m.Name] = m.Priority, m.Ranges
				r.away = append(r.away, m.Name)
			}
		}
	}
	for name := range prio {
		r.names = append(r.names, name)
	}
	slices.Sort(r.names)
	switch d.mode {
	case transport.Failover:
		for _, n := range r.names {
			r.cands = append(r.cands, subscription.Candidate{Name: n, Priority: int(prio[n])})
		}
	case transport.KeyShared:
		if d.keyMode == transport.Sticky {
			r.sticky = subscription.NewSticky()
			for _, n := range r.names {
				// Conflicts were refused at subscribe; a range that
				// does not fit now (a deposed leader's join) is ignored.
				_ = r.sticky.Add(n, toRanges(ranges[n]))
			}
		} else {
			sig := strings.Join(r.names, "\x00")
			if d.ring == nil || d.ringOf != sig {
				d.ring, d.ringOf = subscription.NewAutoSplit(r.names), sig
			}
			r.ring = d.ring
		}
	}
	return r
}

// toRanges converts wire ranges.
func toRanges(rs []transport.HashRange) []subscription.HashRange {
	out := make([]subscription.HashRange, len(rs))
	for i, r := range rs {
		out[i] = subscription.HashRange{Start: int(r.Start), End: int(r.End)}
	}
	return out
}

// ownerName returns the name that owns a hash slot (KS-3, KS-4), "" when
// nobody covers it.
func (r *roles) ownerName(slot int) string {
	if r.sticky != nil {
		return r.sticky.Owner(slot)
	}
	if r.ring != nil {
		return r.ring.Owner(slot)
	}
	return ""
}

// masterName returns the failover master's name (FO-2..FO-4).
func (d *dispatcher) masterName(r *roles) string {
	return subscription.Master(r.cands, d.partition, d.stream)
}

// electLocked keeps the failover master current: it tells consumers
// whether they are active (FO-6), gives an old master holding unacked
// messages the drain timeout before the hand-over, and restarts delivery
// at the first unacknowledged message for the new master (FO-5). A master
// that is away (not reconnected after a leader change) is nobody's yet.
func (d *dispatcher) electLocked(r *roles) {
	if d.mode != transport.Failover {
		return
	}
	defer d.tellStandbys()
	m := r.connected[d.masterName(r)]
	if w := d.p.cfg.FailoverStabilityWindow; w > 0 && m != nil && m != d.current && d.current != nil &&
		slices.Contains(d.consumers, d.current) && time.Since(m.since) < w {
		// FO-8: the returning consumer takes over once it has stayed
		// connected for the stability window.
		d.armTimer(time.Until(m.since.Add(w)))
		m = d.current
	}
	if m == d.current {
		if m != nil && !m.active {
			// A drain was under way and the master stayed.
			m.active = true
			m.out.activeChange(m.id, true)
		}
		d.drainUntil = time.Time{}
		return
	}
	old := d.current
	if old != nil && slices.Contains(d.consumers, old) && old.unacked > 0 && d.p.cfg.DrainTimeout > 0 {
		now := time.Now()
		if d.drainUntil.IsZero() {
			d.drainUntil = now.Add(d.p.cfg.DrainTimeout)
			if old.active {
				old.active = false
				old.out.activeChange(old.id, false)
			}
			d.armTimer(d.p.cfg.DrainTimeout)
			return
		}
		if now.Before(d.drainUntil) {
			return
		}
	}
	d.drainUntil = time.Time{}
	if old != nil && old.active {
		old.active = false
		old.out.activeChange(old.id, false)
	}
	d.current = m
	if m != nil {
		m.active, m.told = true, true
		m.out.activeChange(m.id, true)
		d.rewind()
	}
}

// tellStandbys tells consumers that have heard nothing yet that they stand
// by (FO-6).
func (d *dispatcher) tellStandbys() {
	for _, c := range d.consumers {
		if !c.told && !c.active {
			c.told = true
			c.out.activeChange(c.id, false)
		}
	}
}

// armTimer wakes the dispatcher after a while, for a drain or a stability
// window that ends.
func (d *dispatcher) armTimer(after time.Duration) {
	if d.drainTimer != nil {
		d.drainTimer.Stop()
	}
	d.drainTimer = time.AfterFunc(after, d.notify)
}

// usable reports whether a consumer may be sent messages now.
func (d *dispatcher) usable(c *consumer) bool {
	return c.permits > 0 && !c.blocked && !d.subBlocked
}

// room is how many messages a usable consumer may be sent in one frame:
// within its permits and the unacked limits (SH-4).
func (d *dispatcher) room(c *consumer, burst int) int {
	n := min(c.permits, int64(burst))
	if d.durable {
		n = min(n, int64(d.p.cfg.MaxUnackedPerConsumer-c.unacked), int64(d.p.cfg.MaxUnackedPerSubscription-len(d.pending)))
	}
	return int(max(n, 0))
}

// pick returns the consumer that gets the next frame and how many
// messages it may take, or nil. Not for key_shared.
func (d *dispatcher) pick() (*consumer, int) {
	switch d.mode {
	case transport.Failover:
		if m := d.current; m != nil && d.drainUntil.IsZero() && d.usable(m) {
			return m, d.room(m, maxPush)
		}
		return nil, 0
	case transport.Shared:
		best := int32(-1)
		for _, c := range d.consumers {
			if d.usable(c) && (best < 0 || c.priority < best) {
				best = c.priority
			}
		}
		if best < 0 {
			return nil, 0
		}
		for range d.consumers {
			d.rr = (d.rr + 1) % len(d.consumers)
			if c := d.consumers[d.rr]; d.usable(c) && c.priority == best {
				return c, d.room(c, sharedBurst)
			}
		}
		return nil, 0
	}
	for _, c := range d.consumers {
		if d.usable(c) {
			return c, d.room(c, maxPush)
		}
	}
	return nil, 0
}

// rewind restarts delivery at the first unacknowledged message (EX-3),
// with the replicated redelivery counts. A reader has no cursor: it goes
// on from where it is.
func (d *dispatcher) rewind() {
	if !d.durable {
		return
	}
	s := d.p.fsm.Subscription(d.name)
	if s == nil {
		return
	}
	d.readPos = s.Cursor.NextUnacked(s.Cursor.Floor)
	clear(d.pending)
	clear(d.holders)
	clear(d.keys)
	clear(d.redelivered)
	for o, n := range s.Redeliveries {
		d.redelivered[o] = n
	}
	d.resend, d.skipped = nil, nil
	for _, c := range d.consumers {
		c.unacked, c.blocked = 0, false
	}
	d.subBlocked = false
	d.epoch++
}

// remove detaches a consumer; what it held unacknowledged goes back to the
// dispatcher, to be delivered before newer messages (SH-5, KS-8), and the
// keys it held are free. It reports whether the consumer was attached
// and whether no consumer is left.
func (d *dispatcher) remove(c *consumer) (found, empty bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := slices.Index(d.consumers, c)
	if i < 0 {
		return false, len(d.consumers) == 0
	}
	d.consumers = slices.Delete(d.consumers, i, i+1)
	for off, h := range d.pending {
		if h.c == c {
			d.unhold(off, h)
			d.requeue(off, h.key)
			d.countLocked(off)
		}
	}
	d.sortResend()
	d.electLocked(d.rolesLocked())
	d.notify()
	return true, len(d.consumers) == 0
}

// unhold forgets a delivered message: it is acked or goes back.
func (d *dispatcher) unhold(off uint64, h held) {
	delete(d.pending, off)
	h.c.unacked--
	if h.c.blocked && h.c.unacked <= d.p.cfg.MaxUnackedPerConsumer/2 {
		h.c.blocked = false
	}
	if d.subBlocked && len(d.pending) <= d.p.cfg.MaxUnackedPerSubscription/2 {
		d.subBlocked = false
	}
	if d.mode == transport.KeyShared {
		if k := d.holders[h.key]; k != nil && k.c == h.c {
			if k.n--; k.n <= 0 {
				delete(d.holders, h.key)
			}
		}
	}
}

// hold records a delivery.
func (d *dispatcher) hold(off uint64, c *consumer, key string) {
	d.pending[off] = held{c: c, key: key}
	c.unacked++
	if c.unacked >= d.p.cfg.MaxUnackedPerConsumer {
		c.blocked = true
	}
	if len(d.pending) >= d.p.cfg.MaxUnackedPerSubscription {
		d.subBlocked = true
	}
	if d.mode == transport.KeyShared {
		if k := d.holders[key]; k != nil && k.c == c {
			k.n++
		} else if k == nil {
			d.holders[key] = &keyHold{c: c, n: 1}
		}
		// Out of order (KS-10): a key pending on two consumers keeps
		// its first holder until that one is done.
	}
}

// requeue puts an offset on the resend list (call sortResend after).
func (d *dispatcher) requeue(off uint64, key string) {
	d.resend = append(d.resend, off)
	if d.mode == transport.KeyShared {
		d.keys[off] = key
	}
}

func (d *dispatcher) sortResend() {
	slices.Sort(d.resend)
	d.resend = slices.Compact(d.resend)
}

// attached reports whether a consumer is attached.
func (d *dispatcher) attached(c *consumer) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Contains(d.consumers, c)
}

// named returns the attached consumer of that name, nil if none.
func (d *dispatcher) named(name string) *consumer {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.consumers {
		if c.name == name {
			return c
		}
	}
	return nil
}

// connectedNames returns the names of the attached consumers.
func (d *dispatcher) connectedNames() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]bool, len(d.consumers))
	for _, c := range d.consumers {
		out[c.name] = true
	}
	return out
}

// detachAll removes every consumer and returns them.
func (d *dispatcher) detachAll() []*consumer {
	d.mu.Lock()
	defer d.mu.Unlock()
	cs := d.consumers
	d.consumers = nil
	d.current = nil
	clear(d.pending)
	clear(d.holders)
	clear(d.keys)
	d.resend, d.skipped = nil, nil
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

// acked forgets delivered messages once their acks are committed; a key
// whose last pending message is acked may move to its new owner (KS-7).
func (d *dispatcher) acked(offsets []uint64, cumulative bool) {
	if len(offsets) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if cumulative {
		top := offsets[len(offsets)-1]
		for off, h := range d.pending {
			if off <= top {
				d.unhold(off, h)
			}
		}
		for off := range d.redelivered {
			if off <= top {
				delete(d.redelivered, off)
			}
		}
	} else {
		for _, off := range offsets {
			if h, ok := d.pending[off]; ok {
				d.unhold(off, h)
			}
			delete(d.redelivered, off)
		}
	}
	d.notify()
}

// redeliver sends the given unacknowledged messages again, or all of them
// when offsets is empty.
func (d *dispatcher) redeliver(c *consumer, offsets []uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(offsets) == 0 {
		for off, h := range d.pending {
			if h.c == c {
				offsets = append(offsets, off)
			}
		}
	}
	for _, off := range offsets {
		if h, ok := d.pending[off]; ok && h.c == c {
			d.unhold(off, h)
			d.requeue(off, h.key)
			d.countLocked(off)
		}
	}
	d.sortResend()
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

// takeCounted returns the redeliveries to replicate and forgets them.
func (d *dispatcher) takeCounted() []uint64 {
	c := d.counted
	d.counted = nil
	return c
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

// countLocked counts one more delivery of a message that went back to the
// dispatcher unacknowledged (its consumer left, nacked it or timed out):
// the count is raised when the delivery is lost, not when it is made
// again, so it holds even when the dispatcher closes first (SH-7).
func (d *dispatcher) countLocked(off uint64) {
	if d.durable {
		d.redelivered[off]++
		d.counted = append(d.counted, off)
	}
}

// readTrimmed moves the read position past what retention removed.
func (d *dispatcher) readTrimmed(epoch uint64) {
	start := d.p.fsm.StartOffset()
	d.mu.Lock()
	if d.epoch == epoch && d.readPos < start {
		d.readPos = start
	}
	d.mu.Unlock()
}

// dispatchOnce sends messages if a consumer has permits and there is
// something to send; it reports whether it made progress.
func (d *dispatcher) dispatchOnce() bool {
	if d.mode == transport.KeyShared {
		return d.dispatchKeys()
	}
	d.mu.Lock()
	d.electLocked(d.rolesLocked())
	c, limit := d.pick()
	if c == nil || limit == 0 {
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
		msgs, err := d.p.read(off, 1, maxPushBytes)
		if errors.Is(err, storage.ErrTrimmed) {
			used = append(used, off) // trimmed by retention: nothing to resend
			continue
		}
		if err != nil || len(msgs) == 0 {
			d.p.logger.Error("dispatcher read failed", "subscription", d.name, "offset", off, "err", err)
			break // kept for the next pass
		}
		used = append(used, off)
		batch = append(batch, msgs[0])
	}
	resent := len(batch)
	if len(batch) < limit {
		msgs, err := d.p.read(readPos, limit-len(batch), maxPushBytes)
		if errors.Is(err, storage.ErrTrimmed) {
			d.readTrimmed(epoch)
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
	if d.epoch != epoch || !slices.Contains(d.consumers, c) ||
		d.mode == transport.Failover && (d.current != c || !d.drainUntil.IsZero()) {
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
		if d.durable {
			if _, ok := d.pending[m.Offset]; ok || d.p.fsm.IsAcked(d.name, m.Offset) {
				continue
			}
			d.hold(m.Offset, c, "")
		}
		frame.Messages = append(frame.Messages, delivered(m, d.redelivered[m.Offset]))
	}
	d.readPos = next
	c.permits -= int64(len(frame.Messages))
	counted := d.takeCounted()
	d.mu.Unlock()
	d.flushCounted(counted)
	if len(frame.Messages) > 0 {
		d.push(c, frame)
	}
	return true
}

// push sends a frame to a consumer. A failure means its connection is
// gone: the session notices and removes the consumer, which puts the
// messages back.
func (d *dispatcher) push(c *consumer, frame *transport.Message) {
	ctx, cancel := context.WithTimeout(d.ctx, deliverTimeout)
	defer cancel()
	if err := c.out.deliver(ctx, frame); err != nil {
		d.p.logger.Debug("delivery failed", "subscription", d.name, "consumer", c.name, "err", err)
	}
}

// lookAheadLimit is how many skipped messages a key_shared subscription
// may hold (KS-9).
func (d *dispatcher) lookAheadLimit() int {
	return min(d.p.cfg.LookAheadPerConsumer*max(len(d.consumers), 1), d.p.cfg.LookAheadPerSubscription)
}

// mergeAgain returns resend and skipped (each sorted) merged in offset
// order.
func (d *dispatcher) mergeAgain() []uint64 {
	all := make([]uint64, 0, len(d.resend)+len(d.skipped))
	i, j := 0, 0
	for i < len(d.resend) || j < len(d.skipped) {
		switch {
		case j == len(d.skipped) || i < len(d.resend) && d.resend[i] < d.skipped[j]:
			all = append(all, d.resend[i])
			i++
		case i == len(d.resend) || d.skipped[j] < d.resend[i]:
			all = append(all, d.skipped[j])
			j++
		default: // on both: once
			all = append(all, d.resend[i])
			i, j = i+1, j+1
		}
	}
	return all
}

// keyTarget returns the consumer a key goes to now, or nil if the key must
// wait: its owner is away or blocked, or, unless out of order is allowed,
// another consumer still holds unacknowledged messages of it (KS-7).
func (d *dispatcher) keyTarget(r *roles, key string, room map[*consumer]int) *consumer {
	c := r.connected[r.ownerName(subscription.Slot(key))]
	if c == nil || !d.usable(c) || room[c] <= 0 {
		return nil
	}
	if h := d.holders[key]; h != nil && h.c != c && !d.outOfOrder {
		return nil
	}
	return c
}

// dispatchKeys is a key_shared pass. In offset order it takes the
// messages to deliver again, then the skipped ones, then new ones from the
// log; each goes to its key's owner if the key may go now, otherwise the
// key is blocked for the rest of the pass, so that per key delivery keeps
// offset order (KS-7, KS-8). New messages of blocked keys are skipped, up
// to the look-ahead limit (KS-9); other keys keep flowing.
func (d *dispatcher) dispatchKeys() bool {
	d.mu.Lock()
	r := d.rolesLocked()
	room := map[*consumer]int{}
	total := 0
	for _, c := range d.consumers {
		if d.usable(c) {
			room[c] = d.room(c, maxPush)
			total += room[c]
		}
	}
	if total == 0 {
		d.mu.Unlock()
		return false
	}
	epoch, readPos := d.epoch, d.readPos
	// Which of the waiting messages could go now: only those are read.
	order := d.mergeAgain()
	var want []uint64
	blocked := map[string]bool{}
	plan := maps.Clone(room)
	for _, off := range order {
		if len(want) >= total {
			break
		}
		key := d.keys[off]
		if blocked[key] {
			continue
		}
		c := d.keyTarget(r, key, plan)
		if c == nil {
			blocked[key] = true
			continue
		}
		plan[c]--
		want = append(want, off)
	}
	lookAhead := d.lookAheadLimit() - len(d.skipped)
	if len(want) == 0 && lookAhead <= 0 {
		// Nothing waiting can go and nothing new may be read: sleep
		// until an ack, permits or a membership change, not new data.
		d.stalled.Store(true)
		d.mu.Unlock()
		return false
	}
	d.mu.Unlock()

	data := make(map[uint64]storage.Message, len(want))
	trimmed := map[uint64]bool{}
	for _, off := range want {
		msgs, err := d.p.read(off, 1, maxPushBytes)
		switch {
		case err == nil && len(msgs) > 0:
			data[off] = msgs[0]
		case errors.Is(err, storage.ErrTrimmed):
			trimmed[off] = true
		default:
			d.p.logger.Error("dispatcher read failed", "subscription", d.name, "offset", off, "err", err)
		}
	}
	var fresh []storage.Message
	if lookAhead > 0 {
		msgs, err := d.p.read(readPos, min(maxPush, lookAhead), maxPushBytes)
		if errors.Is(err, storage.ErrTrimmed) {
			d.readTrimmed(epoch)
			return true
		}
		if err != nil {
			d.p.logger.Error("dispatcher read failed", "subscription", d.name, "offset", readPos, "err", err)
			return false
		}
		fresh = msgs
	}

	d.mu.Lock()
	if d.epoch != epoch || d.readPos != readPos {
		d.mu.Unlock()
		return true // things moved while we read: start over
	}
	r = d.rolesLocked()
	frames := map[*consumer]*transport.Message{}
	clear(blocked)
	progress := false
	// deliver sends one message to its key's target, or blocks the key.
	deliver := func(m storage.Message, key string) bool {
		if blocked[key] {
			return false
		}
		c := d.keyTarget(r, key, room)
		if c == nil {
			blocked[key] = true
			return false
		}
		room[c]--
		c.permits--
		d.hold(m.Offset, c, key)
		f := frames[c]
		if f == nil {
			f = &transport.Message{ConsumerID: c.id}
			frames[c] = f
		}
		f.Messages = append(f.Messages, delivered(m, d.redelivered[m.Offset]))
		return true
	}
	order = d.mergeAgain()
	var done []uint64
	for _, off := range order {
		key := d.keys[off]
		if _, ok := d.pending[off]; ok || d.p.fsm.IsAcked(d.name, off) {
			done = append(done, off) // acked meanwhile
			continue
		}
		m, ok := data[off]
		if !ok {
			if trimmed[off] {
				done = append(done, off) // trimmed by retention
			} else {
				blocked[key] = true // not read: its key waits this pass
			}
			continue
		}
		if deliver(m, key) {
			done = append(done, off)
		}
	}
	if len(done) > 0 {
		progress = true
		drop := func(o uint64) bool { _, ok := slices.BinarySearch(done, o); return ok }
		slices.Sort(done)
		d.resend = slices.DeleteFunc(d.resend, drop)
		d.skipped = slices.DeleteFunc(d.skipped, drop)
		for _, o := range done {
			delete(d.keys, o)
		}
	}
	limit := d.lookAheadLimit()
	for _, m := range fresh {
		key := subscription.StickyKey(m.OrderingKey, m.Key)
		if d.p.fsm.IsAcked(d.name, m.Offset) {
			d.readPos = m.Offset + 1
			progress = true
			continue
		}
		if !deliver(m, key) {
			if len(d.skipped) >= limit {
				break // look-ahead is full (KS-9)
			}
			d.skipped = append(d.skipped, m.Offset)
			d.keys[m.Offset] = key
		}
		d.readPos = m.Offset + 1
		progress = true
	}
	counted := d.takeCounted()
	d.mu.Unlock()
	d.flushCounted(counted)
	for c, f := range frames {
		d.push(c, f)
	}
	return progress
}

// describe reports the subscription's consumers with their roles, the
// members that are away, and the keys waiting for a hand-over.
func (d *dispatcher) describe(si *transport.SubscriptionInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.rolesLocked()
	var share map[string]int
	if r.ring != nil || r.sticky != nil {
		share = map[string]int{}
		for slot := range subscription.Slots {
			share[r.ownerName(slot)]++
		}
	}
	info := func(name string) transport.ConsumerInfo {
		ci := transport.ConsumerInfo{Name: name}
		if share != nil {
			ci.HashShare = float64(share[name]) / subscription.Slots
		}
		return ci
	}
	for i, c := range d.consumers {
		ci := info(c.name)
		ci.Unacked, ci.Permits, ci.Blocked = int64(c.unacked), c.permits, c.blocked
		ci.HashRanges = c.ranges
		switch {
		case d.mode == transport.Exclusive && i == 0:
			ci.Role = "active"
		case d.mode == transport.Failover && c.active:
			ci.Role = "master"
		case d.mode == transport.Failover:
			ci.Role = "standby"
		}
		si.Consumers = append(si.Consumers, ci)
	}
	ms, _, _, _, _ := d.p.members(d.name)
	for _, name := range r.away {
		ci := info(name)
		ci.Role = "away"
		if i := slices.IndexFunc(ms, func(m memberState) bool { return m.Name == name }); i >= 0 {
			ci.HashRanges = ms[i].Ranges
		}
		si.Consumers = append(si.Consumers, ci)
	}
	si.Blocked = d.subBlocked
	si.LookAhead = int64(len(d.skipped))
	if d.mode == transport.KeyShared {
		for key, h := range d.holders {
			if owner := r.connected[r.ownerName(subscription.Slot(key))]; owner != h.c {
				si.DrainingKeys = append(si.DrainingKeys, key)
			}
		}
		sort.Strings(si.DrainingKeys)
		if len(si.DrainingKeys) > maxDescribedKeys {
			si.DrainingKeys = si.DrainingKeys[:maxDescribedKeys]
		}
	}
}

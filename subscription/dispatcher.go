package subscription

import (
	"slices"
	"time"
)

// Mode is a subscription's dispatch mode. The values are those of the
// wire protocol and of the replicated state.
type Mode uint8

// Dispatch modes; Exclusive is the default (SUB-3).
const (
	Exclusive Mode = iota
	Shared
	Failover
	KeyShared
)

// KeyPolicy is a key_shared subscription's policy.
type KeyPolicy struct {
	// Sticky gives each consumer the slots of the ranges it declares
	// (KS-4); otherwise slots are spread by consistent hashing (KS-3).
	Sticky bool
	// OutOfOrder lets a key move to its new owner before the old one
	// has acknowledged its messages (KS-10).
	OutOfOrder bool
}

// Frame limits of a delivery.
const (
	// MaxFrame is the most messages one delivery to a consumer carries.
	MaxFrame = 500
	// SharedBurst is how many messages a shared subscription gives one
	// consumer before moving on to the next (SH-3).
	SharedBurst = 20
)

// Limits are the bounds a dispatcher keeps. Zero values are taken as
// they are (a zero unacked limit blocks at once): callers fill them.
type Limits struct {
	// MaxUnackedPerConsumer blocks a consumer with that many
	// unacknowledged messages until it is back to half (SH-4).
	MaxUnackedPerConsumer int
	// MaxUnackedPerSubscription stops the subscription the same way.
	MaxUnackedPerSubscription int
	// LookAheadPerConsumer and LookAheadPerSubscription bound the
	// messages a key_shared subscription reads past blocked keys (KS-9).
	LookAheadPerConsumer     int
	LookAheadPerSubscription int
	// DrainTimeout is how long an old failover master may ack what it
	// holds before the new one starts (FO-5); 0 hands over at once.
	DrainTimeout time.Duration
	// StabilityWindow is how long a returning higher-ranked failover
	// consumer must stay before it takes the role back (FO-8).
	StabilityWindow time.Duration
}

// Member is a member of the subscription as the replicated state holds
// it: a consumer that joined and has not left.
type Member struct {
	Name     string
	Priority int32
	Ranges   []HashRange // sticky key_shared
}

// State is the subscription's replicated state, read only. A dispatcher
// asks it; it never changes it. Its answers may move on between calls
// (acks commit, members join and leave): the dispatcher never keeps them.
type State interface {
	// IsAcked reports whether the cursor holds offset as acknowledged.
	IsAcked(offset uint64) bool
	// Resume returns where delivery restarts (the first unacknowledged
	// offset) and the replicated redelivery counts of unacknowledged
	// offsets (SH-7); ok is false when the subscription is gone.
	Resume() (next uint64, counts map[uint64]uint32, ok bool)
	// Members returns the subscription's members in join order.
	Members() []Member
	// Joining reports whether a newcomer of that name is on its way in
	// (its join is being replicated): it is not a member away, whose role
	// would wait for it.
	Joining(name string) bool
}

// Config configures a dispatcher.
type Config struct {
	Mode Mode
	Keys KeyPolicy // key_shared only
	// Durable is false for a reader (SUB-5): no cursor, no members, no
	// unacknowledged limits; it reads on from where it is.
	Durable bool
	// Partition and Stream place a failover subscription's partition:
	// index -1 for an unpartitioned stream (FO-3, FO-4).
	Partition int
	Stream    string
	Limits    Limits
	// State is the replicated state; nil for a reader.
	State State
}

// ConsumerID names an attached consumer; its driver chooses it.
type ConsumerID uint64

// Consumer is a consumer asking to attach.
type Consumer struct {
	ID       ConsumerID
	Name     string
	Priority int32
	Ranges   []HashRange // sticky key_shared (KS-4)
	// Conn names the consumer's connection: a holder on the newcomer's
	// own connection is alive (it is being read), so it is not probed.
	Conn uint64
}

// consumer is an attached consumer and what the dispatcher counts of it.
type consumer struct {
	Consumer
	permits int64
	unacked int
	blocked bool // SH-4: too many unacked; nothing until half is acked
	active  bool // failover: was last told it is active
	told    bool // failover: was told its role at least once
	since   time.Time
}

// held is a delivered, unacknowledged message and, on a key_shared
// subscription, its sticky key.
type held struct {
	c   *consumer
	key string
}

// keyHold counts one key's unacknowledged messages and who holds them.
type keyHold struct {
	c *consumer
	n int
}

// RoleEvent tells a failover consumer that it became active or inactive
// (FO-6).
type RoleEvent struct {
	Consumer ConsumerID
	Active   bool
}

// Dispatcher is the dispatch state machine of one subscription on the
// partition's leader: who gets which message. It is pure: it does no I/O,
// runs no goroutine, takes no lock and reads no clock (every method that
// needs the time is given it). Its driver reads the log, feeds it and
// sends what it decides; calls must not overlap.
//
// What it decides from: consumers attaching and detaching, their permits,
// acks committed, redelivery requests, the messages the driver read for a
// Plan, and the replicated State. What it gives back: Deliveries, role
// events (TakeEvents), redelivery counts to replicate (TakeCounted) and
// the time it wants to be woken at (Wake).
//
// The modes differ in who gets the next message: exclusive has one
// consumer (EX-1); shared goes round robin among the consumers with
// permits, best priority level first, SharedBurst messages at a time
// (SH-3); failover sends only to the master (FO-1..FO-5); key_shared sends
// each message to the owner of its key's slot, once the key is not pending
// on another consumer (KS-3..KS-10). Roles are computed over the
// replicated members, connected here or not: during the reconnect grace
// after a leader change, a member that has not come back keeps its role,
// and what the role receives waits (SUB-7).
type Dispatcher struct {
	cfg  Config
	mode modeRules

	consumers []*consumer
	readPos   uint64          // next offset to read from the log
	pending   map[uint64]held // delivered and not acknowledged
	resend    []uint64        // to deliver again before reading on, sorted
	// skipped are key_shared messages read past and not delivered yet,
	// their key being blocked (KS-9 bounds them), sorted.
	skipped []uint64
	// keys are the sticky keys of the offsets in resend and skipped;
	// waiting counts them per key (see wait and unwait).
	keys    map[uint64]string
	waiting map[string]int
	// holders says which consumer holds unacknowledged messages of a key.
	holders map[string]*keyHold
	// redelivered counts the deliveries after the first of unacknowledged
	// offsets: from the replicated counts, plus what is counted here and
	// sent to be replicated (counted).
	redelivered map[uint64]uint32
	counted     []uint64
	subBlocked  bool   // SH-4: the subscription has too many unacked
	epoch       uint64 // bumped whenever readPos is reset
	rr          int    // shared: round-robin position

	// Failover: the consumer told it is active; drainUntil, when set, is
	// when its hand-over to the next master ends (FO-5); wake is when the
	// dispatcher wants to look again (a drain or a stability window).
	current    *consumer
	drainUntil time.Time
	wake       time.Time
	events     []RoleEvent

	graceUntil time.Time
	ring       *AutoSplit // cached for ringOf's names
	ringOf     string
}

// New returns the dispatcher of a subscription whose reading starts at
// readPos (for a durable subscription, the first consumer restarts it at
// the cursor's first unacknowledged message).
func New(cfg Config, readPos uint64) *Dispatcher {
	d := &Dispatcher{
		cfg:         cfg,
		readPos:     readPos,
		pending:     map[uint64]held{},
		keys:        map[uint64]string{},
		waiting:     map[string]int{},
		holders:     map[string]*keyHold{},
		redelivered: map[uint64]uint32{},
	}
	d.mode = rulesOf(cfg.Mode)
	return d
}

// Mode returns the dispatcher's mode.
func (d *Dispatcher) Mode() Mode { return d.cfg.Mode }

// Keys returns a key_shared dispatcher's policy.
func (d *Dispatcher) Keys() KeyPolicy { return d.cfg.Keys }

// Durable reports whether the subscription keeps a cursor.
func (d *Dispatcher) Durable() bool { return d.cfg.Durable }

// SetGrace sets the end of the reconnect grace of this leadership (SUB-7):
// until then, members that are not connected keep their roles.
func (d *Dispatcher) SetGrace(until time.Time) { d.graceUntil = until }

// find returns the attached consumer with that id, nil if none.
func (d *Dispatcher) find(id ConsumerID) *consumer {
	for _, c := range d.consumers {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// Attached reports whether a consumer is attached.
func (d *Dispatcher) Attached(id ConsumerID) bool { return d.find(id) != nil }

// Named returns the attached consumer of that name.
func (d *Dispatcher) Named(name string) (ConsumerID, bool) {
	for _, c := range d.consumers {
		if c.Name == name {
			return c.ID, true
		}
	}
	return 0, false
}

// Count returns how many consumers are attached.
func (d *Dispatcher) Count() int { return len(d.consumers) }

// Connected returns the names of the attached consumers.
func (d *Dispatcher) Connected() map[string]bool {
	out := make(map[string]bool, len(d.consumers))
	for _, c := range d.consumers {
		out[c.Name] = true
	}
	return out
}

// Attach attaches a consumer, after the checks of Admit (they may have
// passed for two consumers at once before either attached). The first
// consumer of a durable subscription restarts delivery at the cursor's
// first unacknowledged message (EX-3).
func (d *Dispatcher) Attach(c Consumer, now time.Time) error {
	if _, err := d.admit(c, now, false); err != nil {
		return err
	}
	first := len(d.consumers) == 0
	d.consumers = append(d.consumers, &consumer{Consumer: c, since: now})
	if first {
		d.rewind()
	}
	d.elect(d.roles(now), now)
	return nil
}

// Detach detaches a consumer: what it held unacknowledged goes back, to be
// delivered before newer messages (SH-5, KS-8), counted as a redelivery,
// and its keys are free. It reports whether it was attached and whether
// none is left.
func (d *Dispatcher) Detach(id ConsumerID, now time.Time) (found, empty bool) {
	c := d.find(id)
	if c == nil {
		return false, len(d.consumers) == 0
	}
	d.consumers = slices.DeleteFunc(d.consumers, func(o *consumer) bool { return o == c })
	for _, off := range d.pendingOf(c) {
		d.giveBack(off, d.pending[off])
	}
	d.sortResend()
	d.elect(d.roles(now), now)
	return true, len(d.consumers) == 0
}

// DetachAll detaches every consumer and forgets what is in flight (the
// leadership ends); it returns the ids that were attached.
func (d *Dispatcher) DetachAll() []ConsumerID {
	ids := make([]ConsumerID, len(d.consumers))
	for i, c := range d.consumers {
		ids[i] = c.ID
	}
	d.consumers, d.current = nil, nil
	clear(d.pending)
	clear(d.holders)
	d.forgetWaiting()
	return ids
}

// Flow grants a consumer permits (SH-2), up to max in all.
func (d *Dispatcher) Flow(id ConsumerID, permits, max int64) {
	if c := d.find(id); c != nil {
		c.permits = min(c.permits+permits, max)
	}
}

// Acked forgets delivered messages once their acks are committed: a key
// whose last pending message is acked may move to its new owner (KS-7).
// A cumulative ack names one offset and acks everything up to it.
func (d *Dispatcher) Acked(offsets []uint64, cumulative bool) {
	if len(offsets) == 0 {
		return
	}
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
		return
	}
	for _, off := range offsets {
		if h, ok := d.pending[off]; ok {
			d.unhold(off, h)
		}
		delete(d.redelivered, off)
	}
}

// Redeliver gives back the named unacknowledged messages of a consumer
// (all of them when offsets is empty), to be delivered again before newer
// ones, each counted as a redelivery (SH-5, SH-6 as the client asks it).
func (d *Dispatcher) Redeliver(id ConsumerID, offsets []uint64) {
	c := d.find(id)
	if c == nil {
		return
	}
	if len(offsets) == 0 {
		offsets = d.pendingOf(c)
	}
	for _, off := range offsets {
		if h, ok := d.pending[off]; ok && h.c == c {
			d.giveBack(off, h)
		}
	}
	d.sortResend()
}

// pendingOf returns the offsets a consumer holds, sorted.
func (d *Dispatcher) pendingOf(c *consumer) []uint64 {
	var offs []uint64
	for off, h := range d.pending {
		if h.c == c {
			offs = append(offs, off)
		}
	}
	slices.Sort(offs)
	return offs
}

// giveBack puts a delivered message back to be delivered again, counted
// (call sortResend after). The count is raised when a delivery is lost,
// not when it is made again, so it holds even if the dispatcher ends
// first (SH-7).
func (d *Dispatcher) giveBack(off uint64, h held) {
	d.unhold(off, h)
	d.resend = append(d.resend, off)
	if d.cfg.Mode == KeyShared {
		d.wait(off, h.key)
	}
	if d.cfg.Durable {
		d.redelivered[off]++
		d.counted = append(d.counted, off)
	}
}

// wait records the key of a message that waits in resend or skipped.
func (d *Dispatcher) wait(off uint64, key string) {
	if _, ok := d.keys[off]; ok {
		return
	}
	d.keys[off] = key
	d.waiting[key]++
}

// unwait forgets the key of a message that no longer waits.
func (d *Dispatcher) unwait(off uint64) {
	key, ok := d.keys[off]
	if !ok {
		return
	}
	delete(d.keys, off)
	if d.waiting[key]--; d.waiting[key] <= 0 {
		delete(d.waiting, key)
	}
}

// forgetWaiting drops every waiting message.
func (d *Dispatcher) forgetWaiting() {
	clear(d.keys)
	clear(d.waiting)
	d.resend, d.skipped = nil, nil
}

func (d *Dispatcher) sortResend() {
	slices.Sort(d.resend)
	d.resend = slices.Compact(d.resend)
}

// TakeCounted returns the redeliveries counted since the last call, for
// the driver to replicate (SH-7), and forgets them.
func (d *Dispatcher) TakeCounted() []uint64 {
	c := d.counted
	d.counted = nil
	return c
}

// TakeEvents returns the role events since the last call (FO-6), in
// order, and forgets them.
func (d *Dispatcher) TakeEvents() []RoleEvent {
	e := d.events
	d.events = nil
	return e
}

// Wake returns when the dispatcher wants to be asked again (a failover
// drain or stability window ends), zero for never.
func (d *Dispatcher) Wake() time.Time { return d.wake }

// SeekReader moves a reader to an offset: a reader has no cursor to reset.
func (d *Dispatcher) SeekReader(offset uint64) {
	d.readPos = offset
	d.forgetWaiting()
	d.epoch++
}

// Reset restarts every consumer from the cursor, after a seek (CUR-4).
func (d *Dispatcher) Reset() { d.rewind() }

// Trimmed moves the read position up to start, where retention left the
// log, when reading p's new messages found them trimmed (unless the
// position was reset since p).
func (d *Dispatcher) Trimmed(p Plan, start uint64) {
	if d.epoch == p.epoch && d.readPos < start {
		d.readPos = start
	}
}

// rewind restarts delivery at the first unacknowledged message with the
// replicated redelivery counts (EX-3, SH-7). A reader goes on from where
// it is.
func (d *Dispatcher) rewind() {
	if !d.cfg.Durable || d.cfg.State == nil {
		return
	}
	next, counts, ok := d.cfg.State.Resume()
	if !ok {
		return
	}
	d.readPos = next
	clear(d.pending)
	clear(d.holders)
	d.forgetWaiting()
	clear(d.redelivered)
	for o, n := range counts {
		d.redelivered[o] = n
	}
	for _, c := range d.consumers {
		c.unacked, c.blocked = 0, false
	}
	d.subBlocked = false
	d.epoch++
}

// unhold forgets a delivered message: acked, or given back.
func (d *Dispatcher) unhold(off uint64, h held) {
	delete(d.pending, off)
	h.c.unacked--
	if h.c.blocked && h.c.unacked <= d.cfg.Limits.MaxUnackedPerConsumer/2 {
		h.c.blocked = false
	}
	if d.subBlocked && len(d.pending) <= d.cfg.Limits.MaxUnackedPerSubscription/2 {
		d.subBlocked = false
	}
	if d.cfg.Mode == KeyShared {
		if k := d.holders[h.key]; k != nil && k.c == h.c {
			if k.n--; k.n <= 0 {
				delete(d.holders, h.key)
			}
		}
	}
}

// hold records a delivery.
func (d *Dispatcher) hold(off uint64, c *consumer, key string) {
	d.pending[off] = held{c: c, key: key}
	c.unacked++
	if c.unacked >= d.cfg.Limits.MaxUnackedPerConsumer {
		c.blocked = true
	}
	if len(d.pending) >= d.cfg.Limits.MaxUnackedPerSubscription {
		d.subBlocked = true
	}
	if d.cfg.Mode == KeyShared {
		// Out of order (KS-10): a key pending on two consumers keeps its
		// first holder until that one is done.
		if k := d.holders[key]; k != nil && k.c == c {
			k.n++
		} else if k == nil {
			d.holders[key] = &keyHold{c: c, n: 1}
		}
	}
}

// usable reports whether a consumer may be sent messages now.
func (d *Dispatcher) usable(c *consumer) bool {
	return c.permits > 0 && !c.blocked && !d.subBlocked
}

// room is how many messages a usable consumer may be sent in one
// delivery: within its permits and the unacked limits (SH-4).
func (d *Dispatcher) room(c *consumer, burst int) int {
	n := min(c.permits, int64(burst))
	if d.cfg.Durable {
		l := d.cfg.Limits
		n = min(n, int64(l.MaxUnackedPerConsumer-c.unacked), int64(l.MaxUnackedPerSubscription-len(d.pending)))
	}
	return int(max(n, 0))
}

// acked reports whether the replicated cursor holds offset as acked.
func (d *Dispatcher) acked(offset uint64) bool {
	return d.cfg.Durable && d.cfg.State != nil && d.cfg.State.IsAcked(offset)
}

package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fabriq-io/fabriq/broker/fsm"
	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/cluster"
	"github.com/fabriq-io/fabriq/storage"
	"github.com/fabriq-io/fabriq/subscription"
	"github.com/fabriq-io/fabriq/transport"
)

// Group is what a partition needs of its Raft group (cluster.Group).
type Group interface {
	// Propose proposes an entry without waiting; futures complete in the
	// order entries were proposed.
	Propose(cmd []byte, timeout time.Duration) raft.ApplyFuture
	// Apply proposes an entry and waits for the state machine's answer.
	Apply(ctx context.Context, cmd []byte) (any, error)
	IsLeader() bool
	// Leader returns the leader's node id, empty when unknown.
	Leader() (id, addr string)
	// WatchLeader reports leadership changes.
	WatchLeader() *cluster.LeaderWatch
}

// Reserve is the node's free-space reserve, checked before a send is
// proposed: once committed, every replica must store it.
type Reserve interface {
	// Admit takes room for a send of about size bytes, or refuses it
	// (DiskFull) when that would dig into the reserve.
	Admit(size int) error
}

// Holder is the session holding producers on the partition.
type Holder interface {
	// EvictProducer forgets a producer the partition dropped (it stopped
	// leading, or closes) and tells the client, which looks the leader up
	// again.
	EvictProducer(p *Partition, name string)
}

// Default tunings of a partition.
const (
	// DefaultRetentionInterval is the default Config.RetentionInterval.
	DefaultRetentionInterval = 5 * time.Second
	// DefaultReconnectGrace is the default Config.ReconnectGrace.
	DefaultReconnectGrace = 10 * time.Second
)

// Config configures a partition: what it runs on, what it asks of its
// node, and how its write, ack and dispatch paths are tuned. Zero tuning
// fields take DefaultConfig's values.
type Config struct {
	// Name is the partition's name. Required.
	Name string
	// Log is the partition's log, Machine its state machine over it, and
	// Group the Raft group that applies entries to Machine. Required. The
	// node opens and closes them; the partition only uses them.
	Log     *storage.Log
	Machine *fsm.Machine
	Group   Group

	// NotLeader builds the error for a request that reached a follower.
	// Nil answers NotLeader without a hint.
	NotLeader func() error
	// OnLeadership is told every leadership change (the node announces
	// it to the cluster); it must not block. May be nil.
	OnLeadership func(cluster.Leadership)
	// OnDamage is told, once, that a read found the copy damaged (its
	// log, or its Raft log); it must not block. May be nil.
	OnDamage func(error)
	// Reserve is checked before a send is proposed; nil admits every
	// send.
	Reserve Reserve
	// Retention returns the stream's retention policy, false while the
	// stream is not in the catalog. Nil applies no retention.
	Retention func() (transport.RetentionPolicy, bool)
	// Logger receives the partition's logs. Nil discards them.
	Logger *slog.Logger

	// MaxEntryBytes bounds the messages grouped into one Raft entry.
	// Default 6 MiB.
	MaxEntryBytes int
	// MaxInflight bounds the entries proposed and not yet committed.
	// Default 64.
	MaxInflight int
	// ApplyTimeout bounds how long a proposal may wait for commit.
	// Default 10s.
	ApplyTimeout time.Duration
	// AckInterval is how long acks are gathered into one entry (CUR-2).
	// Default 2ms.
	AckInterval time.Duration
	// ReconnectGrace is how long a new leader keeps the roles of members
	// that have not reconnected yet (SUB-7). Default
	// DefaultReconnectGrace.
	ReconnectGrace time.Duration
	// Dispatch are the dispatch engine's limits and timings, as the
	// subscription engine takes them.
	Dispatch subscription.Limits
	// SweepInterval is how often the leader looks for members that stayed
	// away longer than the reconnect grace. Default 250ms.
	SweepInterval time.Duration
	// MaxSubscriptions bounds the durable subscriptions; zero: no bound.
	MaxSubscriptions int
	// RetentionInterval is how often the leader applies the stream's
	// retention policy and checks its backlog quota. Default
	// DefaultRetentionInterval.
	RetentionInterval time.Duration
}

// DefaultConfig returns the default tunings.
func DefaultConfig() Config {
	return Config{
		MaxEntryBytes:     6 << 20,
		MaxInflight:       64,
		ApplyTimeout:      10 * time.Second,
		AckInterval:       2 * time.Millisecond,
		ReconnectGrace:    DefaultReconnectGrace,
		SweepInterval:     250 * time.Millisecond,
		RetentionInterval: DefaultRetentionInterval,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	fill := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	if c.MaxEntryBytes == 0 {
		c.MaxEntryBytes = d.MaxEntryBytes
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = d.MaxInflight
	}
	fill(&c.ApplyTimeout, d.ApplyTimeout)
	fill(&c.AckInterval, d.AckInterval)
	fill(&c.ReconnectGrace, d.ReconnectGrace)
	fill(&c.SweepInterval, d.SweepInterval)
	fill(&c.RetentionInterval, d.RetentionInterval)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.NotLeader == nil {
		name := c.Name
		c.NotLeader = func() error {
			return wire.Errorf(transport.CodeNotLeader, "this node does not lead partition %s", name)
		}
	}
	return c
}

// Validate reports what is wrong with the configuration.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Name == "" || c.Log == nil || c.Machine == nil || c.Group == nil {
		errs = append(errs, errors.New("a Name, Log, Machine and Group are required"))
	}
	if c.MaxEntryBytes < 0 || c.MaxInflight < 0 || c.MaxSubscriptions < 0 {
		errs = append(errs, errors.New("negative sizes"))
	}
	if c.ApplyTimeout < 0 || c.AckInterval < 0 || c.ReconnectGrace < 0 || c.SweepInterval < 0 || c.RetentionInterval < 0 {
		errs = append(errs, errors.New("negative durations"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("partition: config: %w", err)
	}
	return nil
}

// sendReq is one producer's batch waiting for commit; with no messages it
// opens the producer (done gets no offsets; lastSeq is set).
type sendReq struct {
	producer string
	msgs     []transport.MessageData
	size     int
	lastSeq  int64
	done     func(offsets []uint64, err error)
}

// ackReq is one consumer's acks waiting for commit.
type ackReq struct {
	sub         string
	offsets     []uint64
	cumulative  bool
	redelivered []uint64        // redelivery counts to add (SH-7)
	done        func(err error) // may be nil
}

// inflight is a proposed send entry and the requests it carries.
type inflight struct {
	future raft.ApplyFuture
	reqs   []*sendReq
}

// Partition runs one stream partition on this node: the driver that ties
// its log, its state machine and Raft group, and the subscription engine.
// It runs the write path that groups concurrent sends into one entry, the
// ack path, and, on the leader, the dispatchers; sessions drive it
// (producers, sends, subscriptions and their consumers).
//
// Lifecycle: New starts nothing; Start starts its loops; StopAccepting
// refuses new work and drops every producer and consumer, telling their
// sessions; Wait, once the Raft group is closed, waits for the loops and
// stops the dispatchers. The node owns the log, the state machine and the
// group, and closes them.
type Partition struct {
	name   string
	cfg    Config
	log    *storage.Log
	fsm    *fsm.Machine
	group  Group
	logger *slog.Logger
	// notLeader builds the error for a request that reached a follower.
	notLeader func() error
	// onLeadership is told every leadership change; may be nil.
	onLeadership func(cluster.Leadership)
	// onDamage is told, once, that the copy was found damaged; may be nil.
	onDamage   func(error)
	damageOnce sync.Once
	damage     atomic.Pointer[error] // the first damage found
	// reserve is the node's free-space reserve; nil admits every send.
	reserve Reserve
	// policy returns the stream's retention policy; nil applies none.
	policy func() (transport.RetentionPolicy, bool)
	// quota is the backlog quota as the last retention pass found it.
	quota atomic.Pointer[quotaState]

	sends    chan *sendReq
	acks     chan *ackReq
	inflight chan inflight
	stop     chan struct{}
	wg       sync.WaitGroup

	mu          sync.Mutex
	dispatchers map[string]*dispatcher
	owners      map[string]Holder // producer name → the session holding it
	lastPublish int64
	// leading, term and leaderSince follow this node's leadership; the
	// reconnect grace (SUB-7) counts from leaderSince.
	leading     bool
	term        uint64
	leaderSince time.Time
	// graceUntil (Unix nanoseconds) ends the reconnect grace of this
	// node's current leadership: until then members that have not
	// reconnected keep their roles (SUB-7).
	graceUntil atomic.Int64
	// joining counts the consumers whose join is being committed, by
	// subscription and name: they are not away, only on their way in.
	joinMu    sync.Mutex
	joining   map[[2]string]int
	attaching map[[2]string]int // every join in progress, newcomer or not
}

// New checks the configuration and returns a partition that has started
// nothing.
func New(cfg Config) (*Partition, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Partition{
		name:         cfg.Name,
		cfg:          cfg,
		log:          cfg.Log,
		fsm:          cfg.Machine,
		group:        cfg.Group,
		logger:       cfg.Logger.With("partition", cfg.Name),
		notLeader:    cfg.NotLeader,
		onLeadership: cfg.OnLeadership,
		onDamage:     cfg.OnDamage,
		reserve:      cfg.Reserve,
		policy:       cfg.Retention,
		sends:        make(chan *sendReq, 1024),
		acks:         make(chan *ackReq, 1024),
		inflight:     make(chan inflight, cfg.MaxInflight),
		stop:         make(chan struct{}),
		dispatchers:  map[string]*dispatcher{},
		owners:       map[string]Holder{},
		joining:      map[[2]string]int{},
		attaching:    map[[2]string]int{},
	}, nil
}

// Name returns the partition's name.
func (p *Partition) Name() string { return p.name }

// Start runs the write, ack, leadership, sweep and retention loops.
func (p *Partition) Start() {
	p.wg.Add(6)
	go p.proposeLoop()
	go p.commitLoop()
	go p.ackLoop()
	go p.leaderLoop(p.group.WatchLeader())
	go p.sweepLoop()
	go p.retentionLoop()
}

// leaderLoop follows the group's leadership: when this node stops leading,
// its consumers and producers are closed so that clients look the leader
// up again; every change is passed on to onLeadership.
func (p *Partition) leaderLoop(w *cluster.LeaderWatch) {
	defer p.wg.Done()
	defer w.Stop()
	was := false
	var term uint64
	for {
		select {
		case <-p.stop:
			return
		case l, ok := <-w.C:
			if !ok {
				return
			}
			// Leadership lost, or lost and regained in between (a new
			// term): what the old term's leader held is stale.
			if was && (!l.IsLeader || l.Term != term) {
				p.logger.Info("leadership lost; closing consumers and producers")
				// Not leading first: an attach in progress sees it and
				// gives up instead of starting a dispatcher after this.
				p.mu.Lock()
				p.leading = false
				p.mu.Unlock()
				p.evictAll()
			}
			if l.IsLeader && (!was || l.Term != term) {
				now := time.Now()
				p.graceUntil.Store(now.Add(p.cfg.ReconnectGrace).UnixNano())
				p.mu.Lock()
				p.leaderSince = now
				p.mu.Unlock()
			}
			was, term = l.IsLeader, l.Term
			p.mu.Lock()
			p.leading, p.term = l.IsLeader, l.Term
			p.mu.Unlock()
			if p.onLeadership != nil {
				p.onLeadership(l)
			}
		}
	}
}

// evictAll closes every dispatcher with its consumers and every producer,
// telling their sessions.
func (p *Partition) evictAll() {
	p.mu.Lock()
	ds := slices.Collect(maps.Values(p.dispatchers))
	p.dispatchers = map[string]*dispatcher{}
	owners := p.owners
	p.owners = map[string]Holder{}
	p.mu.Unlock()
	for _, d := range ds {
		d.signal() // pushes in flight end now, not after deliverTimeout
	}
	for _, d := range ds {
		for _, c := range d.detachAll() {
			c.out.EvictConsumer(c.id)
		}
	}
	closeDispatchers(ds)
	for name, s := range owners {
		s.EvictProducer(p, name)
	}
}

// StopAccepting makes the partition refuse new work; what is in flight is
// answered once the Raft group closes (its futures fail) and wait returns.
func (p *Partition) StopAccepting() {
	p.mu.Lock()
	select {
	case <-p.stop:
		p.mu.Unlock()
		return
	default:
		close(p.stop)
	}
	p.mu.Unlock()
	// Clients hear that this partition is gone from here and look again.
	p.evictAll()
}

// Wait waits for the loops, then stops the dispatchers. Call it after
// StopAccepting and after the Raft group is closed.
func (p *Partition) Wait() {
	p.wg.Wait()
	p.mu.Lock()
	ds := slices.Collect(maps.Values(p.dispatchers))
	p.dispatchers = map[string]*dispatcher{}
	p.mu.Unlock()
	closeDispatchers(ds)
}

// Applied wakes the dispatchers after the state machine applied an
// entry (fsm.Config.Applied); data says it only added messages.
func (p *Partition) Applied(_ uint64, data bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.dispatchers {
		if data {
			d.notifyData()
		} else {
			d.notify()
		}
	}
}

// ErrStopping is given to requests that were waiting when the partition
// closed: a retryable ServiceNotReady.
var ErrStopping = wire.Errorf(transport.CodeServiceNotReady, "partition is closing")

// OpenProducer passes an empty batch for the producer through the write
// path, behind every send proposed before, and tells done the producer's
// last stored sequence id: read from the state machine directly it could
// miss sends still in flight (an earlier incarnation's, or a log tail a
// new leader has not applied yet), and the producer would reuse their ids.
func (p *Partition) OpenProducer(ctx context.Context, producer string, done func(lastSeq int64, err error)) {
	r := &sendReq{producer: producer}
	r.done = func(_ []uint64, err error) { done(r.lastSeq, err) }
	p.enqueue(ctx, r)
}

// Send queues a producer's batch; done is called once, with the offsets
// of its messages after commit, or with the error. It blocks while the
// queue is full (backpressure on the producer's connection) and fails if
// ctx ends first.
func (p *Partition) Send(ctx context.Context, producer string, msgs []transport.MessageData, done func(offsets []uint64, err error)) {
	p.enqueue(ctx, &sendReq{producer: producer, msgs: msgs, done: done})
}

// enqueue queues a send request; r.done is called once, after commit or
// on failure.
func (p *Partition) enqueue(ctx context.Context, r *sendReq) {
	if !p.group.IsLeader() {
		r.done(nil, p.notLeader())
		return
	}
	if len(r.msgs) > 0 {
		if err := p.checkQuota(); err != nil {
			r.done(nil, err)
			return
		}
	}
	r.size = entrySize(r.producer, r.msgs)
	if r.size > p.cfg.MaxEntryBytes {
		r.done(nil, wire.Errorf(transport.CodeTooLarge, "a send of about %d bytes, stored, is above the limit of %d", r.size, p.cfg.MaxEntryBytes))
		return
	}
	// Refused before it is proposed: once committed, every replica must
	// store it. A producer opening stores nothing and goes on.
	if len(r.msgs) > 0 {
		if err := p.admit(r.size); err != nil {
			r.done(nil, err)
			return
		}
	}
	select {
	case p.sends <- r:
	case <-ctx.Done():
		r.done(nil, wire.Errorf(transport.CodeTimeout, "send queue full: %v", ctx.Err()))
	case <-p.stop:
		r.done(nil, ErrStopping)
	}
}

// recordOverhead bounds what the log adds to each message besides its
// fields (varints and length prefixes).
const recordOverhead = 64

// entrySize bounds the bytes a producer's batch takes in a Raft entry and
// in the log, where every record repeats the producer's name.
func entrySize(producer string, msgs []transport.MessageData) int {
	size := 64 + len(producer)
	for _, m := range msgs {
		size += recordOverhead + len(producer) + len(m.Payload) + len(m.Key) + len(m.OrderingKey)
		for k, v := range m.Properties {
			size += len(k) + len(v) + 16
		}
	}
	return size
}

// admit checks the node's free-space reserve for a send of size bytes.
func (p *Partition) admit(size int) error {
	if p.reserve == nil {
		return nil
	}
	return p.reserve.Admit(size)
}

// publishTime returns a leader publish time that never goes back.
func (p *Partition) publishTime() int64 {
	now := time.Now().UnixMilli()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastPublish = max(p.lastPublish, now)
	return p.lastPublish
}

// proposeLoop groups queued sends into entries and proposes them in order.
// Order matters: a producer's sequence ids must reach the state machine in
// the order it sent them, or deduplication would drop the later-proposed
// lower ones.
func (p *Partition) proposeLoop() {
	defer p.wg.Done()
	defer close(p.inflight)
	var carry *sendReq // taken from the queue but too big for the last entry
	for {
		first := carry
		carry = nil
		if first == nil {
			select {
			case first = <-p.sends:
			case <-p.stop:
				p.failQueued()
				return
			}
		}
		reqs := []*sendReq{first}
		size := first.size
	gather:
		for {
			select {
			case r := <-p.sends:
				if size+r.size > p.cfg.MaxEntryBytes {
					carry = r
					break gather
				}
				reqs = append(reqs, r)
				size += r.size
			default:
				break gather
			}
		}
		e := fsm.Send{PublishTime: p.publishTime(), Batches: make([]fsm.Batch, len(reqs))}
		for i, r := range reqs {
			e.Batches[i] = fsm.Batch{Producer: r.producer, Messages: fsmMessages(r.msgs)}
		}
		data, err := fsm.Encode(e)
		if err != nil {
			for _, r := range reqs {
				r.done(nil, err)
			}
			continue
		}
		f := p.group.Propose(data, p.cfg.ApplyTimeout)
		select {
		case p.inflight <- inflight{future: f, reqs: reqs}:
		case <-p.stop:
			// The entry may still commit; its senders learn nothing
			// and retry with the same sequence ids, which dedup drops.
			for _, r := range reqs {
				r.done(nil, ErrStopping)
			}
			p.failQueued()
			return
		}
	}
}

func (p *Partition) failQueued() {
	for {
		select {
		case r := <-p.sends:
			r.done(nil, ErrStopping)
		default:
			return
		}
	}
}

// commitLoop waits for proposed entries in order and answers their senders.
func (p *Partition) commitLoop() {
	defer p.wg.Done()
	for in := range p.inflight {
		err := in.future.Error()
		var results []fsm.SendResult
		if err == nil {
			results, err = fsm.Answer(fsm.Send{}, in.future.Response())
		}
		if err == nil {
			if len(results) != len(in.reqs) {
				err = fmt.Errorf("state machine answered %d results for %d batches", len(results), len(in.reqs))
			}
		}
		if err != nil {
			werr := p.raftError(err)
			for _, r := range in.reqs {
				r.done(nil, werr)
			}
			continue
		}
		next := p.fsm.NextOffset()
		for i, r := range in.reqs {
			r.lastSeq = results[i].LastSeq
			if results[i].Err != nil {
				r.done(nil, sendRefusal(results[i].Err, r.msgs, results[i].LastSeq))
				continue
			}
			if len(r.msgs) > 0 && !heldOffsets(results[i].Offsets, len(r.msgs), next) {
				// Never expected: the state machine answers only for
				// what the log holds. Refused rather than acknowledged.
				p.logger.Error("state machine answered a send with offsets the log does not hold",
					"producer", r.producer, "offsets", results[i].Offsets, "messages", len(r.msgs), "next", next)
				r.done(nil, wire.Errorf(transport.CodeUnknown, "the send's offsets could not be confirmed; nothing is acknowledged"))
				continue
			}
			r.done(results[i].Offsets, nil)
		}
	}
}

// sendRefusal maps the state machine's refusal of a producer's batch to
// what the producer is told. Nothing of the batch was stored.
func sendRefusal(err error, msgs []transport.MessageData, lastSeq int64) error {
	ids := fmt.Sprintf("sequence id %d is", msgs[0].SequenceID)
	if n := len(msgs); n > 1 {
		ids = fmt.Sprintf("sequence ids %d..%d include one", msgs[0].SequenceID, msgs[n-1].SequenceID)
	}
	switch {
	case errors.Is(err, fsm.ErrSequenceGap):
		return wire.Errorf(transport.CodeOutOfOrderSequence,
			"%s below the producer's last stored id %d and never stored (an earlier send failed while a later one succeeded); nothing of the send is stored: send its messages again as new ones",
			ids, lastSeq)
	case errors.Is(err, fsm.ErrSequenceForgotten):
		return wire.Errorf(transport.CodeOutOfOrderSequence,
			"%s below the producer's last stored id %d and older than the last %d sends kept for deduplication: whether it was stored cannot be told, so nothing of the send is stored or acknowledged",
			ids, lastSeq, fsm.RecentSends)
	case errors.Is(err, fsm.ErrSequenceOrder):
		return wire.Errorf(transport.CodeInvalidArgument, "sequence ids must increase within a send")
	}
	return wire.Errorf(transport.CodeUnknown, "%v", err)
}

// heldOffsets reports whether offsets give each of n messages an offset the
// log holds (below next).
func heldOffsets(offsets []uint64, n int, next uint64) bool {
	if len(offsets) != n {
		return false
	}
	for _, o := range offsets {
		if o >= next {
			return false
		}
	}
	return true
}

// raftError maps a Raft failure to what a client is told.
func (p *Partition) raftError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress),
		errors.Is(err, cluster.ErrNotLeader), errors.Is(err, cluster.ErrLeadershipLost):
		return p.notLeader()
	case errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, cluster.ErrTimeout):
		return wire.Errorf(transport.CodeTimeout, "the partition's Raft group did not commit in time")
	case errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, cluster.ErrClosed):
		return ErrStopping
	case errors.Is(err, fsm.ErrHalted):
		// Committed, and stored by the other replicas: a retry finds it
		// there, deduplicated.
		return wire.Errorf(transport.CodeServiceNotReady, "partition %s stopped on this node (%v); its other replicas take over", p.name, err)
	case errors.Is(err, syscall.ENOSPC):
		// The leader could not store the entry in its Raft log: it steps
		// down, and a member with space takes over.
		return wire.Errorf(transport.CodeServiceNotReady, "partition %s: its leader's disk is full (%v); another replica takes over: try again", p.name, err)
	}
	var te *transport.Error
	if errors.As(err, &te) {
		return te
	}
	return wire.Errorf(transport.CodeUnknown, "%v", err)
}

// ack queues acks; done (if not nil) is called after commit.
func (p *Partition) ack(r *ackReq) {
	select {
	case p.acks <- r:
	case <-p.stop:
		if r.done != nil {
			r.done(ErrStopping)
		}
	}
}

// maxAckEntryOffsets bounds the offsets of one ack entry.
const maxAckEntryOffsets = 256 << 10

// ackLoop gathers acks for AckInterval and commits them as one entry.
func (p *Partition) ackLoop() {
	defer p.wg.Done()
	for {
		var first *ackReq
		select {
		case first = <-p.acks:
		case <-p.stop:
			for {
				select {
				case r := <-p.acks:
					if r.done != nil {
						r.done(ErrStopping)
					}
				default:
					return
				}
			}
		}
		reqs := []*ackReq{first}
		offsets := len(first.offsets) + len(first.redelivered)
		timer := time.NewTimer(p.cfg.AckInterval)
	gather:
		// An entry stays well under the log's limits: about 8 bytes per
		// offset.
		for len(reqs) < 10000 && offsets < maxAckEntryOffsets {
			select {
			case r := <-p.acks:
				reqs = append(reqs, r)
				offsets += len(r.offsets) + len(r.redelivered)
			case <-timer.C:
				break gather
			case <-p.stop:
				timer.Stop()
				break gather
			}
		}
		timer.Stop()
		e := fsm.Acks{Acks: make([]fsm.SubAcks, len(reqs))}
		for i, r := range reqs {
			e.Acks[i] = fsm.SubAcks{Sub: r.sub, Offsets: r.offsets, Cumulative: r.cumulative, Redelivered: r.redelivered}
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.ApplyTimeout)
		errs, err := apply(ctx, p, e)
		cancel()
		for i, r := range reqs {
			rerr := err
			if rerr == nil && i < len(errs) && errs[i] != nil && len(r.offsets) > 0 {
				rerr = wire.Errorf(transport.CodeSubscriptionNotFound, "subscription %s does not exist", r.sub)
			}
			if rerr == nil {
				if d := p.dispatcherOf(r.sub); d != nil {
					d.acked(r.offsets, r.cumulative)
				}
			}
			if r.done != nil {
				r.done(rerr)
			}
		}
	}
}

// dispatcherOf returns a subscription's dispatcher, nil if none runs.
func (p *Partition) dispatcherOf(sub string) *dispatcher {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dispatchers[sub]
}

// SubscribeRequest is what a consumer asks of a subscription, and the
// consumer.
type SubscribeRequest struct {
	Subscription string
	Mode         transport.SubscriptionMode
	Initial      transport.InitialPosition
	// KeyShared is a key_shared consumer's policy (nil: auto_split).
	KeyShared *transport.KeySharedPolicy
	// NonDurable makes a reader (SUB-5): no Raft, nothing left behind; it
	// starts at Start, or at the initial position.
	NonDurable bool
	Start      *uint64

	// ID is the session's id for the consumer, Name its name (required)
	// and Priority its priority level (failover, shared).
	ID       uint64
	Name     string
	Priority int32
	// Out is the consumer's session, where its messages and events go.
	Out Outbox
	// Conn names the session's connection: consumers of one connection
	// share it (the dispatch engine tells connections apart by it).
	Conn uint64
}

// probeTimeout is how long a holder has to answer a ping before a
// newcomer replaces it (EX-2).
const probeTimeout = 2 * time.Second

// Subscribe creates the subscription if needed and makes the consumer one
// of its members (through Raft: the consumer set is replicated state,
// SUB-7), then attaches it to the subscription's dispatcher. It returns
// the consumer, which its session drives.
func (p *Partition) Subscribe(ctx context.Context, r SubscribeRequest) (*Consumer, error) {
	c := &Consumer{id: r.ID, name: r.Name, priority: r.Priority, out: r.Out, conn: r.Conn, p: p, sub: r.Subscription}
	d, err := p.attach(ctx, r, c, false)
	if err != nil {
		return nil, err
	}
	c.d = d
	return c, nil
}

// attach is Subscribe; probed says a holder was already probed once.
func (p *Partition) attach(ctx context.Context, r SubscribeRequest, c *Consumer, probed bool) (*dispatcher, error) {
	if !p.group.IsLeader() {
		return nil, p.notLeader()
	}
	p.mu.Lock()
	term := p.term
	p.mu.Unlock()
	var keyMode transport.KeySharedMode
	var outOfOrder bool
	if r.Mode == transport.KeyShared && r.KeyShared != nil {
		keyMode, outOfOrder = r.KeyShared.Mode, r.KeyShared.AllowOutOfOrder
		if keyMode == transport.Sticky {
			c.ranges = slices.Clone(r.KeyShared.Ranges)
		}
	}
	var pos uint64
	if r.NonDurable {
		var err error
		if pos, err = p.readerStart(r); err != nil {
			return nil, err
		}
	} else {
		again, err := p.join(ctx, r, keyMode, outOfOrder, c, probed)
		if again {
			return p.attach(ctx, r, c, true)
		}
		if err != nil {
			return nil, err
		}
	}
	return p.attachDispatcher(r, c, term, pos, keyMode, outOfOrder)
}

// readerStart is where a reader (SUB-5) starts: at its start offset, or
// at its initial position.
func (p *Partition) readerStart(r SubscribeRequest) (uint64, error) {
	if _, _, durable := p.fsm.Cursor(r.Subscription); durable {
		return 0, wire.Errorf(transport.CodeSubscriptionBusy, "subscription %s is durable; a reader needs a name of its own", r.Subscription)
	}
	start := p.fsm.StartOffset()
	switch {
	case r.Start != nil:
		return min(max(*r.Start, start), p.fsm.NextOffset()), nil
	case r.Initial == transport.Earliest:
		return start, nil
	default:
		return p.fsm.NextOffset(), nil
	}
}

// join checks that the consumer may join the subscription (checkJoin) and
// commits it as a member. When a connected holder is in the way, it is
// probed once first (EX-2): one whose connection died silently would lock
// the subscription until its connection times out. again says the holder
// did not answer and was replaced: the caller attaches again.
func (p *Partition) join(ctx context.Context, r SubscribeRequest, keyMode transport.KeySharedMode, outOfOrder bool, c *Consumer, probed bool) (again bool, err error) {
	holder, err := p.checkJoin(r, keyMode, outOfOrder, c)
	if err != nil {
		if holder != nil && !probed && !holder.out.Probe(probeTimeout) {
			p.logger.Info("consumer did not answer a ping; replacing it", "subscription", r.Subscription, "consumer", holder.name)
			p.detach(r.Subscription, holder)
			holder.out.Drop()
			return true, nil
		}
		return false, err
	}
	// A newcomer is on its way in, not away, until it is attached; a
	// returning member keeps its role meanwhile (SUB-7). Either way the
	// sweep leaves it alone until it is attached.
	ms, _, _, _, _ := p.members(r.Subscription)
	newcomer := !slices.ContainsFunc(ms, func(m memberState) bool { return m.Name == c.name })
	p.setJoining(r.Subscription, c.name, newcomer, 1)
	defer p.setJoining(r.Subscription, c.name, newcomer, -1)
	jr, err := apply(ctx, p, fsm.Join{
		Sub: r.Subscription, Mode: fsmMode(r.Mode), Initial: fsmInitial(r.Initial), KeyMode: fsmKeyMode(keyMode), OutOfOrder: outOfOrder,
		Member:  fsmMember(memberState{Name: c.name, Priority: c.priority, Ranges: c.ranges}),
		MaxSubs: p.cfg.MaxSubscriptions,
	})
	if err != nil {
		return false, err
	}
	if jr.Err != nil {
		return false, joinRefusal(r.Subscription, jr.Err)
	}
	c.gen = jr.Gen
	return false, nil
}

// attachDispatcher attaches the consumer to the subscription's
// dispatcher, started here if none runs or the one running is of another
// kind, unless leadership was lost (a new term) since the join began.
func (p *Partition) attachDispatcher(r SubscribeRequest, c *Consumer, term, pos uint64, keyMode transport.KeySharedMode, outOfOrder bool) (*dispatcher, error) {
	p.mu.Lock()
	if !r.NonDurable && (!p.leading || p.term != term) {
		// Leadership was lost while the join committed.
		p.mu.Unlock()
		return nil, p.notLeader()
	}
	d := p.dispatchers[r.Subscription]
	if d != nil && d.consumerCount() > 0 && (d.mode != r.Mode || d.durable == r.NonDurable) {
		p.mu.Unlock()
		if d.durable == r.NonDurable {
			return nil, wire.Errorf(transport.CodeSubscriptionBusy, "subscription %s is in use by a %s", r.Subscription, map[bool]string{true: "consumer", false: "reader"}[d.durable])
		}
		return nil, wire.Errorf(transport.CodeSubscriptionBusy, wire.SubscriptionType, modeName(d.mode), modeName(r.Mode))
	}
	var old *dispatcher
	if d == nil || d.mode != r.Mode || d.durable == r.NonDurable || d.keyMode != keyMode || d.outOfOrder != outOfOrder {
		old = d
		d = newDispatcher(p, r.Subscription, r.Mode, !r.NonDurable, pos, keyMode, outOfOrder)
		p.dispatchers[r.Subscription] = d
		d.start()
	}
	// Attached under the partition's lock, so that a detach cannot close
	// the dispatcher between finding it and attaching to it.
	err := d.add(c)
	p.mu.Unlock()
	if old != nil {
		old.close()
	}
	if err != nil {
		// Another consumer won a race for the role: the join just
		// committed must not outlive the refusal.
		if !r.NonDurable && d.named(c.name) == nil {
			p.leave(r.Subscription, memberState{Name: c.name, Gen: c.gen})
		}
		return nil, err
	}
	return d, nil
}

// setJoining counts a join in progress up or down; newcomer says the
// name was not a member when it began.
func (p *Partition) setJoining(sub, name string, newcomer bool, delta int) {
	p.joinMu.Lock()
	defer p.joinMu.Unlock()
	k := [2]string{sub, name}
	count := func(m map[[2]string]int) {
		if m[k] += delta; m[k] <= 0 {
			delete(m, k)
		}
	}
	count(p.attaching)
	if newcomer {
		count(p.joining)
	}
}

// isJoining reports whether a newcomer's join is in progress.
func (p *Partition) isJoining(sub, name string) bool {
	p.joinMu.Lock()
	defer p.joinMu.Unlock()
	return p.joining[[2]string{sub, name}] > 0
}

// isAttaching reports whether any join of that name is in progress.
func (p *Partition) isAttaching(sub, name string) bool {
	p.joinMu.Lock()
	defer p.joinMu.Unlock()
	return p.attaching[[2]string{sub, name}] > 0
}

// inGrace reports whether this leadership's reconnect grace runs.
func (p *Partition) inGrace() bool {
	return time.Now().UnixNano() < p.graceUntil.Load()
}

// checkJoin refuses a consumer that cannot join: another mode or key
// policy while the subscription has members (SUB-2), a reader's name, or
// what the engine's admission refuses (EX-1, names, KS-4; see
// subscription.Admit). Members that are away after a leader change count:
// their roles are kept for them (SUB-7). When the conflict is with a
// connected consumer, it is returned to be probed (EX-2).
func (p *Partition) checkJoin(r SubscribeRequest, keyMode transport.KeySharedMode, outOfOrder bool, c *Consumer) (*Consumer, error) {
	ms, mode, km, ooo, _ := p.members(r.Subscription)
	d := p.dispatcherOf(r.Subscription)
	connected := d != nil && d.consumerCount() > 0
	if connected && !d.durable {
		return nil, wire.Errorf(transport.CodeSubscriptionBusy, "subscription %s is in use by a reader", r.Subscription)
	}
	if connected && len(ms) == 0 {
		mode, km, ooo = d.mode, d.keyMode, d.outOfOrder
	}
	if len(ms) > 0 || connected {
		if mode != r.Mode {
			return nil, wire.Errorf(transport.CodeSubscriptionBusy, wire.SubscriptionType, modeName(mode), modeName(r.Mode))
		}
		if r.Mode == transport.KeyShared && (km != keyMode || ooo != outOfOrder) {
			return nil, wire.Errorf(transport.CodeSubscriptionBusy, wire.SubscriptionType, keyPolicyName(km, ooo), keyPolicyName(keyMode, outOfOrder))
		}
	}
	if connected {
		return d.admit(c)
	}
	_, err := subscription.Admit(subscription.Admission{
		Mode:     subscription.Mode(r.Mode),
		Keys:     keyPolicy(keyMode, outOfOrder),
		Consumer: c.engine(),
		Members:  engineMembers(ms),
		Grace:    p.inGrace(),
	})
	return nil, busyError(err)
}

// detach detaches a consumer; it leaves the subscription's members, and if
// the subscription is left without consumers its dispatcher stops.
func (p *Partition) detach(sub string, c *Consumer) {
	p.mu.Lock()
	d := p.dispatchers[sub]
	p.mu.Unlock()
	if d == nil {
		return
	}
	found, empty := d.remove(c)
	if found && d.durable && c.gen != 0 && d.named(c.name) == nil {
		m := memberState{Name: c.name, Gen: c.gen}
		if subscription.Mode(d.mode).SharedNames() {
			m.Gen = 0 // the last one of the name out leaves
		}
		p.leave(sub, m)
	}
	if empty {
		p.mu.Lock()
		if p.dispatchers[sub] == d && d.consumerCount() == 0 {
			delete(p.dispatchers, sub)
			p.mu.Unlock()
			d.close()
			return
		}
		p.mu.Unlock()
	}
}

// leave removes members from a subscription and waits for the commit, so
// that their roles have moved on when it returns. A node that no longer
// leads leaves it to the next leader's sweep.
func (p *Partition) leave(sub string, ms ...memberState) {
	if !p.group.IsLeader() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.ApplyTimeout)
	defer cancel()
	e := fsm.Leave{Sub: sub}
	for _, m := range ms {
		e.Members = append(e.Members, fsmMember(m))
	}
	if _, err := apply(ctx, p, e); err != nil {
		p.logger.Warn("could not remove consumers from a subscription; the leader's sweep will", "subscription", sub, "err", err)
	}
}

// sweepLoop removes, on the leader, the members that stayed away longer
// than the reconnect grace: after a leader change, consumers that did not
// come back give up their roles (SUB-7); in steady state, members whose
// leave failed are removed.
func (p *Partition) sweepLoop() {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.SweepInterval)
	defer t.Stop()
	away := map[[2]string]time.Time{}
	var term uint64
	var last time.Time
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.mu.Lock()
			leading, cur, since := p.leading, p.term, p.leaderSince
			p.mu.Unlock()
			if !leading || cur != term {
				clear(away)
				term, last = cur, time.Time{}
				if !leading {
					continue
				}
			}
			seen := map[[2]string]time.Time{}
			gone := map[string][]memberState{}
			for sub, ms := range p.fsm.AllMembers() {
				var names map[string]bool
				if d := p.dispatcherOf(sub); d != nil {
					names = d.connectedNames()
				}
				for _, m := range ms {
					if names[m.Name] || p.isAttaching(sub, m.Name) {
						continue
					}
					k := [2]string{sub, m.Name}
					first, ok := away[k]
					if !ok {
						first = since
						if last.After(first) {
							first = last
						}
					}
					if now.Sub(first) >= p.cfg.ReconnectGrace {
						gone[sub] = append(gone[sub], memberState{Name: m.Name, Gen: m.Gen})
						continue
					}
					seen[k] = first
				}
			}
			away, last = seen, now
			// Roles kept for away members lapse when the grace ends.
			p.Applied(0, false)
			for sub, ms := range gone {
				p.logger.Info("consumers did not come back within the reconnect grace; their roles move on", "subscription", sub, "consumers", len(ms))
				p.leave(sub, ms...)
			}
		}
	}
}

// ClaimProducer reserves a producer name on the partition for a session
// (MSG-4: a second producer with the same name is refused). The session
// that holds the name may claim it again: a client re-attaching after a
// refused send.
func (p *Partition) ClaimProducer(name string, owner Holder) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.owners[name]; ok && s != owner {
		return false
	}
	p.owners[name] = owner
	return true
}

// ReleaseProducer frees a producer name its session held.
func (p *Partition) ReleaseProducer(name string, owner Holder) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.owners[name] == owner {
		delete(p.owners, name)
	}
}

// Attached reports whether any producer or consumer is attached.
func (p *Partition) Attached() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.owners) > 0 {
		return true
	}
	for _, d := range p.dispatchers {
		if d.consumerCount() > 0 {
			return true
		}
	}
	return false
}

// Damaged reports, once, that this copy was found damaged on disk.
func (p *Partition) Damaged(err error) {
	p.damage.CompareAndSwap(nil, &err)
	if p.onDamage != nil {
		p.damageOnce.Do(func() { p.onDamage(err) })
	}
}

// DamageFound returns the first damage reported, or nil.
func (p *Partition) DamageFound() error {
	if err := p.damage.Load(); err != nil {
		return *err
	}
	return nil
}

package partition

import (
	"cmp"
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
	// Wait waits for a proposal's future, or fails it once the group
	// has closed (hashicorp/raft may drop a future at shutdown).
	Wait(f raft.Future) error
	// Apply proposes an entry and waits for the state machine's answer.
	Apply(ctx context.Context, cmd []byte) (any, error)
	IsLeader() bool
	// Term returns this node's current Raft term.
	Term() uint64
	// Leader returns the leader's node id, empty when unknown.
	Leader() (id, addr string)
	// WatchLeaderFunc reports leadership changes to a function.
	WatchLeaderFunc(fn func(cluster.Leadership)) *cluster.LeaderWatch
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
	// OnCommit is told how long each entry of sends took from its
	// proposal to its commit (the Raft commit latency); it must not
	// block. May be nil.
	OnCommit func(time.Duration)
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
	// ProbeTimeout is how long a connected holder in a newcomer's way has
	// to answer a ping before the newcomer replaces it (EX-2). Default
	// DefaultProbeTimeout.
	ProbeTimeout time.Duration
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
		ProbeTimeout:      DefaultProbeTimeout,
		SweepInterval:     250 * time.Millisecond,
		RetentionInterval: DefaultRetentionInterval,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.MaxEntryBytes = cmp.Or(c.MaxEntryBytes, d.MaxEntryBytes)
	c.MaxInflight = cmp.Or(c.MaxInflight, d.MaxInflight)
	c.ApplyTimeout = cmp.Or(c.ApplyTimeout, d.ApplyTimeout)
	c.AckInterval = cmp.Or(c.AckInterval, d.AckInterval)
	c.ReconnectGrace = cmp.Or(c.ReconnectGrace, d.ReconnectGrace)
	c.ProbeTimeout = cmp.Or(c.ProbeTimeout, d.ProbeTimeout)
	c.SweepInterval = cmp.Or(c.SweepInterval, d.SweepInterval)
	c.RetentionInterval = cmp.Or(c.RetentionInterval, d.RetentionInterval)
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
	if c.ApplyTimeout < 0 || c.AckInterval < 0 || c.ReconnectGrace < 0 || c.ProbeTimeout < 0 || c.SweepInterval < 0 || c.RetentionInterval < 0 {
		errs = append(errs, errors.New("negative durations"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("partition: config: %w", err)
	}
	return nil
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
	// traffic counts what this copy stored and delivered while it led.
	traffic Traffic

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

	stop chan struct{}
	// The group's leadership is followed with no goroutine waiting for
	// it: watch hands each change to leadership, which runs
	// leadershipChanged in a goroutine of its own while there is a change
	// to take (worker.go).
	watch      *cluster.LeaderWatch
	leadership *latest[cluster.Leadership]
	// The loops that hold no goroutine while idle (worker.go): the write
	// path's two stages (queues: the sends, the entries in flight), the
	// ack path, the sweep and retention.
	proposer         *worker[*sendReq]
	committer        *worker[inflight]
	acker            *worker[*ackReq]
	sweep, retention *timed
	sweepState       sweepState // the sweep's own

	mu          sync.Mutex
	dispatchers map[string]*dispatcher
	owners      map[string]Holder // producer name → the session holding it
	lastPublish int64
	// leading, term and leaderSince follow this node's leadership, as
	// leadershipChanged, which alone writes them, last took it; the
	// reconnect grace (SUB-7) counts from leaderSince.
	leading     bool
	term        uint64
	leaderSince time.Time
	// leadChanged is closed, and replaced, when leading and term change.
	leadChanged chan struct{}
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

// queueDepth bounds the sends and the acks queued for the write and ack
// paths; a full queue pushes back on the session's connection. The queues
// are allocated with the partition, idle or not, and scanned by the
// garbage collector on every cycle: 1,024 of each, with the in-flight
// queue, were a third of an idle node's heap at a thousand partitions.
// Each entry is a whole batch of a producer or of a consumer's acks, and
// the proposer empties the queue into every entry it makes.
const queueDepth = 256

// New checks the configuration and returns a partition that has started
// nothing.
func New(cfg Config) (*Partition, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Partition{
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
		stop:         make(chan struct{}),
		leadChanged:  make(chan struct{}),
		dispatchers:  map[string]*dispatcher{},
		owners:       map[string]Holder{},
		joining:      map[[2]string]int{},
		attaching:    map[[2]string]int{},
	}
	p.proposer = newWorker(queueDepth, p.proposeLoop, func(r *sendReq) { r.done(nil, ErrStopping) }, p.stop)
	p.committer = newWorker(cfg.MaxInflight, p.commitLoop, p.commit, p.stop)
	p.acker = newWorker(queueDepth, p.ackLoop, func(r *ackReq) {
		if r.done != nil {
			r.done(ErrStopping)
		}
	}, p.stop)
	p.leadership = newLatest(p.leadershipChanged)
	p.sweep = newTimed(cfg.SweepInterval, p.sweepOnce)
	p.retention = newTimed(cfg.RetentionInterval, p.retainOnce)
	return p, nil
}

// Name returns the partition's name.
func (p *Partition) Name() string { return p.name }

// Start follows the group's leadership and arms the sweep's and
// retention's timers; the write and ack paths start with their first
// request.
func (p *Partition) Start() {
	p.watch = p.group.WatchLeaderFunc(p.leadership.set)
	p.sweep.start()
	p.retention.start()
}

// leadershipChanged follows the group's leadership, run by p.leadership
// with the latest change (runs never overlap): when this node stops
// leading, its consumers and producers are closed so that clients look
// the leader up again; every change is passed on to onLeadership.
func (p *Partition) leadershipChanged(l cluster.Leadership) {
	if closed(p.stop) {
		return
	}
	// leading and term are leadershipChanged's alone to write: they are
	// what its last run took.
	p.mu.Lock()
	was, term := p.leading, p.term
	p.mu.Unlock()
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
	p.mu.Lock()
	p.leading, p.term = l.IsLeader, l.Term
	close(p.leadChanged)
	p.leadChanged = make(chan struct{})
	p.mu.Unlock()
	if l.IsLeader {
		p.sweep.wake() // after leading is set: the sweep reads it
	}
	if p.onLeadership != nil {
		p.onLeadership(l)
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

// Wait waits for the loops, answers what they left queued, then stops the
// dispatchers. Call it after StopAccepting and after the Raft group is
// closed.
func (p *Partition) Wait() {
	if p.watch != nil {
		p.watch.Stop()
	}
	p.leadership.stop()
	p.proposer.stop() // first: it hands entries to the committer
	p.committer.stop()
	p.acker.stop()
	p.sweep.stop()
	p.retention.stop()
	p.mu.Lock()
	ds := slices.Collect(maps.Values(p.dispatchers))
	p.dispatchers = map[string]*dispatcher{}
	p.mu.Unlock()
	closeDispatchers(ds)
}

// Applied wakes the dispatchers, and the sweep of a partition without
// members, after the state machine applied an entry
// (fsm.Config.Applied); data says it only added messages.
func (p *Partition) Applied(_ uint64, data bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leading {
		p.sweep.wake()
	}
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
	case errors.Is(err, fsm.ErrSubscriptionNotFound):
		// Deleted meanwhile (a seek's subscription, by an operator).
		return wire.Errorf(transport.CodeSubscriptionNotFound, "%v", err)
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

// Traffic counts what a partition's copy stored (payload bytes committed
// through it, as leader) and delivered to consumers (messages and payload
// bytes) since it opened. Messages stored are its log's next offset.
type Traffic struct {
	BytesIn               atomic.Uint64
	MessagesOut, BytesOut atomic.Uint64
}

// Traffic returns the partition's counts; they start at zero when the copy
// opens and grow while it leads.
func (p *Partition) Traffic() *Traffic { return &p.traffic }

package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fabriq-io/fabriq/cluster"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/storage"
	"github.com/fabriq-io/fabriq/transport"
)

// raftGroup is what a partition needs of its Raft group (cluster.Group).
type raftGroup interface {
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

// partitionConfig tunes a partition's write and ack paths.
type partitionConfig struct {
	// MaxEntryBytes bounds the messages grouped into one Raft entry.
	MaxEntryBytes int
	// MaxInflight bounds the entries proposed and not yet committed.
	MaxInflight int
	// ApplyTimeout bounds how long a proposal may wait for commit.
	ApplyTimeout time.Duration
	// AckInterval is how long acks are gathered into one entry (CUR-2).
	AckInterval time.Duration
	// MaxMessageBytes refuses larger messages (MSG-6).
	MaxMessageBytes int
}

func defaultPartitionConfig() partitionConfig {
	return partitionConfig{
		MaxEntryBytes:   6 << 20,
		MaxInflight:     64,
		ApplyTimeout:    10 * time.Second,
		AckInterval:     2 * time.Millisecond,
		MaxMessageBytes: 5 << 20,
	}
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
	sub        string
	offsets    []uint64
	cumulative bool
	done       func(err error) // may be nil
}

// inflight is a proposed send entry and the requests it carries.
type inflight struct {
	future raft.ApplyFuture
	reqs   []*sendReq
}

// partition runs one stream partition on this node: its log, its state
// machine and Raft group, the write path that groups concurrent sends into
// one entry, the ack path, and, on the leader, the dispatchers.
type partition struct {
	name   string
	cfg    partitionConfig
	log    *storage.Log
	fsm    *fsm
	group  raftGroup
	logger *slog.Logger
	// notLeader builds the error for a request that reached a follower.
	notLeader func() error
	// onLeadership is told every leadership change (the node announces
	// it to the cluster); it must not block. May be nil.
	onLeadership func(cluster.Leadership)

	sends    chan *sendReq
	acks     chan *ackReq
	inflight chan inflight
	stop     chan struct{}
	wg       sync.WaitGroup

	mu          sync.Mutex
	dispatchers map[string]*dispatcher
	owners      map[string]*session // producer name → the session holding it
	lastPublish int64
}

func newPartition(name string, cfg partitionConfig, log *storage.Log, f *fsm, g raftGroup, logger *slog.Logger, notLeader func() error) *partition {
	return &partition{
		name:        name,
		cfg:         cfg,
		log:         log,
		fsm:         f,
		group:       g,
		logger:      logger.With("partition", name),
		notLeader:   notLeader,
		sends:       make(chan *sendReq, 1024),
		acks:        make(chan *ackReq, 1024),
		inflight:    make(chan inflight, cfg.MaxInflight),
		stop:        make(chan struct{}),
		dispatchers: map[string]*dispatcher{},
		owners:      map[string]*session{},
	}
}

// start runs the write, ack and leadership loops.
func (p *partition) start() {
	p.wg.Add(4)
	go p.proposeLoop()
	go p.commitLoop()
	go p.ackLoop()
	go p.leaderLoop(p.group.WatchLeader())
}

// leaderLoop follows the group's leadership: when this node stops leading,
// its consumers and producers are closed so that clients look the leader
// up again; every change is passed on to onLeadership.
func (p *partition) leaderLoop(w *cluster.LeaderWatch) {
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
				p.evictAll()
			}
			was, term = l.IsLeader, l.Term
			if p.onLeadership != nil {
				p.onLeadership(l)
			}
		}
	}
}

// evictAll closes every dispatcher with its consumers and every producer,
// telling their sessions.
func (p *partition) evictAll() {
	p.mu.Lock()
	ds := p.dispatchers
	p.dispatchers = map[string]*dispatcher{}
	owners := p.owners
	p.owners = map[string]*session{}
	p.mu.Unlock()
	for _, d := range ds {
		for _, c := range d.detachAll() {
			c.out.evictConsumer(c.id)
		}
		d.close()
	}
	for name, s := range owners {
		s.evictProducer(p, name)
	}
}

// stopAccepting makes the partition refuse new work; what is in flight is
// answered once the Raft group closes (its futures fail) and wait returns.
func (p *partition) stopAccepting() {
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

// wait waits for the loops, then stops the dispatchers. Call it after
// stopAccepting and after the Raft group is closed.
func (p *partition) wait() {
	p.wg.Wait()
	p.mu.Lock()
	ds := p.dispatchers
	p.dispatchers = map[string]*dispatcher{}
	p.mu.Unlock()
	for _, d := range ds {
		d.close()
	}
}

// onApplied wakes the dispatchers after the state machine applied entries.
func (p *partition) onApplied(uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.dispatchers {
		d.notify()
	}
}

// errStopping is given to requests that were waiting when the partition
// closed.
var errStopping = wireError(transport.CodeServiceNotReady, "partition is closing")

// send queues a producer's batch; done is called once, after commit or on
// failure. It blocks while the queue is full (backpressure on the
// producer's connection) and fails if ctx ends first.
func (p *partition) send(ctx context.Context, r *sendReq) {
	if !p.group.IsLeader() {
		r.done(nil, p.notLeader())
		return
	}
	r.size = entrySize(r.producer, r.msgs)
	if r.size > p.cfg.MaxEntryBytes {
		r.done(nil, wireError(transport.CodeTooLarge, "a send of about %d bytes, stored, is above the limit of %d", r.size, p.cfg.MaxEntryBytes))
		return
	}
	select {
	case p.sends <- r:
	case <-ctx.Done():
		r.done(nil, wireError(transport.CodeTimeout, "send queue full: %v", ctx.Err()))
	case <-p.stop:
		r.done(nil, errStopping)
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

// publishTime returns a leader publish time that never goes back.
func (p *partition) publishTime() int64 {
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
func (p *partition) proposeLoop() {
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
		e := sendEntry{PublishTime: p.publishTime(), Batches: make([]batchEntry, len(reqs))}
		for i, r := range reqs {
			e.Batches[i] = batchEntry{Producer: r.producer, Messages: r.msgs}
		}
		data, err := encodeEntry(entrySend, e)
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
				r.done(nil, errStopping)
			}
			p.failQueued()
			return
		}
	}
}

func (p *partition) failQueued() {
	for {
		select {
		case r := <-p.sends:
			r.done(nil, errStopping)
		default:
			return
		}
	}
}

// commitLoop waits for proposed entries in order and answers their senders.
func (p *partition) commitLoop() {
	defer p.wg.Done()
	for in := range p.inflight {
		err := in.future.Error()
		var results []sendResult
		if err == nil {
			results, _ = in.future.Response().([]sendResult)
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
		for i, r := range in.reqs {
			r.lastSeq = results[i].LastSeq
			if errors.Is(results[i].Err, errSequenceGap) {
				first, last := r.msgs[0].SequenceID, r.msgs[len(r.msgs)-1].SequenceID
				r.done(nil, wireError(transport.CodeNotAllowed,
					"sequence ids %d..%d are below the producer's last stored %d and were never stored: an earlier send failed; send these again",
					first, last, results[i].LastSeq))
				continue
			}
			r.done(results[i].Offsets, nil)
		}
	}
}

// raftError maps a Raft failure to what a client is told.
func (p *partition) raftError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress),
		errors.Is(err, cluster.ErrNotLeader), errors.Is(err, cluster.ErrLeadershipLost):
		return p.notLeader()
	case errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, cluster.ErrTimeout):
		return wireError(transport.CodeTimeout, "the partition's Raft group did not commit in time")
	case errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, cluster.ErrClosed):
		return errStopping
	}
	var te *transport.Error
	if errors.As(err, &te) {
		return te
	}
	return wireError(transport.CodeUnknown, "%v", err)
}

// ack queues acks; done (if not nil) is called after commit.
func (p *partition) ack(r *ackReq) {
	select {
	case p.acks <- r:
	case <-p.stop:
		if r.done != nil {
			r.done(errStopping)
		}
	}
}

// ackLoop gathers acks for AckInterval and commits them as one entry.
func (p *partition) ackLoop() {
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
						r.done(errStopping)
					}
				default:
					return
				}
			}
		}
		reqs := []*ackReq{first}
		timer := time.NewTimer(p.cfg.AckInterval)
	gather:
		for len(reqs) < 10000 {
			select {
			case r := <-p.acks:
				reqs = append(reqs, r)
			case <-timer.C:
				break gather
			case <-p.stop:
				timer.Stop()
				break gather
			}
		}
		timer.Stop()
		e := ackEntry{Acks: make([]subAcks, len(reqs))}
		for i, r := range reqs {
			e.Acks[i] = subAcks{Sub: r.sub, Offsets: r.offsets, Cumulative: r.cumulative}
		}
		data, err := encodeEntry(entryAcks, e)
		var res any
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), p.cfg.ApplyTimeout)
			res, err = p.group.Apply(ctx, data)
			cancel()
		}
		if err != nil {
			err = p.raftError(err)
		}
		errs, _ := res.([]error)
		for i, r := range reqs {
			rerr := err
			if rerr == nil && i < len(errs) && errs[i] != nil && len(r.offsets) > 0 {
				rerr = wireError(transport.CodeSubscriptionNotFound, "subscription %s does not exist", r.sub)
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

// apply proposes one entry and waits for it, mapping failures for clients.
func (p *partition) apply(ctx context.Context, t entryType, body any) (any, error) {
	data, err := encodeEntry(t, body)
	if err != nil {
		return nil, err
	}
	res, err := p.group.Apply(ctx, data)
	if err != nil {
		return nil, p.raftError(err)
	}
	return res, nil
}

// dispatcherOf returns a subscription's dispatcher, nil if none runs.
func (p *partition) dispatcherOf(sub string) *dispatcher {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dispatchers[sub]
}

// subscribe creates the subscription if needed (through Raft) and attaches
// the consumer to its dispatcher. A non-durable subscription (a reader)
// skips Raft: it starts at start, or at the initial position, and leaves
// nothing behind.
func (p *partition) subscribe(ctx context.Context, sub string, mode transport.SubscriptionMode, initial transport.InitialPosition, c *consumer, nonDurable bool, start *uint64) (*dispatcher, error) {
	return p.attach(ctx, sub, mode, initial, c, nonDurable, start, false)
}

// probeTimeout is how long an exclusive holder has to answer a ping
// before a newcomer replaces it (EX-2).
const probeTimeout = 2 * time.Second

// attach is subscribe; probed says the holder was already probed once.
func (p *partition) attach(ctx context.Context, sub string, mode transport.SubscriptionMode, initial transport.InitialPosition, c *consumer, nonDurable bool, start *uint64, probed bool) (*dispatcher, error) {
	if !p.group.IsLeader() {
		return nil, p.notLeader()
	}
	var pos uint64
	if nonDurable {
		if _, _, durable := p.fsm.cursor(sub); durable {
			return nil, wireError(transport.CodeSubscriptionBusy, "subscription %s is durable; a reader needs a name of its own", sub)
		}
		info := p.log.Info()
		switch {
		case start != nil:
			pos = min(max(*start, info.StartOffset), p.fsm.nextOffset())
		case initial == transport.Earliest:
			pos = info.StartOffset
		default:
			pos = p.fsm.nextOffset()
		}
	} else if _, err := p.apply(ctx, entryCreateSubscription, createSubscriptionEntry{Name: sub, Mode: mode, Initial: initial}); err != nil {
		return nil, err
	}
	p.mu.Lock()
	d := p.dispatchers[sub]
	if d != nil && d.consumerCount() > 0 && (d.mode != mode || d.durable == nonDurable) {
		p.mu.Unlock()
		if d.durable == nonDurable {
			return nil, wireError(transport.CodeSubscriptionBusy, "subscription %s is in use by a %s", sub, map[bool]string{true: "consumer", false: "reader"}[d.durable])
		}
		return nil, wireError(transport.CodeSubscriptionBusy, msgSubscriptionType, modeName(d.mode), modeName(mode))
	}
	var old *dispatcher
	if d == nil || d.mode != mode || d.durable == nonDurable {
		old = d
		d = newDispatcher(p, sub, mode, !nonDurable, pos)
		if pn, err := geofabric.ParsePartition(p.name); err == nil {
			d.partition, d.stream = pn.Index, pn.Stream.String()
		}
		p.dispatchers[sub] = d
		d.start()
	}
	// Attached under the partition's lock, so that a detach cannot close
	// the dispatcher between finding it and attaching to it.
	err := d.add(c)
	p.mu.Unlock()
	if old != nil {
		old.close()
	}
	if err != nil && mode == transport.Exclusive && !probed {
		// EX-2: before refusing, make sure the holder is alive; a holder
		// whose connection died silently would lock the subscription
		// until its connection times out.
		// A holder on the newcomer's own connection is alive: that
		// connection is being read right now (and could not read a Pong
		// while this waits).
		if h := d.holder(); h != nil && h.out != c.out && !h.out.probe(probeTimeout) {
			p.logger.Info("exclusive consumer did not answer a ping; replacing it", "subscription", sub, "consumer", h.name)
			p.detach(sub, h)
			h.out.drop()
			return p.attach(ctx, sub, mode, initial, c, nonDurable, start, true)
		}
	}
	if err != nil {
		return nil, err
	}
	return d, nil
}

// detach detaches a consumer; if the subscription is left without
// consumers its dispatcher stops.
func (p *partition) detach(sub string, c *consumer) {
	p.mu.Lock()
	d := p.dispatchers[sub]
	p.mu.Unlock()
	if d == nil {
		return
	}
	if d.remove(c) {
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

// claimProducer reserves a producer name on the partition for a session
// (MSG-4: a second producer with the same name is refused). The session
// that holds the name may claim it again: a client re-attaching after a
// refused send.
func (p *partition) claimProducer(name string, owner *session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.owners[name]; ok && s != owner {
		return false
	}
	p.owners[name] = owner
	return true
}

// releaseProducer frees a producer name its session held.
func (p *partition) releaseProducer(name string, owner *session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.owners[name] == owner {
		delete(p.owners, name)
	}
}

// attached reports whether any producer or consumer is attached.
func (p *partition) attached() bool {
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

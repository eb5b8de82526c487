package partition

import (
	"context"
	"slices"
	"time"

	"github.com/fabriq-io/fabriq/broker/fsm"
	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/subscription"
	"github.com/fabriq-io/fabriq/transport"
)

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

// DefaultProbeTimeout is how long, by default, a holder has to answer a
// ping before a newcomer replaces it (EX-2).
const DefaultProbeTimeout = 2 * time.Second

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
	term, err := p.leadingTerm(ctx)
	if err != nil {
		return nil, err
	}
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
		// A newcomer is on its way in, not away, until it is attached —
		// after its join has committed, too: counted away in the
		// reconnect grace meanwhile, it would depose a failover master
		// before it could take over (SUB-7, FO-8). A returning member
		// keeps its role meanwhile. Either way the sweep leaves it alone
		// until it is attached.
		ms, _, _, _, _ := p.members(r.Subscription)
		newcomer := !slices.ContainsFunc(ms, func(m memberState) bool { return m.Name == c.name })
		p.setJoining(r.Subscription, c.name, newcomer, 1)
		defer p.setJoining(r.Subscription, c.name, newcomer, -1)
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
		if holder != nil && !probed && !holder.out.Probe(p.cfg.ProbeTimeout) {
			p.logger.Info("consumer did not answer a ping; replacing it", "subscription", r.Subscription, "consumer", holder.name)
			p.detach(r.Subscription, holder)
			holder.out.Drop()
			return true, nil
		}
		return false, err
	}
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

// leadingTerm returns the term in which this node leads the partition.
// Right after Raft made this node leader, leadershipChanged may not have
// taken it yet (a subscribe sent as soon as the stream was created, whose
// leader the node waited for, found it so): the request waits for it,
// until ctx ends, rather than being refused.
func (p *Partition) leadingTerm(ctx context.Context) (uint64, error) {
	for {
		if !p.group.IsLeader() {
			return 0, p.notLeader()
		}
		p.mu.Lock()
		leading, term, changed := p.leading, p.term, p.leadChanged
		p.mu.Unlock()
		if leading && term == p.group.Term() {
			return term, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, p.notLeader()
		case <-p.stop:
			return 0, ErrStopping
		}
	}
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

// sweepState is what the sweep keeps from one run to the next.
type sweepState struct {
	// away holds, per member away at the last run, since when it counts
	// as away.
	away map[[2]string]time.Time
	term uint64
	// last is when the previous run looked; the zero time after a
	// leadership change.
	last time.Time
	// slept is set when the sweep went to sleep with nobody to sweep.
	slept bool
}

// sweepOnce is a run of the sweep, which removes, on the leader, the
// members that stayed away longer than the reconnect grace: after a
// leader change, consumers that did not come back give up their roles
// (SUB-7); in steady state, members whose leave failed are removed. It
// runs every SweepInterval while this node leads a partition with
// members, and sleeps otherwise (returns false): most replicas of a node
// follow, and a thousand idle leaders ticking for nothing cost a node 4 %
// of its CPU. Leadership gained and an entry applied on the leader
// (members join through Raft) wake it.
func (p *Partition) sweepOnce(now time.Time) bool {
	if closed(p.stop) {
		return false
	}
	s := &p.sweepState
	p.mu.Lock()
	leading, cur, since := p.leading, p.term, p.leaderSince
	p.mu.Unlock()
	if !leading || cur != s.term {
		clear(s.away)
		s.term, s.last, s.slept = cur, time.Time{}, false
		if !leading {
			return false
		}
	}
	if s.slept {
		// Nobody was away before the wake, a run ago.
		s.last, s.slept = now.Add(-p.cfg.SweepInterval), false
	}
	all := p.fsm.AllMembers()
	if len(all) == 0 {
		clear(s.away)
		s.slept = true
		return false
	}
	seen := map[[2]string]time.Time{}
	gone := map[string][]memberState{}
	for sub, ms := range all {
		var names map[string]bool
		if d := p.dispatcherOf(sub); d != nil {
			names = d.connectedNames()
		}
		for _, m := range ms {
			if names[m.Name] || p.isAttaching(sub, m.Name) {
				continue
			}
			k := [2]string{sub, m.Name}
			first, ok := s.away[k]
			if !ok {
				first = since
				if s.last.After(first) {
					first = s.last
				}
			}
			if now.Sub(first) >= p.cfg.ReconnectGrace {
				gone[sub] = append(gone[sub], memberState{Name: m.Name, Gen: m.Gen})
				continue
			}
			seen[k] = first
		}
	}
	s.away, s.last = seen, now
	// Roles kept for away members lapse when the grace ends.
	p.Applied(0, false)
	for sub, ms := range gone {
		p.logger.Info("consumers did not come back within the reconnect grace; their roles move on", "subscription", sub, "consumers", len(ms))
		p.leave(sub, ms...)
	}
	return true
}

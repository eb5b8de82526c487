package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/vmihailenco/msgpack/v5"
)

// NodeMeta is what a node advertises about itself to the cluster.
type NodeMeta struct {
	ID         string // stable node id, the node's name in memberlist
	Region     string // region of the node, for placement
	ClientAddr string // host:port of the client protocol
	RaftAddr   string // host:port of the Raft port
	HTTPAddr   string // host:port of the HTTP port
	Version    string // fabriq version the node runs
	// RaftProtocol is what the node speaks on its Raft port (see
	// RaftProtocol): a Membership advertises this version's, and reads
	// ProtocolGroups from nodes that advertise none (older versions).
	RaftProtocol int
	// Catalog is the newest metadata catalog format the node applies
	// (meta.CatalogFormat); 0 from nodes that advertise none (older
	// versions). The metadata leader writes entries of a newer format only
	// once every node reads it.
	Catalog int
}

// metaWire is NodeMeta in memberlist's node metadata: a msgpack map with
// one-letter keys, empty fields left out, so that fields can be added
// (an older node ignores keys it does not know). The id is the node's name
// and is not repeated. Instance is a random number drawn when the
// Membership is created: it tells a restarted node from its previous run.
type metaWire struct {
	Region     string `msgpack:"r,omitempty"`
	ClientAddr string `msgpack:"c,omitempty"`
	RaftAddr   string `msgpack:"a,omitempty"`
	HTTPAddr   string `msgpack:"h,omitempty"`
	Version    string `msgpack:"v,omitempty"`
	Instance   uint64 `msgpack:"i,omitempty"`
	Protocol   int    `msgpack:"p,omitempty"`
	Catalog    int    `msgpack:"m,omitempty"`
}

func encodeMeta(m NodeMeta, instance uint64) ([]byte, error) {
	return msgpack.Marshal(metaWire{
		Region:     m.Region,
		ClientAddr: m.ClientAddr,
		RaftAddr:   m.RaftAddr,
		HTTPAddr:   m.HTTPAddr,
		Version:    m.Version,
		Instance:   instance,
		Protocol:   RaftProtocol,
		Catalog:    m.Catalog,
	})
}

// decodeMeta decodes the metadata of node id. Empty metadata is valid.
func decodeMeta(id string, b []byte) (NodeMeta, uint64, error) {
	m := NodeMeta{ID: id}
	if len(b) == 0 {
		return m, 0, nil
	}
	var w metaWire
	if err := msgpack.Unmarshal(b, &w); err != nil {
		return m, 0, err
	}
	m.Region, m.ClientAddr, m.RaftAddr, m.HTTPAddr, m.Version = w.Region, w.ClientAddr, w.RaftAddr, w.HTTPAddr, w.Version
	m.RaftProtocol = max(w.Protocol, ProtocolGroups)
	m.Catalog = w.Catalog
	return m, w.Instance, nil
}

// checkMeta returns an error matching ErrMetaTooLarge when m's encoding,
// with the widest instance, does not fit in memberlist's limit.
func checkMeta(m NodeMeta) error {
	b, err := encodeMeta(m, ^uint64(0))
	if err != nil {
		return fmt.Errorf("cluster: meta: %w", err)
	}
	if len(b) > memberlist.MetaMaxSize {
		return fmt.Errorf("%w: %d bytes encoded, limit %d", ErrMetaTooLarge, len(b), memberlist.MetaMaxSize)
	}
	return nil
}

// MemberState is a member's state as this node sees it.
//
// memberlist also suspects a member for a while before declaring it dead,
// but does not tell anyone outside: a suspect member is Alive here until it
// is declared dead or refutes the suspicion.
type MemberState uint8

const (
	// MemberAlive: the member answers probes, or is only suspected.
	MemberAlive MemberState = iota + 1
	// MemberLeft: the member left gracefully (Leave).
	MemberLeft
	// MemberDead: the member failed, or left without saying so in a way
	// this node heard.
	MemberDead
)

func (s MemberState) String() string {
	switch s {
	case MemberAlive:
		return "alive"
	case MemberLeft:
		return "left"
	case MemberDead:
		return "dead"
	default:
		return "MemberState(" + strconv.Itoa(int(s)) + ")"
	}
}

// Member is a node of the cluster as this node sees it.
type Member struct {
	NodeMeta
	Addr  string      // gossip address, host:port
	State MemberState // alive, left or dead
	Since time.Time   // when this node saw State begin
}

// MemberEventType says what happened to a member.
type MemberEventType uint8

const (
	// EventJoin: a node joined, or came back after it left or died
	// (possibly restarted, with a new address).
	EventJoin MemberEventType = iota + 1
	// EventUpdate: a live node's metadata or address changed.
	EventUpdate
	// EventLeave: a node left gracefully.
	EventLeave
	// EventDead: a node failed.
	EventDead
)

func (t MemberEventType) String() string {
	switch t {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventLeave:
		return "leave"
	case EventDead:
		return "dead"
	default:
		return "MemberEventType(" + strconv.Itoa(int(t)) + ")"
	}
}

// MemberEvent is a membership change. Member is the member's whole state
// after it, so a reader can apply an event without having seen the ones
// before it.
type MemberEvent struct {
	Type   MemberEventType
	Member Member
}

// MemberWatch delivers membership changes on C. See Membership.Watch.
type MemberWatch struct {
	// C receives an event for every known member when the watch starts
	// (EventJoin for live ones, EventLeave or EventDead for the others),
	// then one per change. A reader that falls behind receives each node's
	// latest event instead of every step. C is closed by Stop and when the
	// Membership closes.
	C <-chan MemberEvent

	f *feed[string, MemberEvent]
	m *Membership
}

// Stop ends the watch and closes C. It is idempotent.
func (w *MemberWatch) Stop() {
	w.m.mu.Lock()
	delete(w.m.watches, w)
	w.m.mu.Unlock()
	w.f.stop()
}

// mergeMemberEvents coalesces two events of one node queued for a slow
// reader: the later one wins, but an update does not hide a join the
// reader has not seen.
func mergeMemberEvents(queued, next MemberEvent) MemberEvent {
	if queued.Type == EventJoin && next.Type == EventUpdate {
		next.Type = EventJoin
	}
	return next
}

// Time constants of the Membership's own work.
const (
	// joinBackoffMin and joinBackoffMax bound the wait between two rounds
	// of join attempts; it doubles from the first to the second, with
	// ±20% jitter.
	joinBackoffMin = 250 * time.Millisecond
	joinBackoffMax = 30 * time.Second
	// memberRetention is how long a left or dead member stays in Members.
	memberRetention = 24 * time.Hour
	// intentRetention is how long a leave intent waits for its node to be
	// seen leaving; maxIntents bounds how many wait.
	intentRetention = 10 * time.Minute
	maxIntents      = 1024
	// defaultOpTimeout bounds UpdateMeta and Leave when their context has
	// no deadline.
	defaultOpTimeout = 10 * time.Second
)

type lifeState uint8

const (
	stateNew lifeState = iota
	stateStarted
	stateClosed
)

// Membership is this node's view of the cluster's members, kept by gossip
// (hashicorp/memberlist, SWIM): who is alive, with what metadata, and who
// left or failed. The same gossip carries the leader routing table
// (Routes).
//
// NewMembership starts nothing; Start opens the gossip port and joins the
// cluster in the background; Leave says goodbye; Close stops everything.
// All methods are safe for concurrent use.
type Membership struct {
	cfg      MembershipConfig // defaults filled
	logger   *slog.Logger
	instance uint64
	routes   *Routes
	bcast    *memberlist.TransmitLimitedQueue
	alive    atomic.Int32 // live members, this node included; sizes the broadcast queue's retransmits
	leaving  atomic.Bool
	metaEnc  atomic.Pointer[[]byte] // what NodeMeta gives memberlist

	// life is held for writing by Start and Close and for reading around
	// every call into memberlist that must not run after its Shutdown.
	life      sync.RWMutex
	state     lifeState
	ml        *memberlist.Memberlist
	closeOnce sync.Once

	metaMu sync.Mutex // serialises UpdateMeta

	in     *inbox
	stop   chan struct{} // closed by Close
	rejoin chan struct{} // one slot: a peer holds our name at an old address
	wg     sync.WaitGroup

	mu      sync.Mutex
	addr    string // gossip address, once started
	meta    NodeMeta
	members map[string]*memberRec
	intents map[string]intent
	watches map[*MemberWatch]struct{}
	closed  bool
}

type memberRec struct {
	Member
	instance uint64
}

// intent is a leave intent received for a node not yet seen leaving.
type intent struct {
	instance uint64
	at       time.Time
}

// NewMembership checks cfg and returns a Membership that has started
// nothing.
func NewMembership(cfg MembershipConfig) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.Join = slices.Clone(cfg.Join)
	cfg.Meta.RaftProtocol = RaftProtocol
	logger := cfg.Logger.With("node", cfg.NodeID)
	m := &Membership{
		cfg:      cfg,
		logger:   logger,
		instance: rand.Uint64() | 1,
		in:       newInbox(),
		stop:     make(chan struct{}),
		rejoin:   make(chan struct{}, 1),
		meta:     cfg.Meta,
		members:  make(map[string]*memberRec),
		intents:  make(map[string]intent),
		watches:  make(map[*MemberWatch]struct{}),
	}
	m.bcast = newBroadcastQueue(func() int { return int(max(m.alive.Load(), 1)) })
	m.alive.Store(1)
	m.routes = newRoutes(logger, cfg.TombstoneTTL, m.bcast)
	b, err := encodeMeta(cfg.Meta, m.instance)
	if err != nil {
		return nil, fmt.Errorf("cluster: meta: %w", err)
	}
	m.metaEnc.Store(&b)
	return m, nil
}

// Start opens the gossip port (TCP and UDP), starts the Membership's
// goroutine and, if the configuration lists addresses to join, a goroutine
// that tries them until this node knows another member. It returns once
// the port is open; joining goes on in the background. Start returns
// ErrStarted when called again, and ErrClosed after Close.
func (m *Membership) Start() error {
	m.life.Lock()
	defer m.life.Unlock()
	switch m.state {
	case stateStarted:
		return fmt.Errorf("cluster: start membership: %w", ErrStarted)
	case stateClosed:
		return fmt.Errorf("cluster: start membership: %w", ErrClosed)
	}
	var ml *memberlist.Memberlist
	mc, err := m.cfg.memberlistConfig(mlDelegate{m: m})
	if err == nil {
		ml, err = memberlist.Create(mc)
	}
	if err != nil {
		m.in.drain()
		return fmt.Errorf("cluster: start membership on %s: %w", m.cfg.BindAddr, err)
	}
	self := copyNode(ml.LocalNode())
	m.ml, m.state = ml, stateStarted
	m.mu.Lock()
	m.addr = self.addr
	m.mu.Unlock()
	// Record this node now, so that Members and LocalMember are complete
	// when Start returns; memberlist's own notification follows and changes
	// nothing.
	m.applyNode(inJoin, self)
	m.wg.Add(2)
	go m.loop()
	go m.joinLoop(ml, self.addr)
	m.logger.Info("gossip started", "addr", self.addr, "join", m.cfg.Join)
	return nil
}

// Addr returns the gossip address other nodes reach this one at
// (host:port, the port picked when BindAddr's was 0). It is "" before
// Start.
func (m *Membership) Addr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addr
}

// Routes returns the leader routing table gossiped with the membership.
func (m *Membership) Routes() *Routes { return m.routes }

// Members returns every member this node knows, itself included, sorted by
// id: the live ones, and the ones that left or died in the last 24 hours.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(m.members))
	for _, id := range slices.Sorted(maps.Keys(m.members)) {
		out = append(out, m.members[id].Member)
	}
	return out
}

// ProtocolOf returns what the node whose Raft address is addr speaks on
// its Raft port, as its gossip metadata says: ProtocolUnknown when no
// member advertises the address. A live member's word counts over a
// departed one's at the same address. It suits Mux.SetProtocols.
func (m *Membership) ProtocolOf(addr string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := ProtocolUnknown
	for _, r := range m.members {
		if r.RaftAddr != addr {
			continue
		}
		if r.State == MemberAlive {
			return r.RaftProtocol
		}
		p = r.RaftProtocol
	}
	return p
}

// LocalMember returns this node as a member. Before Start its Addr is
// empty.
func (m *Membership) LocalMember() Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.members[m.cfg.NodeID]; ok {
		return r.Member
	}
	return Member{NodeMeta: m.meta, State: MemberAlive}
}

// Watch starts a MemberWatch: C receives an event for every known member
// at once, then one per change. Watching never slows gossip down: each
// watch queues at most one event per node, the latest, and a goroutine of
// its own hands them to C. Stop the watch when done with it. After Close,
// C is closed at once.
func (m *Membership) Watch() *MemberWatch {
	f := newFeed[string](mergeMemberEvents)
	w := &MemberWatch{C: f.ch, f: f, m: m}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		f.stop()
		return w
	}
	for _, id := range slices.Sorted(maps.Keys(m.members)) {
		r := m.members[id]
		t := EventJoin
		switch r.State {
		case MemberLeft:
			t = EventLeave
		case MemberDead:
			t = EventDead
		}
		f.push(id, MemberEvent{Type: t, Member: r.Member})
	}
	m.watches[w] = struct{}{}
	return w
}

// UpdateMeta changes what this node advertises, for example after one of
// its addresses changed, and gossips it. meta.ID may be empty and is then
// the node id; anything else is refused. Before Start it only replaces the
// configured metadata. Once started, it returns when the update has been
// gossiped (sent its due number of times), or with ErrTimeout when ctx's
// deadline (10s if it has none) comes first, in which case the update still
// spreads. It returns ErrMetaTooLarge if the metadata does not fit, ErrLeft
// after Leave and ErrClosed after Close.
func (m *Membership) UpdateMeta(ctx context.Context, meta NodeMeta) error {
	meta.RaftProtocol = RaftProtocol
	if meta.ID == "" {
		meta.ID = m.cfg.NodeID
	}
	if meta.ID != m.cfg.NodeID {
		return fmt.Errorf("cluster: update meta: id %q is not this node's, %q", meta.ID, m.cfg.NodeID)
	}
	if err := checkMeta(meta); err != nil {
		return err
	}
	b, err := encodeMeta(meta, m.instance)
	if err != nil {
		return fmt.Errorf("cluster: update meta: %w", err)
	}
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	if m.leaving.Load() {
		return fmt.Errorf("cluster: update meta: %w", ErrLeft)
	}
	m.life.RLock()
	state := m.state
	if state != stateClosed {
		m.mu.Lock()
		m.meta = meta
		m.mu.Unlock()
		m.metaEnc.Store(&b)
	}
	m.life.RUnlock()
	switch state {
	case stateNew:
		return nil
	case stateClosed:
		return fmt.Errorf("cluster: update meta: %w", ErrClosed)
	}
	return m.call(ctx, "update meta", func(ml *memberlist.Memberlist, timeout time.Duration) error {
		if err := ml.UpdateNode(timeout); err != nil {
			return fmt.Errorf("cluster: update meta: %w (%v)", ErrTimeout, err)
		}
		return nil
	})
}

// Leave leaves the cluster gracefully: the other members see this node as
// Left (EventLeave), not Dead, and stop probing it. It tells every live
// member directly that it is leaving, then has memberlist gossip its
// departure, and returns once that has been sent its due number of times,
// or with ErrTimeout when ctx's deadline (10s if it has none) comes first.
// Gossip keeps running, so Members and Routes still work; Close afterwards.
// Leave returns ErrNotStarted before Start and ErrClosed after Close;
// calling it again does nothing more.
func (m *Membership) Leave(ctx context.Context) error {
	return m.call(ctx, "leave", func(ml *memberlist.Memberlist, timeout time.Duration) error {
		deadline := time.Now().Add(timeout)
		if m.leaving.Swap(true) {
			return leave(ml, time.Until(deadline)) // again: memberlist does nothing more
		}
		msg := encodeLeaveMsg(m.cfg.NodeID, m.instance)
		m.bcast.QueueBroadcast(&gossipMsg{name: "leave:" + m.cfg.NodeID, msg: msg})

		// Tell every live member directly, over TCP, before memberlist's
		// own gossip says the node is gone; gossip carries the intent to
		// those that miss it. Sends left behind by the deadline end by
		// mlTCPTimeout; Close waits for them.
		var peers []*memberlist.Node
		m.mu.Lock()
		for _, r := range m.members {
			if r.ID != m.cfg.NodeID && r.State == MemberAlive {
				if n, ok := mlNode(r.ID, r.Addr); ok {
					peers = append(peers, n)
				}
			}
		}
		m.mu.Unlock()
		var sent sync.WaitGroup
		for _, n := range peers {
			sent.Add(1)
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				defer sent.Done()
				if err := ml.SendReliable(n, msg); err != nil {
					m.logger.Debug("could not tell a member this node is leaving", "member", n.Name, "error", err)
				}
			}()
		}
		m.waitGroup(&sent, time.Until(deadline)/2)

		if err := leave(ml, time.Until(deadline)); err != nil {
			return err
		}
		m.logger.Info("left the cluster")
		return nil
	})
}

// leave has memberlist gossip this node's departure and waits up to
// timeout for it to be sent.
func leave(ml *memberlist.Memberlist, timeout time.Duration) error {
	if err := ml.Leave(max(timeout, time.Millisecond)); err != nil {
		return fmt.Errorf("cluster: leave: %w (%v)", ErrTimeout, err)
	}
	return nil
}

// waitGroup waits for wg, at most d. The goroutine it uses to wait ends
// with wg, which the caller guarantees ends.
func (m *Membership) waitGroup(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// Close stops gossip without a goodbye (call Leave first for one), in this
// order: new calls are refused with ErrClosed (a Leave or UpdateMeta under
// way is waited for, up to its deadline); the join goroutine is told to
// stop; memberlist shuts down, closing the gossip port; the Membership's
// goroutines are waited for; then every RouteWatch and MemberWatch is
// stopped, closing its channel. Members, LocalMember, Lookup and Snapshot
// keep answering from the last state. Close is idempotent.
func (m *Membership) Close() error {
	m.closeOnce.Do(m.close)
	return nil
}

func (m *Membership) close() {
	m.life.Lock()
	prev := m.state
	m.state = stateClosed
	ml := m.ml
	m.life.Unlock()
	close(m.stop)
	if prev == stateStarted {
		if err := ml.Shutdown(); err != nil {
			m.logger.Warn("memberlist shutdown", "error", err)
		}
	}
	m.wg.Wait()
	m.in.close()
	m.routes.close()
	m.mu.Lock()
	m.closed = true
	ws := slices.Collect(maps.Keys(m.watches))
	clear(m.watches)
	m.mu.Unlock()
	for _, w := range ws {
		w.f.stop()
	}
	if prev == stateStarted {
		m.logger.Info("gossip stopped")
	}
}

// call runs f, a call into memberlist that may block for up to the timeout
// it is given, with ctx's deadline (defaultOpTimeout if none). f runs in a
// goroutine holding life for reading, so Close cannot shut memberlist down
// under it (memberlist panics on a Leave after Shutdown); the caller waits
// for it or for ctx.
func (m *Membership) call(ctx context.Context, op string, f func(ml *memberlist.Memberlist, timeout time.Duration) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultOpTimeout)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	m.life.RLock()
	switch m.state {
	case stateNew:
		m.life.RUnlock()
		return fmt.Errorf("cluster: %s: %w", op, ErrNotStarted)
	case stateClosed:
		m.life.RUnlock()
		return fmt.Errorf("cluster: %s: %w", op, ErrClosed)
	}
	if ctx.Err() != nil {
		m.life.RUnlock()
		return opCtxErr(ctx, op)
	}
	done := make(chan error, 1)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer m.life.RUnlock()
		done <- f(m.ml, time.Until(deadline))
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return opCtxErr(ctx, op)
	}
}

// opCtxErr is the error of an operation whose context ended first:
// ErrTimeout (and context.DeadlineExceeded) for a deadline, the context's
// error for a cancellation.
func opCtxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("cluster: %s: %w", op, err)
	}
	return fmt.Errorf("cluster: %s: %w (%w)", op, ErrTimeout, context.DeadlineExceeded)
}

// mlNode makes the memberlist.Node to send a message to.
func mlNode(name, addr string) (*memberlist.Node, bool) {
	ip, port, err := splitIPPort(addr)
	if err != nil {
		return nil, false
	}
	return &memberlist.Node{Name: name, Addr: ip, Port: uint16(port)}, true
}

// loop is the Membership's goroutine: it handles what memberlist's
// callbacks queued, in order, and once a minute drops what has expired.
func (m *Membership) loop() {
	defer m.wg.Done()
	tick := time.NewTicker(min(time.Minute, m.cfg.TombstoneTTL/2))
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-m.in.wake:
			items, dropped := m.in.drain()
			if dropped > 0 {
				m.logger.Warn("gossip messages dropped: handling fell behind", "dropped", dropped)
			}
			for _, it := range items {
				m.handle(it)
			}
		case now := <-tick.C:
			m.reap(now)
		}
	}
}

func (m *Membership) handle(it inItem) {
	now := time.Now()
	switch it.kind {
	case inJoin, inUpdate, inLeave:
		m.applyNode(it.kind, it.node)
	case inConflict:
		if it.node.name == m.cfg.NodeID {
			// A peer still holds this node's name at its previous
			// address: it restarted before the others declared the old
			// one dead. Push-pull again once they have.
			m.logger.Warn("a member still knows this node at another address; will sync again once it is declared dead",
				"old", it.other.addr, "addr", it.node.addr)
			select {
			case m.rejoin <- struct{}{}:
			default:
			}
		} else {
			m.logger.Debug("two addresses claim one node id", "id", it.node.name, "known", it.node.addr, "other", it.other.addr)
		}
	case inMsg:
		m.handleMsg(it.data, now)
	case inState:
		switch it.data[0] {
		case stateRoutes:
			m.routes.mergeState(it.data[1:], now)
		default:
			m.logger.Debug("ignoring a push-pull state of unknown type", "type", it.data[0])
		}
	}
}

func (m *Membership) handleMsg(b []byte, now time.Time) {
	if len(b) == 0 {
		return
	}
	switch b[0] {
	case msgRoute:
		m.routes.handleMsg(b[1:], now)
	case msgLeave:
		id, instance, err := decodeLeaveMsg(b[1:])
		if err != nil {
			m.logger.Warn("dropping a leave intent that does not decode", "error", err)
			return
		}
		m.leaveIntent(id, instance, b, now)
	default:
		m.logger.Debug("ignoring a gossip message of unknown type", "type", b[0])
	}
}

// applyNode applies a memberlist notification to the member table and
// tells the watches. A join that changes nothing (this node's own, after
// Start recorded it) is not an event.
func (m *Membership) applyNode(kind inKind, n nodeInfo) {
	meta, instance, err := decodeMeta(n.name, n.meta)
	if err != nil {
		m.logger.Warn("member metadata does not decode", "member", n.name, "error", err)
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	r, known := m.members[n.name]
	if !known {
		r = &memberRec{}
		m.members[n.name] = r
	}
	prev := *r
	r.NodeMeta, r.Addr, r.instance = meta, n.addr, instance
	var t MemberEventType
	switch kind {
	case inJoin, inUpdate:
		t = EventUpdate
		if !known || prev.State != MemberAlive {
			t = EventJoin
			r.State, r.Since = MemberAlive, now
		} else if prev.Member == r.Member && prev.instance == instance {
			return
		}
		if in, ok := m.intents[n.name]; ok && in.instance != instance {
			delete(m.intents, n.name) // meant for an earlier run of the node
		}
	case inLeave:
		left := m.leaving.Load() && n.name == m.cfg.NodeID
		if in, ok := m.intents[n.name]; ok && in.instance == instance {
			left = true
			delete(m.intents, n.name)
		}
		t, r.State, r.Since = EventDead, MemberDead, now
		if left {
			t, r.State = EventLeave, MemberLeft
		}
	}
	m.countAliveLocked()
	m.publishLocked(MemberEvent{Type: t, Member: r.Member})
	m.logger.Log(context.Background(), memberEventLevel(t), "member "+t.String(),
		"member", n.name, "addr", n.addr, "region", meta.Region)
}

func memberEventLevel(t MemberEventType) slog.Level {
	switch t {
	case EventDead:
		return slog.LevelWarn
	case EventUpdate:
		return slog.LevelDebug
	default:
		return slog.LevelInfo
	}
}

// leaveIntent records that node id's run instance is leaving, or, if that
// node was already declared dead (memberlist's news came first), turns it
// into Left. A new intent is gossiped on.
func (m *Membership) leaveIntent(id string, instance uint64, msg []byte, now time.Time) {
	if id == m.cfg.NodeID {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.members[id]; ok && r.instance == instance && r.State != MemberAlive {
		if r.State == MemberDead {
			r.State = MemberLeft
			m.publishLocked(MemberEvent{Type: EventLeave, Member: r.Member})
			m.logger.Info("member left", "member", id, "addr", r.Addr)
		}
		return
	}
	if in, ok := m.intents[id]; ok && in.instance == instance {
		return
	}
	if len(m.intents) >= maxIntents {
		oldest := ""
		for k, in := range m.intents {
			if oldest == "" || in.at.Before(m.intents[oldest].at) {
				oldest = k
			}
		}
		delete(m.intents, oldest)
	}
	m.intents[id] = intent{instance: instance, at: now}
	m.bcast.QueueBroadcast(&gossipMsg{name: "leave:" + id, msg: msg})
}

func (m *Membership) countAliveLocked() {
	n := 0
	for _, r := range m.members {
		if r.State == MemberAlive {
			n++
		}
	}
	m.alive.Store(int32(n))
}

func (m *Membership) publishLocked(ev MemberEvent) {
	for w := range m.watches {
		w.f.push(ev.Member.ID, ev)
	}
}

// reap drops members gone for longer than memberRetention, stale leave
// intents and expired route tombstones.
func (m *Membership) reap(now time.Time) {
	m.mu.Lock()
	for id, r := range m.members {
		if r.State != MemberAlive && now.Sub(r.Since) > memberRetention {
			delete(m.members, id)
		}
	}
	for id, in := range m.intents {
		if now.Sub(in.at) > intentRetention {
			delete(m.intents, id)
		}
	}
	m.mu.Unlock()
	m.routes.reap(now)
}

// joinLoop joins the cluster through the configured addresses, then
// resyncs whenever a peer turns out to hold this node's name at an old
// address.
func (m *Membership) joinLoop(ml *memberlist.Memberlist, self string) {
	defer m.wg.Done()
	if len(m.cfg.Join) > 0 {
		m.join(ml, self)
	}
	for {
		select {
		case <-m.stop:
			return
		case <-m.rejoin:
		}
		if !m.sleep(m.cfg.DetectionTime(int(m.alive.Load()) + 1)) {
			return
		}
		select { // the push-pull below answers the conflicts seen meanwhile
		case <-m.rejoin:
		default:
		}
		m.pushPull(ml, self, m.rejoinTargets())
	}
}

// join tries the Join addresses, one at a time, until one of them
// answers, backing off between rounds. Being joined by another node is
// not enough: nodes that each join the next one of a ring, started in
// any order, would otherwise stop as soon as the node behind them
// joined, and could settle as two clusters that never meet.
func (m *Membership) join(ml *memberlist.Memberlist, self string) {
	backoff := joinBackoffMin
	for round := 1; ; round++ {
		var errs []error
		tried, reached := 0, false
		for _, addr := range m.cfg.Join {
			if addr == self {
				continue
			}
			select {
			case <-m.stop:
				return
			default:
			}
			tried++
			if _, err := ml.Join([]string{addr}); err != nil {
				errs = append(errs, err)
				continue
			}
			reached = true
			break
		}
		if tried == 0 {
			return // only this node's own address: nothing to join
		}
		if reached {
			m.logger.Info("joined the cluster", "members", ml.NumMembers(), "rounds", round)
			return
		}
		m.logger.Warn("could not join the cluster yet; retrying", "round", round, "members", ml.NumMembers(), "retry_in", backoff, "error", errors.Join(errs...))
		jitter := 0.8 + 0.4*rand.Float64()
		if !m.sleep(time.Duration(float64(backoff) * jitter)) {
			return
		}
		backoff = min(2*backoff, joinBackoffMax)
	}
}

// rejoinTargets are the Join addresses and every live member's address.
func (m *Membership) rejoinTargets() []string {
	targets := slices.Clone(m.cfg.Join)
	m.mu.Lock()
	for _, r := range m.members {
		if r.ID != m.cfg.NodeID && r.State == MemberAlive {
			targets = append(targets, r.Addr)
		}
	}
	m.mu.Unlock()
	slices.Sort(targets)
	return slices.Compact(targets)
}

// pushPull exchanges state with each of addrs but self in turn, until
// stopped.
func (m *Membership) pushPull(ml *memberlist.Memberlist, self string, addrs []string) {
	for _, addr := range addrs {
		if addr == self {
			continue
		}
		select {
		case <-m.stop:
			return
		default:
		}
		if _, err := ml.Join([]string{addr}); err != nil {
			m.logger.Debug("push-pull failed", "addr", addr, "error", err)
		}
	}
}

// sleep waits d; false if the Membership is closing.
func (m *Membership) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-m.stop:
		return false
	}
}

// hostPort renders an address from memberlist's parts.
func hostPort(ip net.IP, port uint16) string {
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
}

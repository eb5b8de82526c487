package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// Paths inside GroupConfig.Dir.
const (
	raftDBFile   = "raft.db"
	snapshotsDir = "snapshots"
	// boltLockTimeout bounds the wait for raft.db's file lock, held by
	// another Group (or process) using the same directory.
	boltLockTimeout = time.Second
)

// Server is one member of a group's configuration.
type Server struct {
	ID      string // stable node id, the Raft server id
	Address string // the node's Raft address, host:port
	Voter   bool   // false for a non-voter, which replicates but does not vote
}

// Group is one Raft group on this node: a hashicorp/raft instance with its
// raft-boltdb log and stable store (DIR/raft.db), its SnapshotStore
// (DIR/snapshots/), a NetworkTransport over the group's Layer of the node's
// Mux, and the caller's FSM.
//
// Every method that waits for Raft takes a context; an operation whose
// context has no deadline gets GroupConfig.OpTimeout. Errors are this
// package's sentinels: *NotLeaderError, ErrLeadershipLost, ErrTimeout,
// ErrClosed.
type Group struct {
	id     string
	nodeID string
	addr   string
	cfg    GroupConfig
	logger *slog.Logger
	raft   *raft.Raft
	trans  *raft.NetworkTransport
	gate   *voteGate // trans as Raft sees it
	layer  *Layer
	store  *raftboltdb.BoltStore
	log    *checkedStore // store as Raft sees it (logstore.go)
	damage *damageReport // where its stores report damage
	stable *stableStore  // Raft's term and vote (stable.go)
	snaps  *SnapshotStore
	fsm    *configFSM     // cfg.FSM, learning committed configurations
	obs    *raft.Observer // publishes leadership changes (leadership.go)
	stop   chan struct{}  // closed by Close: stops what waits on the group
	// down is closed by Close once Raft was told to shut down and had
	// its time to: a future still pending then may never complete (Wait).
	down chan struct{}

	closeOnce sync.Once
	closeErr  error

	// snapping is set while a snapshot that snapshotGrown asked for is
	// under way.
	snapping atomic.Bool

	mu       sync.Mutex
	closed   bool
	waiters  sync.WaitGroup // goroutines waiting on raft futures
	current  Leadership
	watchers map[*LeaderWatch]struct{}

	// transferTerm and transferred: the voters a leadership transfer
	// went to while this member led in that term (claimTransfer).
	transferMu   sync.Mutex
	transferTerm uint64
	transferred  map[raft.ServerID]bool
}

// OpenGroup opens the group's stores in cfg.Dir, registers the group on
// cfg.Mux and starts its Raft instance, which restores the newest snapshot
// unless NoSnapshotRestoreOnStart. A new group has no configuration until
// Bootstrap, or until a leader adds this node. Close releases everything.
func OpenGroup(cfg GroupConfig) (*Group, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	logger := cfg.Logger.With("group", cfg.ID)
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: group %s: %w", cfg.ID, err)
	}
	// Before Raft can change anything the mark would not know (sleep.go).
	if err := wakeMark(cfg.Dir); err != nil {
		return nil, fmt.Errorf("cluster: group %s: wake: %w", cfg.ID, err)
	}

	g := &Group{
		id:       cfg.ID,
		nodeID:   cfg.NodeID,
		addr:     cfg.LocalAddr,
		cfg:      cfg,
		logger:   logger,
		stop:     make(chan struct{}),
		down:     make(chan struct{}),
		watchers: make(map[*LeaderWatch]struct{}),
	}
	var undo []func()
	fail := func(err error) (*Group, error) {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		return nil, fmt.Errorf("cluster: open group %s: %w", cfg.ID, err)
	}

	opts := *bbolt.DefaultOptions
	opts.Timeout = boltLockTimeout
	var err error
	g.store, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.Dir, raftDBFile), BoltOptions: &opts})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			err = fmt.Errorf("%s is locked by another user of the directory: %w", raftDBFile, err)
		}
		return fail(err)
	}
	undo = append(undo, func() { g.store.Close() })
	g.stable, err = openStableStore(cfg.Dir, g.store, logger)
	if err != nil {
		return fail(err)
	}
	undo = append(undo, func() { g.stable.Close() })

	// While Raft opens, damage is recorded, not reported: the open fails.
	g.damage = &damageReport{notify: cfg.OnDamage}
	g.damage.opening.Store(true)
	g.snaps, err = OpenSnapshotStore(filepath.Join(cfg.Dir, snapshotsDir), SnapshotStoreConfig{
		Retain:   cfg.SnapshotRetain,
		Expand:   cfg.Expand,
		Logger:   logger,
		OnDamage: g.damage.report,
	})
	if err != nil {
		return fail(err)
	}

	g.layer, err = cfg.Mux.MemberLayer(cfg.ID, cfg.NodeID)
	if err != nil {
		return fail(err)
	}
	undo = append(undo, func() { g.layer.Close() })

	// NetworkTransport starts its accept goroutine here; its Close (called
	// by Raft's shutdown, and by ours) stops it.
	g.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  advertisedLayer{Layer: g.layer, addr: tcpAddr(cfg.LocalAddr)},
		MaxPool: transportMaxPool,
		Timeout: transportTimeout,
		Logger:  newHCLogger(logger, "raft-net"),
	})
	gate := newVoteGate(g.trans, g.layer, cfg.Mux, cfg.ID, raft.ServerID(cfg.NodeID))
	gate.quiet.base = raft.ReloadableConfig{HeartbeatTimeout: cfg.HeartbeatTimeout, ElectionTimeout: cfg.ElectionTimeout}
	gate.quiet.lease = cfg.LeaderLeaseTimeout
	gate.retired.Store(cfg.Retired)
	if cfg.OnSleep != nil {
		gate.onSleep.Store(&cfg.OnSleep)
	}
	undo = append(undo, func() { gate.Close() })

	g.fsm = &configFSM{FSM: cfg.FSM, snaps: g.snaps}
	g.fsm.fromSnapshots()
	g.log = &checkedStore{LogStore: g.store, damage: g.damage, grownLimit: cfg.SnapshotBytes}
	g.raft, err = raft.NewRaft(cfg.raftConfig(logger), g.fsm, g.log, g.stable, g.snaps, gate)
	g.damage.opening.Store(false)
	if derr := g.damage.found(); derr != nil {
		if err == nil {
			// NewRaft read every entry this member would apply, and
			// one is damaged: stop Raft before it applies anything.
			if serr := g.raft.Shutdown().Error(); serr != nil {
				logger.Warn("raft did not shut down cleanly after finding its log damaged", "err", serr)
			}
		}
		return fail(derr)
	}
	if err != nil {
		return fail(err)
	}
	gate.raft.Store(g.raft)
	g.gate = gate
	// From here a log grown by SnapshotBytes snapshots. What Raft's scan
	// read on open counts: the next entry stored asks for the snapshot
	// (asked now, it would find Raft's FSM with nothing applied since
	// the start, and fail).
	grown := g.snapshotGrown
	g.log.onGrown.Store(&grown)

	g.current = g.readLeadership()
	g.obs = raft.NewObserver(nil, false, g.observe)
	g.raft.RegisterObserver(g.obs)
	g.publish() // what changed before the observer was registered
	// A group opened again with no leader known (its node restarted):
	// its first member stands soon (elect.go).
	ctx, cancel := context.WithTimeout(context.Background(), cfg.OpTimeout)
	defer cancel()
	if servers, err := g.Servers(ctx); err == nil && len(servers) > 0 {
		g.arrangeElection(servers)
	}
	return g, nil
}

// advertisedLayer reports the node's advertised address as the layer's
// address: NetworkTransport tells peers that address in every RPC, so it
// must be what they dial, not the listener's bind address.
type advertisedLayer struct {
	*Layer
	addr net.Addr
}

func (a advertisedLayer) Addr() net.Addr { return a.addr }

// tcpAddr is a host:port kept as written, without resolving the host.
type tcpAddr string

func (a tcpAddr) Network() string { return "tcp" }
func (a tcpAddr) String() string  { return string(a) }

// ID returns the group id.
func (g *Group) ID() string { return g.id }

// NodeID returns this node's id.
func (g *Group) NodeID() string { return g.nodeID }

// Addr returns this node's advertised Raft address.
func (g *Group) Addr() string { return g.addr }

// Bootstrap gives a new group its first configuration. Every initial member
// may call it with the same servers: on a group that already has state it
// does nothing and returns nil.
func (g *Group) Bootstrap(ctx context.Context, servers []Server) error {
	if len(servers) == 0 {
		return fmt.Errorf("cluster: group %s: bootstrap without servers", g.id)
	}
	var conf raft.Configuration
	for _, s := range servers {
		if s.ID == "" || s.Address == "" {
			return fmt.Errorf("cluster: group %s: bootstrap: server %+v needs an id and an address", g.id, s)
		}
		suffrage := raft.Nonvoter
		if s.Voter {
			suffrage = raft.Voter
		}
		conf.Servers = append(conf.Servers, raft.Server{
			ID: raft.ServerID(s.ID), Address: raft.ServerAddress(s.Address), Suffrage: suffrage,
		})
	}
	_, err := g.do(ctx, "bootstrap", func(time.Duration) raft.Future {
		return g.raft.BootstrapCluster(conf)
	})
	if errors.Is(err, raft.ErrCantBootstrap) {
		return nil
	}
	if err == nil {
		g.arrangeElection(servers) // its first member stands soon (elect.go)
	}
	return err
}

// Apply proposes cmd to the group and waits until it is committed and
// applied to this node's FSM, or until ctx's deadline. It returns the FSM's
// response; a response that is an error is returned as the error. Only the
// leader applies: elsewhere it returns a *NotLeaderError naming the leader
// if known. After ErrTimeout or ErrLeadershipLost the entry may still be
// committed.
func (g *Group) Apply(ctx context.Context, cmd []byte) (any, error) {
	f, err := g.do(ctx, "apply", func(timeout time.Duration) raft.Future {
		return g.raft.Apply(cmd, timeout)
	})
	if err != nil {
		return nil, err
	}
	resp := f.(raft.ApplyFuture).Response()
	if err, ok := resp.(error); ok {
		return nil, err
	}
	return resp, nil
}

// Barrier waits until every entry committed before it is applied to this
// node's FSM. A new leader calls it before serving reads from its FSM.
func (g *Group) Barrier(ctx context.Context) error {
	_, err := g.do(ctx, "barrier", func(timeout time.Duration) raft.Future {
		return g.raft.Barrier(timeout)
	})
	return err
}

// IsLeader reports whether this node is the group's leader now.
func (g *Group) IsLeader() bool { return g.raft.State() == raft.Leader }

// Leader returns the node id and Raft address of the leader this node knows
// of; both are empty when it knows none.
func (g *Group) Leader() (id, addr string) {
	a, i := g.raft.LeaderWithID()
	return string(i), string(a)
}

// Term returns this node's current Raft term.
func (g *Group) Term() uint64 { return g.raft.CurrentTerm() }

// AppliedIndex returns the index of the last entry handed to the FSM.
func (g *Group) AppliedIndex() uint64 { return g.raft.AppliedIndex() }

// WaitForLeader waits until this node knows a leader and returns its node
// id.
func (g *Group) WaitForLeader(ctx context.Context) (string, error) {
	ctx, cancel := g.bound(ctx)
	defer cancel()
	w := g.WatchLeader()
	defer w.Stop()
	for {
		select {
		case l, ok := <-w.C:
			if !ok {
				return "", fmt.Errorf("cluster: group %s: wait for leader: %w", g.id, ErrClosed)
			}
			if l.LeaderID != "" {
				return l.LeaderID, nil
			}
		case <-ctx.Done():
			return "", g.ctxErr(ctx, "wait for leader")
		}
	}
}

// Servers returns the group's latest configuration, which may not be
// committed yet.
func (g *Group) Servers(ctx context.Context) ([]Server, error) {
	f, err := g.do(ctx, "configuration", func(time.Duration) raft.Future {
		return g.raft.GetConfiguration()
	})
	if err != nil {
		return nil, err
	}
	return toServers(f.(raft.ConfigurationFuture).Configuration()), nil
}

// AddVoter adds a voting member, or updates its address. The leader first
// catches the new server up as a non-voter, then promotes it. Leader only.
func (g *Group) AddVoter(ctx context.Context, id, addr string) error {
	_, err := g.do(ctx, "add voter", func(timeout time.Duration) raft.Future {
		return g.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout)
	})
	return err
}

// AddNonvoter adds a member that replicates the log but does not vote.
// Leader only.
func (g *Group) AddNonvoter(ctx context.Context, id, addr string) error {
	_, err := g.do(ctx, "add nonvoter", func(timeout time.Duration) raft.Future {
		return g.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout)
	})
	return err
}

// RemoveServer removes a member. Leader only. A removed follower is not
// told (the leader just stops replicating to it): whoever removes it closes
// its Group. A leader that removes itself shuts its Raft instance down once
// the change commits; its Group then answers ErrClosed until it is closed.
func (g *Group) RemoveServer(ctx context.Context, id string) error {
	_, err := g.do(ctx, "remove server", func(timeout time.Duration) raft.Future {
		return g.raft.RemoveServer(raft.ServerID(id), 0, timeout)
	})
	return err
}

// ErrTransferTried is TransferLeadership's and TransferLeadershipTo's
// answer when every voter it could hand leadership to was already tried
// in this term (claimTransfer).
var ErrTransferTried = errors.New("cluster: a leadership transfer to this voter was already tried in this term")

// TransferLeadership hands leadership to a voter not yet tried in this
// term, on a node that is neither gone nor silent, and waits until it
// took it: HandOver with no preferred voter. Leader only.
func (g *Group) TransferLeadership(ctx context.Context) error { return g.HandOver(ctx, "") }

// TransferLeadershipTo hands leadership to the given voter. Leader only.
// A voter on a node that is gone or silent (Mux.reachable) is refused at
// once with ErrUnreachable.
func (g *Group) TransferLeadershipTo(ctx context.Context, id, addr string) error {
	if !g.gate.mux.reachable(addr) {
		return fmt.Errorf("cluster: group %s: transfer leadership to %s: %w", g.id, id, ErrUnreachable)
	}
	if !g.claimTransfer(raft.ServerID(id)) {
		return fmt.Errorf("cluster: group %s: transfer leadership to %s: %w", g.id, id, ErrTransferTried)
	}
	return g.transfer(ctx, raft.ServerID(id), raft.ServerAddress(addr))
}

// HandOver hands leadership to voter preferred ("": none), then to each
// other voter in the configuration's order, until one took it: each is
// tried once, unless its node is gone or silent or it was tried in this
// term (TransferLeadershipTo). A voter whose node has just restarted may
// not have opened its copy of the group yet: its node refuses the request
// (the connection closes), and the next voter takes the leadership at
// once rather than the group electing one after the leader goes. Leader
// only. When none took it, the error is the last transfer's that failed,
// or else ErrUnreachable when a voter was unreachable, or else
// ErrTransferTried.
func (g *Group) HandOver(ctx context.Context, preferred string) error {
	servers, err := g.Servers(ctx)
	if err != nil {
		return err
	}
	order := make([]Server, 0, len(servers))
	for _, s := range servers {
		if s.Voter && s.ID != g.nodeID && s.ID == preferred {
			order = append(order, s)
		}
	}
	for _, s := range servers {
		if s.Voter && s.ID != g.nodeID && s.ID != preferred {
			order = append(order, s)
		}
	}
	var failed error
	unreachable := false
	for _, s := range order {
		switch err := g.TransferLeadershipTo(ctx, s.ID, s.Address); {
		case err == nil, ctx.Err() != nil:
			return err
		case errors.Is(err, ErrUnreachable):
			unreachable = true
		case errors.Is(err, ErrTransferTried):
		default:
			failed = err
			g.logger.Debug("leadership transfer failed; trying the next voter", "to", s.ID, "err", err)
		}
	}
	switch {
	case failed != nil:
		return failed
	case unreachable:
		return fmt.Errorf("cluster: group %s: transfer leadership: %w", g.id, ErrUnreachable)
	}
	return fmt.Errorf("cluster: group %s: transfer leadership: %w", g.id, ErrTransferTried)
}

// transfer hands leadership to voter id, claimed (claimTransfer). A
// transfer that did not time out took its catch-up request back, or never
// sent one: the claim is given back.
func (g *Group) transfer(ctx context.Context, id raft.ServerID, addr raft.ServerAddress) error {
	_, err := g.do(ctx, "transfer leadership", func(time.Duration) raft.Future {
		return g.raft.LeadershipTransferToServer(id, addr)
	})
	// hashicorp/raft's own timeout has no sentinel error, only this text.
	if err != nil && !errors.Is(err, ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "leadership transfer timeout") {
		g.transferMu.Lock()
		delete(g.transferred, id)
		g.transferMu.Unlock()
	}
	return err
}

// claimTransfer reports whether a leadership transfer may go to voter id:
// one per voter while this member leads in one term. hashicorp/raft v1.8
// hands a transfer's catch-up request to the follower's replication
// through a channel of one, and its sender cannot give up: a second
// transfer to a follower whose replication had not taken the first's
// (it was stuck on a dead peer, or stopped) blocked for ever, and with it
// the flag that makes the leader refuse every proposal, for as long as
// this Raft runs, through later terms too (hashicorp/raft issue 696). A
// node then led its partition and refused every send, ack and
// membership change, until it stopped (the chaos suite, a move during a
// network partition with leaders balanced meanwhile). Each leadership
// has new replication channels, so the first transfer to each follower
// of a term always finds its channel empty.
func (g *Group) claimTransfer(id raft.ServerID) bool {
	term := g.raft.CurrentTerm()
	g.transferMu.Lock()
	defer g.transferMu.Unlock()
	if term != g.transferTerm {
		g.transferTerm, g.transferred = term, map[raft.ServerID]bool{}
	}
	if g.transferred[id] {
		return false
	}
	g.transferred[id] = true
	return true
}

// Retire makes this member a follower for good: it keeps its log, answers
// the leader and votes, but never campaigns again (a leadership transfer
// to it is refused too). A member whose place in the group has been given
// to another server is retired until the group has removed it: it stays
// part of the majority the group counts, yet, running on a configuration
// the group may have left, it must never lead. A retired leader stays
// leader until it hands leadership over (TransferLeadership) or loses it.
// It cannot be undone; close the group instead.
func (g *Group) Retire() { g.gate.retired.Store(true) }

// Retired reports whether Retire was called.
func (g *Group) Retired() bool { return g.gate.retired.Load() }

// Snapshot takes a snapshot now, at the last applied index (again if one
// was taken there already), and compacts the log behind it, keeping
// TrailingLogs entries. It returns ErrNothingToSnapshot when the FSM has
// applied nothing yet.
func (g *Group) Snapshot(ctx context.Context) error {
	_, err := g.do(ctx, "snapshot", func(time.Duration) raft.Future {
		return g.raft.Snapshot()
	})
	return err
}

// snapshotGrown takes a snapshot in the background, unless one it asked
// for is under way, once the log has grown by SnapshotBytes since the last
// (checkedStore.grew): Raft's own check counts entries only, every
// SnapshotInterval. The count starts again from the request, so entries
// stored meanwhile count towards the next. When the FSM has applied
// nothing since the group opened there is nothing to snapshot yet: the
// count is given back, and the next entry stored asks again. Another
// failure is logged, and the next SnapshotBytes ask again.
func (g *Group) snapshotGrown() {
	if !g.snapping.CompareAndSwap(false, true) {
		return
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		g.snapping.Store(false)
		return
	}
	g.waiters.Add(1) // Close waits for the goroutine below
	g.mu.Unlock()
	counted := g.log.grown.Swap(0)
	go func() {
		defer g.waiters.Done()
		defer g.snapping.Store(false)
		switch err := g.Snapshot(context.Background()); { // bounded by OpTimeout
		case err == nil, errors.Is(err, ErrClosed):
		case errors.Is(err, ErrNothingToSnapshot):
			g.log.grown.Add(counted)
		default:
			g.logger.Warn("could not snapshot a log grown past its size threshold", "bytes", g.cfg.SnapshotBytes, "err", err)
		}
	}()
}

// Close stops the group, in this order: new operations are refused with
// ErrClosed; Raft shuts down (its goroutines stop and pending futures fail,
// but for those hashicorp/raft drops, which Wait gives up on from here),
// waiting up to ShutdownTimeout; if that runs out, the group's connections
// are closed to unblock it; the transport and the Layer close, which closes
// every connection of the group; the waits on Raft futures return (up to
// ShutdownTimeout more, which is also Raft's second chance to stop); the
// leadership observer is removed and every LeaderWatch channel is closed; the bolt
// store closes. If Raft did not stop, the store is left open (Raft may
// still use it) and Close returns ErrTimeout. Close is idempotent and safe
// to call concurrently.
func (g *Group) Close() error {
	g.closeOnce.Do(func() { g.closeErr = g.close() })
	return g.closeErr
}

func (g *Group) close() error {
	g.mu.Lock()
	g.closed = true
	g.waiters.Add(1) // for the shutdown wait below
	g.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownTimeout)
	_, err := g.await(ctx, "shutdown", func(time.Duration) raft.Future { return g.raft.Shutdown() })
	cancel()
	raftStopped := err == nil
	close(g.down)
	if !raftStopped {
		g.logger.Warn("raft did not stop in time; closing its connections", "timeout", g.cfg.ShutdownTimeout)
		g.layer.Close()
	}
	g.gate.Close()
	g.layer.Close()

	// The shutdown wait is one of the waiters: once they are all done,
	// Raft has stopped.
	drained := make(chan struct{})
	go func() {
		g.waiters.Wait()
		close(drained)
	}()
	t := time.NewTimer(g.cfg.ShutdownTimeout)
	select {
	case <-drained:
		raftStopped = true
	case <-t.C:
		g.logger.Error("raft operations still pending after close")
	}
	t.Stop()

	g.raft.DeregisterObserver(g.obs) // waits for an observation in progress
	close(g.stop)
	g.mu.Lock()
	for w := range g.watchers {
		delete(g.watchers, w)
		w.close()
	}
	g.mu.Unlock()

	if !raftStopped {
		return fmt.Errorf("cluster: close group %s: raft did not stop within %v, store left open: %w", g.id, 2*g.cfg.ShutdownTimeout, ErrTimeout)
	}
	g.log.recent.close()
	// The stable store first: it gives raft.db its last values.
	serr := g.stable.Close()
	if err := errors.Join(serr, g.store.Close()); err != nil {
		return fmt.Errorf("cluster: close group %s: %w", g.id, err)
	}
	return nil
}

// do runs one Raft operation: it refuses to start after Close, gives the
// operation ctx's deadline (OpTimeout if ctx has none) and runs it through
// await. The returned future is resolved when err is nil.
func (g *Group) do(ctx context.Context, op string, start func(timeout time.Duration) raft.Future) (raft.Future, error) {
	ctx, cancel := g.bound(ctx)
	defer cancel()
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, fmt.Errorf("cluster: group %s: %s: %w", g.id, op, ErrClosed)
	}
	g.waiters.Add(1) // done by await's goroutine; Close waits for it
	g.mu.Unlock()
	switch op {
	case "configuration", "snapshot": // local reads and writes
	case "apply", "barrier":
		g.gate.proposed() // an entry: a quiet group wakes, and is in use
	default:
		g.gate.active() // a proposal: a quiet group wakes
	}
	return g.await(ctx, op, start)
}

// await is the one place where the package waits on a raft.Future, so that
// no wait outlives its deadline, however Raft is doing (an Apply without a
// majority: hashicorp/raft issue 498). ctx must have a deadline. A
// goroutine starts the operation with the time left (some of Raft's calls
// block until Raft takes the request, so starting counts against the
// deadline too) and waits on the future's blocking Error method; the caller
// waits for that goroutine or for ctx. The goroutine outlives a timeout
// until Raft resolves the future, which it does for every future by the
// time it has shut down. The caller has added one to g.waiters for it.
func (g *Group) await(ctx context.Context, op string, start func(timeout time.Duration) raft.Future) (raft.Future, error) {
	type result struct {
		f   raft.Future
		err error
	}
	deadline, _ := ctx.Deadline()
	left := time.Until(deadline)
	if left <= 0 || ctx.Err() != nil {
		g.waiters.Done()
		return nil, g.ctxErr(ctx, op)
	}
	done := make(chan result, 1)
	go func() {
		defer g.waiters.Done()
		f := start(left)
		done <- result{f, f.Error()}
	}()
	select {
	case r := <-done:
		return r.f, g.mapErr(op, r.err)
	case <-ctx.Done():
		return nil, g.ctxErr(ctx, op)
	}
}

// bound returns ctx with a deadline: its own, or OpTimeout from now.
func (g *Group) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, g.cfg.OpTimeout)
}

// ctxErr is the error for an operation whose context ended first: ErrTimeout
// (and context.DeadlineExceeded) for a deadline, the context's error for a
// cancellation.
func (g *Group) ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("cluster: group %s: %s: %w", g.id, op, err)
	}
	return fmt.Errorf("cluster: group %s: %s: %w (%w)", g.id, op, ErrTimeout, context.DeadlineExceeded)
}

// mapErr turns hashicorp/raft's errors into this package's.
func (g *Group) mapErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader):
		addr, id := g.raft.LeaderWithID()
		if string(id) == g.nodeID { // stale view: we just lost it
			addr, id = "", ""
		}
		return &NotLeaderError{Group: g.id, LeaderID: string(id), LeaderAddr: string(addr)}
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return &NotLeaderError{Group: g.id}
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("cluster: group %s: %s: %w", g.id, op, ErrLeadershipLost)
	case errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, raft.ErrTransportShutdown):
		return fmt.Errorf("cluster: group %s: %s: %w", g.id, op, ErrClosed)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		// Raft's enqueue timeout is the time left before ctx's deadline.
		return fmt.Errorf("cluster: group %s: %s: %w (%w)", g.id, op, ErrTimeout, context.DeadlineExceeded)
	case errors.Is(err, raft.ErrNothingNewToSnapshot):
		return fmt.Errorf("cluster: group %s: %s: %w", g.id, op, ErrNothingToSnapshot)
	default:
		return fmt.Errorf("cluster: group %s: %s: %w", g.id, op, err)
	}
}

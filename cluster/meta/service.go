package meta

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabriq-io/fabriq/cluster"
	"github.com/fabriq-io/fabriq/geofabric"
)

// GroupID names the metadata Raft group on a node's Raft port.
const GroupID = "_meta"

// MaxVoters bounds the metadata group's voters; other nodes replicate it
// as non-voters.
const MaxVoters = 5

// Default timings of the control plane.
const (
	// DefaultApplyTimeout bounds a metadata change and a round of the
	// leader's work.
	DefaultApplyTimeout = 10 * time.Second
	// DefaultBalanceInterval is how often a node checks whether it leads
	// more than its share of partitions.
	DefaultBalanceInterval = 5 * time.Second
	// leaderTick is how often the metadata leader looks at membership
	// and dead nodes when nothing wakes it.
	leaderTick = 2 * time.Second
	// catchUpTick is how often a node that has not caught up asks again.
	catchUpTick = 250 * time.Millisecond
	// transferTimeout bounds one leadership hand-over.
	transferTimeout = 3 * time.Second
	// balanceMovesPerRound bounds the leaderships a node hands over in
	// a round of balancing, balanceMovesAtOnce those under way at once.
	balanceMovesPerRound = 64
	balanceMovesAtOnce   = 8
)

// Gossip is what the control plane needs of cluster membership.
type Gossip interface {
	// Members returns every node gossip knows, this one included.
	Members() []cluster.Member
	// Changed is signalled, without blocking the sender, when
	// membership changes.
	Changed() <-chan struct{}
}

// Host is what the control plane asks of the node it runs on: what only
// the node can do with its partition copies. Its methods must not block
// for long; none is called with a lock of the Service held.
type Host interface {
	// Views reports this node's running copies of the partitions named,
	// in the same order: a zero View for a partition it does not run.
	Views(partitions []string) []View
	// LeaderOf returns the node leading a partition as this node knows
	// it (from its own copy, or from gossip's routes); "" if none.
	LeaderOf(partition string) string
	// InUse reports whether clients are attached to this node's copy of
	// a partition, which leads it (producers or consumers): the leader
	// balancing moves such partitions last.
	InUse(partition string) bool
	// TransferLeadership hands the leadership of this node's copy of a
	// partition, which must lead, to member at its node's Raft address.
	TransferLeadership(ctx context.Context, partition, member, addr string) error
	// CatalogChanged is called after every change of the catalog, and
	// once the catalog has caught up (Current). It must not block.
	CatalogChanged()
	// Wake asks the replicas of a partition whose leader is not known to
	// wake, if they sleep: the repair of a dead replica needs its
	// leader. It must not block.
	Wake(partition string)
}

// Config configures a node's control plane. Zero means default for the
// optional fields.
type Config struct {
	// Self is this node as the catalog records it. Required: ID and
	// RaftAddr.
	Self Node
	// Group configures the metadata Raft group (its directory, mux,
	// timings); the Service sets its FSM, and its ID when empty.
	Group cluster.GroupConfig
	// BootstrapExpect is how many nodes bootstrap the metadata group: 1
	// bootstraps this node alone at Start; more waits until gossip shows
	// that many and bootstraps with the lowest ids.
	BootstrapExpect int
	// ReplaceDeadAfter is how long a node stays down before the metadata
	// leader moves its replicas elsewhere; 0 never moves them.
	ReplaceDeadAfter time.Duration
	// AutoCreateFabrics lets CreateStream create the tenant and fabric of
	// a stream when they are missing; without it such a stream is refused
	// (ErrTenantNotFound, ErrFabricNotFound), except in DefaultTenant,
	// whose fabrics are created on first use.
	AutoCreateFabrics bool
	// ApplyTimeout bounds each metadata change. Default
	// DefaultApplyTimeout.
	ApplyTimeout time.Duration
	// BalanceInterval is how often leaders are evened out. Default
	// DefaultBalanceInterval.
	BalanceInterval time.Duration
	// Gossip is the node's membership; nil runs without (one node).
	Gossip Gossip
	// Host is the node. Required.
	Host Host
	// RPC is the node's RPC server, on which the Service registers its
	// methods before it starts; Client calls other nodes'. Required.
	RPC    *cluster.RPCServer // where its methods are served
	Client *cluster.RPCClient // how it calls other nodes
	// Protocol tells what the node at a Raft address speaks
	// (cluster.Mux.Protocol); nil: every node speaks
	// cluster.RaftProtocol. Nodes of older versions (ProtocolGroups)
	// serve no node-to-node calls: none is made to them.
	Protocol func(raftAddr string) int
	// LegacyIndex asks a node of an older version, over its client port,
	// how far the metadata leader's catalog is. Catching up uses it while
	// the metadata leader runs an older version, in a rolling upgrade;
	// nil waits for a leader of this version.
	LegacyIndex func(ctx context.Context, clientAddr string) (uint64, error)
	// Logger receives the control plane's logs. Nil discards.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults of the optional fields.
func DefaultConfig() Config {
	return Config{BootstrapExpect: 1, ApplyTimeout: DefaultApplyTimeout, BalanceInterval: DefaultBalanceInterval}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.BootstrapExpect = cmp.Or(c.BootstrapExpect, d.BootstrapExpect)
	c.ApplyTimeout = cmp.Or(c.ApplyTimeout, d.ApplyTimeout)
	c.BalanceInterval = cmp.Or(c.BalanceInterval, d.BalanceInterval)
	c.Group.ID = cmp.Or(c.Group.ID, GroupID)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Protocol == nil {
		c.Protocol = func(string) int { return cluster.RaftProtocol }
	}
	return c
}

// Validate reports what is wrong with the configuration.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Self.ID == "" || c.Self.RaftAddr == "" {
		errs = append(errs, errors.New("the Self node needs an ID and a RaftAddr"))
	}
	if c.Host == nil || c.RPC == nil || c.Client == nil {
		errs = append(errs, errors.New("a Host, RPC and Client are required"))
	}
	if c.BootstrapExpect < 1 {
		errs = append(errs, fmt.Errorf("BootstrapExpect %d is below 1", c.BootstrapExpect))
	}
	if c.BootstrapExpect > 1 && c.Gossip == nil {
		errs = append(errs, errors.New("BootstrapExpect above 1 needs Gossip"))
	}
	if c.ReplaceDeadAfter < 0 || c.ApplyTimeout < 0 || c.BalanceInterval < 0 {
		errs = append(errs, errors.New("negative durations"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("meta: config: %w", err)
	}
	return nil
}

// Service is a node's control plane: its replica of the metadata group
// and catalog, and the loops that keep them working — bootstrap, the
// metadata leader's (registering nodes, moving the replicas of dead
// nodes), catching up after a restart, evening out partition leaders —
// and the node-to-node calls they make.
//
// Lifecycle: New starts nothing; Start opens the metadata group and
// starts the loops; Close stops the loops, then closes the group, and is
// idempotent.
type Service struct {
	cfg     Config
	logger  *slog.Logger
	catalog *Catalog
	group   *cluster.Group

	// current latches once the catalog has caught up (Current).
	current atomic.Bool
	// notes remembers what the leader's loop logged once (leader.go);
	// only that loop touches it.
	notes map[string]bool

	// barrierMu guards the shared read barriers (barrier.go).
	barrierMu      sync.Mutex
	nextBarrier    *barrierRound
	barrierRunning bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// New checks the configuration and returns a Service that has started
// nothing. It registers its methods on cfg.RPC, which the caller starts.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{cfg: cfg, logger: cfg.Logger, notes: map[string]bool{}, ctx: ctx, cancel: cancel}
	s.catalog = NewCatalog(cfg.Host.CatalogChanged, cfg.Logger)
	s.register(cfg.RPC)
	return s, nil
}

// Start opens the metadata group, bootstraps it when this node alone does
// (BootstrapExpect 1), and starts the loops.
func (s *Service) Start(ctx context.Context) error {
	gcfg := s.cfg.Group
	gcfg.FSM = s.catalog
	g, err := cluster.OpenGroup(gcfg)
	if err != nil {
		return err
	}
	s.group = g
	if s.cfg.BootstrapExpect == 1 {
		self := cluster.Server{ID: s.cfg.Self.ID, Address: s.cfg.Self.RaftAddr, Voter: true}
		if err := g.Bootstrap(ctx, []cluster.Server{self}); err != nil {
			return err
		}
	} else {
		s.goLoop(s.bootstrapLoop)
	}
	s.goLoop(s.leaderLoop)
	s.goLoop(s.catchUpLoop)
	s.goLoop(s.balanceLoop)
	return nil
}

func (s *Service) goLoop(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// Close stops the loops, then closes the metadata group.
func (s *Service) Close() error {
	var err error
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait()
		if s.group != nil {
			err = s.group.Close()
		}
	})
	return err
}

// Catalog returns the node's replica of the catalog, to read.
func (s *Service) Catalog() *Catalog { return s.catalog }

// Current reports whether this node's catalog has caught up with the
// metadata group since the node started. A node that restarts replays the
// metadata log, and its catalog passes through every placement of the
// past on the way: acting on them would open partitions the node no
// longer holds, close those it does, and tell clients that streams do not
// exist. Once caught up the catalog only moves forward.
func (s *Service) Current() bool { return s.current.Load() }

// IsLeader reports whether this node leads the metadata group.
func (s *Service) IsLeader() bool { return s.group.IsLeader() }

// Leader returns the node id of the metadata leader as this node knows
// it, "" if none.
func (s *Service) Leader() string {
	id, _ := s.group.Leader()
	return id
}

// Index returns how far this node's catalog is: on the leader, once
// everything committed is applied (a read barrier); elsewhere, what it
// has applied. A restarting node waits for its catalog to reach the
// leader's.
func (s *Service) Index(ctx context.Context) (uint64, error) {
	if s.group.IsLeader() {
		if err := s.barrier(ctx); err != nil {
			return 0, err
		}
	}
	return s.catalog.Applied(), nil
}

// HandOver hands the metadata group's leadership to another member if
// this node leads it and has peers; for a node that stops.
func (s *Service) HandOver(ctx context.Context) error {
	if !s.group.IsLeader() {
		return nil
	}
	servers, err := s.group.Servers(ctx)
	if err != nil || len(servers) < 2 {
		return err
	}
	return s.group.TransferLeadership(ctx)
}

// WaitRegistered waits until the metadata group has a leader and this
// node, at its current addresses, is in the catalog.
func (s *Service) WaitRegistered(ctx context.Context) error {
	for {
		changed := s.catalog.Watch()
		if have, ok := s.catalog.Node(s.cfg.Self.ID); ok && have == s.cfg.Self {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("meta: the node was not registered in the metadata group (leader %q): %w", s.Leader(), ctx.Err())
		}
	}
}

// Placed returns what the catalog places on this node, by partition
// name: the member it runs each as, the partition's members, and who may
// bootstrap it. Streams whose name does not parse are left out (and
// logged).
func (s *Service) Placed() map[string]Assignment {
	placed, bad := Assignments(s.catalog.Streams(), s.cfg.Self.ID)
	for _, name := range bad {
		s.logger.Error("catalog holds a bad stream name", "stream", name)
	}
	return placed
}

// Members returns the member ids of a partition's replicas, nil if the
// catalog does not have it (its stream is deleted, or not replayed yet).
func (s *Service) Members(partition string) []string {
	pn, err := geofabric.ParsePartition(partition)
	if err != nil {
		return nil
	}
	st, ok := s.catalog.Stream(pn.Stream.String())
	if !ok {
		return nil
	}
	return st.Members(pn.Number())
}

// fromNode reports whether a request from addr comes from node id: from
// the host of one of the node's advertised addresses.
func (s *Service) fromNode(addr net.Addr, id string) bool {
	info, ok := s.catalog.Node(id)
	if !ok || addr == nil {
		return false
	}
	host, _, err := net.SplitHostPort(addr.String())
	return err == nil && slices.Contains(info.Hosts(), host)
}

// apply proposes an entry to the metadata group as its leader, within
// ApplyTimeout, and returns its Result.
func (s *Service) apply(ctx context.Context, e Entry) (Result, error) {
	if !s.group.IsLeader() {
		return Result{}, &NotLeaderError{LeaderID: s.Leader()}
	}
	if err := s.everyNodeReads(entryFormat(e)); err != nil {
		return Result{}, err
	}
	data, err := Encode(e)
	if err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ApplyTimeout)
	defer cancel()
	v, err := s.group.Apply(ctx, data)
	if err != nil {
		return Result{}, fmt.Errorf("%w: metadata: %v", ErrNotReady, err)
	}
	res, ok := v.(Result)
	if !ok {
		return Result{}, fmt.Errorf("meta: a %T entry answered %T", e, v)
	}
	return res, nil
}

// everyNodeReads returns ErrNotReady while a live node advertises an
// older catalog format than format: it would stop at such an entry. A
// node of an older version that is down now stops at the entry when it
// comes back (upgrade it before): waiting for nodes that may never return
// would hold the cluster back for ever.
func (s *Service) everyNodeReads(format int) error {
	if format <= 1 || s.cfg.Gossip == nil {
		return nil
	}
	for _, m := range s.cfg.Gossip.Members() {
		if m.State == cluster.MemberAlive && m.Catalog < format && m.ID != s.cfg.Self.ID {
			return fmt.Errorf("%w: node %s runs a version without tenants and fabrics (version %q): upgrade every node first", ErrNotReady, m.ID, m.Version)
		}
	}
	return nil
}

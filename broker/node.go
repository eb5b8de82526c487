package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/sync/errgroup"

	"github.com/fabriq-io/fabriq/broker/fsm"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabriq-io/fabriq/broker/partition"
	"github.com/fabriq-io/fabriq/broker/pulsar"
	"github.com/fabriq-io/fabriq/broker/session"
	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/cluster"
	"github.com/fabriq-io/fabriq/cluster/meta"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/storage"
	"github.com/fabriq-io/fabriq/transport"
)

// Node is a running fabriq node: the metadata group's replica, the
// partitions placed on the node, and the client listener.
type Node struct {
	cfg    Config
	logger *slog.Logger

	// dataLock holds the data directory (lockDataDir) from Start to Close.
	dataLock *os.File

	raftLn   net.Listener
	clientLn net.Listener
	mux      *cluster.Mux
	// control is the node's control plane: its replica of the metadata
	// group, the catalog it reads (catalog), and the loops that place and
	// repair partitions.
	control *meta.Service
	catalog *meta.Catalog
	// rpc answers other nodes' calls on the Raft port; rpcClient makes
	// this node's.
	rpc       *cluster.RPCServer
	rpcClient *cluster.RPCClient

	// gossip is nil when the node runs without membership (no GossipAddr).
	gossip gossip
	// disk keeps the free-space reserve; nil when it is turned off.
	disk *diskReserve

	reconcileCh chan struct{}
	// renewing holds the partitions whose damaged copy this node is
	// asking the metadata leader to replace (askRenewal).
	renewing map[string]bool
	stop     chan struct{}
	// ctx ends when the node closes.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// serving is set once Start has returned and cleared when the node
	// starts to stop: Readiness reads the rest only while it is set.
	serving atomic.Bool

	mu         sync.Mutex
	partitions map[string]*localPartition
	// retired holds the copies of partitions moved away that still run
	// their group, retired (retirePartition), until it removes them.
	retired  map[string]*localPartition
	sessions map[*session.Session]struct{}
	// perAddr counts the sessions of each client IP address.
	perAddr map[string]int
	// refusals holds a token per connection being told it is over a
	// limit (refuse).
	refusals chan struct{}
	// refused counts and logs the requests refused for authentication,
	// authorization, limits and disk space.
	refused *refusedLog
	// raftEvents counts the elections and leader changes of the node's
	// groups; commitLatency, its partitions' commit latency.
	publish       *publishLimits
	raftEvents    cluster.GroupEvents
	commitLatency prometheus.Histogram
	// halted holds the partitions whose state machine stopped on this
	// node (haltPartition): they stay closed until the disk has room and
	// their wait is over, or the node restarts.
	halted map[string]*haltedCopy
	// haltWait is how long a partition that stopped waits before it is
	// opened again: doubled at each stop, from haltRetry up to
	// haltRetryMax, so a copy whose disk keeps failing does not loop.
	haltWait map[string]time.Duration
	changed  chan struct{} // closed and replaced when partitions change
	closed   bool
	// asleep holds the partitions placed here whose copy sleeps
	// (sleep.go); rouse, when this node last asked a partition's
	// replicas to wake.
	asleep map[string]*asleepCopy
	rouse  rousers
	// closing holds a token per copy going to sleep at its leader's word
	// (offerSleep).
	closing chan struct{}
}

// haltedCopy is a partition whose state machine stopped on this node.
type haltedCopy struct {
	fsm   *fsm.Machine
	done  chan struct{} // closed once the copy is closed
	retry time.Time     // not opened again before
}

// How long a partition stopped for lack of disk space waits before it is
// opened again, at its first stop and at most.
const (
	haltRetry    = 30 * time.Second
	haltRetryMax = 10 * time.Minute
)

// localPartition is a partition this node runs, with what it owns: the
// partition's log, state machine and Raft group, which the node opens
// and closes, and the driver over them (partition.Partition).
type localPartition struct {
	*partition.Partition
	group *cluster.Group
	log   *storage.Log
	fsm   *fsm.Machine
	// replica is this node's server id in the group (replicaID).
	replica string
	// dir is the partition's data directory (partitionDir).
	dir string
}

// NewNode checks the configuration; Start starts the node.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Node{
		ctx:         ctx,
		cancel:      cancel,
		cfg:         cfg,
		logger:      cfg.Logger.With("node", cfg.NodeID),
		reconcileCh: make(chan struct{}, 1),
		renewing:    map[string]bool{},
		stop:        make(chan struct{}),
		partitions:  map[string]*localPartition{},
		retired:     map[string]*localPartition{},
		sessions:    map[*session.Session]struct{}{},
		perAddr:     map[string]int{},
		refusals:    make(chan struct{}, maxRefusals),
		refused:     newRefusedLog(cfg.Logger.With("node", cfg.NodeID)),
		publish:     newPublishLimits(cfg.PublishRate, cfg.NodeID),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fabriq_raft_commit_seconds",
			Help:    "Time from the proposal of an entry of sends to its commit, on the partitions this node leads: a majority of replicas has it on disk.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5 ms to 4 s
		}),
		halted:   map[string]*haltedCopy{},
		asleep:   map[string]*asleepCopy{},
		closing:  make(chan struct{}, partitionsAtOnce),
		haltWait: map[string]time.Duration{},
		changed:  make(chan struct{}),
		disk:     newDiskReserve(cfg.DataDir, cfg.MinFreeDisk, cfg.Logger.With("node", cfg.NodeID)),
	}, nil
}

// Start opens the listeners and the metadata group, registers the node,
// opens its partitions and starts serving clients. It returns once the
// node answers clients, or with the first error.
func (n *Node) Start(ctx context.Context) (err error) {
	if err := os.MkdirAll(n.cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	lock, err := lockDataDir(n.cfg.DataDir)
	if err != nil {
		return err
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		lock.Close()
		return errors.New("broker: the node is closed")
	}
	n.dataLock = lock
	n.mu.Unlock()
	defer func() {
		if err != nil {
			n.unlockDataDir() // Close, when it ran, did already
		}
	}()
	if err := n.disk.refresh(); err != nil {
		return err
	}
	if n.raftLn, err = net.Listen("tcp", n.cfg.RaftAddr); err != nil {
		return fmt.Errorf("broker: raft listener: %w", err)
	}
	if n.clientLn, err = net.Listen("tcp", n.cfg.ClientAddr); err != nil {
		n.raftLn.Close()
		return fmt.Errorf("broker: client listener: %w", err)
	}
	if n.cfg.AdvertiseRaftAddr == "" {
		n.cfg.AdvertiseRaftAddr = n.raftLn.Addr().String()
	}
	if n.cfg.AdvertiseClientAddr == "" {
		n.cfg.AdvertiseClientAddr = n.clientLn.Addr().String()
	}
	if t := n.cfg.TLS; t != nil {
		n.clientLn = tlsOnlyListener{Listener: n.clientLn, cfg: t.Server()}
		n.raftLn = tls.NewListener(n.raftLn, t.PeerServer())
	}
	n.mux = cluster.NewMux(n.raftLn, n.logger)
	if n.cfg.TLS != nil {
		n.mux.SetTLS(n.cfg.TLS.PeerClient())
	}
	if err := n.mux.Start(); err != nil {
		n.shutdownListeners()
		return err
	}
	if n.cfg.GossipAddr != "" {
		g, err := startGossip(cluster.MembershipConfig{
			NodeID:   n.cfg.NodeID,
			BindAddr: n.cfg.GossipAddr,
			Join:     n.cfg.Join,
			Keys:     n.cfg.GossipKeys,
			Meta: cluster.NodeMeta{
				ID: n.cfg.NodeID, Region: n.cfg.Region, ClientAddr: n.cfg.AdvertiseClientAddr,
				RaftAddr: n.cfg.AdvertiseRaftAddr, HTTPAddr: n.cfg.HTTPAddr, Version: n.cfg.Version,
				Catalog: meta.CatalogFormat,
			},
			Logger: n.logger,
		}, n.partitionEpoch)
		if err != nil {
			n.shutdownListeners()
			return fmt.Errorf("broker: gossip: %w", err)
		}
		n.gossip = g
		// Headers naming a member, and node-to-node calls, go to the
		// nodes that advertise them: in a rolling upgrade some do not.
		n.mux.SetProtocols(g.m.ProtocolOf)
	}
	if err := n.startControl(ctx); err != nil {
		n.Close()
		return err
	}
	n.mux.SetAsleep(func(group string) bool { return n.wakeCopy(group, false) })
	n.wg.Add(3)
	go n.diskLoop()
	go n.reconcileLoop()
	go n.acceptLoop()
	if n.cfg.SleepAfter > 0 {
		n.wg.Add(1)
		go n.sleepLoop()
	}
	n.requestReconcile()
	n.serving.Store(true)
	return nil
}

// diskLoop reads the free space of the data directory every
// diskCheckEvery, so that sends are refused below the reserve and accepted
// again once space is freed.
func (n *Node) diskLoop() {
	defer n.wg.Done()
	if n.disk == nil {
		return
	}
	t := time.NewTicker(diskCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			_ = n.disk.refresh() // a failure is logged once and keeps the last reading
		}
	}
}

// startControl starts the node's control plane and its node-to-node
// calls, and waits until the node is registered in the catalog.
func (n *Node) startControl(ctx context.Context) error {
	n.rpc = cluster.NewRPCServer(n.mux, n.logger)
	n.rpcClient = cluster.NewRPCClient()
	if n.cfg.TLS != nil {
		n.rpcClient.SetTLS(n.cfg.TLS.PeerClient())
	}
	cfg := meta.Config{
		Self:              meta.Node{ID: n.cfg.NodeID, ClientAddr: n.cfg.AdvertiseClientAddr, RaftAddr: n.cfg.AdvertiseRaftAddr, Region: n.cfg.Region},
		Group:             n.groupConfig(meta.GroupID, filepath.Join(n.cfg.DataDir, "meta"), nil, nil),
		BootstrapExpect:   n.cfg.BootstrapExpect,
		ReplaceDeadAfter:  max(n.cfg.ReplaceDeadAfter, 0), // negative: never, which meta says with 0
		AutoCreateFabrics: n.cfg.AutoCreateFabrics,
		ApplyTimeout:      applyTimeout,
		Host:              host{n},
		RPC:               n.rpc,
		Client:            n.rpcClient,
		Protocol:          n.mux.Protocol,
		LegacyIndex:       n.legacyIndex,
		Logger:            n.logger,
	}
	if n.gossip != nil {
		cfg.Gossip = n.gossip
	}
	control, err := meta.New(cfg)
	if err != nil {
		return err
	}
	n.control, n.catalog = control, control.Catalog()
	if err := n.rpc.Start(); err != nil {
		return err
	}
	if err := control.Start(ctx); err != nil {
		return err
	}
	return control.WaitRegistered(ctx)
}

// groupConfig returns the configuration of one of the node's Raft groups.
func (n *Node) groupConfig(id, dir string, fsm raft.FSM, expand cluster.ExpandFunc) cluster.GroupConfig {
	cfg := cluster.DefaultGroupConfig()
	cfg.ID = id
	cfg.NodeID = n.cfg.NodeID
	cfg.Dir = dir
	cfg.Mux = n.mux
	cfg.LocalAddr = n.cfg.AdvertiseRaftAddr
	cfg.Logger = n.logger
	cfg.Events = &n.raftEvents
	if t := n.cfg.Raft; t.HeartbeatTimeout > 0 {
		cfg.HeartbeatTimeout = t.HeartbeatTimeout
		// The lease as long as the heartbeat timeout (Raft's limit), not
		// half: with a thousand groups per node, a node held up for a
		// quarter of a second (two cores, garbage collection, a burst of
		// creates) made every leader it had step down at once, and the
		// elections that followed held it up again (BENCHMARKS.md, "Many
		// idle partitions"). A leader cut off from a majority still steps
		// down within it, before the followers' heartbeat timeout.
		cfg.LeaderLeaseTimeout = t.HeartbeatTimeout
	}
	if t := n.cfg.Raft; t.ElectionTimeout > 0 {
		cfg.ElectionTimeout = t.ElectionTimeout
	}
	if t := n.cfg.Raft; t.CommitTimeout > 0 {
		cfg.CommitTimeout = t.CommitTimeout
	}
	if t := n.cfg.RaftSnapshots; t.Interval > 0 {
		cfg.SnapshotInterval = t.Interval
	}
	if t := n.cfg.RaftSnapshots; t.Threshold > 0 {
		cfg.SnapshotThreshold = t.Threshold
	}
	if t := n.cfg.RaftSnapshots; t.TrailingLogs > 0 {
		cfg.TrailingLogs = t.TrailingLogs
	}
	if t := n.cfg.RaftSnapshots; t.Bytes != 0 {
		cfg.SnapshotBytes = t.Bytes
	}
	cfg.FSM = fsm
	cfg.Expand = expand
	return cfg
}

// GossipAddr returns the gossip address, empty without membership.
func (n *Node) GossipAddr() string {
	if g, ok := n.gossip.(*clusterGossip); ok {
		return g.m.Addr()
	}
	return ""
}

// partitionEpoch returns the incarnation of a partition's stream.
func (n *Node) partitionEpoch(partition string) uint64 {
	p, err := geofabric.ParsePartition(partition)
	if err != nil {
		return 0
	}
	s, _ := n.catalog.Stream(p.Stream.String())
	return s.Epoch
}

// Addr returns the address clients connect to.
func (n *Node) Addr() string { return n.cfg.AdvertiseClientAddr }

// NodeID returns the node's id.
func (n *Node) NodeID() string { return n.cfg.NodeID }

func (n *Node) requestReconcile() {
	select {
	case n.reconcileCh <- struct{}{}:
	default:
	}
}

// reconcileLoop opens the partitions the catalog places on this node and
// closes those it no longer does.
func (n *Node) reconcileLoop() {
	defer n.wg.Done()
	// A copy set aside goes once the group has removed its member, which
	// no catalog change announces: look again now and then.
	tick := time.NewTicker(reconcileEvery)
	defer tick.Stop()
	sweep := time.NewTicker(sweepCopiesEvery)
	defer sweep.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.reconcileCh:
		case <-tick.C:
		case <-sweep.C:
			n.removeMovedAwayCopies()
			n.removeRetiredCopies()
			continue
		}
		n.reconcile()
	}
}

// partitionCommitTimeout is how long an idle partition leader waits before
// it tells its followers the commit index again (cluster.GroupConfig's
// CommitTimeout; the metadata group keeps the 50 ms default, its followers'
// catalogs serve reads). hashicorp/raft sends every follower an append
// that often even when nothing happens, and building one reads the Raft
// log: with hundreds of idle partitions per node that was a tenth of a
// core. A partition's follower only learns of the last entries of a burst
// later; acknowledgements never wait for it (they need a majority's log,
// not its state machine), and a new leader applies every committed entry
// before anything it proposes.
const partitionCommitTimeout = time.Second

// reconcileEvery is how often the node reconciles its partitions without
// being asked.
const reconcileEvery = 2 * time.Second

// sweepCopiesEvery is how often the node looks for copies of partitions
// moved away that it may delete (it asks their leaders), and for copies
// set aside whose member the group has removed. (The second ran with
// every reconcile at first: with a thousand partitions it was half of an
// idle node's reconcile loop, for copies that are rare.)
const sweepCopiesEvery = 10 * time.Second

func (n *Node) reconcile() {
	if !n.catalogCurrent() {
		return // the next catalog change or tick reconciles
	}
	placed := n.control.Placed()
	n.mu.Lock()
	running := make(map[string]string, len(n.partitions))
	for name, lp := range n.partitions {
		running[name] = lp.replica
	}
	retired := make(map[string]bool, len(n.retired))
	for name, lp := range n.retired {
		retired[name] = lp.group.IsLeader()
	}
	plan := meta.PlanNode(placed, running, retired, n.known)
	type dropped struct {
		lp     *localPartition
		remove bool
	}
	var drop []dropped
	for _, d := range plan.Drop {
		from := n.partitions
		if d.Retired {
			from = n.retired
		}
		drop = append(drop, dropped{lp: from[d.Partition], remove: d.Remove})
		delete(from, d.Partition)
	}
	var retire, handOver []*localPartition
	for _, name := range plan.Retire {
		lp := n.partitions[name]
		delete(n.partitions, name)
		n.retired[name] = lp
		retire = append(retire, lp)
	}
	for _, name := range plan.HandOver {
		handOver = append(handOver, n.retired[name])
	}
	open, gone := n.haltedLocked(plan.Open)
	open, wake, goneAsleep := n.asleepLocked(open, placed)
	n.mu.Unlock()
	for _, name := range append(gone, goneAsleep...) {
		n.removePartitionData(name)
	}
	for _, name := range wake {
		n.wakeCopy(name, true)
	}
	for _, lp := range retire {
		n.retirePartition(lp)
	}
	for _, lp := range handOver {
		n.handOver(lp)
	}
	for _, d := range drop {
		n.closePartition(d.lp, d.remove)
		// Only a deleted stream's routes go: a tombstone for a partition
		// that lives on elsewhere would hide its leader from every node.
		if d.remove && n.gossip != nil {
			n.gossip.forget(d.lp.Name())
		}
	}
	if !n.openPlaced(open, placed) {
		return
	}
	n.mu.Lock()
	close(n.changed)
	n.changed = make(chan struct{})
	leading := make([]*localPartition, 0, len(n.partitions))
	for _, lp := range n.partitions {
		if lp.group.IsLeader() {
			leading = append(leading, lp)
		}
	}
	n.mu.Unlock()
	for _, lp := range leading {
		replicas := placed[lp.Name()].Members
		if replicas == nil {
			replicas = n.replicasOf(lp.Name())
		}
		if len(replicas) > 0 {
			n.reconcileReplicas(lp, replicas)
		}
	}
}

// known reports whether the catalog has the partition's stream.
func (n *Node) known(partition string) bool { return n.replicasOf(partition) != nil }

// haltedLocked filters the partitions to open: a halted copy stays closed
// until there is room on the disk again and its wait is over (or the node
// restarts); then it is opened again and catches up from Raft. It returns
// the partitions to open, and the halted copies of deleted streams, whose
// data goes. The caller holds n.mu.
func (n *Node) haltedLocked(open []string) (keep, gone []string) {
	for name, h := range n.halted {
		select {
		case <-h.done:
			switch {
			case !n.known(name):
				delete(n.halted, name)
				delete(n.haltWait, name)
				gone = append(gone, name)
			case n.disk.roomy() && time.Now().After(h.retry):
				delete(n.halted, name)
				n.logger.Info("opening again a partition stopped for lack of disk space: there is room again; it catches up from Raft", "partition", name)
			}
		default: // still closing: the next pass looks again
		}
	}
	for _, name := range open {
		if n.halted[name] == nil {
			keep = append(keep, name)
		}
	}
	return keep, gone
}

// openPlaced opens the partitions placed on this node that it does not
// run, partitionsAtOnce at a time; it reports false when the node has
// closed meanwhile.
func (n *Node) openPlaced(names []string, placed map[string]meta.Assignment) bool {
	var g errgroup.Group
	g.SetLimit(partitionsAtOnce)
	var closed atomic.Bool
	listing := new(asideListing)
	for _, name := range names {
		if closed.Load() {
			break
		}
		g.Go(func() error {
			a := placed[name]
			lp, err := n.openPartition(name, a.Member, a.Members, a.Bootstrap, false, listing, true)
			switch {
			case errors.Is(err, errAsleep):
				n.mu.Lock()
				if n.asleep[name] == nil {
					n.asleep[name] = &asleepCopy{member: a.Member, members: a.Members}
				}
				n.mu.Unlock()
			case err != nil:
				n.openFailed(name, a.Member, err)
			case !n.keep(n.partitions, lp):
				closed.Store(true)
			}
			return nil
		})
	}
	g.Wait()
	return !closed.Load()
}

// openFailed reports a copy of a partition that could not open, as member:
// a damaged one is renewed.
func (n *Node) openFailed(name, member string, err error) {
	switch {
	case errors.Is(err, errStaleMember):
		n.logger.Warn("not opening a partition the catalog places here under an older member than a copy on disk", "partition", name, "err", err)
	case errors.Is(err, storage.ErrCorrupt) || errors.Is(err, cluster.ErrDamaged):
		n.askRenewal(name, member, err)
	default:
		n.logger.Error("cannot open partition", "partition", name, "err", err)
	}
}

// partitionsAtOnce bounds the partitions a node opens, and closes, at
// once. One at a time, each waiting on its disk writes (opening) or on its
// Raft group's shutdown (closing), a node of a thousand partitions took
// 20 s to open them at a restart and four minutes to stop. Opened at
// once, groups elect at once: as many as their opens take, spread over
// the heartbeat timeout that follows each.
const partitionsAtOnce = 32

// catalogCurrent reports whether this node's catalog has caught up with
// the metadata group since the node started (meta.Service.Current): until
// then it opens and closes no partition.
func (n *Node) catalogCurrent() bool { return n.control.Current() }

// replicasOf returns the member ids of a partition's replicas from the
// catalog, nil if the stream is gone.
func (n *Node) replicasOf(partition string) []string { return n.control.Members(partition) }

// reconcileReplicas makes the Raft configuration of a partition this node
// leads match its replicas (member ids), in the order meta.MemberChanges
// gives, and stops at the first change that fails: the next round starts
// again from the group's configuration.
func (n *Node) reconcileReplicas(lp *localPartition, replicas []string) {
	ctx, cancel := context.WithTimeout(n.ctx, applyTimeout)
	defer cancel()
	servers, err := lp.group.Servers(ctx)
	if err != nil {
		return
	}
	addr := func(node string) (string, bool) {
		info, ok := n.catalog.Node(node)
		return info.RaftAddr, ok
	}
	alive := func(node string) bool { return n.nodeState(node) == "alive" }
	for _, c := range meta.MemberChanges(servers, replicas, lp.replica, addr, alive) {
		if c.Remove {
			if err := lp.group.RemoveServer(ctx, c.ID); err != nil {
				n.logger.Warn("removing a replica failed", "partition", lp.Name(), "replica", c.ID, "err", err)
				return
			}
			n.logger.Info("replica removed", "partition", lp.Name(), "replica", c.ID)
			continue
		}
		if err := lp.group.AddVoter(ctx, c.ID, c.Addr); err != nil {
			n.logger.Warn("adding a replica failed", "partition", lp.Name(), "replica", c.ID, "err", err)
			return
		}
		n.logger.Info("replica added", "partition", lp.Name(), "replica", c.ID, "addr", c.Addr)
	}
}

// retirePartition keeps running the copy of a partition moved away from
// this node, retired (cluster.Group.Retire): it serves no client and never
// campaigns, but it answers its group's leader and votes until the group
// has removed its member. Stopping it at once could leave the group
// without a majority that can answer: its replacement may not have caught
// up, and another member may be down. Running on, with a configuration
// the group may have left, it must never lead: copies like it could elect
// each other over a shorter log.
func (n *Node) retirePartition(lp *localPartition) {
	n.logger.Info("replica moved away; its copy follows its group, retired, until the group removes it", "partition", lp.Name(), "member", lp.replica)
	lp.group.Retire()
	lp.StopAccepting()
	if lp.group.IsLeader() {
		n.handOver(lp)
	}
}

// handOver asks a retired copy that leads its group to hand leadership to
// another member; reconcile asks again while it leads.
func (n *Node) handOver(lp *localPartition) {
	ctx, cancel := context.WithTimeout(n.ctx, transferTimeout)
	defer cancel()
	switch err := lp.group.TransferLeadership(ctx); {
	case errors.Is(err, cluster.ErrTransferTried):
		// Every voter was tried in this term: the next term's leader,
		// or the next reconcile after the term moved, tries again.
		n.logger.Debug("a retired copy tried every voter in this term", "partition", lp.Name())
	case err != nil:
		n.logger.Warn("a retired copy could not hand its leadership over; will try again", "partition", lp.Name(), "err", err)
	}
}

// partitionDir is where a partition's data lives (see PartitionDir).
func (n *Node) partitionDir(name string) (string, error) {
	return PartitionDir(n.cfg.DataDir, name)
}

// removeCopy removes a partition directory through the guard.
func (n *Node) removeCopy(dir string) error { return removeCopy(n.cfg.DataDir, dir) }

// openPartition opens a partition placed on this node as the member self
// of its group. A replica of the stream's initial placement bootstraps the
// group with the others (all of them with the same configuration); a
// replica placed later waits for the leader to add it.
//
// A retired copy (a member of a group this node no longer holds a place
// in, see retirePartition) opens retired, with nothing to bootstrap.
//
// With mayStayAsleep, a copy that went to sleep and has not been opened
// since stays closed: errAsleep (sleep.go).
func (n *Node) openPartition(name, self string, replicas, initial []string, retired bool, listing *asideListing, mayStayAsleep bool) (*localPartition, error) {
	dir, err := n.partitionDir(name)
	if err != nil {
		return nil, err
	}
	if err := n.claimPartitionDir(dir, self, listing); err != nil {
		return nil, err
	}
	if why, err := os.ReadFile(filepath.Join(dir, damagedMarker)); err == nil {
		return nil, fmt.Errorf("%w: the copy of member %s was found damaged while it served: %s", storage.ErrCorrupt, self, strings.TrimSpace(string(why)))
	}
	if mayStayAsleep && !retired && stayAsleep(dir) {
		return nil, errAsleep
	}
	log, err := storage.Open(filepath.Join(dir, "log"), storage.Config{SegmentMaxBytes: n.cfg.SegmentBytes, Logger: n.logger.With("partition", name)})
	if err != nil {
		return nil, err
	}
	snapDir := filepath.Join(dir, "log-snapshots")
	if err := fsm.CleanSnapshotDir(snapDir); err != nil {
		log.Close()
		return nil, err
	}
	// Raft may apply entries (a restart replays them) before the
	// partition exists: the callback finds it once it does.
	var target atomic.Pointer[partition.Partition]
	var f *fsm.Machine
	f = fsm.New(fsm.Config{
		Log:         log,
		SnapshotDir: snapDir,
		Applied: func(next uint64, data bool) {
			if p := target.Load(); p != nil {
				p.Applied(next, data)
			}
		},
		Halted: func(err error) { n.haltPartition(name, f, err) },
		Logger: n.logger.With("partition", name),
	})
	gcfg := n.groupConfig(name, filepath.Join(dir, "raft"), f, fsm.ExpandLogSnapshot)
	if n.cfg.Raft.CommitTimeout == 0 {
		gcfg.CommitTimeout = partitionCommitTimeout
	}
	gcfg.NodeID = self
	gcfg.Retired = retired
	// The Raft log found damaged while the group runs: the copy stops
	// serving and is renewed, as for a damaged read of its log (damage
	// found while it opens fails the open instead).
	var damage atomic.Pointer[error]
	gcfg.OnDamage = func(err error) {
		damage.Store(&err)
		if p := target.Load(); p != nil {
			p.Damaged(err)
		}
	}
	gcfg.OnSleep = func() { n.offerSleep(name) }
	g, err := cluster.OpenGroup(gcfg)
	if err != nil {
		log.Close()
		return nil, err
	}
	if retired || !slices.Contains(initial, n.cfg.NodeID) {
		replicas = nil
	}
	var servers []cluster.Server
	for _, id := range replicas {
		info, ok := n.catalog.Node(meta.NodeOf(id))
		if !ok {
			g.Close()
			log.Close()
			return nil, fmt.Errorf("broker: replica node %s is not registered", id)
		}
		servers = append(servers, cluster.Server{ID: id, Address: info.RaftAddr, Voter: true})
	}
	ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
	defer cancel()
	if len(servers) == 0 {
		// Not an initial replica: nothing to bootstrap.
	} else if err := g.Bootstrap(ctx, servers); err != nil {
		g.Close()
		log.Close()
		return nil, err
	}
	p, err := n.newPartition(name, log, f, g)
	if err != nil {
		g.Close()
		log.Close()
		return nil, err
	}
	target.Store(p)
	if err := damage.Load(); err != nil {
		p.Damaged(*err) // found before the partition existed
	}
	if retired {
		p.StopAccepting() // serves nobody: its loops never start
	} else {
		p.Start()
	}
	return &localPartition{Partition: p, group: g, log: log, fsm: f, replica: self, dir: dir}, nil
}

// newPartition returns the driver of a partition over its log, state
// machine and Raft group, with the node's tunings, told what only the
// node knows (the leader's address, the stream's retention policy, the
// free-space reserve) and telling the node of leadership and damage.
func (n *Node) newPartition(name string, log *storage.Log, f *fsm.Machine, g *cluster.Group) (*partition.Partition, error) {
	var p *partition.Partition
	cfg := partition.DefaultConfig()
	cfg.Name, cfg.Log, cfg.Machine, cfg.Group, cfg.Logger = name, log, f, g, n.logger
	cfg.ReconnectGrace = n.cfg.Subscriptions.ReconnectGrace
	cfg.ProbeTimeout = n.cfg.Subscriptions.ProbeTimeout
	cfg.Dispatch = n.cfg.Subscriptions.engine()
	cfg.MaxSubscriptions = n.cfg.Limits.MaxSubscriptionsPerPartition
	cfg.MaxEntryBytes = max(cfg.MaxEntryBytes, n.cfg.MaxMessageBytes+1<<20)
	cfg.RetentionInterval = n.cfg.RetentionInterval
	if n.disk != nil {
		cfg.Reserve = n.disk
	}
	cfg.NotLeader = func() error { return n.notLeaderError(name, g) }
	if pn, err := geofabric.ParsePartition(name); err == nil {
		stream := pn.Stream.String()
		cfg.Retention = func() (transport.RetentionPolicy, bool) {
			s, ok := n.catalog.Stream(stream)
			return retentionToWire(s.Retention), ok
		}
	}
	cfg.OnDamage = func(err error) { n.damagedCopy(name, p, err) }
	cfg.OnCommit = func(d time.Duration) { n.commitLatency.Observe(d.Seconds()) }
	cfg.OnLeadership = func(l cluster.Leadership) {
		if !l.IsLeader || g.Retired() {
			return
		}
		if n.gossip != nil {
			n.gossip.announce(name, n.cfg.NodeID, l.Term)
		}
		n.requestReconcile() // a new leader checks the replicas
	}
	var err error
	p, err = partition.New(cfg)
	return p, err
}

// keep records a partition just opened in into (n.partitions or
// n.retired), or closes it if the node has closed meanwhile, or if its
// state machine stopped while it opened (haltPartition); it reports false
// when the node has closed.
func (n *Node) keep(into map[string]*localPartition, lp *localPartition) bool {
	n.mu.Lock()
	if h := n.halted[lp.Name()]; h != nil && h.fsm == lp.fsm {
		n.mu.Unlock()
		n.closePartition(lp, false)
		close(h.done)
		return true
	}
	if n.closed {
		n.mu.Unlock()
		n.closePartition(lp, false)
		return false
	}
	into[lp.Name()] = lp
	n.mu.Unlock()
	if err := lp.DamageFound(); err != nil {
		// Found damaged before it was kept: damagedCopy did not find it.
		n.damagedCopy(lp.Name(), lp.Partition, err)
	}
	return true
}

// haltPartition closes, on this node only, a partition whose state
// machine stopped because its log could not take a committed entry (a
// full disk). The group's other members keep their majority and go on;
// this copy stays closed until the disk has room again and a wait that
// doubles at each stop is over, or until the node restarts; then it
// replays from Raft what it could not append and catches up. Called from Raft's
// goroutine, it must not block: the group is closed by a goroutine of the
// node.
func (n *Node) haltPartition(name string, f *fsm.Machine, err error) {
	n.mu.Lock()
	if n.closed || n.halted[name] != nil {
		n.mu.Unlock()
		return
	}
	wait := min(max(2*n.haltWait[name], haltRetry), haltRetryMax)
	n.haltWait[name] = wait
	h := &haltedCopy{fsm: f, done: make(chan struct{}), retry: time.Now().Add(wait)}
	n.halted[name] = h
	var lp *localPartition
	for _, m := range []map[string]*localPartition{n.partitions, n.retired} {
		if c := m[name]; c != nil && c.fsm == f {
			lp = c
			delete(m, name)
		}
	}
	if lp != nil {
		n.wg.Add(1)
	}
	n.mu.Unlock()
	n.logger.Error("partition stopped on this node: its log cannot store a committed entry; the other replicas go on without this one; once the disk has room it is opened again and catches up from Raft",
		"partition", name, "retry_after", wait.String(), "err", err)
	if lp == nil {
		return // still opening: keep closes it
	}
	go func() {
		defer n.wg.Done()
		defer close(h.done)
		n.closePartition(lp, false)
	}()
}

// damagedCopy stops serving a copy whose log failed its checks on a read
// (a sealed segment damaged on disk, found only when read): it marks the
// copy damaged, so that it is never opened again, closes it (the other
// replicas elect a leader if it led) and asks for a new member with an
// empty copy, as for a copy found damaged at open. It must not block: the
// partition's reader reports it.
func (n *Node) damagedCopy(name string, p *partition.Partition, cause error) {
	n.mu.Lock()
	lp := n.partitions[name]
	if n.closed || lp == nil || lp.Partition != p {
		n.mu.Unlock()
		return
	}
	delete(n.partitions, name)
	n.wg.Add(1)
	n.mu.Unlock()
	n.logger.Error("partition copy is damaged: a read failed its checks; this copy stops serving and is renewed from the other replicas", "partition", name, "member", lp.replica, "err", cause)
	go func() {
		defer n.wg.Done()
		// Marked before it closes: reconcile may look for it at once.
		if dir, err := n.partitionDir(name); err == nil {
			if err := writeFileSync(filepath.Join(dir, damagedMarker), []byte(cause.Error()+"\n")); err != nil {
				n.logger.Warn("cannot mark a damaged copy", "partition", name, "err", err)
			}
		}
		n.closePartition(lp, false)
		n.askRenewal(name, lp.replica, cause)
	}()
}

// closePartition stops a partition; with remove its data goes too.
func (n *Node) closePartition(lp *localPartition, remove bool) {
	lp.StopAccepting()
	if err := lp.group.Close(); err != nil {
		n.logger.Warn("closing partition group", "partition", lp.Name(), "err", err)
	}
	lp.Wait()
	if err := lp.log.Close(); err != nil {
		n.logger.Warn("closing partition log", "partition", lp.Name(), "err", err)
	}
	if remove {
		n.removePartitionData(lp.Name())
	}
}

// removePartitionData removes a partition's data and its copies set aside.
func (n *Node) removePartitionData(name string) {
	dir, err := n.partitionDir(name)
	if err != nil {
		n.logger.Error("partition data not removed", "partition", name, "err", err)
		return
	}
	retired, _ := filepath.Glob(dir + "@*")
	for _, d := range append(retired, dir) {
		if err := n.removeCopy(d); err != nil {
			n.logger.Warn("removing partition data", "partition", name, "dir", d, "err", err)
		}
	}
}

// notLeaderError is the answer of a follower: NotLeader with the leader's
// client address, or ServiceNotReady while there is no leader. A leader
// that refused a request (it is handing its leadership over, or has just
// lost it and does not know yet) answers ServiceNotReady too: a hint
// naming itself would send the client straight back to it.
func (n *Node) notLeaderError(name string, g *cluster.Group) error {
	id, _ := g.Leader()
	id = meta.NodeOf(id)
	if id == "" {
		return wire.Errorf(transport.CodeServiceNotReady, "partition %s has no leader yet", name)
	}
	if id == n.cfg.NodeID {
		return wire.Errorf(transport.CodeServiceNotReady, "partition %s: its leader, this node, is not taking requests now (its leadership is being handed over or was lost); try again", name)
	}
	info, _ := n.catalog.Node(id)
	return &transport.Error{Code: transport.CodeNotLeader, Message: fmt.Sprintf("node %s leads partition %s", id, name), LeaderHint: info.ClientAddr}
}

// nodeState is what the node knows of another's liveness.
func (n *Node) nodeState(id string) string {
	if id == n.cfg.NodeID {
		return "alive"
	}
	if n.gossip != nil {
		for _, m := range n.gossip.Members() {
			if m.ID == id {
				return m.State.String()
			}
		}
	}
	return "unknown"
}

// mayLead reports whether node id may lead a partition as far as gossip
// knows: it is not dead and has not left.
func (n *Node) mayLead(id string) bool {
	st := n.nodeState(id)
	return st != cluster.MemberDead.String() && st != cluster.MemberLeft.String()
}

// leaderOf returns a partition's leader and term as this node knows them:
// from its own replica, else from the routes gossip spreads.
func (n *Node) leaderOf(name string) (string, uint64) {
	if lp, ok := n.partition(name); ok {
		if id, _ := lp.group.Leader(); id != "" {
			return meta.NodeOf(id), lp.group.Term()
		}
	}
	if n.gossip != nil {
		if id, term, ok := n.gossip.route(name); ok {
			return id, term
		}
	}
	return "", 0
}

// partition returns a partition this node runs.
func (n *Node) partition(name string) (*localPartition, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	lp, ok := n.partitions[name]
	return lp, ok
}

// waitPartition waits until the node runs the partition and it has a
// leader, or ctx ends.
func (n *Node) waitPartition(ctx context.Context, name string) (*localPartition, error) {
	for {
		n.mu.Lock()
		lp, ok := n.partitions[name]
		changed := n.changed
		n.mu.Unlock()
		if ok {
			if _, err := lp.group.WaitForLeader(ctx); err != nil {
				return nil, wire.Errorf(transport.CodeTimeout, "partition %s has no leader: %v", name, err)
			}
			return lp, nil
		}
		n.wakeCopy(name, true)
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, wire.Errorf(transport.CodeTimeout, "partition %s did not open: %v", name, ctx.Err())
		case <-n.stop:
			return nil, partition.ErrStopping
		}
	}
}

// acceptLoop serves client connections until the node closes.
func (n *Node) acceptLoop() {
	defer n.wg.Done()
	// A failed accept (out of descriptors) is retried with a backoff: a
	// node that gave up here would stay a leader no client can reach.
	acc := cluster.NewAcceptor(n.clientLn, n.stop, n.logger.With("listener", "client"))
	for {
		nc, err := acc.Accept()
		if err != nil {
			select {
			case <-n.stop:
			default:
				n.logger.Error("client listener closed under the node", "err", err)
			}
			return
		}
		host := hostOf(nc.RemoteAddr())
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			nc.Close()
			return
		}
		var over error
		switch lim := n.cfg.Limits; {
		case len(n.sessions) >= lim.MaxConnections:
			over = wire.Errorf(transport.CodeLimitExceeded, "node %s serves %d connections, its limit (--max-connections); try again later or another node", n.cfg.NodeID, lim.MaxConnections)
		case n.perAddr[host] >= lim.MaxConnectionsPerAddress:
			over = wire.Errorf(transport.CodeLimitExceeded, "node %s serves %d connections from %s, its limit per client address (--max-connections-per-address)", n.cfg.NodeID, lim.MaxConnectionsPerAddress, host)
		}
		if over != nil {
			n.mu.Unlock()
			n.refuse(nc, over)
			continue
		}
		s, err := session.New(nc, sessionNode{n}, n.sessionConfig())
		if err != nil {
			n.mu.Unlock()
			n.logger.Error("cannot serve a connection", "err", err)
			nc.Close()
			continue
		}
		n.sessions[s] = struct{}{}
		n.perAddr[host]++
		n.wg.Add(1)
		n.mu.Unlock()
		go func() {
			defer n.wg.Done()
			s.Serve()
			n.mu.Lock()
			delete(n.sessions, s)
			if n.perAddr[host]--; n.perAddr[host] <= 0 {
				delete(n.perAddr, host)
			}
			n.mu.Unlock()
		}()
	}
}

// sessionConfig is what the node's client sessions are told of its
// configuration.
func (n *Node) sessionConfig() session.Config {
	var throttle func(context.Context, string, int, int) error
	if n.publish.on() {
		throttle = n.publish.throttle
	}
	pcfg := pulsar.Config{Addr: n.cfg.AdvertiseClientAddr, TLS: n.cfg.TLS != nil, MaxMessageBytes: n.cfg.MaxMessageBytes}
	return session.Config{
		// Pulsar clients are served on the client port: each connection
		// speaks the protocol its first bytes are in.
		Codec:           func() transport.Codec { return pulsar.Sniff(pcfg) },
		Throttle:        throttle,
		NodeID:          n.cfg.NodeID,
		Version:         n.cfg.Version,
		MaxMessageBytes: n.cfg.MaxMessageBytes,
		MaxProducers:    n.cfg.Limits.MaxProducersPerConnection,
		MaxConsumers:    n.cfg.Limits.MaxConsumersPerConnection,
		MaxQueuedBytes:  n.cfg.Limits.MaxQueuedBytesPerConnection,
		Auth:            n.cfg.Auth,
		Refused:         n.refused.note,
		Logger:          n.logger,
	}
}

// maxRefusals bounds the connections being refused at once (refuse).
const maxRefusals = 64

// refuse tells a connection over a limit why, with an Error frame in
// place of the Connected its client waits for, and closes it. Telling
// takes up to a second and a half (transport.Conn.Fail), in a goroutine
// of its own; when maxRefusals are being told already, the connection is
// closed at once, so that a flood costs no more than that.
func (n *Node) refuse(nc net.Conn, why error) {
	select {
	case n.refusals <- struct{}{}:
	default:
		nc.Close()
		return
	}
	conn, err := transport.NewConn(nc, transport.Config{Logger: n.logger})
	if err != nil {
		<-n.refusals
		nc.Close()
		return
	}
	n.refused.note(transport.CodeLimitExceeded, nc.RemoteAddr().String(), "", why)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() { <-n.refusals }()
		conn.Fail(transport.CodeLimitExceeded, why)
	}()
}

// hostOf is the IP address of a connection's peer, the whole address if
// it has no port.
func hostOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	s := a.String()
	if host, _, err := net.SplitHostPort(s); err == nil {
		return host
	}
	return s
}

// Shutdown stops the node gracefully: it hands the leadership of every
// partition it leads to another replica (so clients move before the node
// goes, and no send fails for its departure), then closes it. ctx bounds
// the hand-over; Close follows whatever happens.
func (n *Node) Shutdown(ctx context.Context) error {
	n.serving.Store(false)
	if n.mux != nil {
		n.mux.Leave()
	}
	n.mu.Lock()
	parts := make([]*localPartition, 0, len(n.partitions)+len(n.retired))
	for _, lp := range n.partitions {
		parts = append(parts, lp)
	}
	for _, lp := range n.retired {
		parts = append(parts, lp)
	}
	n.mu.Unlock()
	groups := []*cluster.Group{}
	for _, lp := range parts {
		groups = append(groups, lp.group)
	}
	// Hand-overs run in parallel, each bounded: when the whole cluster
	// stops at once the peers may be leaving too.
	var wg sync.WaitGroup
	if n.control != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gctx, cancel := context.WithTimeout(ctx, transferTimeout)
			defer cancel()
			if err := n.control.HandOver(gctx); err != nil {
				n.logger.Warn("leadership transfer failed", "group", meta.GroupID, "err", err)
			}
		}()
	}
	var live []string
	if n.gossip != nil {
		live = meta.LiveNodes(n.gossip.Members(), n.cfg.NodeID)
	}
	spread := newHandOvers(live)
	handed := 0
	for _, g := range groups {
		if !g.IsLeader() {
			continue
		}
		handed++
		wg.Add(1)
		go func() {
			defer wg.Done()
			gctx, cancel := context.WithTimeout(ctx, transferTimeout)
			defer cancel()
			servers, err := g.Servers(gctx)
			if err != nil || len(servers) < 2 {
				return
			}
			// The pick first, spread over the live nodes; when it cannot
			// take the leadership (gone, tried this term, its copy not
			// open yet on a node just restarted), each other voter.
			preferred := ""
			if to, ok := spread.pick(g.NodeID(), servers); ok {
				preferred = to.ID
			}
			if err := g.HandOver(gctx, preferred); err != nil {
				n.logger.Warn("leadership transfer failed", "group", g.ID(), "err", err)
			}
		}()
	}
	wg.Wait()
	if handed > 0 {
		n.logger.Info("leaderships handed over", "partitions", handed, "to", spread.counts())
	}
	if n.gossip != nil {
		lctx, cancel := context.WithTimeout(ctx, transferTimeout)
		if err := n.gossip.leave(lctx); err != nil {
			n.logger.Warn("leaving gossip failed", "err", err)
		}
		cancel()
	}
	return n.Close()
}

// handOvers spreads the leaderships a stopping node hands over: each goes
// to the live voter given the fewest so far, so that the nodes that stay
// share what this one led (Raft's own choice, the most caught-up voter,
// is for an idle partition the first of equals in its configuration),
// and the leader balancing has little left to move.
type handOvers struct {
	live  []string // node ids
	mu    sync.Mutex
	given map[string]int // by node id
}

func newHandOvers(live []string) *handOvers {
	return &handOvers{live: live, given: map[string]int{}}
}

// pick returns the voter of servers, other than self, to hand over to; false
// when none is alive.
func (h *handOvers) pick(self string, servers []cluster.Server) (cluster.Server, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var best cluster.Server
	bestNode := ""
	for _, sv := range servers {
		node := meta.NodeOf(sv.ID)
		if sv.ID == self || !sv.Voter || !slices.Contains(h.live, node) {
			continue
		}
		if bestNode == "" || h.given[node] < h.given[bestNode] || (h.given[node] == h.given[bestNode] && sv.ID < best.ID) {
			best, bestNode = sv, node
		}
	}
	if bestNode == "" {
		return cluster.Server{}, false
	}
	h.given[bestNode]++
	return best, true
}

// counts returns how many leaderships went to each node.
func (h *handOvers) counts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.given)
}

// Close stops serving, closes every session, partition and group, and
// waits for every goroutine. It is idempotent.
func (n *Node) Close() error {
	n.serving.Store(false)
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	if n.mux != nil {
		n.mux.Leave()
	}
	sessions := make([]*session.Session, 0, len(n.sessions))
	for s := range n.sessions {
		sessions = append(sessions, s)
	}
	n.mu.Unlock()
	close(n.stop)
	n.cancel()
	if n.clientLn != nil {
		n.clientLn.Close()
	}
	for _, s := range sessions {
		s.Close()
	}
	n.wg.Wait()
	if n.rpc != nil {
		n.rpc.Close() // no more calls from other nodes
	}
	n.mu.Lock()
	parts := n.partitions
	n.partitions = map[string]*localPartition{}
	retired := n.retired
	n.retired = map[string]*localPartition{}
	n.mu.Unlock()
	all := slices.Collect(maps.Values(parts))
	all = append(all, slices.Collect(maps.Values(retired))...)
	var g errgroup.Group
	g.SetLimit(partitionsAtOnce)
	for _, lp := range all {
		g.Go(func() error { n.closePartition(lp, false); return nil })
	}
	g.Wait()
	var err error
	if n.control != nil {
		err = n.control.Close()
	}
	if n.rpcClient != nil {
		n.rpcClient.Close()
	}
	if n.gossip != nil {
		if gerr := n.gossip.close(); err == nil {
			err = gerr
		}
	}
	n.shutdownListeners()
	n.unlockDataDir()
	return err
}

func (n *Node) shutdownListeners() {
	if n.mux != nil {
		n.mux.Close()
	} else if n.raftLn != nil {
		n.raftLn.Close()
	}
	if n.clientLn != nil {
		n.clientLn.Close()
	}
}

// applyTimeout bounds admin operations that go through Raft.
const applyTimeout = 10 * time.Second

// transferTimeout bounds one leadership hand-over, and the gossip leave,
// at shutdown.
const transferTimeout = 3 * time.Second

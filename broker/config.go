package broker

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/fabriq-io/fabriq/auth"
	"github.com/fabriq-io/fabriq/broker/partition"
	"github.com/fabriq-io/fabriq/broker/session"
	"github.com/fabriq-io/fabriq/storage"
	"github.com/fabriq-io/fabriq/subscription"
	"github.com/fabriq-io/fabriq/tlsconfig"
)

// MaxMessageBytesLimit is the largest MaxMessageBytes: a Raft entry holds
// at least one message and must fit in one storage batch.
const MaxMessageBytesLimit = 10 << 20

// minSegmentBytes is the smallest Config.SegmentBytes: smaller segments
// only multiply files.
const minSegmentBytes = 4 << 10

// DefaultSegmentBytes is the default Config.SegmentBytes.
const DefaultSegmentBytes = 64 << 20

// DefaultSleepAfter is the default Config.SleepAfter.
const DefaultSleepAfter = 5 * time.Minute

// defaultRetentionInterval is the default Config.RetentionInterval.
const defaultRetentionInterval = partition.DefaultRetentionInterval

// Config configures a Node. The zero value of every field but NodeID and
// DataDir means its default.
type Config struct {
	// NodeID is the node's stable identity; Raft knows it by this id.
	NodeID string
	// DataDir holds the node's metadata and partition data.
	DataDir string
	// ClientAddr is where clients connect. Default 127.0.0.1:6650.
	ClientAddr string
	// AdvertiseClientAddr is the client address other nodes and clients
	// are told; default the address ClientAddr bound.
	AdvertiseClientAddr string
	// RaftAddr carries every Raft group of the node. Default
	// 127.0.0.1:7650.
	RaftAddr string
	// AdvertiseRaftAddr is the Raft address peers dial; default the
	// address RaftAddr bound.
	AdvertiseRaftAddr string
	// GossipAddr is where membership gossip listens (TCP and UDP); port 0
	// picks one. Empty runs the node without membership: alone.
	GossipAddr string
	// Join lists gossip addresses of nodes already in the cluster.
	Join []string
	// GossipKeys encrypt and authenticate gossip (cluster.MembershipConfig
	// Keys): the first seals, any opens. Empty: gossip in the clear.
	GossipKeys [][]byte
	// Auth turns authentication and authorization on for client
	// connections: each must present a token the verifier accepts, and
	// may do only what its grants allow (package auth). Nil: any client
	// may do anything.
	Auth *auth.Verifier
	// TLS, when set, makes every port of the node TLS: the client port
	// with the node's certificate, the Raft port requiring peers'
	// certificates signed by the cluster's CA (package tlsconfig). Nil:
	// plain TCP.
	TLS *tlsconfig.Node
	// PublishRate limits, on this node, what each tenant's producers
	// send: a send over it waits, one that would wait too long is refused
	// with RateLimited. Zero: no limit.
	PublishRate PublishRate
	// HTTPAddr is advertised to other nodes for metrics and health.
	HTTPAddr string
	// Region is the node's region.
	Region string
	// ReplaceDeadAfter is how long a node may stay dead before the
	// metadata leader moves its replicas to live nodes. Default 5m;
	// negative never moves them.
	ReplaceDeadAfter time.Duration
	// NoAutoCreate refuses a produce or subscribe to a missing stream
	// (StreamNotFound); by default the stream is created on that first
	// use, with its fabric's defaults, as in Pulsar and Kafka.
	NoAutoCreate bool
	// AutoCreateFabrics creates the tenant and fabric of a stream created
	// (explicitly or on first use) in a fabric that does not exist;
	// without it only the tenant public gets new fabrics that way.
	AutoCreateFabrics bool
	// BootstrapExpect is how many nodes bootstrap the metadata group
	// together. Default 1: a lone node bootstraps itself.
	BootstrapExpect int
	// MaxMessageBytes refuses larger messages. Default 5 MiB.
	MaxMessageBytes int
	// MinFreeDisk is the free space, in bytes, that the file system of
	// DataDir keeps in reserve: below it a partition leader refuses sends
	// with DiskFull, while acks, subscriptions and metadata changes go on
	// using the reserve. Default DefaultMinFreeDisk; negative turns the
	// reserve off (an append that then fails stops the partition on this
	// node, see DESIGN.md).
	MinFreeDisk int64
	// SegmentBytes is the size at which a partition's log starts a new
	// segment file; retention deletes whole segments. Default 64 MiB, at
	// most storage.MaxSegmentBytes.
	SegmentBytes int64
	// RetentionInterval is how often a partition leader applies its
	// stream's retention policy, message TTL and backlog quota. Default
	// 5s.
	RetentionInterval time.Duration
	// SleepAfter is how long a partition this node leads stays idle — no
	// send, ack or other proposal, no producer or consumer attached —
	// before it is put to sleep on every replica: its copies close, and
	// cost nothing until a client or another node asks for it (the first
	// send then waits for the copies to open and elect, DESIGN.md,
	// "Sleeping partitions"). A partition that holds messages under a
	// time limit or a message TTL stays awake, for its retention. Default
	// DefaultSleepAfter; negative: this node's leaders never put their
	// partitions to sleep (its copies still follow a leader elsewhere
	// that does).
	SleepAfter time.Duration
	// Raft tunes every Raft group of the node.
	Raft RaftTimings
	// RaftSnapshots tunes when every Raft group of the node compacts its
	// log; zero fields take hashicorp/raft's defaults through
	// cluster.DefaultGroupConfig. Between compactions a group's Raft log
	// holds up to TrailingLogs entries, and what it stored since its last
	// snapshot (fewer than SnapshotThreshold entries and Bytes bytes), on
	// disk beside the partition's log, whatever its retention.
	RaftSnapshots RaftSnapshots
	// Subscriptions tunes subscriptions; zero fields take their defaults.
	Subscriptions SubscriptionLimits
	// Limits bound what clients may hold on the node; zero fields take
	// their defaults.
	Limits ClientLimits
	// Version is reported to clients.
	Version string
	// Logger receives the node's logs. Nil discards them.
	Logger *slog.Logger
}

// RaftTimings are the Raft timings of the node's groups; zero means the
// default. Tests shorten them.
type RaftTimings struct {
	HeartbeatTimeout time.Duration
	ElectionTimeout  time.Duration
	// CommitTimeout: how often an idle leader tells followers the commit
	// index. Default: 50 ms for the metadata group, 500 ms for partitions
	// (partitionCommitTimeout).
	CommitTimeout time.Duration
}

// RaftSnapshots say when a Raft group snapshots and compacts its log;
// zero means the default.
type RaftSnapshots struct {
	// Interval is how often a group checks whether to snapshot.
	// Default 120s.
	Interval time.Duration
	// Threshold is how many new entries make a snapshot. Default 8192.
	Threshold uint64
	// TrailingLogs is how many entries a compaction keeps, for followers
	// slightly behind. Default 10240.
	TrailingLogs uint64
	// Bytes is how many bytes of entries stored since a group's last
	// snapshot make it snapshot, whatever their count: a group reads
	// them all when its node opens it. Default
	// cluster.DefaultSnapshotBytes (16 MiB); negative: by count only.
	Bytes int64
}

// SubscriptionLimits tune how subscriptions dispatch (SEMANTICS.md).
type SubscriptionLimits struct {
	// ReconnectGrace is how long a new partition leader keeps the roles
	// of consumers that have not reconnected yet (SUB-7). Default 10s.
	ReconnectGrace time.Duration
	// ProbeTimeout is how long a connected holder of what a newcomer asks
	// for (an exclusive subscription, a failover master's place) has to
	// answer a ping before the newcomer replaces it (EX-2). Default 2s.
	ProbeTimeout time.Duration
	// DrainTimeout is how long an old failover master may ack what it
	// holds before the new one starts (FO-5). Default 1s; negative hands
	// over at once.
	DrainTimeout time.Duration
	// FailoverStabilityWindow is how long a returning higher-ranked
	// failover consumer must stay connected before it takes the master
	// role back (FO-8). Default 0: at once, as Pulsar does.
	FailoverStabilityWindow time.Duration
	// MaxUnackedPerConsumer blocks a consumer holding that many unacked
	// messages until half are acked (SH-4). Default 50,000.
	MaxUnackedPerConsumer int
	// MaxUnackedPerSubscription stops a subscription the same way.
	// Default 200,000.
	MaxUnackedPerSubscription int
	// LookAheadPerConsumer and LookAheadPerSubscription bound how many
	// key_shared messages are read past blocked keys (KS-9): the limit is
	// the smaller of the first times the consumers and the second.
	// Defaults 2,000 and 20,000.
	LookAheadPerConsumer     int
	LookAheadPerSubscription int
}

// ClientLimits bound what clients may hold on a node, so that one client
// (or a flood of connections) cannot take what every other needs: file
// descriptors, goroutines, memory. A request over a limit is refused with
// the wire error LimitExceeded, naming the limit; a connection over one
// gets that error in answer to its Connect and is closed.
type ClientLimits struct {
	// MaxConnections bounds the client connections of the node. Default
	// 10,000: each costs a descriptor and two goroutines, and the node
	// needs descriptors for its logs and Raft besides; set the process's
	// descriptor limit above it.
	MaxConnections int
	// MaxConnectionsPerAddress bounds the connections from one client IP
	// address. Default 1,000: a client opens one connection per node it
	// talks to, and many applications share a host, but one host cannot
	// take every connection of the node.
	MaxConnectionsPerAddress int
	// MaxProducersPerConnection and MaxConsumersPerConnection bound the
	// producers and consumers one connection holds. Default 1,000 each: a
	// client holds one per partition it writes or reads on the node.
	MaxProducersPerConnection int
	MaxConsumersPerConnection int
	// MaxSubscriptionsPerPartition bounds the durable subscriptions of a
	// partition: each keeps a cursor in its replicated state, in every
	// snapshot, on every replica. Default 1,000.
	MaxSubscriptionsPerPartition int
	// MaxQueuedBytesPerConnection bounds, each way, the bytes a
	// connection holds in memory: the frames read and not yet handled
	// (what a client that sends faster than the node serves it, or whose
	// requests wait, can pin), and the messages queued for a consumer and
	// not yet written (what a consumer that reads slowly can pin). A frame
	// larger than what is left waits until the queue is empty, so the
	// bound is this plus one frame. When it is reached the connection
	// stops reading (TCP pushes back on the client), and dispatch to it
	// waits (a consumer that takes nothing for 10 s is disconnected).
	// Default 16 MiB: three frames of the largest message, far more than
	// a pipelining producer needs to keep its partition busy.
	MaxQueuedBytesPerConnection int
}

// DefaultClientLimits returns the defaults of ClientLimits.
func DefaultClientLimits() ClientLimits {
	s := session.DefaultConfig()
	return ClientLimits{
		MaxConnections:               10_000,
		MaxConnectionsPerAddress:     1_000,
		MaxProducersPerConnection:    s.MaxProducers,
		MaxConsumersPerConnection:    s.MaxConsumers,
		MaxSubscriptionsPerPartition: 1_000,
		MaxQueuedBytesPerConnection:  s.MaxQueuedBytes,
	}
}

// withDefaults fills zero fields.
func (l ClientLimits) withDefaults() ClientLimits {
	d := DefaultClientLimits()
	l.MaxConnections = cmp.Or(l.MaxConnections, d.MaxConnections)
	l.MaxConnectionsPerAddress = cmp.Or(l.MaxConnectionsPerAddress, d.MaxConnectionsPerAddress)
	l.MaxProducersPerConnection = cmp.Or(l.MaxProducersPerConnection, d.MaxProducersPerConnection)
	l.MaxConsumersPerConnection = cmp.Or(l.MaxConsumersPerConnection, d.MaxConsumersPerConnection)
	l.MaxSubscriptionsPerPartition = cmp.Or(l.MaxSubscriptionsPerPartition, d.MaxSubscriptionsPerPartition)
	l.MaxQueuedBytesPerConnection = cmp.Or(l.MaxQueuedBytesPerConnection, d.MaxQueuedBytesPerConnection)
	return l
}

// validate reports a limit that cannot work.
func (l ClientLimits) validate() error {
	l = l.withDefaults()
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxConnections", l.MaxConnections},
		{"MaxConnectionsPerAddress", l.MaxConnectionsPerAddress},
		{"MaxProducersPerConnection", l.MaxProducersPerConnection},
		{"MaxConsumersPerConnection", l.MaxConsumersPerConnection},
		{"MaxSubscriptionsPerPartition", l.MaxSubscriptionsPerPartition},
		{"MaxQueuedBytesPerConnection", l.MaxQueuedBytesPerConnection},
	} {
		if f.v < 0 {
			return fmt.Errorf("broker: %s must not be negative, not %d", f.name, f.v)
		}
	}
	return nil
}

// DefaultSubscriptionLimits returns the defaults of SubscriptionLimits.
func DefaultSubscriptionLimits() SubscriptionLimits {
	return SubscriptionLimits{
		ReconnectGrace:            partition.DefaultReconnectGrace,
		ProbeTimeout:              partition.DefaultProbeTimeout,
		DrainTimeout:              time.Second,
		MaxUnackedPerConsumer:     50_000,
		MaxUnackedPerSubscription: 200_000,
		LookAheadPerConsumer:      2_000,
		LookAheadPerSubscription:  20_000,
	}
}

// engine returns the limits as the subscription engine takes them.
func (l SubscriptionLimits) engine() subscription.Limits {
	return subscription.Limits{
		MaxUnackedPerConsumer:     l.MaxUnackedPerConsumer,
		MaxUnackedPerSubscription: l.MaxUnackedPerSubscription,
		LookAheadPerConsumer:      l.LookAheadPerConsumer,
		LookAheadPerSubscription:  l.LookAheadPerSubscription,
		DrainTimeout:              l.DrainTimeout,
		StabilityWindow:           l.FailoverStabilityWindow,
	}
}

// withDefaults fills zero fields.
func (l SubscriptionLimits) withDefaults() SubscriptionLimits {
	d := DefaultSubscriptionLimits()
	if l.ReconnectGrace == 0 {
		l.ReconnectGrace = d.ReconnectGrace
	}
	if l.ProbeTimeout == 0 {
		l.ProbeTimeout = d.ProbeTimeout
	}
	if l.DrainTimeout == 0 {
		l.DrainTimeout = d.DrainTimeout
	}
	if l.MaxUnackedPerConsumer == 0 {
		l.MaxUnackedPerConsumer = d.MaxUnackedPerConsumer
	}
	if l.MaxUnackedPerSubscription == 0 {
		l.MaxUnackedPerSubscription = d.MaxUnackedPerSubscription
	}
	if l.LookAheadPerConsumer == 0 {
		l.LookAheadPerConsumer = d.LookAheadPerConsumer
	}
	if l.LookAheadPerSubscription == 0 {
		l.LookAheadPerSubscription = d.LookAheadPerSubscription
	}
	return l
}

// DefaultMinFreeDisk is the default free-space reserve, 1 GiB. It is a
// size, not a share of the disk: what the reserve has to hold does not
// grow with the disk. It holds the acks and subscription changes that go
// on while sends are refused, the metadata group's entries, the Raft
// stores' growth (bolt grows its file in steps of 16 MiB) and snapshots,
// with room to spare for an operator or retention to act.
const DefaultMinFreeDisk = 1 << 30

// minMinFreeDisk is the smallest reserve Validate accepts: below it a
// number was likely meant in MiB, not bytes.
const minMinFreeDisk = 1 << 20

// DefaultConfig returns the defaults used for zero fields.
func DefaultConfig() Config {
	return Config{
		ClientAddr:      "127.0.0.1:6650",
		RaftAddr:        "127.0.0.1:7650",
		BootstrapExpect: 1,
		MaxMessageBytes: session.DefaultConfig().MaxMessageBytes,
		MinFreeDisk:     DefaultMinFreeDisk,
		Version:         "dev",
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.ClientAddr == "" {
		c.ClientAddr = d.ClientAddr
	}
	if c.RaftAddr == "" {
		c.RaftAddr = d.RaftAddr
	}
	if c.BootstrapExpect == 0 {
		c.BootstrapExpect = d.BootstrapExpect
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = d.MaxMessageBytes
	}
	if c.MinFreeDisk == 0 {
		c.MinFreeDisk = d.MinFreeDisk
	}
	if c.Version == "" {
		c.Version = d.Version
	}
	if c.SegmentBytes == 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	if c.SleepAfter == 0 {
		c.SleepAfter = DefaultSleepAfter
	}
	if c.RetentionInterval == 0 {
		c.RetentionInterval = defaultRetentionInterval
	}
	if c.ReplaceDeadAfter == 0 {
		c.ReplaceDeadAfter = 5 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Subscriptions = c.Subscriptions.withDefaults()
	c.Limits = c.Limits.withDefaults()
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.NodeID == "":
		return errors.New("broker: NodeID is required")
	case strings.Contains(c.NodeID, "@"):
		return fmt.Errorf("broker: NodeID %q has an @, which partition groups use to tell a node's placements apart", c.NodeID)
	case c.DataDir == "":
		return errors.New("broker: DataDir is required")
	case c.PublishRate.Messages < 0 || c.PublishRate.Bytes < 0 || math.IsNaN(c.PublishRate.Messages) || math.IsInf(c.PublishRate.Messages, 0):
		return fmt.Errorf("broker: PublishRate %+v: want finite, non-negative rates", c.PublishRate)
	case c.BootstrapExpect < 1:
		return fmt.Errorf("broker: BootstrapExpect must be at least 1, not %d", c.BootstrapExpect)
	case c.BootstrapExpect > 1 && c.GossipAddr == "":
		return fmt.Errorf("broker: BootstrapExpect %d needs GossipAddr: nodes find each other by gossip", c.BootstrapExpect)
	case len(c.Join) > 0 && c.GossipAddr == "":
		return errors.New("broker: Join needs GossipAddr")
	case c.Subscriptions.ReconnectGrace < 0:
		return fmt.Errorf("broker: ReconnectGrace must not be negative, not %v", c.Subscriptions.ReconnectGrace)
	case c.Subscriptions.ProbeTimeout < 0:
		return fmt.Errorf("broker: ProbeTimeout must not be negative, not %v", c.Subscriptions.ProbeTimeout)
	case c.Subscriptions.MaxUnackedPerConsumer < 0, c.Subscriptions.MaxUnackedPerSubscription < 0,
		c.Subscriptions.LookAheadPerConsumer < 0, c.Subscriptions.LookAheadPerSubscription < 0:
		return errors.New("broker: subscription limits must not be negative")
	case c.MaxMessageBytes < 1 || c.MaxMessageBytes > MaxMessageBytesLimit:
		return fmt.Errorf("broker: MaxMessageBytes must be in 1..%d, not %d", MaxMessageBytesLimit, c.MaxMessageBytes)
	case c.MinFreeDisk > 0 && c.MinFreeDisk < minMinFreeDisk:
		return fmt.Errorf("broker: MinFreeDisk of %d bytes is below the smallest reserve, %d bytes (1 MiB); negative turns it off", c.MinFreeDisk, minMinFreeDisk)
	case c.SegmentBytes < minSegmentBytes || c.SegmentBytes > storage.MaxSegmentBytes:
		return fmt.Errorf("broker: SegmentBytes must be in %d..%d, not %d", minSegmentBytes, storage.MaxSegmentBytes, c.SegmentBytes)
	case c.RetentionInterval < 0:
		return fmt.Errorf("broker: RetentionInterval must not be negative, not %v", c.RetentionInterval)
	}
	return c.Limits.validate()
}

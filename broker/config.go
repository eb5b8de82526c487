package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/fabriq-io/fabriq/storage"
)

// MaxMessageBytesLimit is the largest MaxMessageBytes: a Raft entry holds
// at least one message and must fit in one storage batch.
const MaxMessageBytesLimit = 10 << 20

// minSegmentBytes is the smallest Config.SegmentBytes: smaller segments
// only multiply files.
const minSegmentBytes = 4 << 10

// DefaultSegmentBytes is the default Config.SegmentBytes.
const DefaultSegmentBytes = 64 << 20

// defaultRetentionInterval is the default Config.RetentionInterval.
const defaultRetentionInterval = 5 * time.Second

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
	// HTTPAddr is advertised to other nodes for metrics and health.
	HTTPAddr string
	// Region is the node's region.
	Region string
	// ReplaceDeadAfter is how long a node may stay dead before the
	// metadata leader moves its replicas to live nodes. Default 5m;
	// negative never moves them.
	ReplaceDeadAfter time.Duration
	// BootstrapExpect is how many nodes bootstrap the metadata group
	// together. Default 1: a lone node bootstraps itself.
	BootstrapExpect int
	// MaxMessageBytes refuses larger messages. Default 5 MiB.
	MaxMessageBytes int
	// SegmentBytes is the size at which a partition's log starts a new
	// segment file; retention deletes whole segments. Default 64 MiB, at
	// most storage.MaxSegmentBytes.
	SegmentBytes int64
	// RetentionInterval is how often a partition leader applies its
	// stream's retention policy, message TTL and backlog quota. Default
	// 5s.
	RetentionInterval time.Duration
	// Raft tunes every Raft group of the node.
	Raft RaftTimings
	// RaftSnapshots tunes when every Raft group of the node compacts its
	// log; zero fields take hashicorp/raft's defaults through
	// cluster.DefaultGroupConfig. Between compactions a group's Raft log
	// holds up to SnapshotThreshold+TrailingLogs entries on disk beside
	// the partition's log, whatever its retention.
	RaftSnapshots RaftSnapshots
	// Subscriptions tunes subscriptions; zero fields take their defaults.
	Subscriptions SubscriptionLimits
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
	CommitTimeout    time.Duration
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
}

// SubscriptionLimits tune how subscriptions dispatch (SEMANTICS.md).
type SubscriptionLimits struct {
	// ReconnectGrace is how long a new partition leader keeps the roles
	// of consumers that have not reconnected yet (SUB-7). Default 10s.
	ReconnectGrace time.Duration
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

// DefaultSubscriptionLimits returns the defaults of SubscriptionLimits.
func DefaultSubscriptionLimits() SubscriptionLimits {
	return SubscriptionLimits{
		ReconnectGrace:            10 * time.Second,
		DrainTimeout:              time.Second,
		MaxUnackedPerConsumer:     50_000,
		MaxUnackedPerSubscription: 200_000,
		LookAheadPerConsumer:      2_000,
		LookAheadPerSubscription:  20_000,
	}
}

// withDefaults fills zero fields.
func (l SubscriptionLimits) withDefaults() SubscriptionLimits {
	d := DefaultSubscriptionLimits()
	if l.ReconnectGrace == 0 {
		l.ReconnectGrace = d.ReconnectGrace
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

// DefaultConfig returns the defaults used for zero fields.
func DefaultConfig() Config {
	return Config{
		ClientAddr:      "127.0.0.1:6650",
		RaftAddr:        "127.0.0.1:7650",
		BootstrapExpect: 1,
		MaxMessageBytes: 5 << 20,
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
	if c.Version == "" {
		c.Version = d.Version
	}
	if c.SegmentBytes == 0 {
		c.SegmentBytes = DefaultSegmentBytes
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
	case c.BootstrapExpect < 1:
		return fmt.Errorf("broker: BootstrapExpect must be at least 1, not %d", c.BootstrapExpect)
	case c.BootstrapExpect > 1 && c.GossipAddr == "":
		return fmt.Errorf("broker: BootstrapExpect %d needs GossipAddr: nodes find each other by gossip", c.BootstrapExpect)
	case len(c.Join) > 0 && c.GossipAddr == "":
		return errors.New("broker: Join needs GossipAddr")
	case c.Subscriptions.ReconnectGrace < 0:
		return fmt.Errorf("broker: ReconnectGrace must not be negative, not %v", c.Subscriptions.ReconnectGrace)
	case c.Subscriptions.MaxUnackedPerConsumer < 0, c.Subscriptions.MaxUnackedPerSubscription < 0,
		c.Subscriptions.LookAheadPerConsumer < 0, c.Subscriptions.LookAheadPerSubscription < 0:
		return errors.New("broker: subscription limits must not be negative")
	case c.MaxMessageBytes < 1 || c.MaxMessageBytes > MaxMessageBytesLimit:
		return fmt.Errorf("broker: MaxMessageBytes must be in 1..%d, not %d", MaxMessageBytesLimit, c.MaxMessageBytes)
	case c.SegmentBytes < minSegmentBytes || c.SegmentBytes > storage.MaxSegmentBytes:
		return fmt.Errorf("broker: SegmentBytes must be in %d..%d, not %d", minSegmentBytes, storage.MaxSegmentBytes, c.SegmentBytes)
	case c.RetentionInterval < 0:
		return fmt.Errorf("broker: RetentionInterval must not be negative, not %v", c.RetentionInterval)
	}
	return nil
}

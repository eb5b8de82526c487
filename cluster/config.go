package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Transport settings of every group: connections pooled per peer, and the
// I/O deadline of one RPC (scaled up for InstallSnapshot by its size).
const (
	transportMaxPool = 3
	transportTimeout = 10 * time.Second
)

// GroupConfig configures a Group. The zero value of every optional field
// means its default; DefaultGroupConfig lists them. The few Raft knobs a
// group exposes are mapped to raft.Config by OpenGroup; raft.Config itself
// is not part of the API.
type GroupConfig struct {
	// ID names the group, e.g. a partition's name. It is sent in the header
	// of every connection, so it is 1..MaxGroupIDLen bytes. Required.
	ID string
	// NodeID is this node's stable id, its Raft server id. Never an address.
	// Required.
	NodeID string
	// Dir holds the group's state: raft.db (log and stable store) and
	// snapshots/. Required.
	Dir string
	// FSM is the state machine the group replicates. Required.
	FSM raft.FSM
	// Mux carries the group's connections. Required.
	Mux *Mux
	// LocalAddr is this node's Raft address as other nodes dial it
	// (host:port). Default: the mux listener's address, which is only right
	// when the listener is bound to a routable address.
	LocalAddr string
	// Expand turns a directory adopted by a snapshot back into bytes (see
	// DirSink and ExpandFunc). Nil means the FSM writes its snapshots as
	// plain bytes and AdoptDir is refused.
	Expand ExpandFunc

	// HeartbeatTimeout is how long a follower waits without hearing from a
	// leader before it starts an election. Default 1s. A new leader serves
	// its first apply after about 2.2 times this.
	HeartbeatTimeout time.Duration
	// ElectionTimeout is how long a candidate waits for an election to
	// finish. Default: HeartbeatTimeout. Not below HeartbeatTimeout.
	ElectionTimeout time.Duration
	// LeaderLeaseTimeout is how long a leader stays leader without hearing
	// from a majority. Default: half of HeartbeatTimeout. Not above
	// HeartbeatTimeout.
	LeaderLeaseTimeout time.Duration
	// CommitTimeout is how long an idle leader waits before it sends
	// followers the commit index. It is what an idle group costs in CPU.
	// Default 50ms.
	CommitTimeout time.Duration
	// SnapshotInterval is how often Raft checks whether to take a snapshot
	// (randomly stretched up to twice this). Default 120s.
	SnapshotInterval time.Duration
	// SnapshotThreshold is how many new log entries trigger a snapshot.
	// Default 8192.
	SnapshotThreshold uint64
	// TrailingLogs is how many entries stay in the log after a snapshot,
	// for followers that are slightly behind. Default 10240.
	TrailingLogs uint64
	// SnapshotBytes is how many bytes of entries stored since the group's
	// last snapshot make it take one at once, whatever their count: an
	// entry may be megabytes, and what follows the last snapshot is what
	// the group reads when it opens again. Default DefaultSnapshotBytes;
	// negative: by count only (SnapshotThreshold).
	SnapshotBytes int64
	// SnapshotRetain is how many snapshots to keep. Default 2.
	SnapshotRetain int
	// NoSnapshotRestoreOnStart makes Raft skip restoring the newest snapshot
	// into the FSM when the group opens, for an FSM that recovers from its
	// own durable state; Raft still replays the log after the snapshot.
	NoSnapshotRestoreOnStart bool

	// OpTimeout bounds an operation whose context has no deadline.
	// Default 10s.
	OpTimeout time.Duration

	// Events, when set, counts the group's elections and leader changes,
	// with those of the other groups given the same Events (a node's).
	Events *GroupEvents
	// ShutdownTimeout bounds each wait of Close for Raft to stop.
	// Default 10s.
	ShutdownTimeout time.Duration
	// Logger receives the group's and hashicorp/raft's logs. Nil discards.
	Logger *slog.Logger
	// Retired opens the member retired (see Group.Retire): a member the
	// group may still count, whose place has been given to another.
	Retired bool
	// OnDamage is told, once, that the running group found its Raft log
	// damaged on disk (an error matching ErrDamaged). The group refuses to
	// use what is damaged, but goes on otherwise: the caller stops serving
	// this copy (closes the group) and has it renewed. It must not block:
	// it may be called from Raft's goroutines. Nil ignores it.
	OnDamage func(error)
	// OnSleep is told that the member's leader put the group to sleep
	// (sleep.go): the caller may then call Sleep, and close what else it
	// runs for the group. It must not block: it is called from the
	// heartbeats' goroutines. Nil leaves the member awake: it campaigns
	// once its leader's silence outlasts its timeout, and wakes the
	// others.
	OnSleep func()
}

// DefaultSnapshotBytes is GroupConfig.SnapshotBytes's default. A node
// opening a group reads every entry after the group's last snapshot
// (hashicorp/raft scans them for configurations, then the FSM applies
// them) through bolt's memory map, and keeps those pages mapped. By count
// alone (8,192 entries of up to 6 MiB, a partition's MaxEntryBytes) that
// could be gigabytes a partition; ten partitions that took 400,000
// messages of 1 KiB had no snapshot yet, and their node mapped 465 MB of
// Raft log on restart (170 MB with this). 16 MiB is what CockroachDB lets
// a range's Raft log grow to before it truncates it; a partition's
// snapshot costs a few file-system operations per segment
// (storage.Log.Snapshot).
const DefaultSnapshotBytes = 16 << 20

// DefaultGroupConfig returns the defaults of every optional field. The
// fields that default relative to HeartbeatTimeout are filled for its
// default.
func DefaultGroupConfig() GroupConfig {
	return GroupConfig{
		HeartbeatTimeout:   time.Second,
		ElectionTimeout:    time.Second,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		CommitTimeout:      50 * time.Millisecond,
		SnapshotInterval:   120 * time.Second,
		SnapshotThreshold:  8192,
		TrailingLogs:       10240,
		SnapshotBytes:      DefaultSnapshotBytes,
		SnapshotRetain:     DefaultSnapshotRetain,
		OpTimeout:          10 * time.Second,
		ShutdownTimeout:    10 * time.Second,
	}
}

// withDefaults fills zero fields.
func (c GroupConfig) withDefaults() GroupConfig {
	d := DefaultGroupConfig()
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = d.HeartbeatTimeout
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = c.HeartbeatTimeout
	}
	if c.LeaderLeaseTimeout == 0 {
		c.LeaderLeaseTimeout = c.HeartbeatTimeout / 2
	}
	if c.CommitTimeout == 0 {
		c.CommitTimeout = d.CommitTimeout
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = d.SnapshotInterval
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = d.SnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = d.TrailingLogs
	}
	if c.SnapshotBytes == 0 {
		c.SnapshotBytes = d.SnapshotBytes
	}
	if c.SnapshotRetain == 0 {
		c.SnapshotRetain = d.SnapshotRetain
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = d.OpTimeout
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = d.ShutdownTimeout
	}
	if c.LocalAddr == "" && c.Mux != nil {
		c.LocalAddr = c.Mux.Addr().String()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports what is wrong with the configuration once its defaults
// are filled in.
func (c GroupConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if err := checkGroupID(c.ID); err != nil {
		errs = append(errs, err)
	}
	if c.NodeID == "" {
		errs = append(errs, errors.New("NodeID is required"))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("Dir is required"))
	}
	if c.FSM == nil {
		errs = append(errs, errors.New("FSM is required"))
	}
	if c.Mux == nil {
		errs = append(errs, errors.New("Mux is required"))
	}
	if c.LocalAddr != "" {
		if _, _, err := net.SplitHostPort(c.LocalAddr); err != nil {
			errs = append(errs, fmt.Errorf("LocalAddr %q is not host:port: %v", c.LocalAddr, err))
		}
	}
	const floor = 5 * time.Millisecond // raft's lower bound for its timers
	for _, d := range []struct {
		name string
		v    time.Duration
		min  time.Duration
	}{
		{"HeartbeatTimeout", c.HeartbeatTimeout, floor},
		{"ElectionTimeout", c.ElectionTimeout, floor},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout, floor},
		{"CommitTimeout", c.CommitTimeout, time.Millisecond},
		{"SnapshotInterval", c.SnapshotInterval, floor},
		{"OpTimeout", c.OpTimeout, time.Millisecond},
		{"ShutdownTimeout", c.ShutdownTimeout, time.Millisecond},
	} {
		if d.v < d.min {
			errs = append(errs, fmt.Errorf("%s %v is below %v", d.name, d.v, d.min))
		}
	}
	if c.ElectionTimeout < c.HeartbeatTimeout {
		errs = append(errs, fmt.Errorf("ElectionTimeout %v is below HeartbeatTimeout %v", c.ElectionTimeout, c.HeartbeatTimeout))
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		errs = append(errs, fmt.Errorf("LeaderLeaseTimeout %v is above HeartbeatTimeout %v", c.LeaderLeaseTimeout, c.HeartbeatTimeout))
	}
	if c.SnapshotRetain < 0 {
		errs = append(errs, fmt.Errorf("SnapshotRetain %d is negative", c.SnapshotRetain))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster: group config: %w", err)
	}
	return nil
}

// raftConfig maps the group's knobs to hashicorp/raft's configuration,
// logging to logger. c has its defaults filled.
func (c GroupConfig) raftConfig(logger *slog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.NodeID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.SnapshotInterval = c.SnapshotInterval
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.TrailingLogs = c.TrailingLogs
	rc.NoSnapshotRestoreOnStart = c.NoSnapshotRestoreOnStart
	rc.Logger = newHCLogger(logger, "raft")
	return rc
}

// GroupEvents counts what the groups of a node went through, for its
// metrics. It is safe for concurrent use; the zero value is ready.
type GroupEvents struct {
	// Elections counts the elections the node stood in: each time one of
	// its members became a candidate.
	Elections atomic.Uint64
	// LeaderChanges counts, over the node's groups, each new leader (or
	// new term of the same leader) a member learned of.
	LeaderChanges atomic.Uint64
}

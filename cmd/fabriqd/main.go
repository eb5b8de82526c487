// Command fabriqd runs a fabriq node.
//
// A node serves clients on --client-addr, carries every Raft group it is a
// replica of on --raft-addr, and keeps its data under --data-dir. Started
// alone (the default --bootstrap-expect 1) it bootstraps a one-node
// cluster. SIGINT or SIGTERM stops it cleanly.
package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fabriq-io/fabriq/auth"
	"github.com/fabriq-io/fabriq/broker"
	"github.com/fabriq-io/fabriq/cluster"
	"github.com/fabriq-io/fabriq/tlsconfig"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newRootCommand(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "fabriqd:", err)
		os.Exit(1)
	}
}

type options struct {
	config          string
	printConfig     bool
	gossipKeyFile   string
	authSecretFile  string
	authPublicKey   string
	tls             tlsconfig.Files
	publishRate     float64
	publishBytes    rateSizeFlag
	nodeID          string
	dataDir         string
	clientAddr      string
	raftAddr        string
	gossipAddr      string
	httpAddr        string
	pprofAddr       string
	region          string
	join            []string
	bootstrapExpect int
	maxMessageBytes int
	minFreeDisk     sizeOrOff
	gcHeadroom      sizeOrOff
	segmentBytes    sizeFlag
	retentionEvery  time.Duration
	sleepAfter      time.Duration
	replaceDead     time.Duration
	autoCreate      bool
	autoFabrics     bool
	raftHeartbeat   time.Duration
	raftSnapshots   broker.RaftSnapshots
	raftSnapBytes   sizeOrOff
	subs            broker.SubscriptionLimits
	limits          broker.ClientLimits
	logLevel        string
	logJSON         bool
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	var o options
	cmd := &cobra.Command{
		Use:   "fabriqd",
		Short: "fabriqd runs a node of a fabriq stream broker cluster",
		Long: `fabriqd runs a node of a fabriq stream broker cluster.

Every stream partition is a Raft group; the node runs the partitions placed
on it, answers clients on --client-addr and replicates on --raft-addr. A
node started with the default --bootstrap-expect 1 forms a cluster of its
own. Stop it with SIGINT or SIGTERM.`,
		Example:       "  fabriqd --node-id n1 --data-dir /var/lib/fabriq",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.config != "" {
				if err := applyConfig(cmd.Flags(), o.config); err != nil {
					return err
				}
			}
			if o.printConfig {
				return printConfig(stdout, cmd.Flags())
			}
			return run(cmd.Context(), o, stderr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.config, "config", "", "YAML file of flag values, keyed by flag name without the dashes (join as a list); flags on the command line override it, a key that is no flag is an error")
	f.BoolVar(&o.printConfig, "print-config", false, "print the effective configuration (command line, --config file, defaults) as a config file, and exit")
	host, _ := os.Hostname()
	f.StringVar(&o.nodeID, "node-id", host, "stable identity of this node (Raft knows it by this id)")
	f.StringVar(&o.dataDir, "data-dir", "fabriq-data", "directory for the node's metadata and partition data")
	f.StringVar(&o.clientAddr, "client-addr", "127.0.0.1:6650", "address clients connect to")
	f.StringVar(&o.raftAddr, "raft-addr", "127.0.0.1:7650", "address carrying every Raft group of the node")
	f.StringVar(&o.gossipAddr, "gossip-addr", "127.0.0.1:7946", "gossip membership address, TCP and UDP")
	f.StringVar(&o.gossipKeyFile, "gossip-key-file", "", "file of gossip encryption keys, one base64 key of 16, 24 or 32 bytes a line (head -c 32 /dev/urandom | base64): the first seals, every one opens; a node without a key of the cluster cannot join it (empty: gossip in the clear)")
	f.StringVar(&o.authSecretFile, "auth-secret-file", "", "turn authentication on: clients must present a token (JWT) signed with the HMAC secret in this file, at least 32 bytes (openssl rand -base64 48 > FILE), and may do only what its grants allow; make tokens with fabriq token create")
	f.StringVar(&o.authPublicKey, "auth-public-key-file", "", "turn authentication on, as --auth-secret-file, for tokens signed with the private key of this PEM public key (RSA, ECDSA or Ed25519)")
	f.StringVar(&o.tls.Cert, "tls-cert-file", "", "turn TLS on for every port (client, Raft, HTTP) with this PEM certificate of the node (with its intermediates after it); it names the host names and IPs clients dial, and the CA of --tls-ca-file signed it; needs --tls-key-file and --tls-ca-file")
	f.StringVar(&o.tls.Key, "tls-key-file", "", "the PEM private key of --tls-cert-file")
	f.StringVar(&o.tls.CA, "tls-ca-file", "", "the PEM certificate of the cluster's CA: peers on the Raft port must present a certificate it signed (make it sign the cluster's nodes alone)")
	f.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:8080", "HTTP address: /healthz (the process runs), /readyz (the node is ready: started, the metadata group and every partition of the node led), /metrics (Prometheus) and the admin API under /admin/v1/ (JSON, the same tokens as the client port); advertised to the other nodes; off when empty")
	f.StringVar(&o.pprofAddr, "pprof-addr", "", "serve Go's CPU, heap, mutex and block profiles at http://ADDR/debug/pprof/ (off when empty; no authentication: keep it on loopback)")
	f.StringVar(&o.region, "region", "", "the node's region")
	f.StringSliceVar(&o.join, "join", nil, "gossip addresses of nodes to join, HOST:PORT[,HOST:PORT...]")
	f.IntVar(&o.bootstrapExpect, "bootstrap-expect", 1, "nodes that bootstrap the metadata group together (1: bootstrap alone)")
	f.IntVar(&o.maxMessageBytes, "max-message-size", 5<<20, "largest message payload accepted, in bytes")
	o.minFreeDisk = broker.DefaultMinFreeDisk
	f.Var(&o.minFreeDisk, "min-free-disk", "free space kept in reserve on the data directory's file system: below it sends are refused with the retryable error DiskFull while reads and acks go on, and they resume once space is freed; a size such as 1GiB or 512MiB (a size, not a share of the disk: what it holds does not grow with the disk), off for none")
	o.gcHeadroom = defaultGCHeadroom
	f.Var(&o.gcHeadroom, "gc-headroom", "garbage a busy node may hold before Go's collector runs, at most: the node lets its heap grow by what it allocates in a second, up to this, so that it collects about once a second rather than each time its heap doubles; each collection marks the stacks of every partition's Raft goroutines, which makes it costly on a node of many partitions; a node that goes idle is back on Go's own pacing within a second and returns the memory to the system ten seconds later; GOMEMLIMIT, when set, bounds it to a quarter of itself (off: Go's own pacing, GOGC)")
	o.segmentBytes = sizeFlag(broker.DefaultSegmentBytes)
	f.Var(&o.segmentBytes, "segment-bytes", "size at which a partition's log starts a new segment file (e.g. 64MiB); retention deletes whole segments")
	f.DurationVar(&o.retentionEvery, "retention-interval", 5*time.Second, "how often partition leaders apply their streams' retention, message TTL and backlog quota")
	f.DurationVar(&o.sleepAfter, "sleep-after", broker.DefaultSleepAfter, "how long a partition stays idle (no send or ack, no producer or consumer attached) before its replicas close until it is asked for again; its first send then waits for them to open and elect (under half a second measured on 3 nodes); a partition holding messages under a time limit or TTL stays awake (negative: never)")
	f.DurationVar(&o.raftHeartbeat, "raft-heartbeat-timeout", 2*time.Second, "Raft heartbeat timeout of every group, and each leader's lease: a leader whose host is lost is noticed within one to two of these (a leader whose process died, within a fraction of a second); a leader cut off from a majority steps down after one; a failed election is retried after two to four times as long, at least 2 s")
	f.DurationVar(&o.raftSnapshots.Interval, "raft-snapshot-interval", 120*time.Second, "how often every Raft group checks whether to snapshot and compact its log")
	f.Uint64Var(&o.raftSnapshots.Threshold, "raft-snapshot-threshold", 8192, "new entries that make a Raft group snapshot and compact its log")
	o.raftSnapBytes = cluster.DefaultSnapshotBytes
	f.Var(&o.raftSnapBytes, "raft-snapshot-bytes", "bytes of entries stored since a Raft group's last snapshot that make it snapshot and compact its log at once, whatever their count: a node that opens a group (at each start) reads every entry after its last snapshot (off: by count only, --raft-snapshot-threshold)")
	f.Uint64Var(&o.raftSnapshots.TrailingLogs, "raft-trailing-logs", 10240, "entries a Raft group keeps after a compaction, for followers slightly behind")
	f.BoolVar(&o.autoCreate, "auto-create", true, "create a stream on the first produce or subscribe to it, with its fabric's defaults (--auto-create=false: refuse with StreamNotFound)")
	f.BoolVar(&o.autoFabrics, "auto-create-fabrics", false, "also create a missing tenant and fabric when a stream is created in them (without it only the tenant public gets new fabrics that way)")
	f.DurationVar(&o.replaceDead, "replace-dead-after", 5*time.Minute, "move the replicas of a node dead this long to live nodes (negative: never)")
	d := broker.DefaultSubscriptionLimits()
	f.DurationVar(&o.subs.ReconnectGrace, "reconnect-grace", d.ReconnectGrace, "after a partition leader change, how long consumers keep their roles (failover master, key_shared hashes) while they reconnect")
	f.DurationVar(&o.subs.ProbeTimeout, "consumer-probe-timeout", d.ProbeTimeout, "how long a connected consumer holding what a newcomer asks for (an exclusive subscription, a failover master's place) has to answer a ping before the newcomer replaces it")
	f.DurationVar(&o.subs.DrainTimeout, "failover-drain-timeout", d.DrainTimeout, "how long an old failover master may ack what it holds before the new master starts (negative: no wait)")
	f.DurationVar(&o.subs.FailoverStabilityWindow, "failover-stability-window", 0, "how long a returning higher-ranked failover consumer must stay connected before it takes the master role back")
	f.IntVar(&o.subs.MaxUnackedPerConsumer, "max-unacked-per-consumer", d.MaxUnackedPerConsumer, "a shared or key_shared consumer holding this many unacked messages gets no more until half are acked")
	f.IntVar(&o.subs.MaxUnackedPerSubscription, "max-unacked-per-subscription", d.MaxUnackedPerSubscription, "a subscription holding this many unacked messages stops until half are acked")
	f.IntVar(&o.subs.LookAheadPerConsumer, "key-shared-look-ahead-per-consumer", d.LookAheadPerConsumer, "key_shared messages read past blocked keys, per consumer")
	f.IntVar(&o.subs.LookAheadPerSubscription, "key-shared-look-ahead-per-subscription", d.LookAheadPerSubscription, "key_shared messages read past blocked keys, per subscription at most")
	l := broker.DefaultClientLimits()
	f.IntVar(&o.limits.MaxConnections, "max-connections", l.MaxConnections, "client connections the node serves at most; more are refused with LimitExceeded (keep the process's descriptor limit, ulimit -n, above it)")
	f.IntVar(&o.limits.MaxConnectionsPerAddress, "max-connections-per-address", l.MaxConnectionsPerAddress, "client connections from one IP address at most; more are refused with LimitExceeded")
	f.IntVar(&o.limits.MaxProducersPerConnection, "max-producers-per-connection", l.MaxProducersPerConnection, "producers one connection may hold (one per partition it writes on this node)")
	f.IntVar(&o.limits.MaxConsumersPerConnection, "max-consumers-per-connection", l.MaxConsumersPerConnection, "consumers one connection may hold (one per partition it reads on this node)")
	f.IntVar(&o.limits.MaxSubscriptionsPerPartition, "max-subscriptions-per-partition", l.MaxSubscriptionsPerPartition, "durable subscriptions a partition may have; a subscribe that would create one more is refused with LimitExceeded")
	f.IntVar(&o.limits.MaxQueuedBytesPerConnection, "max-queued-bytes-per-connection", l.MaxQueuedBytesPerConnection, "bytes one connection may hold in memory each way (plus one frame): frames read and not yet served, past which the node stops reading it, and messages queued for its consumers and not yet written")
	f.Float64Var(&o.publishRate, "tenant-publish-rate", 0, "messages a second this node stores for each tenant's producers (0: no limit); a send over it waits, holding its connection, and one that would wait more than 5 s is refused with RateLimited")
	f.Var(&o.publishBytes, "tenant-publish-bytes-rate", "payload bytes a second this node stores for each tenant's producers, a size such as 10MiB (0: no limit); as --tenant-publish-rate")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.BoolVar(&o.logJSON, "log-json", false, "write logs as JSON lines")
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	return cmd
}

func run(ctx context.Context, o options, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	hopts := &slog.HandlerOptions{Level: level}
	var handler slog.Handler = slog.NewTextHandler(stderr, hopts)
	if o.logJSON {
		handler = slog.NewJSONHandler(stderr, hopts)
	}
	logger := slog.New(handler)
	if o.gcHeadroom > 0 {
		if g := newGCPace(uint64(o.gcHeadroom)); g != nil {
			defer g.stop()
		}
	}
	var gossipKeys [][]byte
	if o.gossipKeyFile != "" {
		keys, err := readGossipKeys(o.gossipKeyFile)
		if err != nil {
			return err
		}
		gossipKeys = keys
	}
	var verifier *auth.Verifier
	if o.authSecretFile != "" || o.authPublicKey != "" {
		v, err := auth.LoadVerifier(o.authSecretFile, o.authPublicKey)
		if err != nil {
			return fmt.Errorf("--auth-secret-file, --auth-public-key-file: %w", err)
		}
		verifier = v
	}
	var certs *tlsconfig.Node
	if o.tls != (tlsconfig.Files{}) {
		c, err := tlsconfig.Load(o.tls)
		if err != nil {
			return err
		}
		certs = c
	}
	var httpLn net.Listener
	if o.httpAddr != "" {
		ln, err := listenHTTP(o.httpAddr)
		if err != nil {
			return err
		}
		if certs != nil {
			ln = tls.NewListener(ln, certs.Server())
		}
		httpLn = ln
		defer ln.Close()
		o.httpAddr = ln.Addr().String()
	}
	o.raftSnapshots.Bytes = int64(o.raftSnapBytes)
	node, err := broker.NewNode(broker.Config{
		NodeID:            o.nodeID,
		DataDir:           o.dataDir,
		ClientAddr:        o.clientAddr,
		RaftAddr:          o.raftAddr,
		Region:            o.region,
		GossipAddr:        o.gossipAddr,
		Join:              o.join,
		GossipKeys:        gossipKeys,
		Auth:              verifier,
		TLS:               certs,
		HTTPAddr:          o.httpAddr,
		BootstrapExpect:   o.bootstrapExpect,
		MaxMessageBytes:   o.maxMessageBytes,
		MinFreeDisk:       int64(o.minFreeDisk),
		SegmentBytes:      int64(o.segmentBytes),
		RetentionInterval: o.retentionEvery,
		SleepAfter:        o.sleepAfter,
		ReplaceDeadAfter:  o.replaceDead,
		NoAutoCreate:      !o.autoCreate,
		AutoCreateFabrics: o.autoFabrics,
		Raft:              broker.RaftTimings{HeartbeatTimeout: o.raftHeartbeat, ElectionTimeout: electionTimeoutFor(o.raftHeartbeat)},
		RaftSnapshots:     o.raftSnapshots,
		Subscriptions:     o.subs,
		Limits:            o.limits,
		PublishRate:       broker.PublishRate{Messages: o.publishRate, Bytes: int64(o.publishBytes)},
		Version:           version,
		Logger:            logger,
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if httpLn != nil {
		// From before the start, so that /readyz answers "not yet".
		defer serveHTTP(httpLn, node, certs, logger)()
	}
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = node.Start(startCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if o.pprofAddr != "" {
		stopPprof, err := servePprof(o.pprofAddr, logger)
		if err != nil {
			node.Shutdown(context.Background())
			return err
		}
		defer stopPprof()
	}
	logger.Info("fabriqd ready", "node", o.nodeID, "client", node.Addr(), "gossip", node.GossipAddr(), "http", o.httpAddr, "data", o.dataDir, "auth", verifier != nil, "tls", certs != nil, "version", version)
	<-ctx.Done()
	logger.Info("fabriqd stopping", "signal", strings.TrimSpace(context.Cause(ctx).Error()))
	stopCtx, cancelStop := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelStop()
	return node.Shutdown(stopCtx)
}

// electionTimeoutFor returns the election timeout of groups whose heartbeat
// timeout is hb: how long a candidate waits for its votes before it tries
// again, a random time between one and two of these. A node's loss starts
// hundreds of elections at once; with candidates that gave up after
// 0.5–1 s, elections slowed by that load failed, split and started over,
// and a cluster of 1,000 partitions never settled: at least 2 s, which
// settled (cluster/DESIGN.md, "Raft knobs").
func electionTimeoutFor(hb time.Duration) time.Duration { return max(2*hb, 2*time.Second) }

package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/transport"
)

func (a *app) streamCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "stream", Short: "Create, list, describe and delete streams"}

	var partitions, replicas int
	var local, leaderRegion string
	var rf retentionFlags
	create := &cobra.Command{
		Use:   "create STREAM",
		Short: "Create a stream",
		Long: `Create a stream with --partitions partitions, each a Raft group of
--replicas replicas. A stream with one partition is unpartitioned.

Retention works as in Pulsar, per partition and whole segments at a time:
messages acknowledged by every subscription (every message, on a stream
with no subscription) are deleted unless --retention-time or
--retention-size keeps them. With both, an acknowledged segment goes once it
is older than the time or the partition is larger than the size; with one,
the other is unlimited; -1 keeps acknowledged messages forever.
--backlog-quota-size bounds the unacknowledged backlog of the slowest
subscription: with --backlog-quota-policy producer_exception sends are
refused (error ProducerBlockedQuotaExceededError) until consumers catch
up; with consumer_backlog_eviction the oldest backlog is acknowledged on
the slowest subscriptions' behalf. --message-ttl acknowledges, on every
subscription, messages published longer ago than it.

A global stream (the default) spreads each partition's replicas over its
fabric's regions, one per region first; a local one (--local REGION) keeps
them all in one region. Too few live nodes where the replicas may go is an
error. --leader-region moves each partition's leadership to a replica in
that region whenever one is live (and repair keeps one there).

Partitions, replicas and a retention policy left out come from the stream's
fabric (fabric create sets them), or are 1, 1 and no retention. The fabric
must exist (fabric create), except public/default and other fabrics of
the tenant public, which are made on first use.

Sizes take B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers
of 1024); durations take Go's units (s, m, h) and d, w.`,
		Example: `  fabriq stream create persistent://acme/prod/orders --partitions 4 --replicas 3
  fabriq stream create persistent://acme/prod/audit --replicas 3 --retention-time 7d --retention-size 100GiB
  fabriq stream create persistent://acme/global/orders --replicas 3 --leader-region eu-west
  fabriq stream create persistent://acme/global/eu-only --replicas 3 --local eu-west
  fabriq stream create persistent://acme/prod/events --backlog-quota-size 10GiB --backlog-quota-policy consumer_backlog_eviction --message-ttl 24h`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts []client.StreamOption
			if local != "" {
				opts = append(opts, client.WithLocal(local))
			}
			if leaderRegion != "" {
				opts = append(opts, client.WithLeaderRegion(leaderRegion))
			}
			if rf.changed(cmd) {
				policy, err := rf.policy()
				if err != nil {
					return err
				}
				opts = append(opts, client.WithRetention(policy))
			}
			return a.withClient(func(c *client.Client) error {
				if err := c.CreateStream(cmd.Context(), args[0], partitions, replicas, opts...); err != nil {
					return err
				}
				info, err := c.DescribeStreamLocal(cmd.Context(), args[0])
				if err != nil {
					fmt.Fprintf(a.stdout, "created %s\n", args[0])
					return nil
				}
				fmt.Fprintf(a.stdout, "created %s with %d partition(s), %d replica(s) each\n", info.Stream, len(info.Partitions), info.Replicas)
				return nil
			})
		},
	}
	create.Flags().IntVarP(&partitions, "partitions", "p", 0, "number of partitions (default: the fabric's, or 1)")
	create.Flags().IntVarP(&replicas, "replicas", "r", 0, "replicas of each partition (default: the fabric's, or 1)")
	create.Flags().StringVar(&local, "local", "", "make a local stream: every replica in this region (one of the fabric's); by default a stream is global, its replicas spread over the fabric's regions")
	create.Flags().StringVar(&leaderRegion, "leader-region", "", "region where the stream's partitions should be led, so that producers there pay one round trip between regions per send, not two")
	rf.register(create)

	var srf retentionFlags
	setRetention := &cobra.Command{
		Use:   "set-retention STREAM",
		Short: "Replace a stream's retention, backlog quota and message TTL",
		Long: `Replace a stream's retention policy with the one the flags give, as
stream create takes it: a flag left out takes its default, so give every
limit the stream should keep. Partition leaders apply the new policy at
their next retention pass (fabriqd --retention-interval); segments the new
policy no longer keeps are deleted then.`,
		Example: "  fabriq stream set-retention persistent://acme/prod/audit --retention-time 30d --retention-size -1",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			policy, err := srf.policy()
			if err != nil {
				return err
			}
			return a.withClient(func(c *client.Client) error {
				if err := c.SetRetention(cmd.Context(), args[0], policy); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "%s: %s\n", args[0], describeRetention(policy))
				return nil
			})
		},
	}
	srf.register(setRetention)

	var force bool
	del := &cobra.Command{
		Use:   "delete STREAM",
		Short: "Delete a stream and its messages",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(c *client.Client) error {
				if err := c.DeleteStream(cmd.Context(), args[0], force); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "deleted %s\n", args[0])
				return nil
			})
		},
	}
	del.Flags().BoolVar(&force, "force", false, "delete even while producers or consumers are attached")

	list := &cobra.Command{
		Use:   "list TENANT/FABRIC",
		Short: "List the streams of a fabric, one per line",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(c *client.Client) error {
				streams, err := c.ListStreams(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				for _, s := range streams {
					fmt.Fprintln(a.stdout, s)
				}
				return nil
			})
		},
	}

	var asJSON bool
	describe := &cobra.Command{
		Use:   "describe STREAM",
		Short: "Describe a stream's partitions and subscriptions",
		Long: `Describe a stream. With --json the output is one object:
{"stream": S, "replicas": R, "local": REGION, "leader_region": REGION,
 "retention": {"retention_time_ms": N, "retention_bytes": N, "backlog_quota_bytes": N,
               "backlog_quota_policy": 0 (producer_exception) or 1, "message_ttl_ms": N},
 "partitions": [{"partition": 0, "leader": NODE_ID, "replicas": [NODE_ID, ...], "regions": [REGION, ...],
                 "start_offset": N, "next_offset": N, "log_bytes": N,
                 "subscriptions": [...]}, ...],
 "subscriptions": [{"name": ..., "mode": ..., "backlog": N, "blocked": B, "look_ahead": N,
                    "draining_keys": [...], "consumers": [...]}, ...]}
where the top-level subscriptions sum each subscription over the partitions.
start_offset is where retention has trimmed the partition to, the same on
every replica; log_bytes is the size of the answering node's copy.
Each consumer shows its partition, its role (exclusive: active; failover:
master or standby; away: kept for a consumer that has not reconnected after
a leader change), its unacked count, whether it is blocked by the unacked
limit, and for key_shared its hash ranges (sticky) or hash share.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var info client.StreamInfo
			err := a.withClient(func(c *client.Client) (err error) {
				info, err = c.DescribeStream(cmd.Context(), args[0])
				return err
			})
			if err != nil {
				return err
			}
			d := describeOutput(info)
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(d)
			}
			fmt.Fprintf(a.stdout, "stream %s, %d replica(s)%s\n", d.Stream, d.Replicas, describeRegions(info))
			fmt.Fprintf(a.stdout, "  %s\n", describeRetention(d.Retention))
			for _, p := range d.Partitions {
				fmt.Fprintf(a.stdout, "  partition %d: leader %s, replicas %v, offsets %d..%d, %d bytes on disk",
					p.Partition, orNone(p.Leader), withRegions(p.Replicas, p.Regions), p.StartOffset, p.NextOffset, p.LogBytes)
				if p.BacklogQuotaExceeded {
					fmt.Fprint(a.stdout, ", backlog quota exceeded: sends refused")
				}
				fmt.Fprintln(a.stdout)
			}
			for _, s := range d.Subscriptions {
				fmt.Fprintf(a.stdout, "  subscription %s (%s): backlog %d, %d consumer(s)\n", s.Name, s.Mode, s.Backlog, len(s.Consumers))
				for _, c := range s.Consumers {
					fmt.Fprintf(a.stdout, "    consumer %s on partition %d: %s, %d unacked", c.Name, c.Partition, orNone(c.Role), c.Unacked)
					if c.HashShare > 0 {
						fmt.Fprintf(a.stdout, ", %.1f%% of key hashes", 100*c.HashShare)
					}
					if c.Blocked {
						fmt.Fprint(a.stdout, ", blocked")
					}
					fmt.Fprintln(a.stdout)
				}
				if len(s.DrainingKeys) > 0 {
					fmt.Fprintf(a.stdout, "    keys waiting for a hand-over: %v\n", s.DrainingKeys)
				}
			}
			return nil
		},
	}
	describe.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	cmd.AddCommand(create, setRetention, del, list, describe)
	return cmd
}

// retentionFlags are the retention flags of stream create, as given.
type retentionFlags struct {
	time, size, quota, quotaPolicy, ttl string
}

// register adds the retention flags to a command.
func (f *retentionFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.time, "retention-time", "", "keep acknowledged messages this long (e.g. 12h, 7d; -1: forever)")
	cmd.Flags().StringVar(&f.size, "retention-size", "", "keep acknowledged messages while a partition is smaller than this (e.g. 1GiB; -1: no limit)")
	cmd.Flags().StringVar(&f.quota, "backlog-quota-size", "", "bound on a partition's unacknowledged backlog, in bytes (e.g. 10GiB); none by default")
	cmd.Flags().StringVar(&f.quotaPolicy, "backlog-quota-policy", "producer_exception", "over the backlog quota: producer_exception (refuse sends) or consumer_backlog_eviction (drop the oldest backlog)")
	cmd.Flags().StringVar(&f.ttl, "message-ttl", "", "acknowledge messages older than this on every subscription's behalf (e.g. 1h); none by default")
}

// changed reports whether any retention flag was given.
func (f *retentionFlags) changed(cmd *cobra.Command) bool {
	for _, name := range []string{"retention-time", "retention-size", "backlog-quota-size", "backlog-quota-policy", "message-ttl"} {
		if cmd.Flags().Changed(name) {
			return true
		}
	}
	return false
}

// policy turns the flags into a stream's policy.
func (f retentionFlags) policy() (client.RetentionPolicy, error) {
	var p client.RetentionPolicy
	ms := func(flag, s string, forever bool) (int64, error) {
		if s == "" {
			return 0, nil
		}
		d, err := parseAge(s)
		if err != nil {
			return 0, fmt.Errorf("--%s: %w", flag, err)
		}
		if d < 0 {
			if !forever {
				return 0, fmt.Errorf("--%s: -1 is not allowed here; leave the flag out for none", flag)
			}
			return -1, nil
		}
		return (d + time.Millisecond - 1).Milliseconds(), nil
	}
	size := func(flag, s string, forever bool) (int64, error) {
		if s == "" {
			return 0, nil
		}
		n, err := parseSize(s)
		if err != nil {
			return 0, fmt.Errorf("--%s: %w", flag, err)
		}
		if n < 0 && !forever {
			return 0, fmt.Errorf("--%s: -1 is not allowed here; leave the flag out for none", flag)
		}
		return n, nil
	}
	var err error
	if p.RetentionTimeMs, err = ms("retention-time", f.time, true); err != nil {
		return p, err
	}
	if p.RetentionBytes, err = size("retention-size", f.size, true); err != nil {
		return p, err
	}
	if p.BacklogQuotaBytes, err = size("backlog-quota-size", f.quota, false); err != nil {
		return p, err
	}
	if p.BacklogQuotaPolicy, err = transport.ParseBacklogQuotaPolicy(f.quotaPolicy); err != nil {
		return p, fmt.Errorf("--backlog-quota-policy: %w", err)
	}
	if p.MessageTTLMs, err = ms("message-ttl", f.ttl, false); err != nil {
		return p, err
	}
	return p, nil
}

// describeRetention says in words what a stream's policy does.
func describeRetention(p client.RetentionPolicy) string {
	limit := func(v int64, unit func(int64) string) string {
		if v < 0 {
			return "no limit"
		}
		return unit(v)
	}
	ms := func(v int64) string { return (time.Duration(v) * time.Millisecond).String() }
	bytes := func(v int64) string { return fmt.Sprintf("%d bytes", v) }
	var s string
	switch {
	case p.RetentionTimeMs == 0 && p.RetentionBytes == 0:
		s = "retention: none (acknowledged messages are deleted)"
	case p.RetentionTimeMs < 0 && p.RetentionBytes < 0,
		p.RetentionTimeMs < 0 && p.RetentionBytes == 0, p.RetentionTimeMs == 0 && p.RetentionBytes < 0:
		s = "retention: acknowledged messages are kept forever"
	default:
		s = fmt.Sprintf("retention: acknowledged messages kept for %s, up to %s", limit(p.RetentionTimeMs-boolInt(p.RetentionTimeMs == 0), ms),
			limit(p.RetentionBytes-boolInt(p.RetentionBytes == 0), bytes))
	}
	if p.BacklogQuotaBytes > 0 {
		s += fmt.Sprintf("; backlog quota %d bytes (%s)", p.BacklogQuotaBytes, p.BacklogQuotaPolicy)
	} else {
		s += "; no backlog quota"
	}
	if p.MessageTTLMs > 0 {
		s += "; message TTL " + ms(p.MessageTTLMs)
	}
	return s
}

// boolInt is 1 for true: a zero limit beside a set one means no limit.
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// streamDescription is the JSON shape of stream describe --json.
type streamDescription struct {
	client.StreamInfo
	Subscriptions []subscriptionTotal `json:"subscriptions"`
}

type subscriptionTotal struct {
	Name         string            `json:"name"`
	Mode         string            `json:"mode"`
	Backlog      uint64            `json:"backlog"`
	Blocked      bool              `json:"blocked"`
	LookAhead    int64             `json:"look_ahead"`
	DrainingKeys []string          `json:"draining_keys"`
	Consumers    []consumerSummary `json:"consumers"`
}

type consumerSummary struct {
	Name       string                `json:"name"`
	Partition  int32                 `json:"partition"`
	Role       string                `json:"role,omitempty"`
	Unacked    int64                 `json:"unacked"`
	Blocked    bool                  `json:"blocked"`
	HashRanges []transport.HashRange `json:"hash_ranges,omitempty"`
	HashShare  float64               `json:"hash_share,omitempty"`
}

func describeOutput(info client.StreamInfo) streamDescription {
	byName := map[string]*subscriptionTotal{}
	for _, p := range info.Partitions {
		for _, s := range p.Subscriptions {
			t := byName[s.Name]
			if t == nil {
				t = &subscriptionTotal{Name: s.Name, Mode: s.Mode, DrainingKeys: []string{}, Consumers: []consumerSummary{}}
				byName[s.Name] = t
			}
			t.Backlog += s.Backlog
			t.Blocked = t.Blocked || s.Blocked
			t.LookAhead += s.LookAhead
			t.DrainingKeys = append(t.DrainingKeys, s.DrainingKeys...)
			for _, c := range s.Consumers {
				t.Consumers = append(t.Consumers, consumerSummary{Name: c.Name, Partition: p.Partition, Role: c.Role, Unacked: c.Unacked,
					Blocked: c.Blocked, HashRanges: c.HashRanges, HashShare: c.HashShare})
			}
		}
	}
	d := streamDescription{StreamInfo: info, Subscriptions: []subscriptionTotal{}}
	for _, t := range byName {
		d.Subscriptions = append(d.Subscriptions, *t)
	}
	sort.Slice(d.Subscriptions, func(i, j int) bool { return d.Subscriptions[i].Name < d.Subscriptions[j].Name })
	return d
}

// describeRegions says where a stream's replicas go, for describe.
func describeRegions(info client.StreamInfo) string {
	out := ", global"
	if info.Local != "" {
		out = ", local to " + info.Local
	}
	if info.LeaderRegion != "" {
		out += ", led in " + info.LeaderRegion
	}
	return out
}

// withRegions names each replica with its region, when regions are known:
// [n1 (eu) n2 (us)].
func withRegions(replicas, regions []string) []string {
	if len(regions) != len(replicas) {
		return replicas
	}
	out := make([]string, len(replicas))
	for i, r := range replicas {
		out[i] = r
		if regions[i] != "" {
			out[i] = fmt.Sprintf("%s (%s)", r, regions[i])
		}
	}
	return out
}

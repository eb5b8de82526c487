package main

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/transport"
)

func (a *app) streamCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "stream", Short: "Create, list, describe and delete streams"}

	var partitions, replicas int
	create := &cobra.Command{
		Use:   "create STREAM",
		Short: "Create a stream",
		Long: `Create a stream with --partitions partitions, each a Raft group of
--replicas replicas. A stream with one partition is unpartitioned.`,
		Example: "  fabriq stream create persistent://acme/prod/orders --partitions 4 --replicas 3",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(c *client.Client) error {
				if err := c.CreateStream(cmd.Context(), args[0], partitions, replicas); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "created %s with %d partition(s), %d replica(s) each\n", args[0], partitions, replicas)
				return nil
			})
		},
	}
	create.Flags().IntVarP(&partitions, "partitions", "p", 1, "number of partitions")
	create.Flags().IntVarP(&replicas, "replicas", "r", 1, "replicas of each partition")

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
{"stream": S, "replicas": R,
 "partitions": [{"partition": 0, "leader": NODE_ID, "replicas": [NODE_ID, ...],
                 "start_offset": N, "next_offset": N, "subscriptions": [...]}, ...],
 "subscriptions": [{"name": ..., "mode": ..., "backlog": N, "blocked": B, "look_ahead": N,
                    "draining_keys": [...], "consumers": [...]}, ...]}
where the top-level subscriptions sum each subscription over the partitions.
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
			fmt.Fprintf(a.stdout, "stream %s, %d replica(s)\n", d.Stream, d.Replicas)
			for _, p := range d.Partitions {
				fmt.Fprintf(a.stdout, "  partition %d: leader %s, replicas %v, offsets %d..%d\n",
					p.Partition, orNone(p.Leader), p.Replicas, p.StartOffset, p.NextOffset)
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

	cmd.AddCommand(create, del, list, describe)
	return cmd
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

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/fabriq-io/fabriq/cmd/internal/bench"
)

func (a *app) benchCommand() *cobra.Command {
	var w bench.Workload
	var typ string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput and latency of a workload against the cluster",
		Long: `Run producers and consumers against the cluster and report throughput (msg/s,
MB/s) and publish and end-to-end latency (p50, p95, p99, p99.9, max, from HDR
histograms). A line of progress goes to stderr each second; the result goes to
stdout, as JSON with --json.

Without --stream it creates a stream of public/default (--partitions,
--replicas) and deletes it afterwards. The producers send until --messages are
sent or --duration is over, whichever comes first; consumers then have --drain
to receive what was acknowledged. With --producers 0 the consumers read what is
there (--initial-position earliest) until they have --messages or --duration
is over: produce a backlog with --consumers 0 --stream S first to measure how
fast it drains (give S a retention policy, or the backlog nobody subscribed to
is deleted).

Publish latency runs from when a message was due (with --rate, its slot in the
schedule) to its acknowledgement, so a producer that falls behind shows it.
End-to-end latency compares the producer's clock, carried in the message, with
the consumer's: both are this process.`,
		Example: `  # async produce, 1 KiB, 1,000 in flight, 4 partitions of 3 replicas, with 4 shared consumers
  fabriq bench --partitions 4 --replicas 3 --consumers 4 -t shared --messages 200000

  # synchronous sends, one at a time
  fabriq bench --sync --replicas 3 --messages 5000 --consumers 0

  # a backlog of 200,000 (kept by retention: nobody subscribes while it is
  # made), then how fast 3 key_shared consumers drain it
  fabriq stream create drain --replicas 3 --retention-time -1 --retention-size -1
  fabriq bench --stream drain --keys 1000 --consumers 0 --messages 200000
  fabriq bench --stream drain --producers 0 --consumers 3 -t key_shared --initial-position earliest --messages 200000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if w.Type, err = parseType(typ); err != nil {
				return err
			}
			if w.Sync {
				w.InFlight = 1
			}
			pos, _ := cmd.Flags().GetString("initial-position")
			switch pos {
			case "latest":
			case "earliest":
				w.Earliest = true
			default:
				return errors.New("--initial-position must be latest or earliest")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			defer c.Close()
			res, err := bench.Run(cmd.Context(), c, w, a.stderr)
			if res == nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(res); err != nil {
					return err
				}
			} else {
				res.Print(a.stdout)
			}
			if err != nil {
				return err
			}
			if res.Produced.Failed > 0 {
				return errors.New("some sends failed (see the result)")
			}
			if cmd.Context().Err() != nil {
				// Ctrl-C ends a run early; what it measured is printed.
				fmt.Fprintln(a.stderr, "fabriq bench: interrupted; the result covers the run so far")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&w.Stream, "stream", "", "stream to use, created if missing (default: a new one, deleted after)")
	f.BoolVar(&w.Keep, "keep", false, "keep the stream bench created")
	f.IntVar(&w.Partitions, "partitions", 1, "partitions of a stream bench creates")
	f.IntVar(&w.Replicas, "replicas", 0, "replicas of each partition of a stream bench creates (0: the fabric's default)")
	f.IntVar(&w.Producers, "producers", 1, "producers, each with a producer of its own")
	f.IntVar(&w.Consumers, "consumers", 1, "consumers on one subscription")
	f.IntVar(&w.Size, "size", 1024, "message size in bytes (at least 16)")
	f.Float64Var(&w.Rate, "rate", 0, "total messages a second (0: as fast as --in-flight allows)")
	f.IntVar(&w.InFlight, "in-flight", 1000, "messages each producer may have sent and not acknowledged")
	f.BoolVar(&w.Sync, "sync", false, "send one message at a time per producer and wait for it")
	f.IntVar(&w.Keys, "keys", 0, "give messages one of this many keys, at random (0: no keys), batching by key")
	f.BoolVar(&w.DisableBatching, "no-batching", false, "send every message in a frame of its own")
	f.StringVarP(&typ, "subscription-type", "t", "exclusive", "subscription type: exclusive, shared, failover, key_shared")
	f.StringVar(&w.Subscription, "subscription", "fabriq-bench", "subscription name")
	f.String("initial-position", "latest", "where a new subscription starts: latest or earliest")
	f.Int64Var(&w.Messages, "messages", 0, "stop after this many messages sent (received, with --producers 0)")
	f.DurationVar(&w.Duration, "duration", 0, "stop after this long (default 10s when --messages is not given)")
	f.DurationVar(&w.Drain, "drain", 30*time.Second, "how long consumers may take to receive what was acknowledged, once producers are done")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if w.Messages == 0 && w.Duration == 0 {
			w.Duration = 10 * time.Second
		}
		return nil
	}
	cmd.AddCommand(a.benchFailoverCommand())
	return cmd
}

func (a *app) benchFailoverCommand() *cobra.Command {
	var cfg bench.FailoverConfig
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "failover --kill COMMAND",
		Short: "Kill partition leaders under load and measure how long until service is back",
		Long: `Create a stream of one partition (--replicas), run a synchronous producer and
key_shared consumers on it, and kill the partition leader's node --kills times.
For each kill it measures the time from the kill (when the --kill command
returns) to the first acknowledgement of a send made after it, and to the
first delivery of such a message;
it reports the median and the maximum, and checks at the end that every
acknowledged message was delivered.

--kill is a shell command that kills a node; FABRIQ_NODE (the node's id) and
FABRIQ_NODE_ADDR (its client address) are in its environment. Before each kill
the cluster must be whole again: every node alive and the partition led. Give
--restart to bring the killed node back, or run the nodes under a supervisor
that restarts them (make run does: it writes each node's pid to
.run/NODE.pid and restarts a node that dies).`,
		Example: `  # against make run
  fabriq bench failover --kills 10 --kill 'kill -KILL $(cat .run/$FABRIQ_NODE.pid)'

  # nodes under systemd with Restart=always, one host each
  fabriq bench failover --kills 10 --kill 'ssh $FABRIQ_NODE sudo systemctl kill -s KILL fabriqd'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			defer c.Close()
			res, err := bench.Failover(cmd.Context(), c, cfg, a.stderr)
			if res != nil {
				if asJSON {
					enc := json.NewEncoder(a.stdout)
					enc.SetIndent("", "  ")
					if jerr := enc.Encode(res); jerr != nil {
						return jerr
					}
				} else {
					res.Print(a.stdout)
				}
			}
			if err != nil {
				return err
			}
			if res.Missing > 0 {
				return errors.New("acknowledged messages went missing")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Kills, "kills", 10, "how many times to kill the leader")
	f.StringVar(&cfg.Kill, "kill", "", "shell command that kills the node $FABRIQ_NODE (required)")
	f.StringVar(&cfg.Restart, "restart", "", "shell command that starts the node $FABRIQ_NODE again (default: a supervisor does)")
	f.DurationVar(&cfg.Interval, "interval", 3*time.Second, "quiet time before each kill, once the cluster is whole")
	f.IntVar(&cfg.Replicas, "replicas", 3, "replicas of the stream's partition")
	f.IntVar(&cfg.Consumers, "consumers", 3, "key_shared consumers")
	f.IntVar(&cfg.Keys, "keys", 1000, "keys the producer spreads its messages over")
	f.IntVar(&cfg.Size, "size", 1024, "message size in bytes (at least 16)")
	f.DurationVar(&cfg.Timeout, "wait", 2*time.Minute, "longest wait for service after a kill, or for the killed node to come back")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fabriq-io/fabriq/client"
)

func (a *app) clusterCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Inspect the cluster"}
	var asJSON bool
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the nodes and the partitions with their leaders, replicas and lag",
		Long: `Show the cluster as the node asked sees it. With --json the output is one object:
{"node": ID, "meta_leader": ID,
 "nodes": [{"id", "state", "region", "client_addr", "raft_addr"}, ...],
 "partitions": [{"partition", "leader", "term", "replicas": [{"node", "lag"}, ...]}, ...]}
where lag counts the Raft entries a replica has yet to apply, -1 when the
answering node cannot tell.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var st client.ClusterInfo
			err := a.withClient(func(c *client.Client) (err error) {
				st, err = c.ClusterStatus(cmd.Context())
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			fmt.Fprintf(a.stdout, "as seen by node %s; metadata leader %s\n", st.Node, orNone(st.MetaLeader))
			if st.MinFreeDisk > 0 {
				fmt.Fprintf(a.stdout, "node %s: %.1f MiB free on its data directory, reserve %.1f MiB\n",
					st.Node, float64(st.FreeDisk)/(1<<20), float64(st.MinFreeDisk)/(1<<20))
			}
			fmt.Fprintln(a.stdout, "nodes:")
			for _, n := range st.Nodes {
				fmt.Fprintf(a.stdout, "  %-12s %-8s region=%s client=%s raft=%s\n", n.ID, n.State, orNone(n.Region), n.ClientAddr, n.RaftAddr)
			}
			fmt.Fprintln(a.stdout, "partitions:")
			for _, p := range st.Partitions {
				var reps []string
				for _, r := range p.Replicas {
					lag := "?"
					if r.Lag >= 0 {
						lag = fmt.Sprint(r.Lag)
					}
					reps = append(reps, fmt.Sprintf("%s(lag %s)", r.Node, lag))
				}
				leader := orNone(p.Leader)
				if p.Asleep {
					leader = "asleep"
				}
				fmt.Fprintf(a.stdout, "  %s leader=%s term=%d replicas=%s\n", p.Partition, leader, p.Term, strings.Join(reps, ","))
			}
			return nil
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(status)
	return cmd
}

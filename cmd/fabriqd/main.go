// Command fabriqd runs a fabriq node.
//
// The node service (client protocol, partition Raft groups, gossip
// membership) is not built yet: this build holds the partition storage
// engine only, so fabriqd can report its version and explain its state, and
// refuses to pretend to serve.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newRootCommand(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "fabriqd:", err)
		os.Exit(1)
	}
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fabriqd",
		Short: "fabriqd runs a node of a fabriq stream broker cluster",
		Long: `fabriqd runs a node of a fabriq stream broker cluster.

This build contains the partition storage engine only; the node service
(client protocol, Raft groups, membership) comes next. See the README's
status table.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return fmt.Errorf("the node service is not built yet (fabriqd %s holds the storage engine only)", version)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	return cmd
}

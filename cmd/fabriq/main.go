// Command fabriq is the command-line client of a fabriq cluster.
//
// Its global --url flag (or FABRIQ_URL) names the nodes to talk to. The
// stream, produce and consume commands arrive with the broker; today the
// CLI reports its version.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// defaultURL is used when neither --url nor FABRIQ_URL is given.
const defaultURL = "fabriq://127.0.0.1:6650"

func main() {
	if err := newRootCommand(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "fabriq:", err)
		os.Exit(1)
	}
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	url := os.Getenv("FABRIQ_URL")
	if url == "" {
		url = defaultURL
	}
	root := &cobra.Command{
		Use:   "fabriq",
		Short: "fabriq is the command-line client of a fabriq stream broker",
		Long: `fabriq is the command-line client of a fabriq stream broker.

Streams are named persistent://TENANT/FABRIC/STREAM. The commands that create
streams, produce and consume arrive with the broker; see the README's status
table.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("url", url, "nodes to contact, fabriq://HOST:PORT[,HOST:PORT...] (env FABRIQ_URL)")
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the CLI's version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "fabriq", version)
		},
	})
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root
}

// Command fabriq is the command-line client of a fabriq cluster.
//
// Its global --url flag (or FABRIQ_URL) names the nodes to talk to. It
// creates, lists, describes and deletes streams, produces messages from
// flags or JSON lines on stdin, and consumes them as text or JSON lines.
// Errors go to stderr with a non-zero exit; scripts may rely on the JSON
// shapes documented on each command.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fabriq-io/fabriq/client"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// defaultURL is used when neither --url nor FABRIQ_URL is given.
const defaultURL = "fabriq://127.0.0.1:6650"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand(os.Stdin, os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fabriq:", err)
		os.Exit(1)
	}
}

// app holds what every command shares.
type app struct {
	url     string
	token   string
	caFile  string
	timeout time.Duration
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
}

func (a *app) client() (*client.Client, error) {
	token := a.token
	if token == "" {
		token = os.Getenv("FABRIQ_TOKEN")
	}
	caFile := a.caFile
	if caFile == "" {
		caFile = os.Getenv("FABRIQ_TLS_CA_FILE")
	}
	return client.New(client.Options{URL: a.url, Name: "fabriq-cli", OperationTimeout: a.timeout, Token: token, TLSCAFile: caFile})
}

// withClient runs fn with a client that is closed after.
func (a *app) withClient(fn func(*client.Client) error) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

func newRootCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	url := os.Getenv("FABRIQ_URL")
	if url == "" {
		url = defaultURL
	}
	root := &cobra.Command{
		Use:   "fabriq",
		Short: "fabriq is the command-line client of a fabriq stream broker",
		Long: `fabriq is the command-line client of a fabriq stream broker.

Streams are named persistent://TENANT/FABRIC/STREAM; TENANT/FABRIC/STREAM
means the same, and a short name such as orders is a stream of the
public/default fabric (persistent://public/default/orders). --url (or
FABRIQ_URL) names one or more nodes; any node routes a request to the
right leader.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&a.url, "url", url, "nodes to contact, fabriq://HOST:PORT[,HOST:PORT...], fabriq+tls://... with TLS (env FABRIQ_URL)")
	// Not the env as the default: --help would print the token.
	root.PersistentFlags().StringVar(&a.token, "token", "", "token (JWT) to present to a cluster with authentication on (env FABRIQ_TOKEN; see fabriq token create)")
	root.PersistentFlags().StringVar(&a.caFile, "tls-ca-file", "", "PEM file of the CA that signed the nodes' certificates, for a fabriq+tls:// URL (env FABRIQ_TLS_CA_FILE; default the system's roots)")
	root.PersistentFlags().DurationVar(&a.timeout, "timeout", 30*time.Second, "timeout of each request to the cluster")
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the CLI's version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "fabriq", version)
		},
	})
	root.AddCommand(a.tenantCommand(), a.fabricCommand(), a.streamCommand(), a.produceCommand(), a.consumeCommand(), a.subscriptionCommand(), a.clusterCommand(), a.benchCommand(), a.tokenCommand())
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root
}

package tests

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/transport"
)

// badNames are stream names that must be refused, with what the refusal
// says. The first three once named, through "..", a node's own data
// directory or the directories above it, and deleting them removed those.
var badNames = []struct{ name, why string }{
	{"persistent://a/../..", `fabric may not be ".."`},
	{"persistent://t/f/.", `stream may not be "."`},
	{"persistent://../../..", `tenant may not be ".."`},
	{"persistent://t/f/a/b", "TENANT/FABRIC/STREAM"},
	{"persistent://t/f/a\xffb", "not valid UTF-8"},
	{"persistent://t/f/" + strings.Repeat("x", 10000), "longer than"},
	{"persistent://t/f/a\x00b", `character '\x00'`}, // no command line holds a NUL: sent as a frame only
	{"..", `stream may not be ".."`},                // a short name: public/default/..
	{"../../tmp", `tenant may not be ".."`},         // the scheme left out
}

// sandboxState is what lies in a sandbox outside the nodes' partition
// directories: every path outside the data directories with its
// contents, and the entries at the top of each data directory.
func sandboxState(t *testing.T, root string, dataDirs []string) map[string]string {
	t.Helper()
	state := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if slices.Contains(dataDirs, path) {
			entries, err := os.ReadDir(path)
			if err != nil {
				return err
			}
			for _, e := range entries {
				state[filepath.Join(path, e.Name())] = "entry"
			}
			return fs.SkipDir
		}
		if d.Type().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			state[path] = string(b)
		} else {
			state[path] = d.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return state
}

// partitionDirs lists the directories three levels below a data
// directory's partitions directory.
func partitionDirs(t *testing.T, dataDir string) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(dataDir, "partitions", "*", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range dirs {
		dirs[i] = strings.TrimPrefix(d, dataDir+string(filepath.Separator))
	}
	return dirs
}

// rawConn dials addr and makes the handshake, as any program speaking the
// protocol can; the caller closes the connection.
func rawConn(ctx context.Context, t testing.TB, addr, name string, cfg transport.Config) *transport.Conn {
	t.Helper()
	nc, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := transport.NewConn(nc, cfg)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	if _, err := transport.Handshake(ctx, c, &transport.Connect{ClientName: name}); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c
}

// rawNext reads c's next frame that is not a Ping, answering the Pings.
func rawNext(ctx context.Context, t testing.TB, c *transport.Conn) transport.Command {
	t.Helper()
	for {
		cmd, err := c.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := cmd.(*transport.Ping); ok {
			if err := c.Send(ctx, &transport.Pong{}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		return cmd
	}
}

// rawRequest sends one command over a connection of its own, as a client
// that checks nothing would, and returns the answer.
func rawRequest(t *testing.T, addr string, cmd transport.Command) transport.Command {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	c := rawConn(ctx, t, addr, "names-test", transport.Config{ReadIdleTimeout: 20 * time.Second})
	defer c.Close()
	if err := c.Send(ctx, cmd); err != nil {
		t.Fatal(err)
	}
	for {
		res, err := c.Receive()
		if err != nil {
			t.Fatalf("no answer to %T: %v", cmd, err)
		}
		switch res.(type) {
		case *transport.Ping:
			if err := c.Send(ctx, &transport.Pong{}); err != nil {
				t.Fatal(err)
			}
		case *transport.Pong:
		default:
			return res
		}
	}
}

// wantInvalidName fails unless res is an InvalidName error that says why.
func wantInvalidName(t *testing.T, what string, res transport.Command, why string) {
	t.Helper()
	e, ok := res.(*transport.Error)
	if !ok || e.Code != transport.CodeInvalidName || !strings.Contains(e.Message, why) {
		t.Errorf("%s: answered %T %+v, want InvalidName saying %q", what, res, res, why)
		return
	}
	if len(e.Message) > 300 {
		t.Errorf("%s: an error of %d bytes", what, len(e.Message))
	}
}

// Bad names are refused, by the CLI and by the broker itself, and no
// attempt creates or removes anything outside DATA_DIR/partitions. The
// cluster runs in a sandbox: its data directories sit four levels deep in
// a temporary directory, with a canary file in each level above them and
// in each data directory.
func TestBadNamesTouchNothing(t *testing.T) {
	root := t.TempDir()
	levels := []string{root, filepath.Join(root, "l1"), filepath.Join(root, "l1", "l2"), filepath.Join(root, "l1", "l2", "l3")}
	var dirs []string
	for i := range 3 {
		dirs = append(dirs, filepath.Join(levels[3], fmt.Sprint("n", i+1)))
	}
	for _, d := range append(slices.Clone(levels), dirs...) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "canary"), []byte("canary of "+d), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	nodes := startClusterIn(t, dirs)
	url := nodes[0].url()
	const good = "persistent://acme/prod/kept"
	cliFabric(t, url, "acme/prod")
	if out, errOut, code := fabriqCLI(t, url, "", "stream", "create", good, "--replicas", "3"); code != 0 {
		t.Fatalf("stream create %s: %d %s %s", good, code, out, errOut)
	}
	if out, errOut, code := fabriqCLI(t, url, "", "produce", good, "-m", "acknowledged"); code != 0 {
		t.Fatalf("produce: %d %s %s", code, out, errOut)
	}
	// A send is acknowledged by a majority: the third replica may open
	// its copy a moment later.
	opened := testContext(t, 30*time.Second)
	for _, d := range dirs {
		eventually(opened, t, "the partition directory in "+d, func() bool {
			return slices.Equal(partitionDirs(t, d), []string{"partitions/acme/prod/kept"})
		})
	}
	before := sandboxState(t, root, dirs)
	for _, d := range append(slices.Clone(levels), dirs...) {
		if _, ok := before[filepath.Join(d, "canary")]; !ok {
			t.Fatalf("no canary in %s before the test", d)
		}
	}

	for _, bad := range badNames {
		label := fmt.Sprintf("%.40q", bad.name)
		// The CLI, as a user would type it.
		if !strings.ContainsRune(bad.name, 0) {
			for _, args := range [][]string{
				{"stream", "create", bad.name, "--replicas", "3"},
				{"stream", "delete", bad.name, "--force"},
				{"produce", bad.name, "-m", "x"},
				{"consume", bad.name, "-s", "sub", "-n", "1"},
			} {
				out, errOut, code := fabriqCLI(t, url, "", args...)
				if code == 0 || !strings.Contains(errOut, "invalid name") || !strings.Contains(errOut, bad.why) {
					t.Errorf("fabriq %s %s %s: exit %d, stdout %q, stderr %.300q; want a refusal saying %q", args[0], args[1], label, code, out, errOut, bad.why)
				}
			}
		}
		// The broker, sent frames by a client that checks nothing; every
		// node is asked (one of them leads the metadata group).
		for i, n := range nodes {
			wantInvalidName(t, fmt.Sprintf("CreateStream %s on n%d", label, i+1),
				rawRequest(t, n.addr, &transport.CreateStream{RequestID: 1, Stream: bad.name, Partitions: 1, Replicas: 3}), bad.why)
			wantInvalidName(t, fmt.Sprintf("DeleteStream %s on n%d", label, i+1),
				rawRequest(t, n.addr, &transport.DeleteStream{RequestID: 2, Stream: bad.name, Force: true}), bad.why)
			wantInvalidName(t, fmt.Sprintf("CreateProducer %s on n%d", label, i+1),
				rawRequest(t, n.addr, &transport.CreateProducer{RequestID: 3, ProducerID: 1, Stream: bad.name}), bad.why)
			wantInvalidName(t, fmt.Sprintf("Subscribe %s on n%d", label, i+1),
				rawRequest(t, n.addr, &transport.Subscribe{RequestID: 4, ConsumerID: 1, Stream: bad.name, Subscription: "sub"}), bad.why)
		}
	}

	// Producer, subscription and consumer names: valid UTF-8, no control
	// characters, at most 256 bytes; refused by the CLI and by the broker.
	badClient := []struct{ name, why string }{
		{"a\xffb", "not valid UTF-8"},
		{"a\x00b", "control character U+0000"},
		{"a\nb", "control character U+000A"},
		{strings.Repeat("x", 10000), "longer than 256 bytes"},
	}
	for _, bad := range badClient {
		label := fmt.Sprintf("%.40q", bad.name)
		if !strings.ContainsRune(bad.name, 0) {
			for _, args := range [][]string{
				{"consume", good, "-s", bad.name, "-n", "1"},
				{"consume", good, "-s", "sub", "--name", bad.name, "-n", "1"},
			} {
				out, errOut, code := fabriqCLI(t, url, "", args...)
				if code == 0 || !strings.Contains(errOut, "invalid name") || !strings.Contains(errOut, bad.why) {
					t.Errorf("fabriq %v with %s: exit %d, stdout %q, stderr %.300q; want a refusal saying %q", args[:3], label, code, out, errOut, bad.why)
				}
			}
		}
		for i, n := range nodes {
			wantInvalidName(t, fmt.Sprintf("producer name %s on n%d", label, i+1),
				rawRequest(t, n.addr, &transport.CreateProducer{RequestID: 5, ProducerID: 1, Stream: good, ProducerName: bad.name}), "producer name")
			wantInvalidName(t, fmt.Sprintf("subscription name %s on n%d", label, i+1),
				rawRequest(t, n.addr, &transport.Subscribe{RequestID: 6, ConsumerID: 1, Stream: good, Subscription: bad.name}), "subscription name")
			wantInvalidName(t, fmt.Sprintf("consumer name %s on n%d", label, i+1),
				rawRequest(t, n.addr, &transport.Subscribe{RequestID: 7, ConsumerID: 1, Stream: good, Subscription: "sub", ConsumerName: bad.name}), "consumer name")
		}
	}

	// Nothing outside the partitions directories changed, no partition
	// directory came or went, and the stream that was there still holds
	// its message on every node.
	after := sandboxState(t, root, dirs)
	for path, v := range before {
		if a, ok := after[path]; !ok {
			t.Errorf("%s was removed", path)
		} else if a != v {
			t.Errorf("%s changed", path)
		}
	}
	for path := range after {
		if _, ok := before[path]; !ok {
			t.Errorf("%s was created", path)
		}
	}
	for _, d := range dirs {
		if got := partitionDirs(t, d); !slices.Equal(got, []string{"partitions/acme/prod/kept"}) {
			t.Errorf("partition directories of %s after: %v", d, got)
		}
	}
	for _, n := range nodes {
		if err := n.stop(); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		n.past = append(n.past, n.node)
		n.node = launch(t, n.id, n.dir, n.args...)
	}
	for _, n := range nodes {
		n.waitReady()
	}
	ctx := testContext(t, time.Minute)
	for {
		out, errOut, code := fabriqCLI(t, nodes[0].url(), "", "consume", good, "-s", "check", "-n", "1", "--initial-position", "earliest", "--timeout", "10s")
		if code == 0 {
			if !strings.Contains(out, "acknowledged") {
				t.Fatalf("consumed %q, want the acknowledged message", out)
			}
			break
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("consume after restart: %d %s", code, errOut)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

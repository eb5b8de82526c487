package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// bin holds the binaries built for this test run.
var bin string

// TestMain builds the binaries once for every test.
//
// Tests run one at a time, except those that spend most of their time
// waiting (failure detection, replacement, restarts, CLI processes
// starting) and little on the CPU: they call t.Parallel and run together
// at the end, two at a time on two cores. Every test has its own processes, ports (chosen by the
// kernel, or by freeAddr, which never hands one out twice) and
// directories, so they do not meet.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fabriq-tests-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/fabriq-io/fabriq/cmd/fabriqd", "github.com/fabriq-io/fabriq/cmd/fabriq")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the binaries:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// node is a fabriqd child process.
type node struct {
	t       testing.TB
	id      string
	dataDir string
	cmd     *exec.Cmd
	addr    string // client address it bound
	http    string // HTTP address it bound (health)
	secure  bool   // TLS on its ports
	logs    *lockedBuffer
	exited  chan struct{}
	ready   chan readyLine // once ready
}

// readyLine is what a node's "fabriqd ready" log line says.
type readyLine struct {
	Msg    string `json:"msg"`
	Client string `json:"client"`
	HTTP   string `json:"http"`
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startNode starts fabriqd with its data in dataDir and waits until it
// says it is ready. The process is killed when the test ends.
func startNode(t testing.TB, id, dataDir string, extra ...string) *node {
	t.Helper()
	n := launch(t, id, dataDir, extra...)
	n.waitReady()
	return n
}

// launch starts fabriqd without waiting for it to be ready.
func launch(t testing.TB, id, dataDir string, extra ...string) *node {
	t.Helper()
	return launchUnder(t, nil, id, dataDir, extra...)
}

// launchUnder is launch with fabriqd run by a wrapper command that execs
// it (prlimit, for one), so that the process is fabriqd's own.
func launchUnder(t testing.TB, wrapper []string, id, dataDir string, extra ...string) *node {
	t.Helper()
	args := append([]string{
		"--node-id", id, "--data-dir", dataDir,
		"--client-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-json",
	}, extra...)
	argv := append(slices.Clone(wrapper), filepath.Join(bin, "fabriqd"))
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, id: id, dataDir: dataDir, cmd: cmd, logs: &lockedBuffer{}, exited: make(chan struct{}), ready: make(chan readyLine, 1),
		secure: slices.Contains(args, "--tls-cert-file")}
	ready := n.ready
	// FABRIQ_TEST_LOGS keeps every node's whole log in a file of that
	// directory, ID-PID.log (the test's output has each one's tail).
	var keep io.Writer = io.Discard
	if dir := os.Getenv("FABRIQ_TEST_LOGS"); dir != "" {
		err := os.MkdirAll(dir, 0o755)
		var f *os.File
		if err == nil {
			f, err = os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.log", id, cmd.Process.Pid)))
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-n.exited; f.Close() })
		keep = f
	}
	go func() {
		// Owned by the process: it ends when the process's stderr closes.
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(n.logs, line)
			fmt.Fprintln(keep, line)
			var rec readyLine
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "fabriqd ready" {
				select {
				case ready <- rec:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr)
		cmd.Wait()
		close(n.exited)
	}()
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			t.Logf("logs of node %s:\n%s", id, tail(n.logs.String(), 60))
		}
	})
	return n
}

// waitReady waits until the node says it is ready and records its client
// address.
func (n *node) waitReady() {
	n.t.Helper()
	select {
	case r := <-n.ready:
		n.addr, n.http = r.Client, r.HTTP
	case <-n.exited:
		n.t.Fatalf("fabriqd %s exited before it was ready:\n%s", n.id, n.logs.String())
	case <-time.After(90 * time.Second):
		n.t.Fatalf("fabriqd %s not ready after 90s:\n%s", n.id, n.logs.String())
	}
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// kill sends SIGKILL and waits for the process to go.
func (n *node) kill() {
	n.killTimed()
}

// killTimed kills the node's process and waits for it to end; it returns
// when the signal went, and when the process was seen to end (its memory
// unmapped and its sockets closed by the kernel, which takes longer the
// more memory the process held).
func (n *node) killTimed() (signalled, ended time.Time) {
	select {
	case <-n.exited:
		return time.Now(), time.Now()
	default:
	}
	signalled = time.Now()
	n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
	return signalled, time.Now()
}

// stop sends SIGTERM and waits for a clean exit.
func (n *node) stop() error {
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(30 * time.Second):
		n.kill()
		return fmt.Errorf("fabriqd %s did not stop within 30s", n.id)
	}
	if code := n.cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("fabriqd %s exited with status %d%s", n.id, code, crashOf(n.logs.String()))
	}
	return nil
}

// crashOf returns the Go runtime's report in a node's log — a panic or a
// fatal error and the stack that follows — for an exit status to carry:
// the tail of a log may have lost it under later lines.
func crashOf(logs string) string {
	i := strings.Index(logs, "\npanic: ")
	if j := strings.Index(logs, "\nfatal error: "); i < 0 || (j >= 0 && j < i) {
		i = j
	}
	if i < 0 {
		return ""
	}
	return ":\n" + head(logs[i+1:], 80)
}

func head(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[:lines]
	}
	return strings.Join(parts, "\n")
}

func (n *node) url() string {
	if n.secure {
		return "fabriq+tls://" + n.addr
	}
	return "fabriq://" + n.addr
}

func newClient(t testing.TB, url string) *client.Client {
	t.Helper()
	opts := client.Options{URL: url, OperationTimeout: 20 * time.Second}
	if s := secureOf(t); s != nil {
		opts.TLSCAFile, opts.Token = s.caFile, s.token
	}
	c, err := client.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// createStream creates a stream, and its tenant and fabric first when
// they are missing, as an operator does once per fabric.
func createStream(ctx context.Context, c *client.Client, stream string, partitions, replicas int, opts ...client.StreamOption) error {
	if err := ensureFabric(ctx, c, stream); err != nil {
		return err
	}
	return c.CreateStream(ctx, stream, partitions, replicas, opts...)
}

// ensureFabric creates the tenant and fabric of a stream, unless they
// exist. A bad name is left for the stream's own create to refuse.
func ensureFabric(ctx context.Context, c *client.Client, stream string) error {
	st, err := geofabric.ParseStream(stream)
	if err != nil {
		return nil
	}
	if err := c.CreateTenant(ctx, st.Tenant); err != nil && transport.CodeOf(err) != transport.CodeTenantExists {
		return err
	}
	if err := c.CreateFabric(ctx, st.FabricName(), client.FabricOptions{}); err != nil && transport.CodeOf(err) != transport.CodeFabricExists {
		return err
	}
	return nil
}

// digest summarises the logs of a test cluster's nodes for a failed test,
// ahead of each node's last lines: per node, its warnings and errors
// counted by message; then every metadata-group election the nodes
// logged, in time order. What held a test up for minutes (a metadata
// group without a leader, a node failing one call over and over) shows
// here when the last lines have scrolled past it.
func digest(logs map[string][]string) string {
	var b strings.Builder
	var elections []string
	ids := slices.Sorted(maps.Keys(logs))
	for _, id := range ids {
		counts := map[string]int{}
		for _, text := range logs[id] {
			for line := range strings.SplitSeq(text, "\n") {
				var rec struct {
					Time, Level, Msg, Group string
					Term                    json.Number
				}
				if json.Unmarshal([]byte(line), &rec) != nil {
					continue
				}
				if rec.Level == "WARN" || rec.Level == "ERROR" {
					if len(rec.Msg) > 100 {
						rec.Msg = rec.Msg[:100] + "…"
					}
					counts[rec.Level+" "+rec.Msg]++
				}
				if rec.Group == "_meta" && (rec.Msg == "entering candidate state" || rec.Msg == "election won") {
					elections = append(elections, fmt.Sprintf("%s %s %s term %s", rec.Time, id, rec.Msg, rec.Term))
				}
			}
		}
		msgs := slices.Sorted(maps.Keys(counts))
		slices.SortStableFunc(msgs, func(a, b string) int { return counts[b] - counts[a] })
		fmt.Fprintf(&b, "%s:", id)
		for i, m := range msgs {
			if i == 12 {
				fmt.Fprintf(&b, " (%d more)", len(msgs)-i)
				break
			}
			fmt.Fprintf(&b, " %d× %q;", counts[m], m)
		}
		b.WriteString("\n")
	}
	slices.Sort(elections)
	if len(elections) > 40 {
		fmt.Fprintf(&b, "(%d earlier metadata elections)\n", len(elections)-40)
		elections = elections[len(elections)-40:]
	}
	for _, e := range elections {
		b.WriteString(e + "\n")
	}
	return b.String()
}

package tests

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
)

// openFiles counts the file descriptors a process holds.
func openFiles(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// A node that runs out of file descriptors serves clients again once they
// are freed: idle connections flood its client port until accepts fail
// (EMFILE), the flood goes, and a new client connects and produces.
func TestNodeServesAgainAfterRunningOutOfDescriptors(t *testing.T) {
	const limit = 256
	// Go raises the soft limit to the hard one at start-up: lower both.
	n := launchUnder(t, []string{"prlimit", "--nofile=" + strconv.Itoa(limit) + ":" + strconv.Itoa(limit)}, "n1", filepath.Join(t.TempDir(), "n1"))
	n.waitReady()
	ctx := testContext(t, 2*time.Minute)
	const stream = "persistent://acme/limits/descriptors"
	admin := newClient(t, n.url())
	if err := createStream(ctx, admin, stream, 1, 1); err != nil {
		t.Fatal(err)
	}
	admin.Close()

	// Far more idle connections than the node has descriptors: the
	// kernel completes them and queues them for an accept that fails.
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for range 2 * limit {
		c, err := net.DialTimeout("tcp", n.addr, 5*time.Second)
		if err != nil {
			t.Fatalf("flood: after %d connections: %v", len(flood), err)
		}
		flood = append(flood, c)
	}
	deadline := time.Now().Add(20 * time.Second)
	for openFiles(t, n.cmd.Process.Pid) < limit {
		if time.Now().After(deadline) {
			t.Fatalf("the node holds %d descriptors, never reaching its limit of %d", openFiles(t, n.cmd.Process.Pid), limit)
		}
		time.Sleep(20 * time.Millisecond) // polling a count, not waiting for it
	}
	for _, c := range flood {
		c.Close()
	}
	flood = nil

	c, err := client.New(client.Options{URL: n.url(), ConnectTimeout: 5 * time.Second, OperationTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The client retries its dial and handshake until this context ends.
	ctx = testContext(t, 30*time.Second)
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatalf("after the flood, no producer: %v", err)
	}
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("after the flood")}); err != nil {
		t.Fatalf("after the flood, no send: %v", err)
	}
	// The failures were logged once per burst, not once each.
	logs := n.logs.String()
	failing, again := strings.Count(logs, "accepting connections fails"), strings.Count(logs, "accepting connections again")
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "accepting connections") {
			t.Log(line)
		}
	}
	if failing == 0 || failing > 10 || again == 0 {
		t.Fatalf("%d accept failure bursts and %d recoveries logged, want a few of each", failing, again)
	}
}

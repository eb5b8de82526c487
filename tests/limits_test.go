package tests

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
)

// openFiles counts the file descriptors a process holds.
func openFiles(t testing.TB, pid int) int {
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

// A tenant over --tenant-publish-rate is throttled, not refused: every
// message of an asynchronous producer sending faster than the limit is
// stored, in order, and the node reports the time its sends waited. A
// send that would wait more than the bound is refused with RateLimited,
// which the client reports with its send timeout.
func TestTenantPublishRate(t *testing.T) {
	t.Parallel() // mostly waiting on processes: see TestMain
	n := startNode(t, "n1", t.TempDir(), "--tenant-publish-rate", "500", "--tenant-publish-bytes-rate", "64KiB")
	ctx := testContext(t, 2*time.Minute)
	c := newClient(t, n.url())
	const stream = "persistent://public/default/throttled"
	if err := createStream(ctx, c, stream, 1, 1); err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, BatchingMaxMessages: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const count = 1500 // three seconds' worth at 500 a second
	var mu sync.Mutex
	var offsets []uint64
	var failed []error
	var wg sync.WaitGroup
	for i := range count {
		wg.Add(1)
		p.SendAsync(ctx, &client.ProducerMessage{Payload: []byte(fmt.Sprint(i))}, func(id client.MessageID, _ *client.ProducerMessage, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, err)
				return
			}
			offsets = append(offsets, id.Offset)
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d sends failed under the limit, the first: %v", len(failed), failed[0])
	}
	for i, o := range offsets {
		if o != uint64(i) {
			t.Fatalf("message %d stored at offset %d: out of order", i, o)
		}
	}
	if waited, _ := sumOf(scrape(ctx, t, n), "fabriq_publish_throttled_seconds_total", "tenant", "public"); waited <= 0 {
		t.Fatalf("fabriq_publish_throttled_seconds_total{tenant=public} = %v after sending 3 s worth", waited)
	}

	// 640 KiB in one message: ten seconds' worth of bytes, refused.
	big, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, SendTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	_, err = big.Send(ctx, &client.ProducerMessage{Payload: make([]byte, 640<<10)})
	if !errors.Is(err, client.ErrSendTimeout) || !errors.Is(err, client.ErrRateLimited) || !strings.Contains(err.Error(), "rate limit") {
		t.Fatalf("a send of ten seconds' worth: %v, want a send timeout for RateLimited", err)
	}
	if refused, _ := sumOf(scrape(ctx, t, n), "fabriq_requests_refused_total", "reason", "RateLimited"); refused < 1 {
		t.Fatalf("RateLimited refusals counted: %v", refused)
	}
}

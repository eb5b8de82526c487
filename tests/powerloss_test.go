package tests

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/tests/lazyfs"
)

// A power loss on every node at once loses no acknowledged message: each
// node's data directory is a lazyfs mount, the three nodes are killed
// together while a producer sends, every write not yet fsynced is
// dropped, and the cluster, restarted on what is left, serves every
// message it acknowledged at the offset it gave.
func TestPowerLossKeepsAcknowledged(t *testing.T) {
	t.Parallel() // mostly waiting on failure detection and restarts: see TestMain
	root := t.TempDir()
	const n = 3
	disks := make([]string, n)
	mounts := make([]*lazyfs.FS, n)
	dirs := make([]string, n)
	for i := range n {
		disks[i] = filepath.Join(root, fmt.Sprintf("n%d.disk", i+1))
		dirs[i] = filepath.Join(root, fmt.Sprintf("n%d", i+1))
		for _, d := range []string{disks[i], dirs[i]} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		fsys, err := lazyfs.Mount(disks[i], dirs[i])
		if errors.Is(err, lazyfs.ErrNoFUSE) {
			t.Fatalf("this test needs FUSE: %v", err)
		}
		if err != nil {
			t.Fatalf("mount lazyfs for n%d: %v", i+1, err)
		}
		// Registered after TempDir and before the nodes: it runs after
		// they are killed and before the directories go.
		t.Cleanup(func() {
			if err := fsys.Unmount(); err != nil {
				t.Errorf("unmount %s: %v", fsys.Mountpoint(), err)
			}
		})
		mounts[i] = fsys
	}

	nodes := startClusterIn(t, dirs)
	ctx := testContext(t, 4*time.Minute)
	const stream = "persistent://acme/prod/powerloss"
	c := newClient(t, clusterURL(nodes))
	if err := createStream(ctx, c, stream, 4, 3); err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, SendTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	acked, failed := produce(ctx, p, 3000, 0, "a", nil)
	if len(failed) > 0 {
		t.Fatalf("%d sends failed before the power loss, first: %v", len(failed), failed[0])
	}
	// The power goes while a second batch is being sent, once part of it
	// is acknowledged: that part must survive as well.
	inFlight, unacked := produceAndKill(ctx, p, 300, func() {
		for _, cn := range nodes {
			cn.cmd.Process.Signal(syscall.SIGKILL)
		}
		for _, cn := range nodes {
			cn.kill()
		}
	})
	maps.Copy(acked, inFlight)
	t.Logf("%d messages acknowledged, %d of them while the nodes were killed; %d sends failed", len(acked), len(inFlight), unacked)
	p.Close()

	for i, fsys := range mounts {
		syncs := fsys.Syncs()
		if err := fsys.Crash(); err != nil {
			t.Fatalf("crash n%d: %v", i+1, err)
		}
		d := fsys.Dropped()
		t.Logf("n%d: power loss dropped %d writes (%d bytes) and %d size changes in %d files; %d fsyncs had gone through",
			i+1, d.Writes, d.Bytes, d.Truncates, d.Files, syncs)
		if d.Bytes == 0 {
			t.Errorf("n%d: the power loss dropped nothing, so this test proves nothing", i+1)
		}
	}

	// Back on what the disks kept.
	for i, cn := range nodes {
		cn.dir = disks[i]
		cn.past = append(cn.past, cn.node)
		cn.node = launch(t, cn.id, cn.dir, cn.args...)
	}
	for _, cn := range nodes {
		cn.waitReady()
	}
	c = newClient(t, clusterURL(nodes))
	waitOffsets(ctx, t, c, stream, acked)
	readAll(ctx, t, c, stream, acked)
}

// produceAndKill sends messages one a millisecond, calls kill once after
// the first acks acknowledgements, and stops sending once kill returned.
// It returns the acknowledged messages by payload and how many failed.
func produceAndKill(ctx context.Context, p *client.Producer, acks int, kill func()) (map[string]client.MessageID, int) {
	var mu sync.Mutex
	acked := map[string]client.MessageID{}
	failed := 0
	enough := make(chan struct{})
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		select {
		case <-enough:
		case <-ctx.Done():
		}
		kill()
	}()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		select {
		case <-killed:
		case <-tick.C:
			wg.Add(1)
			p.SendAsync(ctx, &client.ProducerMessage{Key: fmt.Sprint("k", i%101), Payload: []byte(fmt.Sprint("b", i))}, func(id client.MessageID, m *client.ProducerMessage, err error) {
				mu.Lock()
				defer mu.Unlock()
				defer wg.Done()
				if err != nil {
					failed++
					return
				}
				acked[string(m.Payload)] = id
				if len(acked) == acks {
					close(enough)
				}
			})
			continue
		}
		break
	}
	wg.Wait()
	return acked, failed
}

// waitOffsets waits until every partition's leader holds the highest
// acknowledged offset of its partition, and names the partitions that
// came back short if that does not happen in time.
func waitOffsets(ctx context.Context, t *testing.T, c *client.Client, stream string, acked map[string]client.MessageID) {
	t.Helper()
	want := map[int]uint64{} // partition: next offset it must reach
	for _, id := range acked {
		want[id.Partition] = max(want[id.Partition], id.Offset+1)
	}
	deadline, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		info, err := c.DescribeStream(deadline, stream)
		var short []string
		if err == nil {
			got := map[int]uint64{}
			for _, p := range info.Partitions {
				got[int(p.Partition)] = p.NextOffset
			}
			for part, next := range want {
				if got[part] < next {
					short = append(short, fmt.Sprintf("partition %d ends at offset %d, but offset %d was acknowledged", part, got[part], next-1))
				}
			}
			if len(short) == 0 {
				return
			}
		}
		select {
		case <-deadline.Done():
			if err != nil {
				t.Fatalf("%s cannot be described after the power loss: %v", stream, err)
			}
			sort.Strings(short)
			t.Fatalf("acknowledged messages lost in the power loss: %q", short)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

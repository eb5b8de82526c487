package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/tests/tmpfs"
)

// smallDisk is a size-limited tmpfs the test mounted on a directory of its
// own: a real file system that fills up, where nothing else lives.
type smallDisk struct {
	dir string
}

// mountSmallDisk mounts a tmpfs of size bytes on dir (which it creates)
// and unmounts it when the test ends, after the nodes are killed.
func mountSmallDisk(t *testing.T, dir string, size int64) *smallDisk {
	t.Helper()
	// Registered before the nodes start: the unmount runs after they are
	// killed.
	return &smallDisk{dir: tmpfs.Mount(t, dir, size)}
}

// free returns the bytes free on the disk.
func (d *smallDisk) free(t testing.TB) int64 { return tmpfs.Free(t, d.dir) }

// fill writes a filler file (inside the node's data directory, on the
// same mount) so that about leave bytes stay free.
func (d *smallDisk) fill(t testing.TB, leave int64) string { return tmpfs.Fill(t, d.dir, leave) }

// startOnSmallDisks starts 3 nodes, each with its data on a 64 MiB
// tmpfs of its own and a 16 MiB reserve.
func startOnSmallDisks(t *testing.T) ([]*clusterNode, []*smallDisk) {
	t.Helper()
	root := t.TempDir()
	disks := make([]*smallDisk, 3)
	dirs := make([]string, 3)
	for i := range disks {
		dirs[i] = filepath.Join(root, fmt.Sprintf("n%d", i+1))
		disks[i] = mountSmallDisk(t, dirs[i], 64<<20)
	}
	return startClusterIn(t, dirs, "--min-free-disk", "16MiB"), disks
}

// bigPayload is a message of about 4 KiB that names itself.
func bigPayload(prefix string, i int) []byte {
	head := fmt.Sprintf("%s-%06d-", prefix, i)
	return append([]byte(head), bytes.Repeat([]byte{'.'}, 4096-len(head))...)
}

// sendRound sends count messages asynchronously and returns the
// acknowledged ones by payload and the errors of those that failed.
func sendRound(ctx context.Context, p *client.Producer, prefix string, count int) (map[string]client.MessageID, []error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	acked := map[string]client.MessageID{}
	var failed []error
	for i := range count {
		wg.Add(1)
		p.SendAsync(ctx, &client.ProducerMessage{Key: fmt.Sprint("k", i%7), Payload: bigPayload(prefix, i)}, func(id client.MessageID, m *client.ProducerMessage, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, err)
			} else {
				acked[string(m.Payload)] = id
			}
			wg.Done()
		})
	}
	wg.Wait()
	return acked, failed
}

// readAs reads subscription sub from the earliest message, acking each,
// until every acknowledged message came back at its offset; an ack that
// fails is an error: acks must go on when the disk is short.
func readAs(ctx context.Context, t *testing.T, c *client.Client, stream, sub string, acked map[string]client.MessageID) {
	t.Helper()
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: sub, SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatalf("subscribe %s: %v", sub, err)
	}
	defer cons.Close()
	seen := map[string]bool{}
	for len(seen) < len(acked) {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("%s: after %d of %d acknowledged messages: %v", sub, len(seen), len(acked), err)
		}
		if id, ok := acked[string(m.Payload)]; ok {
			if id != m.ID {
				t.Fatalf("%s: message read at %v, acknowledged at %v", sub, m.ID, id)
			}
			seen[string(m.Payload)] = true
		}
		if err := cons.Ack(ctx, m); err != nil {
			t.Fatalf("%s: ack of %v: %v", sub, m.ID, err)
		}
	}
}

// Three nodes, each with its data on a 64 MiB tmpfs filled to a little
// above the free-space reserve: a producer sends until the partition's
// leader refuses with DiskFull (the client resends, then fails the sends
// at its timeout with ErrSendTimeout and ErrDiskFull). Nothing
// acknowledged is lost; while the disks are short, the nodes serve a new
// subscription, its reads and its acks, and go on refusing sends; once the
// filler files are deleted, sends go through again without a restart, and
// no node stopped or restarted on the way.
func TestDiskFullRefusesSendsAndResumes(t *testing.T) {
	t.Parallel() // mostly waiting on failure detection and restarts: see TestMain
	const reserve, headroom = 16 << 20, 10 << 20
	nodes, disks := startOnSmallDisks(t)
	ctx := testContext(t, 4*time.Minute)
	const stream = "persistent://acme/prod/diskfull"
	c := newClient(t, clusterURL(nodes))
	p := streamAndProducer(ctx, t, c, stream, 3*time.Second)
	defer p.Close()
	acked, failed := sendRound(ctx, p, "before", 100)
	if len(failed) > 0 {
		t.Fatalf("%d sends failed with space to spare, first: %v", len(failed), failed[0])
	}
	fillers := make([]string, 3)
	for i, d := range disks {
		fillers[i] = d.fill(t, reserve+headroom)
	}
	// Each node reads its free space once a second and admits sends
	// against its last reading: the leader must have read the filled
	// disk, or it would admit more than the disk still holds.
	waitReading(ctx, t, nodes, reserve+headroom)

	// Until the leader refuses: at most headroom/2 of messages fit
	// above the reserve (each is written to the Raft log and the log).
	refused := 0
	var round int
	for round = 0; refused == 0; round++ {
		if round > 4*headroom/(4096*100) {
			t.Fatalf("%d rounds of 100 sends of 4 KiB went through %d MiB above the reserve without a refusal", round, headroom>>20)
		}
		ok, failed := sendRound(ctx, p, fmt.Sprint("full", round), 100)
		for k, id := range ok {
			acked[k] = id
		}
		for _, err := range failed {
			if !errors.Is(err, client.ErrDiskFull) || !errors.Is(err, client.ErrSendTimeout) || !strings.Contains(err.Error(), "DiskFull") {
				t.Fatalf("a send failed with %v, want ErrSendTimeout and ErrDiskFull, saying DiskFull", err)
			}
		}
		refused = len(failed)
	}
	t.Logf("sends refused after %d rounds; %d messages acknowledged; free: %s", round, len(acked), freeOf(t, disks))
	// The refusal came from the leader's estimate of what its admitted
	// sends use; the disk may still hold a little more than the reserve,
	// and the next reading would admit sends again. Below the reserve for
	// real from here on, with room left for acks and a subscription; every
	// node says so at its next reading (once a second).
	for _, d := range disks {
		d.fill(t, reserve-4<<20)
	}
	for _, n := range nodes {
		eventually(ctx, t, n.id+" to log that its free space is below the reserve", func() bool {
			l := n.logs.String()
			return strings.LastIndex(l, "free disk space is below the reserve") > strings.LastIndex(l, "free disk space is back above the reserve")
		})
	}

	// Short of disk: reads, a new subscription and its acks go on, and
	// nothing acknowledged is missing.
	readAs(ctx, t, c, stream, "while-full", acked)
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: bigPayload("still-full", 0)}); !errors.Is(err, client.ErrDiskFull) {
		t.Fatalf("a send after the reads: %v, want ErrDiskFull", err)
	}

	// Space freed: sends go through again, by themselves.
	for _, f := range fillers {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	resumed := time.Now()
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		id, err := p.Send(sctx, &client.ProducerMessage{Payload: bigPayload("freed", 0)})
		cancel()
		if err == nil {
			acked[string(bigPayload("freed", 0))] = id
			break
		}
		if !errors.Is(err, client.ErrDiskFull) || time.Since(resumed) > 30*time.Second {
			t.Fatalf("a send after space was freed: %v", err)
		}
	}
	t.Logf("first send after space was freed acknowledged within %v", time.Since(resumed).Round(time.Millisecond))
	ok, failed := sendRound(ctx, p, "after", 500)
	if len(failed) > 0 {
		t.Fatalf("%d sends failed after space was freed, first: %v", len(failed), failed[0])
	}
	for k, id := range ok {
		acked[k] = id
	}
	readAll(ctx, t, c, stream, acked)
	waitIdentical(ctx, t, nodes, stream)
	for _, n := range nodes {
		select {
		case <-n.exited:
			t.Errorf("node %s exited:\n%s", n.id, tail(n.logs.String(), 30))
		default:
		}
		if strings.Contains(n.logs.String(), "partition stopped on this node") {
			t.Errorf("node %s stopped a partition: the reserve should have kept every append from failing", n.id)
		}
	}
}

// ackedSends returns the acknowledged messages by payload and a function
// that sends a round of count messages into it, failing the test if one
// is refused.
func ackedSends(ctx context.Context, t *testing.T, p *client.Producer) (map[string]client.MessageID, func(prefix string, count int)) {
	acked := map[string]client.MessageID{}
	return acked, func(prefix string, count int) {
		t.Helper()
		ok, failed := sendRound(ctx, p, prefix, count)
		if len(failed) > 0 {
			t.Fatalf("%d sends failed, first: %v", len(failed), failed[0])
		}
		maps.Copy(acked, ok)
	}
}

// waitReading waits until every node's last reading of its free space
// (cluster status) is at most free bytes.
func waitReading(ctx context.Context, t *testing.T, nodes []*clusterNode, free int64) {
	t.Helper()
	for _, n := range nodes {
		nc := newClient(t, n.url())
		eventually(ctx, t, n.id+" to read its free space", func() bool {
			st, err := nc.ClusterStatus(ctx)
			return err == nil && st.MinFreeDisk > 0 && st.FreeDisk <= free
		})
	}
}

// freeOf describes the free space of the disks.
func freeOf(t testing.TB, disks []*smallDisk) string {
	var parts []string
	for i, d := range disks {
		parts = append(parts, fmt.Sprintf("n%d %.1f MiB", i+1, float64(d.free(t))/(1<<20)))
	}
	return strings.Join(parts, ", ")
}

// findLogDir returns the partition log directory under a node's data
// directory: the one directory that holds log segments (*.log files).
func findLogDir(t testing.TB, dataDir string) string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dataDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".log") && filepath.Base(filepath.Dir(path)) == "log" {
			if dir := filepath.Dir(path); !slices.Contains(found, dir) {
				found = append(found, dir)
			}
		}
		return nil
	})
	if err != nil || len(found) != 1 {
		t.Fatalf("looking for the one partition log under %s: %v, found %q", dataDir, err, found)
	}
	return found[0]
}

// moveOnto moves the files of dir onto a new tmpfs of size bytes mounted
// on dir itself, and returns the mount; the node must be stopped.
func moveOnto(t *testing.T, dir string, size int64) *smallDisk {
	t.Helper()
	aside := dir + ".aside"
	if err := os.Rename(dir, aside); err != nil {
		t.Fatal(err)
	}
	d := mountSmallDisk(t, dir, size)
	entries, err := os.ReadDir(aside)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(aside, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(aside); err != nil {
		t.Fatal(err)
	}
	return d
}

// A replica whose partition log fills its file system neither panics nor
// loops: its log cannot append a committed entry, so its copy of the
// partition stops, with one log line, while the two others go on
// acknowledging, and the node keeps answering clients. Restarted without
// space it stops the same way again, instead of crash-looping on the
// replay; given space and restarted, it catches up from Raft and holds the
// same log as the others.
//
// The replica's log is moved onto a 4 MiB tmpfs of its own, its Raft store
// and the reserve's data directory staying on the larger disk: so the log,
// not the Raft store, is the one that runs out, and nothing refuses the
// sends before. A follower cannot refuse what its group committed; a
// leader whose own append fails answers its senders ServiceNotReady, and
// their retries find the entry on the new leader, deduplicated.
func TestReplicaOutOfSpaceCatchesUp(t *testing.T) {
	t.Parallel() // mostly waiting on failure detection and restarts: see TestMain
	t.Run("follower", func(t *testing.T) { testReplicaOutOfSpace(t, false) })
	t.Run("leader", func(t *testing.T) { testReplicaOutOfSpace(t, true) })
}

func testReplicaOutOfSpace(t *testing.T, leads bool) {
	nodes, _ := startOnSmallDisks(t)
	ctx := testContext(t, 4*time.Minute)
	const stream = "persistent://acme/prod/replica-full"
	c := newClient(t, clusterURL(nodes))
	p := streamAndProducer(ctx, t, c, stream, 20*time.Second)
	defer p.Close()
	acked, send := ackedSends(ctx, t, p)
	send("before", 100)
	leader := leaderOf(ctx, t, c, stream)
	var victim *clusterNode
	for _, n := range nodes {
		if n.id != leader {
			victim = n
			break
		}
	}
	if err := victim.stop(); err != nil {
		t.Fatal(err)
	}
	logDisk := moveOnto(t, findLogDir(t, victim.dir), 4<<20)
	victim.restart(t)
	waitIdentical(ctx, t, nodes, stream)
	// To make the victim lead, restart the leader (it hands its
	// leadership over as it stops) until the victim gets it.
	for try := 0; leads && leaderOf(ctx, t, c, stream) != victim.id; try++ {
		if try == 8 {
			t.Fatalf("%s did not get the leadership in %d restarts of the leader", victim.id, try)
		}
		l := byID(nodes, leaderOf(ctx, t, c, stream))
		if err := l.stop(); err != nil {
			t.Fatal(err)
		}
		l.restart(t)
		waitIdentical(ctx, t, nodes, stream)
	}

	// 8 MiB of messages: far more than the victim's log has room for,
	// far less than the reserve of the others allows.
	for round := range 20 {
		send(fmt.Sprint("short", round), 100)
	}
	stops := func() int { return strings.Count(victim.logs.String(), "partition stopped on this node") }
	exited := func() bool {
		select {
		case <-victim.exited:
			return true
		default:
			return false
		}
	}
	eventually(ctx, t, "the victim's copy to stop", func() bool { return stops() > 0 || exited() })
	if exited() {
		t.Fatalf("replica %s exited when its log filled up:\n%s", victim.id, tail(victim.logs.String(), 30))
	}
	// More sends: the stopped copy neither logs again nor comes back,
	// and another replica leads.
	send("stopped", 200)
	if l := leaderOf(ctx, t, c, stream); l == victim.id {
		t.Errorf("replica %s still leads the partition it stopped", victim.id)
	}
	if n := stops(); n != 1 {
		t.Errorf("replica %s logged %d times that it stopped the partition, want once", victim.id, n)
	}
	t.Logf("replica %s: its log has %d KiB free; %d messages acknowledged", victim.id, logDisk.free(t)>>10, len(acked))
	// The node still answers clients, and reads through it go on.
	vc := newClient(t, victim.url())
	if _, err := vc.ClusterStatus(ctx); err != nil {
		t.Fatalf("replica %s with a full disk does not answer: %v", victim.id, err)
	}
	readAs(ctx, t, vc, stream, "through-full-node", acked)

	// Restarted without space, it replays what it could not append,
	// stops again, once, and keeps running: no crash loop.
	if err := victim.stop(); err != nil {
		t.Fatalf("stopping replica %s: %v", victim.id, err)
	}
	victim.restart(t)
	eventually(ctx, t, "the restarted victim's copy to stop", func() bool { return stops() > 0 || exited() })
	if exited() {
		t.Fatalf("replica %s, restarted with a full log, exited:\n%s", victim.id, tail(victim.logs.String(), 30))
	}
	send("restarted-full", 100)
	if n := stops(); n != 1 || exited() {
		t.Errorf("replica %s restarted with a full log: logged %d stops (want 1), exited %v", victim.id, n, exited())
	}

	// An operator gives the log room and restarts the node.
	if err := victim.stop(); err != nil {
		t.Fatalf("stopping replica %s: %v", victim.id, err)
	}
	if err := unix.Mount("tmpfs", logDisk.dir, "tmpfs", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, "size=64m"); err != nil {
		t.Fatalf("growing the log's tmpfs: %v", err)
	}
	victim.restart(t)
	waitIdentical(ctx, t, nodes, stream)
	send("after", 200)
	waitIdentical(ctx, t, nodes, stream)
	readAll(ctx, t, c, stream, acked)
	if n := stops(); n != 0 {
		t.Errorf("replica %s stopped the partition again after it was given space", victim.id)
	}
}

// A follower whose whole disk fills, so that Raft's own store (raft.db)
// is the first to refuse a write, neither exits nor stays behind: the two
// others go on acknowledging, and each time an operator frees space the
// follower catches up by itself, without a restart (the partition's log
// is on another disk: its own refusal is TestReplicaOutOfSpaceCatchesUp's
// case). Its refusal once
// wedged the leader's pipelined replication to it (hashicorp/raft issue
// 612, cluster.TestPipelineNeverBlocksAfterARefusal) in about one time of
// five; the test fills and frees the disk three times.
func TestFollowerRaftStoreFullCatchesUp(t *testing.T) {
	nodes, disks := startOnSmallDisks(t)
	ctx := testContext(t, 4*time.Minute)
	const stream = "persistent://acme/prod/raftdb-full"
	c := newClient(t, clusterURL(nodes))
	p := streamAndProducer(ctx, t, c, stream, 20*time.Second)
	defer p.Close()
	acked, send := ackedSends(ctx, t, p)
	send("before", 100)
	waitIdentical(ctx, t, nodes, stream)
	victim := aFollower(ctx, t, c, nodes, stream)
	vi := slices.Index(nodes, victim)
	// The partition's log goes onto a large disk of its own, so that the
	// Raft store, alone on the small one, is what runs out of space.
	if err := victim.stop(); err != nil {
		t.Fatal(err)
	}
	moveOnto(t, findLogDir(t, victim.dir), 1<<30)
	for victim.restart(t); leaderOf(ctx, t, c, stream) == victim.id; victim.restart(t) {
		if err := victim.stop(); err != nil { // it hands leadership over
			t.Fatal(err)
		}
	}
	waitIdentical(ctx, t, nodes, stream)
	refusals := func() int { return strings.Count(victim.logs.String(), "failed to append to logs") }
	for cycle := range 3 {
		before := refusals()
		filler := disks[vi].fill(t, 0)
		for round := 0; refusals() == before; round++ {
			if round == 20 {
				t.Fatalf("cycle %d: 20 rounds of sends and the full follower %s never refused an append", cycle, victim.id)
			}
			send(fmt.Sprintf("full%d-%d", cycle, round), 100)
		}
		send(fmt.Sprint("refused", cycle), 100)
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		freed := time.Now()
		waitIdentical(testContext(t, time.Minute), t, nodes, stream)
		t.Logf("cycle %d: follower %s caught up %v after space was freed; %d messages acknowledged",
			cycle, victim.id, time.Since(freed).Round(time.Millisecond), len(acked))
	}
	send("after", 200)
	waitIdentical(ctx, t, nodes, stream)
	readAll(ctx, t, c, stream, acked)
	select {
	case <-victim.exited:
		t.Fatalf("replica %s exited:\n%s", victim.id, tail(victim.logs.String(), 30))
	default:
	}
}

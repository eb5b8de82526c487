package tests

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/transport"
)

// retentionArgs give a cluster small segments, frequent retention passes
// and frequent Raft compactions, so that what a partition keeps on disk is
// a few segments and a few hundred Raft entries.
var retentionArgs = []string{
	"--segment-bytes", "64KiB", "--retention-interval", "200ms",
	"--raft-snapshot-interval", "500ms", "--raft-snapshot-threshold", "32", "--raft-trailing-logs", "32",
}

// dirBytes returns the bytes of the files under dir, counting a file with
// several hard links (a Raft snapshot links the log's segments) once.
func dirBytes(t testing.TB, dir string) int64 {
	t.Helper()
	seen := map[[2]uint64]bool{}
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while we walk: a compaction
		}
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			n += fi.Size()
			return nil
		}
		k := [2]uint64{uint64(st.Dev), st.Ino}
		if !seen[k] {
			seen[k] = true
			n += st.Blocks * 512 // what the file takes on disk
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// partitionDir is where a node keeps an unpartitioned stream's partition.
func partitionDir(n *clusterNode, stream string) string {
	rest := strings.TrimPrefix(stream, "persistent://")
	return filepath.Join(n.dir, "partitions", filepath.FromSlash(rest))
}

// A 3-node cluster, a 3-replica stream with 64 KiB segments under steady
// produce and ack: the partition's directory on every node stays bounded
// while many times its size is produced; every replica reports the same
// start offset; a subscription created afterwards from the earliest
// message starts there.
func TestClusterRetentionBoundsDisk(t *testing.T) {
	nodes := startCluster(t, 3, retentionArgs...)
	ctx := testContext(t, 5*time.Minute)
	c := newClient(t, clusterURL(nodes))
	const stream = "persistent://acme/retain/steady"
	if err := createStream(ctx, c, stream, 1, 3); err != nil {
		t.Fatal(err)
	}
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "work", SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, MaxPendingMessages: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	// The consumer acknowledges everything it receives, as it comes.
	var mu sync.Mutex
	received := map[string]bool{}
	cctx, stopConsumer := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			m, err := cons.Receive(cctx)
			if err != nil {
				return
			}
			mu.Lock()
			received[string(m.Payload[:16])] = true
			mu.Unlock()
			_ = cons.Ack(cctx, m) // a lost ack brings the message back
		}
	}()
	defer func() { stopConsumer(); wg.Wait() }()

	const rounds, perRound, size = 24, 2000, 1024
	// Paced: what a partition holds between two retention passes and
	// two compactions is what arrives meanwhile, so the bounds below
	// hold at a rate, not at whatever speed the machine sends. Unpaced,
	// a faster sitting (75,000 messages a second alone where 35,000 had
	// been seen) held twice the bound in Raft's log and the message log.
	const burst, every = 200, 50 * time.Millisecond // 4 MB/s at most
	pace := time.NewTicker(every)
	defer pace.Stop()
	produced := int64(0)
	var peak, logPeak [3]int64
	var sizes [][3]int64
	for r := range rounds {
		acked := map[string]bool{}
		var failed []error
		var amu sync.Mutex
		var pwg sync.WaitGroup
		for i := range perRound {
			if i%burst == 0 {
				select {
				case <-pace.C:
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				}
			}
			key := fmt.Sprintf("r%03d-m%010d", r, i) // 16 bytes
			payload := append([]byte(key), make([]byte, size-len(key))...)
			pwg.Add(1)
			prod.SendAsync(ctx, &client.ProducerMessage{Payload: payload}, func(_ client.MessageID, _ *client.ProducerMessage, err error) {
				amu.Lock()
				if err != nil {
					failed = append(failed, err)
				} else {
					acked[key] = true
				}
				amu.Unlock()
				pwg.Done()
			})
		}
		pwg.Wait()
		if len(failed) > 0 {
			t.Fatalf("round %d: %d sends failed, first: %v", r, len(failed), failed[0])
		}
		produced += perRound * size
		eventually(ctx, t, fmt.Sprintf("round %d consumed", r), func() bool {
			mu.Lock()
			defer mu.Unlock()
			for k := range acked {
				if !received[k] {
					return false
				}
			}
			return true
		})
		var now, logs [3]int64
		for i, n := range nodes {
			now[i] = dirBytes(t, partitionDir(n, stream))
			logs[i] = dirBytes(t, filepath.Join(partitionDir(n, stream), "log"))
			peak[i] = max(peak[i], now[i])
			logPeak[i] = max(logPeak[i], logs[i])
		}
		sizes = append(sizes, now)
		t.Logf("round %d: %d MiB produced, partition directories %v bytes, their logs %v", r, produced>>20, now, logs)
	}
	// Bounded: far below what was produced, and not growing with it: the
	// second half of the run needs no more room than the first.
	// Most of what a partition keeps is Raft's log (raft.db), which its
	// compaction bounds; the message log itself is a few segments. raft.db
	// never shrinks: its size is the most Raft entries ever held between two
	// compactions, more on a loaded machine where they are bigger and
	// compactions later (17.3 MB seen with the two cores busy), so the
	// bound is 20 MiB, under half of what is produced: a partition that
	// kept everything would pass all of it.
	const bound, logBound = 20 << 20, 4 << 20
	var firstHalf, secondHalf [3]int64
	for r, s := range sizes {
		for i := range s {
			if r < rounds/2 {
				firstHalf[i] = max(firstHalf[i], s[i])
			} else {
				secondHalf[i] = max(secondHalf[i], s[i])
			}
		}
	}
	for i, n := range nodes {
		if peak[i] > bound {
			t.Errorf("node %s: partition directory reached %d bytes, bound %d (%d produced)", n.id, peak[i], bound, produced)
		}
		if logPeak[i] > logBound {
			t.Errorf("node %s: the partition's log reached %d bytes, bound %d (%d produced)", n.id, logPeak[i], logBound, produced)
		}
		if secondHalf[i] > firstHalf[i]+firstHalf[i]/2 {
			t.Errorf("node %s: partition directory grows with what is produced: peak %d in the first half, %d in the second", n.id, firstHalf[i], secondHalf[i])
		}
	}
	if produced < 2*bound {
		t.Fatalf("produced %d bytes: not enough to tell a bound from growth", produced)
	}
	if t.Failed() {
		return
	}

	// Every replica reports the same start, past the beginning; each one's
	// log holds little.
	stopConsumer()
	wg.Wait()
	var start uint64
	sameStart := func(what string) {
		t.Helper()
		eventually(ctx, t, what, func() bool {
			var starts []uint64
			for _, n := range nodes {
				nc, err := client.New(client.Options{URL: n.url(), OperationTimeout: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				info, err := nc.DescribeStreamLocal(ctx, stream)
				nc.Close()
				if err != nil || len(info.Partitions) != 1 {
					return false
				}
				p := info.Partitions[0]
				if p.LogBytes > 1<<20 {
					return false
				}
				starts = append(starts, p.StartOffset)
			}
			start = starts[0]
			return start > 0 && starts[1] == start && starts[2] == start
		})
	}
	sameStart("every replica at the same start offset, trimmed")
	t.Logf("start offset %d on every replica", start)
	// A replica restarted from its snapshot and log agrees too.
	if err := nodes[2].stop(); err != nil {
		t.Fatal(err)
	}
	nodes[2].restart(t)
	before := start
	sameStart("every replica at the same start offset after a restart")
	if start < before {
		t.Fatalf("the start went back from %d to %d over a restart", before, start)
	}
	// A new subscription from the earliest message starts at the
	// partition's start (which may have moved on since, as the last acks
	// of "work" commit, but never past a subscription).
	late, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "late", SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	m, err := late.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.DescribeStream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	now := info.Partitions[0].StartOffset
	sub, ok := subscriptionOf(ctx, t, c, stream, 0, "late")
	if m.ID.Offset != now || now < start || !ok || sub.MarkDelete != int64(now)-1 {
		t.Fatalf("a new subscription from the earliest message got offset %d first (mark-delete %d); the partition starts at %d (%d before)",
			m.ID.Offset, sub.MarkDelete, now, start)
	}
}

// A stream with a backlog quota and producer_exception: once a
// subscription's backlog is over the quota, sends are refused with
// ProducerBlockedQuotaExceededError; a larger quota set afterwards lets
// them through; once the subscription acknowledges, sends go through
// again.
func TestClusterBacklogQuotaRefusesProducers(t *testing.T) {
	nodes := startCluster(t, 3, retentionArgs...)
	ctx := testContext(t, 3*time.Minute)
	c := newClient(t, clusterURL(nodes))
	const stream = "persistent://acme/retain/quota"
	const quota = 256 << 10
	err := createStream(ctx, c, stream, 1, 3, client.WithRetention(client.RetentionPolicy{
		BacklogQuotaBytes: quota, BacklogQuotaPolicy: client.ProducerException,
	}))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "slow", SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	payload := make([]byte, 4<<10)
	sent := 0
	var refusal error
	for sent < 4000 { // 16 MiB: far past the quota
		if _, err := prod.Send(ctx, &client.ProducerMessage{Payload: payload}); err != nil {
			refusal = err
			break
		}
		sent++
	}
	if refusal == nil {
		t.Fatalf("%d sends of %d bytes accepted over a backlog quota of %d bytes", sent, len(payload), quota)
	}
	if code := transport.CodeOf(refusal); code != transport.CodeBacklogQuotaExceeded || !strings.Contains(refusal.Error(), "backlog quota exceeded") {
		t.Fatalf("refused with %v (code %v), want %v", refusal, code, transport.CodeBacklogQuotaExceeded)
	}
	if sent*len(payload) < quota {
		t.Fatalf("refused after %d bytes, below the quota of %d", sent*len(payload), quota)
	}
	t.Logf("refused after %d sends (%d bytes): %v", sent, sent*len(payload), refusal)
	info, err := c.DescribeStream(ctx, stream)
	if err != nil || len(info.Partitions) != 1 || !info.Partitions[0].BacklogQuotaExceeded || info.Retention.BacklogQuotaBytes != quota {
		t.Fatalf("describe: %+v, %v", info, err)
	}
	// Refusals keep coming while the backlog stays.
	if _, err := prod.Send(ctx, &client.ProducerMessage{Payload: payload}); transport.CodeOf(err) != transport.CodeBacklogQuotaExceeded {
		t.Fatalf("a send with the backlog still over the quota: %v", err)
	}
	// The policy can change after creation: a larger quota lets sends
	// through, the first one back refuses them again.
	send := func() error {
		_, err := prod.Send(ctx, &client.ProducerMessage{Payload: payload})
		if err == nil {
			sent++
		} else if transport.CodeOf(err) != transport.CodeBacklogQuotaExceeded {
			t.Fatalf("send: %v", err)
		}
		return err
	}
	if err := c.SetRetention(ctx, stream, client.RetentionPolicy{BacklogQuotaBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "sends accepted under a larger quota", func() bool { return send() == nil })
	if err := c.SetRetention(ctx, stream, client.RetentionPolicy{BacklogQuotaBytes: quota}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "sends refused under the first quota again", func() bool { return send() != nil })
	// The consumer catches up: sends go through again.
	for range sent {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := cons.Ack(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	eventually(ctx, t, "sends accepted again", func() bool { return send() == nil })
}

// consumer_backlog_eviction keeps producing possible past the quota by
// moving a subscription that never acknowledges past the oldest backlog;
// a message TTL acknowledges old messages on such a subscription's behalf.
func TestClusterBacklogEvictionAndTTL(t *testing.T) {
	nodes := startCluster(t, 3, retentionArgs...)
	ctx := testContext(t, 3*time.Minute)
	c := newClient(t, clusterURL(nodes))
	const evicted, expiring = "persistent://acme/retain/evicted", "persistent://acme/retain/expiring"
	const quota = 256 << 10
	if err := createStream(ctx, c, evicted, 1, 3, client.WithRetention(client.RetentionPolicy{
		BacklogQuotaBytes: quota, BacklogQuotaPolicy: client.ConsumerBacklogEviction,
	})); err != nil {
		t.Fatal(err)
	}
	if err := createStream(ctx, c, expiring, 1, 3, client.WithRetention(client.RetentionPolicy{MessageTTLMs: 1000})); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 4<<10)
	for _, stream := range []string{evicted, expiring} {
		cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "idle", SubscriptionInitialPosition: client.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		// Few messages in flight: many entries, many segments.
		prod, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, MaxPendingMessages: 20})
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Close()
		// 4 MiB, 16 times the quota.
		var mu sync.Mutex
		var failed []error
		var wg sync.WaitGroup
		for range 1000 {
			wg.Add(1)
			prod.SendAsync(ctx, &client.ProducerMessage{Payload: payload}, func(_ client.MessageID, _ *client.ProducerMessage, err error) {
				if err != nil {
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
				}
				wg.Done()
			})
		}
		wg.Wait()
		if len(failed) > 0 {
			t.Fatalf("%s: %d sends failed, first: %v", stream, len(failed), failed[0])
		}
	}
	// Evicted: the subscription was moved past the oldest segments, which
	// are gone; what is left of its backlog is within a segment of the
	// quota.
	eventually(ctx, t, "backlog evicted to the quota", func() bool {
		info, err := c.DescribeStream(ctx, evicted)
		if err != nil || len(info.Partitions) != 1 || len(info.Partitions[0].Subscriptions) != 1 {
			return false
		}
		p := info.Partitions[0]
		s := p.Subscriptions[0]
		return p.StartOffset > 0 && s.MarkDelete+1 >= int64(p.StartOffset) && s.Backlog*uint64(len(payload)) <= quota+128<<10
	})
	// Expiring: every message is past its TTL and acknowledged.
	eventually(ctx, t, "messages past their TTL acknowledged", func() bool {
		info, err := c.DescribeStream(ctx, expiring)
		if err != nil || len(info.Partitions) != 1 || len(info.Partitions[0].Subscriptions) != 1 {
			return false
		}
		p := info.Partitions[0]
		return p.Subscriptions[0].Backlog == 0 && p.Subscriptions[0].MarkDelete == int64(p.NextOffset)-1
	})
}

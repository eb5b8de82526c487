package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
)

// partitionFilesOpen counts the files a node's process holds open below
// its data directory's partitions.
func partitionFilesOpen(t testing.TB, n *node) int {
	t.Helper()
	dir := filepath.Join("/proc", strconv.Itoa(n.cmd.Process.Pid), "fd")
	fds, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(n.dataDir, "partitions") + "/"
	count := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.HasPrefix(target, root) {
			count++
		}
	}
	return count
}

// waitAsleep waits until every live node says each of its partitions
// sleeps, and holds none of their files open.
func waitAsleep(ctx context.Context, t *testing.T, nodes []*clusterNode, partitions int) {
	t.Helper()
	for _, cn := range nodes {
		for {
			_, r := readiness(ctx, t, cn.node)
			open := partitionFilesOpen(t, cn.node)
			if r.Asleep == partitions && r.Partitions == partitions && open == 0 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("node %s: %d of %d partitions asleep, %d of their files open", cn.id, r.Asleep, r.Partitions, open)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// urlOf is a client URL naming nodes.
func urlOf(nodes ...*clusterNode) string {
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr)
	}
	return "fabriq://" + strings.Join(addrs, ",")
}

// sendKeyed sends one message per key, keys prefix-0 to prefix-(n-1), and
// returns their payloads.
func sendKeyed(ctx context.Context, t *testing.T, c *client.Client, stream, prefix string, n int) []string {
	t.Helper()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var sent []string
	for i := range n {
		payload := fmt.Sprintf("%s-%d", prefix, i)
		if _, err := p.Send(ctx, &client.ProducerMessage{Key: payload, Payload: []byte(payload)}); err != nil {
			t.Fatalf("send %s: %v", payload, err)
		}
		sent = append(sent, payload)
	}
	return sent
}

// receiveAll subscribes from the earliest message and receives want,
// acknowledging each; anything else fails.
func receiveAll(ctx context.Context, t *testing.T, c *client.Client, stream, sub string, want []string) {
	t.Helper()
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: sub, Type: client.Shared, SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var got []string
	for len(got) < len(want) {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("received %d of %d: %v", len(got), len(want), err)
		}
		got = append(got, string(m.Payload))
		if err := cons.Ack(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
}

// Idle partitions go to sleep on every replica: no node holds a file of
// theirs open, and /readyz counts them asleep. A consumer wakes them and
// receives every message sent before; a producer's sends are
// acknowledged. A node restarted keeps its copies asleep, and a node
// killed while they sleep does not keep them from waking on the others.
func TestIdlePartitionsSleepAndWake(t *testing.T) {
	nodes := startCluster(t, 3, "--sleep-after", "1s")
	ctx := testContext(t, 4*time.Minute)
	c := newClient(t, urlOf(nodes...))
	const stream, parts = "persistent://acme/sleep/idle", 6
	if err := createStream(ctx, c, stream, parts, 3); err != nil {
		t.Fatal(err)
	}
	sent := sendKeyed(ctx, t, c, stream, "before", 60)
	waitAsleep(ctx, t, nodes, parts)

	receiveAll(ctx, t, c, stream, "s", sent)
	sent = append(sent, sendKeyed(ctx, t, c, stream, "woken", 12)...)
	waitAsleep(ctx, t, nodes, parts)

	// Restarted, a node opens none of its copies asleep, and wakes none
	// elsewhere: for a few seconds (a woken copy stays awake for
	// --sleep-after and more), none is awake on any node.
	if err := nodes[0].stop(); err != nil {
		t.Fatal(err)
	}
	nodes[0].restart(t)
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, cn := range nodes {
			if _, r := readiness(ctx, t, cn.node); r.Partitions != r.Asleep {
				t.Fatalf("after node %s restarted: node %s has %d of %d partitions awake", nodes[0].id, cn.id, r.Partitions-r.Asleep, r.Partitions)
			}
		}
	}
	waitAsleep(ctx, t, nodes, parts)

	// A node killed while every partition sleeps: the others wake them
	// for a client that knows only them.
	nodes[1].kill()
	survivors := newClient(t, urlOf(nodes[0], nodes[2]))
	sent = append(sent, sendKeyed(ctx, t, survivors, stream, "after-kill", 12)...)
	receiveAll(ctx, t, survivors, stream, "all", sent)
}

// A partition asleep when a node holding one of its replicas dies is
// repaired like one awake: the metadata leader wakes it, and the dead
// node's replica moves to a live one, with no client asking for it. Its
// messages are all there after.
func TestAsleepPartitionIsRepaired(t *testing.T) {
	nodes := startCluster(t, 4, "--sleep-after", "1s", "--replace-dead-after", "3s")
	ctx := testContext(t, 4*time.Minute)
	c := newClient(t, urlOf(nodes...))
	const stream, parts = "persistent://acme/sleep/repair", 2
	if err := createStream(ctx, c, stream, parts, 3); err != nil {
		t.Fatal(err)
	}
	sent := sendKeyed(ctx, t, c, stream, "before", 20)
	placement := map[string][]string{}
	eventually(ctx, t, "every copy asleep", func() bool {
		asleep := 0
		for _, cn := range nodes {
			_, r := readiness(ctx, t, cn.node)
			if r.Partitions != r.Asleep || partitionFilesOpen(t, cn.node) > 0 {
				return false
			}
			asleep += r.Asleep
		}
		return asleep == 3*parts
	})
	st, err := c.ClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Partitions {
		for _, r := range p.Replicas {
			placement[p.Partition] = append(placement[p.Partition], r.Node)
		}
	}
	victim := byID(nodes, placement[stream+"-partition-0"][0])
	victim.kill()
	var live []*clusterNode
	for _, cn := range nodes {
		if cn != victim {
			live = append(live, cn)
		}
	}
	lc := newClient(t, urlOf(live...))
	eventually(ctx, t, "every replica of "+victim.id+" moved to a live node", func() bool {
		st, err := lc.ClusterStatus(ctx)
		if err != nil {
			return false
		}
		for _, p := range st.Partitions {
			for _, r := range p.Replicas {
				if r.Node == victim.id {
					return false
				}
			}
		}
		return true
	})
	receiveAll(ctx, t, lc, stream, "after-repair", sent)
}

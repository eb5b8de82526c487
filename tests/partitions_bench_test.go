//go:build partitions

package tests

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
)

// The many-partitions benchmark's settings (make bench-partitions).
var (
	partitionsTotal = flag.Int("partitions.total", 1000, "partitions of the cluster, busy ones included (each on 3 replicas of 3 nodes)")
	partitionsIdle  = flag.Duration("partitions.idle", 2*time.Minute, "how long the cluster stands idle while CPU, elections and memory are measured")
	partitionsSends = flag.Int("partitions.messages", 300000, "messages of 1 KiB each throughput run sends to the busy stream")
	partitionsKills = flag.Int("partitions.kills", 9, "leader kills in each failover run, of which the median is reported")
	partitionsSleep = flag.Duration("partitions.sleep-after", 20*time.Second, "the nodes' --sleep-after: how long an idle partition waits before it sleeps (fabriqd's default is 5m; the benchmark waits for the idle partitions to sleep before it measures, and before each kill among them)")
)

const (
	busyPartitions = 10
	// awakePartitions are the idle partitions of the stream woken before
	// each kill of the idle partitions' failovers, so that the victim
	// leads one of them awake: a producer attaches to every partition of
	// its stream.
	awakePartitions = 3
	// idleBeforeKill is how long the partitions killed stand idle before
	// each kill, their producers made: longer than a group takes to go
	// quiet (cluster's quietAfter, 2 s).
	idleBeforeKill = 10 * time.Second
)

// BenchmarkManyPartitions builds a 3-node cluster of -partitions.total
// partitions on 3 replicas (every node holds a replica of each) and reports
// the figures of BENCHMARKS.md, "Many idle partitions": stream create
// time, idle CPU, elections and memory, 10 busy partitions' throughput and
// failover alone and among the idle ones (asleep), the first send to an
// idle partition whose leader's node was killed (through a producer made
// before the kill, and through one made after it), SIGTERM to exit with the
// leaderships handed over, and a restart of every node until every
// partition is led again. It runs once, whatever b.N: run it with
// -benchtime 1x.
func BenchmarkManyPartitions(b *testing.B) {
	if *partitionsTotal < 2*busyPartitions {
		b.Fatalf("-partitions.total %d: want at least %d", *partitionsTotal, 2*busyPartitions)
	}
	nodes := startCluster(b, 3, "--sleep-after", partitionsSleep.String())
	ctx := b.Context()
	url := "fabriq://" + nodes[0].addr + "," + nodes[1].addr + "," + nodes[2].addr
	// The client's retries are logged: a create that took one is slow.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := client.New(client.Options{URL: url, OperationTimeout: time.Minute, Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	report := func(name string, v float64, unit string) {
		b.ReportMetric(v, unit)
		b.Logf("%-48s %10.2f %s", name, v, unit)
	}

	// The metadata only: what a replica adds is measured against it.
	emptyRSS, emptyAnon := make([]int64, len(nodes)), make([]int64, len(nodes))
	for i, n := range nodes {
		emptyRSS[i] = rssOf(b, n.cmd.Process.Pid, "VmRSS")
		emptyAnon[i] = rssOf(b, n.cmd.Process.Pid, "RssAnon")
	}

	// Ten busy partitions alone. Each series has a stream of its own,
	// created empty: what a busy partition's log holds after its last
	// snapshot is what a restarted node reads again (and holds in memory
	// for a while) before its next kill, and the runs of the series alone
	// would leave the stream of the series among the idle a different
	// remainder.
	const busyAlone, busy = "persistent://bench/many/busy-alone", "persistent://bench/many/busy"
	if err := createStream(ctx, c, busyAlone, busyPartitions, 3); err != nil {
		b.Fatal(err)
	}
	want := busyPartitions
	waitAllLed(ctx, b, c, want)
	aloneRate := busyThroughput(ctx, b, c, busyAlone)
	restartEach(ctx, b, c, nodes, want)
	alone := failovers(ctx, b, c, nodes, busyAlone, busyPartitions, true, 0, want)
	if err := c.DeleteStream(ctx, busyAlone, true); err != nil {
		b.Fatal(err)
	}
	if err := createStream(ctx, c, busy, busyPartitions, 3); err != nil {
		b.Fatal(err)
	}
	waitAllLed(ctx, b, c, want)

	// The idle partitions: a stream of awakePartitions, then streams of
	// 100 (the last one smaller).
	var creates []time.Duration
	idle := &idleSet{awake: "persistent://bench/many/idle-awake"}
	for left, i := *partitionsTotal-busyPartitions, -1; left > 0; i++ {
		n := min(100, left)
		s := fmt.Sprintf("persistent://bench/many/idle-%03d", i)
		if i < 0 {
			n, s = awakePartitions, idle.awake
		}
		left -= n
		start := time.Now()
		if err := createStream(ctx, c, s, n, 3); err != nil {
			b.Fatalf("create %s (%d partitions): %v", s, n, err)
		}
		if n == 100 {
			creates = append(creates, time.Since(start))
		}
		if i >= 0 {
			idle.asleep = append(idle.asleep, s)
			idle.asleepCopies += n
		}
		want += n
		b.Logf("created %s: %d partitions in %v", s, n, time.Since(start).Round(time.Millisecond))
	}
	waitAllLed(ctx, b, c, want)
	// The idle partitions go to sleep once idle for -partitions.sleep-after
	// (cluster/DESIGN.md, "Sleeping groups"): what follows measures them
	// asleep.
	sleepStart := time.Now()
	waitAsleepCopies(ctx, b, nodes, want-busyPartitions)
	report("every idle partition asleep after its create", ms(time.Since(sleepStart)), "asleep-after-ms")

	// Idle: CPU, elections, memory. An election is a follower's heartbeat
	// timeout, as its node logs it; the terms that moved count the
	// leadership hand-overs too (the metadata leader balances leaders).
	terms := termsOf(ctx, b, c)
	timeouts := make([]int, len(nodes))
	for i, n := range nodes {
		timeouts[i] = heartbeatTimeouts(n.node)
	}
	cpu := make([]time.Duration, len(nodes))
	for i, n := range nodes {
		cpu[i] = cpuOf(b, n.cmd.Process.Pid)
	}
	start := time.Now()
	select {
	case <-time.After(*partitionsIdle):
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	}
	window := time.Since(start)
	moved := uint64(0)
	for p, t := range termsOf(ctx, b, c) {
		if t > terms[p] {
			moved += t - terms[p]
		}
	}
	elections := 0
	for i, n := range nodes {
		elections += heartbeatTimeouts(n.node) - timeouts[i]
	}
	var maxCPU, maxRSS, maxAnon float64
	for i, n := range nodes {
		share := float64(cpuOf(b, n.cmd.Process.Pid)-cpu[i]) / float64(window) * 100
		perReplica := float64(rssOf(b, n.cmd.Process.Pid, "VmRSS")-emptyRSS[i]) / float64(want) / (1 << 20)
		anon := float64(rssOf(b, n.cmd.Process.Pid, "RssAnon")-emptyAnon[i]) / float64(want) / (1 << 20)
		b.Logf("node %s idle: %.1f %% of a core, %.2f MiB per replica (%.2f MiB anonymous)", n.id, share, perReplica, anon)
		maxCPU, maxRSS, maxAnon = max(maxCPU, share), max(maxRSS, perReplica), max(maxAnon, anon)
	}
	report("idle CPU per node, the busiest", maxCPU, "%core")
	report(fmt.Sprintf("elections while idle for %v", window.Round(time.Second)), float64(elections), "elections")
	report("terms moved meanwhile (hand-overs included)", float64(moved), "terms")
	report("RSS per idle replica, the largest", maxRSS, "MiB/replica")
	report("anonymous RSS per idle replica, the largest", maxAnon, "anon-MiB/replica")
	slices.Sort(creates)
	if len(creates) > 0 {
		report("stream create of 100 partitions, median", ms(creates[len(creates)/2]), "create-ms")
		report("stream create of 100 partitions, max", ms(creates[len(creates)-1]), "create-max-ms")
	}

	// Ten busy partitions among the idle ones.
	amongRate := busyThroughput(ctx, b, c, busy)
	restartEach(ctx, b, c, nodes, want)
	among := failovers(ctx, b, c, nodes, busy, busyPartitions, true, idle.asleepCopies, want)
	// An idle partition, awake, whose leader's node was killed: kills of
	// their own.
	idleFirst := failovers(ctx, b, c, nodes, idle.awake, awakePartitions, false, idle.asleepCopies, want).acked
	report("busy throughput alone", aloneRate, "alone-msgs/s")
	report("busy throughput among the idle", amongRate, "among-msgs/s")
	report("busy failover alone, median kill to ack", ms(median(alone.acked)), "alone-failover-ms")
	report("busy failover among the idle, median", ms(median(among.acked)), "among-failover-ms")
	report("killed process's end, alone, median kill to exit", ms(median(alone.ended)), "alone-exit-ms")
	report("killed process's end, among the idle, median", ms(median(among.ended)), "among-exit-ms")
	report("idle partition's first send, median kill to ack", ms(median(idleFirst)), "idle-first-send-ms")
	report("idle partition's first send, max", ms(slices.Max(idleFirst)), "idle-first-send-max-ms")
	asleepFirst := asleepFirstSends(ctx, b, c, nodes, idle, want)
	report("asleep partition's first send, producer made after a kill, median", ms(median(asleepFirst)), "asleep-first-send-ms")
	report("asleep partition's first send, producer made after a kill, max", ms(slices.Max(asleepFirst)), "asleep-first-send-max-ms")

	// SIGTERM: the node that leads the most partitions goes, its
	// leaderships handed over.
	st, err := c.ClusterStatus(ctx)
	if err != nil {
		b.Fatal(err)
	}
	led := map[string]int{}
	for _, p := range st.Partitions {
		led[p.Leader]++
	}
	victim := nodes[0]
	for _, n := range nodes {
		if led[n.id] > led[victim.id] {
			victim = n
		}
	}
	b.Logf("SIGTERM to %s, which leads %d partitions", victim.id, led[victim.id])
	start = time.Now()
	if err := victim.stop(); err != nil {
		b.Fatal(err)
	}
	exited := time.Since(start)
	var others []string
	for _, n := range nodes {
		if n != victim {
			others = append(others, n.addr)
		}
	}
	rest := client.Options{URL: "fabriq://" + strings.Join(others, ","), OperationTimeout: time.Minute}
	rc, err := client.New(rest)
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	waitLedWithout(ctx, b, rc, want, victim.id)
	report("SIGTERM to exit", ms(exited), "sigterm-exit-ms")
	report("SIGTERM to every partition led by the others", ms(time.Since(start)), "sigterm-led-ms")
	victim.restart(b)
	waitAllLed(ctx, b, c, want)

	// Every node restarted on its data.
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		wg.Go(func() { errs[i] = n.stop() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	for _, n := range nodes {
		n.node = launch(b, n.id, n.dir, n.args...)
	}
	for _, n := range nodes {
		n.waitReady()
	}
	ready := time.Since(start)
	waitAllLed(ctx, b, c, want)
	report("restart of every node to every node ready", ms(ready), "restart-ready-ms")
	report("restart of every node to every partition led", ms(time.Since(start)), "restart-led-ms")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// busyThroughput returns the median of throughputRuns busyThroughputOnce
// runs.
func busyThroughput(ctx context.Context, b *testing.B, c *client.Client, stream string) float64 {
	b.Helper()
	// Runs of 100,000 messages, about a second each, moved by a half from
	// one to the next on these two shared cores, and each was mostly the
	// start of a burst (connections dialled again, the collector's pacing
	// catching up): the median of five runs of three seconds or so.
	var rates []float64
	for range throughputRuns {
		rates = append(rates, busyThroughputOnce(ctx, b, c, stream))
	}
	b.Logf("busy throughput runs: %.0f messages/s", rates)
	slices.Sort(rates)
	return rates[len(rates)/2]
}

// throughputRuns is how many throughput runs busyThroughput takes the
// median of.
const throughputRuns = 5

// busyThroughputOnce sends -partitions.messages messages of 1 KiB to
// stream, at most 1,000 in flight per partition, and returns the
// acknowledged messages a second.
func busyThroughputOnce(ctx context.Context, b *testing.B, c *client.Client, stream string) float64 {
	b.Helper()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, MaxPendingMessages: 1000, SendTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	payload := make([]byte, 1024)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	start := time.Now()
	wg.Add(*partitionsSends)
	for i := range *partitionsSends {
		msg := &client.ProducerMessage{Key: strconv.Itoa(i), Payload: payload}
		p.SendAsync(ctx, msg, func(_ client.MessageID, _ *client.ProducerMessage, err error) {
			if err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if failed != nil {
		b.Fatal(failed)
	}
	return float64(*partitionsSends) / time.Since(start).Seconds()
}

// failover is what failovers measured.
type failover struct {
	// acked is, for each kill, from the signal to the first acknowledged
	// send through a producer made before the kill (an application's).
	acked []time.Duration
	// ended is, for each kill, from the signal to the process's end: the
	// kernel unmapping its memory before it closes its sockets, which
	// nothing can notice sooner. The figures above count from the signal.
	ended []time.Duration
}

// restartEach restarts every node, one at a time, each once every
// partition is led (or asleep) again. The busy failover series start with
// it. The throughput runs before leave each node holding the pages of its
// busy partitions' logs mapped, 60-75 MiB a partition, which the kernel
// unmaps before a killed process's sockets close: a node killed before
// its first restart since ended after 10 ms, one restarted since after 5.
// Which victims still held them came from the victims chosen, not from
// the idle partitions; restarted, every victim of both series has run the
// same since its start.
func restartEach(ctx context.Context, b *testing.B, c *client.Client, nodes []*clusterNode, want int) {
	b.Helper()
	for _, n := range nodes {
		if err := n.stop(); err != nil {
			b.Fatal(err)
		}
		n.restart(b)
		waitAllLed(ctx, b, c, want)
	}
}

// failovers kills, -partitions.kills times, a node that leads a partition
// of stream (of partitions) once it stood idle for idleBeforeKill with a
// producer attached, and measures from the kill to that producer's first
// acknowledged send. A busy stream's partition is awake when its leader
// goes, as a busy partition is: a second of sends right before the kill.
// An idle stream is woken first (a producer attaches to each of its
// partitions, then leaves): the partition killed is awake and quiet. With
// asleepCopies, every node has that many copies asleep before each kill,
// as before the first. Each victim is restarted and every partition led
// (or asleep) again before the next kill.
//
// A kill costs the other nodes an election for each group the victim led
// awake: the busy partitions' series leave the idle ones asleep, so that
// alone and among the idle a victim leads the same awake groups.
func failovers(ctx context.Context, b *testing.B, c *client.Client, nodes []*clusterNode, stream string, partitions int, busy bool, asleepCopies, want int) failover {
	b.Helper()
	var out failover
	leadersNow := func() map[string]string {
		st, err := c.ClusterStatus(ctx)
		if err != nil {
			b.Fatal(err)
		}
		leaders := map[string]string{}
		for _, p := range st.Partitions {
			leaders[p.Partition] = p.Leader
		}
		return leaders
	}
	for kills, tries := 0, 0; kills < *partitionsKills; tries++ {
		if tries == 5**partitionsKills {
			b.Fatalf("%d kills of %d: the victims kept losing their leaderships of %s while idle", kills, *partitionsKills, stream)
		}
		if !busy {
			waker, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, SendTimeout: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			waitStreamLed(ctx, b, c, stream)
			waker.Close()
		}
		if asleepCopies > 0 {
			waitAsleepCopies(ctx, b, nodes, asleepCopies)
		}
		leaders := leadersNow()
		var victim *clusterNode
		index := -1
		for i := 0; i < partitions && victim == nil; i++ {
			if v := byID(nodes, leaders[fmt.Sprintf("%s-partition-%d", stream, i)]); v != nil {
				victim, index = v, i
			}
		}
		if victim == nil {
			b.Logf("no partition of %s led; another try", stream)
			continue
		}
		name := fmt.Sprintf("%s-partition-%d", stream, index)
		p, err := c.CreateProducer(ctx, client.ProducerOptions{
			Stream: stream, SendTimeout: time.Minute,
			MessageRouter: func(*client.ProducerMessage, int) int { return index },
		})
		if err != nil {
			b.Fatal(err)
		}
		// Attaching a producer wakes its partition's group: the kill
		// comes once the group is idle again, as an application's
		// producers are between sends. A leadership that moved meanwhile
		// (the leader balancing) makes this try start over.
		select {
		case <-time.After(idleBeforeKill):
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		}
		if leadersNow()[name] != victim.id {
			p.Close()
			continue
		}
		// Long enough for the followers to have taken their leader's
		// first heartbeats since it woke (cluster/DESIGN.md, "Quiet
		// groups").
		for start := time.Now(); busy && time.Since(start) < time.Second; {
			if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("before the kill")}); err != nil {
				b.Fatalf("a send to %s before the kill: %v", name, err)
			}
		}
		kills++
		// What the kernel releases before the victim's sockets close: its
		// memory, then its files (cluster/DESIGN.md).
		pid := victim.cmd.Process.Pid
		rss, anon := rssOf(b, pid, "VmRSS")>>20, rssOf(b, pid, "RssAnon")>>20
		files := openFiles(b, pid)
		killed, ended := victim.killTimed()
		out.ended = append(out.ended, ended.Sub(killed))
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		_, err = p.Send(sctx, &client.ProducerMessage{Payload: []byte("after the kill")})
		cancel()
		if err != nil {
			b.Fatalf("first send to %s after its leader's node was killed: %v", name, err)
		}
		out.acked = append(out.acked, time.Since(killed))
		b.Logf("kill %d: %s, leader of %s, RSS %d MiB (%d anonymous), %d open files: ended after %v, acked after %v",
			kills, victim.id, name, rss, anon, files, ended.Sub(killed), out.acked[len(out.acked)-1].Round(time.Millisecond))
		p.Close()
		victim.restart(b)
		waitAllLed(ctx, b, c, want)
	}
	return out
}

// heartbeatTimeouts counts the elections a node's Raft groups started on a
// heartbeat timeout, from its log.
func heartbeatTimeouts(n *node) int {
	return strings.Count(n.logs.String(), `"msg":"heartbeat timeout reached, starting election"`)
}

// asleepFirstSends kills a node -partitions.kills times, each time once
// every idle partition but the small stream's sleeps, makes a producer on
// a stream asleep (it attaches to, and wakes, each of the stream's
// partitions, with the node gone) and measures from the kill to its
// first acknowledged send. A pass of its own: a stream of 100 woken, and
// woken again on the victim once it restarts, is a node's memory for a
// while after, which a failover of the busy partitions would measure.
func asleepFirstSends(ctx context.Context, b *testing.B, c *client.Client, nodes []*clusterNode, idle *idleSet, want int) []time.Duration {
	b.Helper()
	var out []time.Duration
	for k := range *partitionsKills {
		waitAsleepCopies(ctx, b, nodes, idle.asleepCopies)
		victim := nodes[k%len(nodes)]
		stream := idle.asleep[k%len(idle.asleep)]
		killed, _ := victim.killTimed()
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		p, err := c.CreateProducer(sctx, client.ProducerOptions{Stream: stream, SendTimeout: time.Minute})
		if err == nil {
			_, err = p.Send(sctx, &client.ProducerMessage{Payload: []byte("after the kill")})
			p.Close()
		}
		cancel()
		if err != nil {
			b.Fatalf("first send to %s, asleep, after %s was killed: %v", stream, victim.id, err)
		}
		out = append(out, time.Since(killed))
		b.Logf("asleep %d: %s killed, %s woken, first send acked after %v", k+1, victim.id, stream, out[len(out)-1].Round(time.Millisecond))
		victim.restart(b)
		waitAllLed(ctx, b, c, want)
	}
	return out
}

// idleSet are the idle streams: awake, the small stream woken before each
// kill of the idle partitions' failovers; asleep, the others, with
// asleepCopies partitions.
type idleSet struct {
	awake        string
	asleep       []string
	asleepCopies int
}

// waitAsleepCopies waits until every node reports at least want copies
// asleep.
func waitAsleepCopies(ctx context.Context, b *testing.B, nodes []*clusterNode, want int) {
	b.Helper()
	eventually(ctx, b, fmt.Sprintf("%d copies asleep on every node", want), func() bool {
		for _, n := range nodes {
			if _, r := readiness(ctx, b, n.node); r.Asleep < want {
				return false
			}
		}
		return true
	})
}

// waitStreamLed waits until every partition of stream has a leader.
func waitStreamLed(ctx context.Context, b *testing.B, c *client.Client, stream string) {
	b.Helper()
	eventually(ctx, b, stream+" led", func() bool {
		st, err := c.ClusterStatus(ctx)
		if err != nil {
			return false
		}
		for _, p := range st.Partitions {
			if strings.HasPrefix(p.Partition, stream+"-partition-") && p.Leader == "" {
				return false
			}
		}
		return true
	})
}

// waitAllLed waits until the cluster reports want partitions, each with a
// leader or asleep.
func waitAllLed(ctx context.Context, b *testing.B, c *client.Client, want int) {
	b.Helper()
	waitLedWithout(ctx, b, c, want, "")
}

// waitLedWithout waits until the cluster reports want partitions, each
// with a leader other than node gone, or asleep.
func waitLedWithout(ctx context.Context, b *testing.B, c *client.Client, want int, gone string) {
	b.Helper()
	eventually(ctx, b, fmt.Sprintf("%d partitions led", want), func() bool {
		st, err := c.ClusterStatus(ctx)
		if err != nil {
			return false
		}
		led := 0
		for _, p := range st.Partitions {
			if p.Asleep || p.Leader != "" && p.Leader != gone {
				led++
			}
		}
		return led == want
	})
}

// termsOf returns each partition's Raft term as the cluster reports it.
func termsOf(ctx context.Context, b *testing.B, c *client.Client) map[string]uint64 {
	b.Helper()
	st, err := c.ClusterStatus(ctx)
	if err != nil {
		b.Fatal(err)
	}
	out := make(map[string]uint64, len(st.Partitions))
	for _, p := range st.Partitions {
		out[p.Partition] = p.Term
	}
	return out
}

// cpuOf returns the CPU time process pid has used (user and system).
func cpuOf(b *testing.B, pid int) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which ends with the last ')':
	// utime and stime are the 14th and 15th of the line, in clock ticks
	// (USER_HZ, 100 a second on Linux).
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		b.Fatal(err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// rssOf returns process pid's resident set size in bytes: field is
// "VmRSS" for all of it, "RssAnon" for its anonymous memory (heap, stacks),
// without the pages of files it maps (Raft logs a restart read back, which
// the kernel takes back when it needs them).
func rssOf(b *testing.B, pid int, field string) int64 {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no %s for process %d", field, pid)
	return 0
}

//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
)

var (
	runTime  = flag.Duration("chaos.time", 2*time.Minute, "how long faults are injected")
	runSeed  = flag.Uint64("chaos.seed", 0, "seed of the fault plan (0: random, printed)")
	runNodes = flag.Int("chaos.nodes", 5, "fabriqd processes")
	runOut   = flag.String("chaos.out", "", "directory for run directories (default: the system's temporary directory)")
	runNetns = flag.Bool("chaos.netns", true, "run nodes in network namespaces (root, iproute2) to inject partitions and netem; loopback otherwise")
	runDisks = flag.Bool("chaos.lazyfs", true, "put the nodes' data on lazyfs mounts (root, /dev/fuse) to inject power loss")
	runFull  = flag.Bool("chaos.diskfull", true, "with lazyfs, inject disk-full faults (one node, a majority)")
	runIdle  = flag.Int("chaos.idle", 300, "partitions of a mostly idle stream beside the busy ones (0: none)")
	runSleep = flag.Int("chaos.sleepy", 4, "partitions of a stream whose clients come and go, so that it sleeps and wakes all along (0: none)")
)

var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "fabriq-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/fabriq-io/fabriq/cmd/fabriqd")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building fabriqd:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "fabriqd")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// summary is what a run reports.
type summary struct {
	Valid    bool   `json:"valid"`
	Seed     uint64 `json:"seed"`
	Nodes    int    `json:"nodes"`
	Duration string `json:"duration"`
	Faults   int    `json:"faults_injected"`
	Network  string `json:"network"`
	Disks    string `json:"disks"`
	// Per workload: the queue check, the append checks (linearizable
	// offsets, no duplicate from producer retries), and for key_shared,
	// failover and exclusive the order check (per key; per partition, with
	// one consumer holding it at a time).
	Queue   map[string]QueueResult    `json:"queue"`
	Appends map[string]AppendsResult  `json:"appends"`
	Order   map[string]KeyOrderResult `json:"order"`
	// Cursors: per workload, no ack that returned ok is undone.
	Cursors  map[string]CursorResult `json:"cursors"`
	Replicas ReplicasResult          `json:"replicas"`
	// OnNodes: every acknowledged message on every current replica, at
	// the offset its receipt gave.
	OnNodes OnNodesResult `json:"on_nodes"`
}

// TestChaos runs five workloads — a shared queue, a key_shared keyed
// stream and a failover ordered log, each over 2 partitions, an exclusive
// log over one, and a shared stream of asynchronous batched producers,
// all with 3 replicas — a sixth over hundreds of mostly idle partitions
// (-chaos.idle), and a seventh whose clients come and go, so that its
// partitions sleep and wake all along (-chaos.sleepy), on a 5-node
// cluster while
// a seeded plan kills, pauses, partitions and restarts nodes, cuts one off
// from the clients, damages a stopped node's log segments, Raft log store
// or Raft snapshots, and moves replicas; then heals, drains, checks the
// history, compares the replicas' logs byte for byte and looks up every
// acknowledged message on every replica.
func TestChaos(t *testing.T) {
	seed := *runSeed
	if seed == 0 {
		seed = rand.Uint64() % 1_000_000
	}
	out := *runOut
	if out == "" {
		out = os.TempDir()
	}
	runDir := filepath.Join(out, fmt.Sprintf("fabriq-chaos-%s-seed-%d", time.Now().Format("20060102-150405"), seed))
	if err := os.MkdirAll(filepath.Join(runDir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d (replay: -chaos.seed %d); run directory %s", seed, seed, runDir)
	network := "network namespaces on a bridge: partitions, one-way cuts, client cuts and netem latency/loss"
	var nt *Net
	if *runNetns {
		var err error
		if nt, err = NewNet(*runNodes); err != nil {
			network = "loopback, no network faults: " + err.Error()
			t.Logf("network namespaces unavailable (%v): nodes run on loopback, without network faults", err)
		} else {
			defer nt.Close()
		}
	} else {
		network = "loopback, no network faults (-chaos.netns=false)"
	}
	if nt != nil && !nt.HasNetem {
		network = "network namespaces on a bridge: partitions, one-way cuts, client cuts; no netem (the kernel has no sch_netem): latency and loss from a token-bucket slow link"
		if !nt.HasTBF {
			network = "network namespaces on a bridge: partitions, one-way cuts, client cuts; no latency/loss (the kernel has neither sch_netem nor sch_tbf)"
		}
	}
	cl, err := NewCluster(bin, filepath.Join(runDir, "data"), filepath.Join(runDir, "logs"), *runNodes, nt,
		"--replace-dead-after", ReplaceDeadAfter.String(),
		// Segments roll many times a run, and retention deletes the
		// acknowledged ones under faults.
		"--segment-bytes", "256KiB", "--retention-interval", "1s",
		// Raft snapshots are taken and compacted every few seconds, so
		// a node back from a fault is often caught up by a snapshot, and
		// there are snapshots to damage.
		"--raft-snapshot-interval", "5s", "--raft-snapshot-threshold", "512", "--raft-trailing-logs", "1024",
		// Partitions with no client attached sleep after a moment idle:
		// the sleepy workload's, between its clients, and any other
		// whose clients a fault took away.
		"--sleep-after", SleepAfter.String())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Shutdown()
	disksNote := "plain directories, no power loss (-chaos.lazyfs=false)"
	var disks *Disks
	_, nsenterErr := exec.LookPath("nsenter")
	if *runDisks && nt != nil && nsenterErr != nil {
		disksNote = "plain directories, no power loss: nodes enter their namespaces with `ip netns exec`, which copies the mounts (no nsenter)"
	} else if *runDisks {
		if disks, err = MountDisks(cl); err != nil {
			disksNote = "plain directories, no power loss: " + err.Error()
			t.Logf("lazyfs unavailable (%v): no power-loss faults", err)
		} else {
			disksNote = "lazyfs mounts: power loss drops what was not fsynced"
			defer func() {
				cl.Shutdown()
				if err := disks.Unmount(); err != nil {
					t.Errorf("unmount the disks: %v", err)
				}
			}()
		}
	}
	kinds := Kinds(nt, disks != nil)
	if !*runFull {
		kinds = slices.DeleteFunc(kinds, func(k FaultKind) bool { return k == DiskFullOne || k == DiskFullMajority })
	}
	plan := Plan(seed, *runTime, *runNodes, kinds)
	if err := os.WriteFile(filepath.Join(runDir, "plan.txt"), []byte(FormatPlan(seed, plan)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *runTime+10*time.Minute)
	defer cancel()
	for _, n := range cl.Nodes {
		if err := cl.Start(n); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range cl.Nodes {
		if err := cl.WaitReady(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	url := cl.URL()
	queue := Workload{Name: "q", Stream: "persistent://chaos/jepsen/queue", Partitions: 2, Mode: client.Shared,
		Producers: 2, Consumers: 3, Interval: 2 * time.Millisecond, FirstProcess: 0}
	keys := Workload{Name: "k", Stream: "persistent://chaos/jepsen/keys", Partitions: 2, Mode: client.KeyShared, Keys: 40,
		Producers: 2, Consumers: 3, Interval: 2 * time.Millisecond, FirstProcess: 100}
	ordered := Workload{Name: "f", Stream: "persistent://chaos/jepsen/ordered", Partitions: 2, Mode: client.Failover,
		Producers: 1, Consumers: 2, Interval: 2 * time.Millisecond, FirstProcess: 200}
	// Two consumers on one exclusive subscription: one holds it, the
	// other is refused and keeps trying (it takes over once the holder
	// is gone past the reconnect grace).
	exclusive := Workload{Name: "x", Stream: "persistent://chaos/jepsen/exclusive", Partitions: 1, Mode: client.Exclusive,
		Producers: 1, Consumers: 2, Interval: 5 * time.Millisecond, FirstProcess: 300}
	// Asynchronous, batched producers: most of a run's acknowledged
	// messages, many sends in flight at once.
	bulk := Workload{Name: "b", Stream: "persistent://chaos/jepsen/bulk", Partitions: 2, Mode: client.Shared,
		Producers: 2, Consumers: 4, Interval: 10 * time.Millisecond, Burst: 8, FirstProcess: 400}
	workloads := []Workload{queue, keys, ordered, exclusive, bulk}
	// Hundreds of mostly idle partitions beside the busy ones: one send a
	// second over all of them (keys spread them), so that each partition gets
	// a message every few minutes, after its group has gone quiet, often
	// one whose leader's node a fault took away meanwhile.
	if *runIdle > 0 {
		workloads = append(workloads, Workload{Name: "i", Stream: "persistent://chaos/jepsen/idle", Partitions: *runIdle, Mode: client.Shared,
			Keys: 10 * *runIdle, Producers: 1, Consumers: 1, Interval: time.Second, FirstProcess: 500})
	}
	// A stream whose clients come and go: a producer opened for each
	// send, every few seconds, and consumers that drain and leave, so
	// that its partitions sleep between them and are woken, under the
	// faults, by a client or by a repair.
	if *runSleep > 0 {
		workloads = append(workloads, Workload{Name: "z", Stream: "persistent://chaos/jepsen/sleepy", Partitions: *runSleep, Mode: client.Shared,
			Keys: 4 * *runSleep, Producers: 1, Consumers: 1, Interval: 3 * SleepAfter, FirstProcess: 600, Transient: true})
	}
	for _, w := range workloads {
		if err := w.Create(ctx, url); err != nil {
			t.Fatal(err)
		}
	}
	h := NewHistory()
	admin, err := client.New(client.Options{URL: url, OperationTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	// status asks twice at most: each call starts at another node, so a
	// node the clients cannot reach (cut-client), or a connection to it
	// still recovering after the fault, costs one attempt, not the fault.
	status := func(ctx context.Context) (client.ClusterInfo, error) {
		st, err := admin.ClusterStatus(ctx)
		if err != nil && ctx.Err() == nil {
			st, err = admin.ClusterStatus(ctx)
		}
		return st, err
	}
	var logMu sync.Mutex
	var nemesisLog strings.Builder
	nm := &Nemesis{C: cl, Disks: disks,
		Leader: func(ctx context.Context) int {
			st, err := status(ctx)
			if err != nil {
				return -1
			}
			for _, p := range st.Partitions {
				if p.Partition == keys.Stream+"-partition-0" {
					for i, n := range cl.Nodes {
						if n.ID == p.Leader {
							return i
						}
					}
				}
			}
			return -1
		},
		MetaLeader: func(ctx context.Context) int {
			st, err := status(ctx)
			if err != nil {
				return -1
			}
			for i, n := range cl.Nodes {
				if n.ID == st.MetaLeader {
					return i
				}
			}
			return -1
		},
		Log: func(format string, args ...any) {
			logMu.Lock()
			defer logMu.Unlock()
			fmt.Fprintf(&nemesisLog, "%10s  %s\n", h.Since().Round(time.Millisecond), fmt.Sprintf(format, args...))
		},
	}

	produceCtx, stopProducing := context.WithCancel(ctx)
	consumeCtx, stopConsuming := context.WithCancel(ctx)
	var wg, producing sync.WaitGroup
	errs := make(chan error, 2*len(workloads))
	for _, w := range workloads {
		wg.Add(1)
		producing.Add(1)
		go func() { defer producing.Done(); errs <- w.Produce(produceCtx, url, h) }()
		go func() { defer wg.Done(); errs <- w.Consume(consumeCtx, url, h) }()
	}
	faults, nerr := nm.Run(ctx, time.Now(), plan)
	stopProducing()
	hctx, hcancel := context.WithTimeout(ctx, 2*time.Minute)
	herr := cl.Heal(hctx)
	hcancel()
	// Every send has its outcome before the drain counts what is missing:
	// a send still running (up to its timeout) may yet be acknowledged.
	producing.Wait()
	// Drain: consumers go on until every acknowledged send arrived, or
	// no missing one arrived for a minute (other records, such as a
	// refused consumer's attempts, do not count as progress).
	var undelivered Undelivered
	drainStart := time.Now()
	last, lastMissing, missing := time.Now(), -1, -1
	tick := time.NewTicker(200 * time.Millisecond)
	for range tick.C {
		missing, _ = undelivered.Update(h)
		if missing == 0 || time.Since(last) > time.Minute || ctx.Err() != nil {
			break
		}
		if missing != lastMissing {
			last, lastMissing = time.Now(), missing
		}
	}
	tick.Stop()
	t.Logf("drain: %d acknowledged sends undelivered after %s", missing, time.Since(drainStart).Round(time.Millisecond))
	stopConsuming()
	wg.Wait()
	close(errs)
	var failures []string
	for err := range errs {
		if err != nil {
			failures = append(failures, fmt.Sprintf("workload: %v", err))
		}
	}
	ops := h.Ops()
	s := summary{Seed: seed, Nodes: *runNodes, Duration: runTime.String(), Faults: faults,
		Network: network, Disks: disksNote,
		Queue: map[string]QueueResult{}, Appends: map[string]AppendsResult{}, Order: map[string]KeyOrderResult{},
		Cursors: map[string]CursorResult{}}
	s.Valid = nerr == nil && herr == nil
	for _, w := range workloads {
		own := w.own(ops)
		// Porcupine cannot decide windows of heavily pipelined sends in
		// time (every window of the bulk workload came back Unknown after
		// 10 s): for them the exact sweep alone checks the property.
		perWindow := time.Minute
		if w.Burst > 0 {
			perWindow = 0
		}
		q, a := CheckQueue(own), CheckAppends(own, perWindow)
		s.Queue[w.Stream], s.Appends[w.Stream] = q, a
		cur := CheckCursors(own, receiverQueue)
		s.Cursors[w.Stream] = cur
		s.Valid = s.Valid && q.Valid && a.Valid && cur.Valid
		if w.Mode != client.Shared {
			o := CheckKeyOrder(own)
			s.Order[w.Stream] = o
			s.Valid = s.Valid && o.Valid
		}
	}
	// Every replica holds the same log: wait for them to catch up, stop
	// the nodes cleanly, compare the segment files.
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	var streams []string
	for _, w := range workloads {
		streams = append(streams, w.Stream)
	}
	placement, err := Placement(wctx, url, streams)
	if err != nil {
		failures = append(failures, fmt.Sprintf("placement: %v", err))
		s.Valid = false
	}
	if err := WaitCaughtUp(wctx, cl, streams, placement); err != nil {
		failures = append(failures, err.Error())
		s.Valid = false
	}
	wcancel()
	for _, n := range cl.Nodes {
		cl.Stop(n)
	}
	s.Replicas = CompareReplicas(cl, "chaos", "jepsen", placement)
	s.OnNodes = CheckOnNodes(cl, workloads, ops, placement)
	s.Valid = s.Valid && s.Replicas.Valid && s.OnNodes.Valid
	if err := h.WriteFile(filepath.Join(runDir, "history.jsonl")); err != nil {
		t.Error(err)
	}
	os.WriteFile(filepath.Join(runDir, "nemesis.log"), []byte(nemesisLog.String()), 0o644)
	js, _ := json.MarshalIndent(s, "", "  ")
	os.WriteFile(filepath.Join(runDir, "summary.json"), js, 0o644)
	t.Logf("summary (%s):\n%s", filepath.Join(runDir, "summary.json"), js)
	if nerr != nil {
		t.Errorf("nemesis: %v", nerr)
	}
	if herr != nil {
		t.Errorf("heal: %v", herr)
	}
	// The failed checks last, where the tail of a long log shows them.
	for _, f := range append(failures, s.failed()...) {
		t.Errorf("failed: %s", f)
	}
	if !s.Valid {
		t.Errorf("invalid run; history, plan and node logs in %s", runDir)
		return
	}
	cl.Shutdown()
	if disks != nil {
		if err := disks.Unmount(); err != nil {
			t.Errorf("unmount the disks: %v", err)
		}
	}
	os.RemoveAll(filepath.Join(runDir, "data")) // a valid run keeps its history and logs, not its data
}

// failed names each check of the run that did not hold, with its result.
func (s summary) failed() []string {
	var out []string
	add := func(name string, valid bool, result any) {
		if !valid {
			js, _ := json.Marshal(result)
			out = append(out, fmt.Sprintf("%s: %s", name, js))
		}
	}
	for _, st := range slices.Sorted(maps.Keys(s.Queue)) {
		add("queue "+st, s.Queue[st].Valid, s.Queue[st])
		add("appends "+st, s.Appends[st].Valid, s.Appends[st])
		add("cursors "+st, s.Cursors[st].Valid, s.Cursors[st])
		if o, ok := s.Order[st]; ok {
			add("order "+st, o.Valid, o)
		}
	}
	add("replicas", s.Replicas.Valid, s.Replicas)
	add("on nodes", s.OnNodes.Valid, s.OnNodes)
	return out
}

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// FaultKind is one kind of fault.
type FaultKind string

// The faults this suite injects on processes; network faults follow.
const (
	KillOne      FaultKind = "kill-one"      // SIGKILL one node, restart it after the fault
	KillLeader   FaultKind = "kill-leader"   // SIGKILL the leader of the workloads' first partition
	KillMinority FaultKind = "kill-minority" // SIGKILL a minority at once
	KillAll      FaultKind = "kill-all"      // SIGKILL every node, restart them all
	PauseOne     FaultKind = "pause-one"     // SIGSTOP one node longer than the election timeout
	// MoveReplicas keeps one node dead longer than the cluster's
	// --replace-dead-after, so its replicas move to other nodes while
	// writes go on; then it comes back (membership churn).
	MoveReplicas FaultKind = "move-replicas"
	// TransferStorm stops (SIGTERM: each hands its leaderships over) and
	// restarts nodes one after another.
	TransferStorm FaultKind = "transfer-storm"
	// DamageFile kills one node and, while it is down, damages a log
	// segment of one of its partition copies (DamageSegment): cuts the
	// last one's tail or overwrites bytes in it, or flips a bit in a
	// sealed one. It restarts after the fault.
	DamageFile FaultKind = "damage-file"
	// PowerLoss kills one to all nodes at once and drops every write
	// they had not fsynced (their disks are lazyfs mounts); they restart
	// after the fault. Only with Disks.
	PowerLoss FaultKind = "power-loss"
	// DiskFullOne and DiskFullMajority make the disks of one node, or of
	// a majority, act as full (ENOSPC on new data, no free space in
	// statfs) for the fault's time. Only with Disks.
	DiskFullOne      FaultKind = "disk-full-one"
	DiskFullMajority FaultKind = "disk-full-majority"
	// PauseMajority and PauseAll SIGSTOP a majority, or every node, at
	// once: no group can commit until they go on.
	PauseMajority FaultKind = "pause-majority"
	PauseAll      FaultKind = "pause-all"
	// KillMetaLeader SIGKILLs the leader of the metadata group.
	KillMetaLeader FaultKind = "kill-meta-leader"
	// DamageRaftLog kills one node and, while it is down, flips one bit
	// of the Raft log store (raft.db) of one of its partition copies
	// (DamageRaftDB). It restarts after the fault.
	DamageRaftLog FaultKind = "damage-raft-log"
	// DamageSnapshot kills one node and, while it is down, flips one bit
	// of one file of a Raft snapshot of one of its partition copies
	// (DamageSnapshotFile). It restarts after the fault.
	DamageSnapshot FaultKind = "damage-snapshot"
)

// Network faults, with namespaces (Net) only.
const (
	// PartitionHalves splits the nodes into a majority and a minority.
	PartitionHalves FaultKind = "partition-halves"
	// IsolateLeader cuts the workloads' first partition leader off from
	// every other node.
	IsolateLeader FaultKind = "isolate-leader"
	// PartitionBridge splits the nodes in two halves that only one node,
	// the bridge, sees both of.
	PartitionBridge FaultKind = "partition-bridge"
	// MuteLeader cuts what the workloads' first partition leader sends
	// to every other node, not what it receives (a one-way partition):
	// the others stop hearing it, it still hears them.
	MuteLeader FaultKind = "mute-leader"
	// Latency gives every node 50 ms ± 20 ms of delay and 3% loss
	// (netem).
	Latency FaultKind = "latency-loss"
	// SlowLink limits every node's outgoing link to 1 Mbit/s with up to
	// 80 ms of queue (a token bucket): latency under load, and loss of
	// what overflows. It stands in for netem where the kernel lacks it.
	SlowLink FaultKind = "slow-link"
	// IsolateMetaLeader cuts the metadata group's leader off from every
	// other node.
	IsolateMetaLeader FaultKind = "isolate-meta-leader"
	// KillInPartition splits the nodes into a majority and a minority,
	// then SIGKILLs one node of the majority.
	KillInPartition FaultKind = "kill-in-partition"
	// MoveInPartition splits the nodes into a majority and a minority for
	// longer than --replace-dead-after: the majority moves the
	// minority's replicas while the minority still runs them.
	MoveInPartition FaultKind = "move-in-partition"
	// CutClient cuts one node off from the clients, both ways, while it
	// still talks to the other nodes (Net.CutClient).
	CutClient FaultKind = "cut-client"
)

var netFaults = []FaultKind{PartitionHalves, IsolateLeader, PartitionBridge, MuteLeader, Latency, SlowLink,
	IsolateMetaLeader, KillInPartition, MoveInPartition, CutClient}

// Kinds returns the fault kinds a run can inject: the process faults,
// power loss with lazyfs disks, and with namespaces the network faults
// the kernel supports.
func Kinds(nt *Net, disks bool) []FaultKind {
	kinds := slices.Clone(allFaults)
	if disks {
		kinds = append(kinds, PowerLoss, DiskFullOne, DiskFullMajority)
	}
	if nt == nil {
		return kinds
	}
	for _, k := range netFaults {
		if (k != Latency || nt.HasNetem) && (k != SlowLink || nt.HasTBF) {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// ReplaceDeadAfter is the --replace-dead-after the chaos cluster runs
// with; MoveReplicas outlasts it.
const ReplaceDeadAfter = 6 * time.Second

var allFaults = []FaultKind{KillOne, KillLeader, KillMinority, KillAll, PauseOne, MoveReplicas, TransferStorm, DamageFile,
	PauseMajority, PauseAll, KillMetaLeader, DamageRaftLog, DamageSnapshot}

// Fault is one step of a plan: at At, Kind hits Nodes (indexes) for For,
// then the cluster heals.
type Fault struct {
	At    time.Duration `json:"at"`
	Kind  FaultKind     `json:"kind"`
	Nodes []int         `json:"nodes"`
	For   time.Duration `json:"for"`
	// Seed drives the fault's own choices (which file, where).
	Seed uint64 `json:"seed,omitempty"`
}

func (f Fault) String() string {
	return fmt.Sprintf("%8s %-13s nodes %v for %v", f.At.Round(time.Millisecond), f.Kind, f.Nodes, f.For.Round(time.Millisecond))
}

// Plan draws faults of the given kinds from seed until duration: each
// lasts 2-6 s (a replica move longer) and is followed by 3-6 s of healed
// cluster. The same seed and kinds give the same plan.
func Plan(seed uint64, duration time.Duration, nodes int, kinds []FaultKind) []Fault {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var plan []Fault
	at := 3 * time.Second
	for {
		f := Fault{At: at, Kind: kinds[r.IntN(len(kinds))], For: 2*time.Second + time.Duration(r.Int64N(int64(4*time.Second)))}
		switch f.Kind {
		case PartitionHalves, PartitionBridge, KillInPartition:
			f.Nodes = r.Perm(nodes)
		case MoveInPartition:
			f.Nodes = r.Perm(nodes)
			f.For = ReplaceDeadAfter + 4*time.Second + time.Duration(r.Int64N(int64(3*time.Second)))
		case PauseMajority, DiskFullMajority:
			f.Nodes = r.Perm(nodes)[:nodes/2+1]
		case DiskFullOne:
			f.Nodes = []int{r.IntN(nodes)}
		case PauseAll:
			f.Nodes = r.Perm(nodes)
		case KillOne, PauseOne, CutClient:
			f.Nodes = []int{r.IntN(nodes)}
		case DamageFile, DamageRaftLog, DamageSnapshot:
			f.Nodes = []int{r.IntN(nodes)}
			f.Seed = r.Uint64()
		case MoveReplicas:
			f.Nodes = []int{r.IntN(nodes)}
			f.For = ReplaceDeadAfter + 4*time.Second + time.Duration(r.Int64N(int64(3*time.Second)))
		case TransferStorm:
			f.Nodes = r.Perm(nodes)[:1+r.IntN(nodes)]
		case KillMinority:
			f.Nodes = r.Perm(nodes)[:(nodes-1)/2]
		case KillAll:
			f.Nodes = r.Perm(nodes)
		case PowerLoss:
			f.Nodes = r.Perm(nodes)[:1+r.IntN(nodes)]
		}
		if at+f.For > duration {
			return plan
		}
		plan = append(plan, f)
		at += f.For + 3*time.Second + time.Duration(r.Int64N(int64(3*time.Second)))
	}
}

// FormatPlan writes a plan one fault per line.
func FormatPlan(seed uint64, plan []Fault) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d\n", seed)
	for _, f := range plan {
		fmt.Fprintln(&b, f)
	}
	return b.String()
}

// Nemesis runs a plan against a cluster.
type Nemesis struct {
	C *Cluster
	// Disks, when set, holds the nodes' lazyfs disks (PowerLoss).
	Disks *Disks
	// Leader returns the index of the node leading the workloads' first
	// partition, -1 if unknown.
	Leader func(ctx context.Context) int
	// MetaLeader returns the index of the metadata group's leader, -1 if
	// unknown.
	MetaLeader func(ctx context.Context) int
	// Log receives what the nemesis does.
	Log func(format string, args ...any)
}

// Run injects the plan's faults at their times (from start) and heals
// after each; it returns when the plan is done or ctx ends, with the
// faults injected.
func (nm *Nemesis) Run(ctx context.Context, start time.Time, plan []Fault) (int, error) {
	done := 0
	for _, f := range plan {
		if !waitUntil(ctx, start.Add(f.At)) {
			return done, ctx.Err()
		}
		nodes := f.Nodes
		if leader := nm.leaderFor(f.Kind); leader != nil {
			i := leader(ctx)
			if i < 0 {
				nm.Log("%v: no leader known; skipped", f)
				continue
			}
			nodes = []int{i}
		}
		nm.Log("%v: injecting on %v", f, nodes)
		if err := nm.network(f.Kind, nodes); err != nil {
			return done, fmt.Errorf("%v: %w", f, err)
		}
		for _, i := range processTargets(f.Kind, nodes) {
			n := nm.C.Nodes[i]
			switch f.Kind {
			case PauseOne, PauseMajority, PauseAll:
				nm.C.Pause(n)
			case PowerLoss:
				// Every node of the fault goes down first: the power
				// fails for all of them at once.
			case DiskFullOne, DiskFullMajority:
				if err := nm.Disks.SetFull(n, true); err != nil {
					return done, fmt.Errorf("%v: %w", f, err)
				}
			case DamageFile, DamageRaftLog, DamageSnapshot:
				nm.C.Kill(n)
				damage := DamageSegment
				switch f.Kind {
				case DamageRaftLog:
					damage = DamageRaftDB
				case DamageSnapshot:
					damage = DamageSnapshotFile
				}
				what, err := damage(n.Dir, f.Seed)
				if err != nil {
					return done, fmt.Errorf("%v: %w", f, err)
				}
				nm.Log("%s: %s", n.ID, what)
			case TransferStorm:
				nm.C.Stop(n)
				if err := nm.C.Start(n); err != nil {
					return done, err
				}
				rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				err := nm.C.WaitReady(rctx, n)
				cancel()
				if err != nil {
					return done, err
				}
			default:
				nm.C.Kill(n)
			}
		}
		if f.Kind == PowerLoss {
			var down []*Node
			for _, i := range nodes {
				down = append(down, nm.C.Nodes[i])
			}
			nm.C.KillTogether(down)
			for _, i := range nodes {
				what, err := nm.Disks.PowerLoss(nm.C.Nodes[i])
				if err != nil {
					return done, fmt.Errorf("%v: %w", f, err)
				}
				nm.Log("%s: %s", nm.C.Nodes[i].ID, what)
			}
		}
		done++
		if !waitUntil(ctx, time.Now().Add(f.For)) {
			return done, ctx.Err()
		}
		if nm.Disks != nil {
			nm.Disks.FreeAll()
		}
		if nm.C.Net != nil {
			if err := nm.C.Net.Heal(); err != nil {
				return done, fmt.Errorf("heal the network after %v: %w", f, err)
			}
		}
		hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := nm.C.Heal(hctx)
		cancel()
		if err != nil {
			return done, fmt.Errorf("heal after %v: %w", f, err)
		}
		nm.Log("healed")
	}
	return done, nil
}

// leaderFor returns how to find the node a fault aims at, nil for a
// fault whose nodes the plan chose.
func (nm *Nemesis) leaderFor(kind FaultKind) func(context.Context) int {
	switch kind {
	case KillLeader, IsolateLeader, MuteLeader:
		return nm.Leader
	case KillMetaLeader, IsolateMetaLeader:
		return nm.MetaLeader
	}
	return nil
}

// processTargets returns the nodes a fault acts on as processes (kill,
// pause, stop): none for a network fault, one node of the majority for a
// kill in a partition.
func processTargets(kind FaultKind, nodes []int) []int {
	switch {
	case kind == KillInPartition:
		return nodes[(len(nodes)-1)/2:][:1]
	case slices.Contains(netFaults, kind):
		return nil
	}
	return nodes
}

// waitUntil waits for a moment of the plan; false if ctx ended first.
func waitUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// network injects a network fault on nodes (a permutation for the splits,
// the leader for an isolation, the node cut off from the clients).
func (nm *Nemesis) network(kind FaultKind, nodes []int) error {
	nt := nm.C.Net
	switch kind {
	case PartitionHalves, KillInPartition, MoveInPartition:
		minority := (len(nodes) - 1) / 2
		return nt.Partition([][]int{nodes[:minority], nodes[minority:]})
	case IsolateLeader, IsolateMetaLeader:
		var rest []int
		for i := range nm.C.Nodes {
			if i != nodes[0] {
				rest = append(rest, i)
			}
		}
		return nt.Partition([][]int{nodes[:1], rest})
	case PartitionBridge:
		// nodes[0] is the bridge: it is cut from nobody.
		half := (len(nodes) - 1) / 2
		return nt.Partition([][]int{nodes[1 : 1+half], nodes[1+half:]})
	case MuteLeader:
		for i := range nm.C.Nodes {
			if i != nodes[0] {
				if err := nt.Cut(nodes[0], i); err != nil {
					return err
				}
			}
		}
	case Latency:
		for i := range nm.C.Nodes {
			if err := nt.Netem(i, "delay", "50ms", "20ms", "loss", "3%"); err != nil {
				return err
			}
		}
	case SlowLink:
		for i := range nm.C.Nodes {
			if err := nt.SlowLink(i, "1mbit", "80ms"); err != nil {
				return err
			}
		}
	case CutClient:
		return nt.CutClient(nodes[0])
	}
	return nil
}

// DamageSegment damages one log segment of one partition copy under a
// stopped node's data directory, chosen by seed. The last segment of a
// copy has its tail cut (1 byte to 64 KiB) or 4 bytes overwritten at a
// random position; a sealed one (segments roll under the chaos cluster's
// small --segment-bytes) has one bit flipped, which only a read finds. It
// says what it did.
func DamageSegment(dataDir string, seed uint64) (string, error) {
	r := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	logs, err := filepath.Glob(filepath.Join(dataDir, "partitions", "*", "*", "*", "log"))
	if err != nil {
		return "", err
	}
	type candidate struct {
		path   string
		sealed bool
	}
	var segs []candidate
	for _, dir := range logs {
		if strings.Contains(filepath.Base(filepath.Dir(dir)), "@") {
			continue // a copy set aside, never opened again
		}
		s, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		sort.Strings(s)
		for i, p := range s {
			segs = append(segs, candidate{path: p, sealed: i < len(s)-1})
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].path < segs[j].path })
	if len(segs) == 0 {
		return "no segment to damage", nil
	}
	c := segs[r.IntN(len(segs))]
	seg := c.path
	fi, err := os.Stat(seg)
	if err != nil || fi.Size() == 0 {
		return "empty segment " + seg, err
	}
	name := filepath.Join(filepath.Base(filepath.Dir(filepath.Dir(seg))), filepath.Base(seg))
	at := r.Int64N(fi.Size())
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if c.sealed {
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, at); err != nil {
			return "", err
		}
		bit := r.IntN(8)
		b[0] ^= 1 << bit
		if _, err := f.WriteAt(b, at); err != nil {
			return "", err
		}
		return fmt.Sprintf("flipped bit %d of byte %d of sealed segment %s (%d bytes)", bit, at, name, fi.Size()), f.Sync()
	}
	if r.IntN(2) == 0 {
		cut := 1 + r.Int64N(min(64<<10, fi.Size()))
		if err := f.Truncate(fi.Size() - cut); err != nil {
			return "", err
		}
		return fmt.Sprintf("cut %d of %d bytes off the tail of %s", cut, fi.Size(), name), f.Sync()
	}
	if _, err := f.WriteAt([]byte{0xde, 0xad, 0xbe, 0xef}, at); err != nil {
		return "", err
	}
	return fmt.Sprintf("overwrote 4 bytes at %d of %s (%d bytes)", at, name, fi.Size()), f.Sync()
}

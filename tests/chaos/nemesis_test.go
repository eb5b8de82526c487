package chaos

import (
	"bytes"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The same seed gives the same plan; every fault kind comes up in a long
// one; file damage carries its own seed.
func TestPlanReplays(t *testing.T) {
	kinds := Kinds(&Net{HasTBF: true}, true)
	a := Plan(42, 20*time.Minute, 5, kinds)
	b := Plan(42, 20*time.Minute, 5, kinds)
	if !slices.EqualFunc(a, b, func(x, y Fault) bool { return x.String() == y.String() && x.Seed == y.Seed }) {
		t.Fatal("one seed, two plans")
	}
	drawn := map[FaultKind]bool{}
	for _, f := range a {
		drawn[f.Kind] = true
		if (f.Kind == DamageFile || f.Kind == DamageRaftLog || f.Kind == DamageSnapshot) && f.Seed == 0 {
			t.Fatalf("%v has no seed", f)
		}
		if (f.Kind == CutClient || f.Kind == DamageRaftLog || f.Kind == DamageSnapshot) && len(f.Nodes) != 1 {
			t.Fatalf("%v hits %d nodes, want 1", f, len(f.Nodes))
		}
		if f.Kind == Latency {
			t.Fatalf("%v drawn without netem", f)
		}
	}
	for _, k := range kinds {
		if !drawn[k] {
			t.Errorf("no %s in a 20-minute plan", k)
		}
	}
}

// The file damage faults come with every cluster; cutting a node off from
// the clients needs namespaces, and acts on the network only.
func TestKinds(t *testing.T) {
	for _, c := range []struct {
		name       string
		nt         *Net
		disks      bool
		with, none []FaultKind
	}{
		{"loopback", nil, false, []FaultKind{DamageFile, DamageRaftLog, DamageSnapshot}, []FaultKind{CutClient, PowerLoss}},
		{"lazyfs", nil, true, []FaultKind{DamageRaftLog, DamageSnapshot, PowerLoss}, []FaultKind{CutClient}},
		{"namespaces", &Net{}, false, []FaultKind{DamageRaftLog, DamageSnapshot, CutClient, PartitionHalves}, []FaultKind{Latency, SlowLink}},
	} {
		t.Run(c.name, func(t *testing.T) {
			kinds := Kinds(c.nt, c.disks)
			for _, k := range c.with {
				if !slices.Contains(kinds, k) {
					t.Errorf("no %s in %v", k, kinds)
				}
			}
			for _, k := range c.none {
				if slices.Contains(kinds, k) {
					t.Errorf("%s in %v", k, kinds)
				}
			}
		})
	}
	if got := processTargets(CutClient, []int{2}); len(got) != 0 {
		t.Errorf("cut-client acts on processes %v", got)
	}
	if got := processTargets(DamageSnapshot, []int{2}); !slices.Equal(got, []int{2}) {
		t.Errorf("damage-snapshot acts on processes %v, want [2]", got)
	}
}

// DamageSegment changes one segment of a copy, never a copy set aside, and
// says what it did: a sealed segment gets exactly one bit flipped.
func TestDamageSegment(t *testing.T) {
	kinds := map[string]int{}
	for seed := uint64(1); seed <= 16; seed++ {
		dir := t.TempDir()
		live := filepath.Join(dir, "partitions", "t", "f", "s-partition-0", "log")
		aside := filepath.Join(dir, "partitions", "t", "f", "s-partition-1@n1", "log")
		content := bytes.Repeat([]byte("0123456789abcdef"), 8192)
		for _, d := range []string{live, aside} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"00000000000000000000.log", "00000000000000001000.log"} {
				if err := os.WriteFile(filepath.Join(d, name), content, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		what, err := DamageSegment(dir, seed)
		if err != nil {
			t.Fatal(err)
		}
		damaged := 0
		for _, d := range []string{live, aside} {
			for _, name := range []string{"00000000000000000000.log", "00000000000000001000.log"} {
				got, _ := os.ReadFile(filepath.Join(d, name))
				if bytes.Equal(got, content) {
					continue
				}
				damaged++
				if d == aside {
					t.Fatalf("seed %d (%s): a copy set aside was damaged", seed, what)
				}
				if sealed := name == "00000000000000000000.log"; sealed {
					kinds["sealed"]++
					if bits := differingBits(got, content); bits != 1 || !strings.Contains(what, "flipped bit") {
						t.Fatalf("seed %d (%s): a sealed segment has %d bits changed, want 1", seed, what, bits)
					}
				} else {
					kinds["last"]++
				}
			}
		}
		if damaged != 1 {
			t.Fatalf("seed %d (%s): %d segments damaged, want 1", seed, what, damaged)
		}
	}
	if kinds["sealed"] == 0 || kinds["last"] == 0 {
		t.Fatalf("16 seeds damaged %v: want both sealed and last segments", kinds)
	}
}

// differingBits counts the bits in which a and b differ (b is as long as a
// or longer).
func differingBits(a, b []byte) int {
	n := 0
	for i := range a {
		n += bits.OnesCount8(a[i] ^ b[i])
	}
	return n
}

package chaos

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
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
		if f.Kind == DamageFile && f.Seed == 0 {
			t.Fatalf("%v has no seed", f)
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

// DamageSegment changes the last segment of a copy, never a copy set
// aside, and says what it did.
func TestDamageSegment(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
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
		for _, d := range []string{live, aside} {
			for _, name := range []string{"00000000000000000000.log", "00000000000000001000.log"} {
				got, _ := os.ReadFile(filepath.Join(d, name))
				damaged := !bytes.Equal(got, content)
				if want := d == live && name == "00000000000000001000.log"; damaged != want {
					t.Fatalf("seed %d (%s): %s damaged %v, want %v", seed, what, filepath.Join(d, name), damaged, want)
				}
			}
		}
	}
}

package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestHeadroomIsASecondOfAllocationAtMost(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name       string
		allocated  uint64
		elapsed    time.Duration
		most, want uint64
	}{
		{"busy: a second's allocation", 300 * mib, 500 * time.Millisecond, 1024 * mib, 600 * mib},
		{"busier than the bound", 3000 * mib, time.Second, 1024 * mib, 1024 * mib},
		{"idle: little", 2 * mib, 2 * time.Minute, 1024 * mib, 17476},
		{"no time measured", 2 * mib, 0, 1024 * mib, 1024 * mib},
	} {
		if got := headroomFor(c.allocated, c.elapsed, c.most); got != c.want {
			t.Errorf("%s: headroomFor(%d, %v, %d) = %d, want %d", c.name, c.allocated, c.elapsed, c.most, got, c.want)
		}
	}
}

func TestGCPercentForGrantsTheHeadroomOnly(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                  string
		headroom, live, roots uint64
		base, want            int
	}{
		{"a small heap gets the headroom", 600 * mib, 80 * mib, 40 * mib, 100, 500},
		{"rounded up, never short of it", 100, 3, 0, 100, 3334},
		{"GOGC grants more already", 100 * mib, 300 * mib, 8 * mib, 100, 100},
		{"idle: GOGC as set", 0, 80 * mib, 40 * mib, 100, 100},
		{"a higher GOGC is kept", 600 * mib, 80 * mib, 40 * mib, 800, 800},
		{"nothing measured yet", 600 * mib, 0, 0, 100, 100},
	} {
		got := gcPercentFor(c.headroom, c.live, c.roots, c.base)
		if got != c.want {
			t.Errorf("%s: gcPercentFor(%d, %d, %d, %d) = %d, want %d", c.name, c.headroom, c.live, c.roots, c.base, got, c.want)
		}
		if granted := (c.live + c.roots) * uint64(got) / 100; granted < c.headroom && c.live+c.roots > 0 {
			t.Errorf("%s: GOGC %d grants %d, short of %d", c.name, got, granted, c.headroom)
		}
	}
}

func readGC() (goal, gogc uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// A process that allocates fast is let to collect about once a second, up
// to the bound; stopped, the pacing gives the collector back its GOGC.
func TestGCPaceGrantsABusyProcessItsHeadroom(t *testing.T) {
	const most = 64 << 20
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)

	stop := startGCPace(most)
	defer stop()
	// Allocating as fast as a loop can (GB a second), each MiB garbage at
	// once: the second collection sees the rate and sets the goal. Go's
	// own pacing keeps the goal at a few MB for the first GBs.
	var sink []byte
	for i := 0; ; i++ {
		sink = make([]byte, 1<<20)
		sink[0] = 1
		if goal, _ := readGC(); goal >= most {
			break
		}
		if i == 8*most>>20 {
			goal, gogc := readGC()
			t.Fatalf("after %d MiB of garbage the heap goal is %d (GOGC %d); want %d at least", i, goal, gogc, most)
		}
	}
	runtime.KeepAlive(sink)

	stop()
	runtime.GC()
	if goal, gogc := readGC(); goal >= most || gogc != 100 {
		t.Fatalf("after stop: heap goal %d, GOGC %d; want the runtime's own", goal, gogc)
	}
}

func TestGCPaceOffLeavesTheCollectorAlone(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	defer startGCPace(0)()
	var sink []byte
	for range 512 {
		sink = make([]byte, 1<<20)
	}
	runtime.KeepAlive(sink)
	runtime.GC()
	if goal, gogc := readGC(); gogc != 100 || goal >= 64<<20 {
		t.Fatalf("pacing off changed the collector: GOGC %d, goal %d", gogc, goal)
	}
}

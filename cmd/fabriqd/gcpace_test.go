package main

import (
	"math"
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
		{"rounded up, never short of it", 100*mib + 1, 30 * mib, 0, 100, 334},
		{"GOGC grants more already", 100 * mib, 300 * mib, 8 * mib, 100, 100},
		{"idle: GOGC as set", 0, 80 * mib, 40 * mib, 100, 100},
		{"a higher GOGC is kept", 600 * mib, 80 * mib, 40 * mib, 800, 800},
		{"nothing measured yet", 600 * mib, 0, 0, 100, 100},
		{"a tiny heap: the runtime's least goal bounds it", 64 * mib, 68 << 10, 0, 100, 1601},
	} {
		got := gcPercentFor(c.headroom, c.live, c.roots, c.base)
		if got != c.want {
			t.Errorf("%s: gcPercentFor(%d, %d, %d, %d) = %d, want %d", c.name, c.headroom, c.live, c.roots, c.base, got, c.want)
		}
		if got == c.base || c.live+c.roots == 0 {
			continue
		}
		// The goal Go's pacer sets for this GOGC is the headroom over the
		// live heap: never short of it but by the least goal's rounding,
		// never over it but by the formula's.
		goal := max(heapMinimum*uint64(got)/100, c.live+(c.live+c.roots)*uint64(got)/100)
		if want := c.live + c.headroom; goal+heapMinimum/100 < want || goal > want+(c.live+c.roots)/100 {
			t.Errorf("%s: GOGC %d sets the goal at %d, want %d", c.name, got, goal, want)
		}
	}
}

func TestGCPaceGrantsTheRateOfTheLastSpell(t *testing.T) {
	const mib = 1 << 20
	g := &gcPace{most: 1024 * mib, base: 100}
	t0 := time.Unix(1_800_000_000, 0)
	live, roots := uint64(80*mib), uint64(40*mib)
	for _, step := range []struct {
		name   string
		at     time.Duration
		allocs uint64
		want   int
	}{
		{"the first collection: no rate yet", 0, 100 * mib, 100},
		{"busy: 600 MiB in a second", time.Second, 700 * mib, 500},
		{"busier than the bound", 2 * time.Second, 2700 * mib, 854},
		{"idle again: 2 MiB in two minutes", 2*time.Second + 2*time.Minute, 2702 * mib, 100},
	} {
		// Read a second apart, the two rates are one.
		if got, steady := g.next(t0.Add(step.at), step.allocs, live, roots); got != step.want || steady != step.want {
			t.Errorf("%s: GOGC %d (steady %d), want %d", step.name, got, steady, step.want)
		}
	}
}

// Read each gcLook, a burst is met at the first reading in it, a pause
// shorter than gcEvery keeps the headroom, and a gcEvery without
// allocation gives the base pace back. A blip that raises GOGC for a
// second does not make the process busy for quiet; a second of
// allocation at the burst's rate does.
func TestGCPaceMeetsABurstAtTheNextLook(t *testing.T) {
	const mib = 1 << 20
	g := &gcPace{most: 1024 * mib, base: 100}
	t0 := time.Unix(1_800_000_000, 0)
	live, roots := uint64(80*mib), uint64(40*mib)
	allocs := uint64(100 * mib)
	at := time.Duration(0)
	look := func(name string, allocated uint64, want, wantSteady func(int) bool) {
		t.Helper()
		at += gcLook
		allocs += allocated
		if got, steady := g.next(t0.Add(at), allocs, live, roots); !want(got) || !wantSteady(steady) {
			t.Errorf("%s: GOGC %d, steady %d", name, got, steady)
		}
	}
	base := func(pct int) bool { return pct == 100 }
	raised := func(pct int) bool { return pct >= 500 }
	for range 30 {
		look("idle", 0, base, base)
	}
	look("a blip of 20 MiB", 20*mib, func(pct int) bool { return pct > 100 }, base)
	for range 10 {
		look("idle after the blip", 0, func(int) bool { return true }, base)
	}
	look("a gcEvery after the blip", 0, base, base)
	look("the first look in a burst of 600 MiB a second", 60*mib, raised, base)
	for range 9 {
		look("the burst goes on", 60*mib, raised, func(int) bool { return true })
	}
	look("a second of the burst", 60*mib, raised, raised)
	for range 9 {
		look("a pause shorter than gcEvery", 0, raised, func(int) bool { return true })
	}
	look("a gcEvery without allocation", 0, base, base)
	if len(g.readings) > int(gcEvery/gcLook)+1 {
		t.Errorf("%d readings kept, want the last gcEvery's", len(g.readings))
	}
}

// A busy spell's memory is freed once, after gcFreeAfter at the base
// pace, and not at each pause shorter than that.
func TestGCPaceFreesMemoryOnceQuietAfterABusySpell(t *testing.T) {
	g := &gcPace{base: 100}
	t0 := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, step := range []struct {
		name string
		at   time.Duration
		pct  int
		want bool
	}{
		{"idle from the start: nothing to free", 0, 100, false},
		{"idle for long: still nothing", time.Minute, 100, false},
		{"busy", time.Minute + time.Second, 800, false},
		{"a pause", time.Minute + 2*time.Second, 100, false},
		{"busy again before gcFreeAfter", time.Minute + 2*time.Second + gcFreeAfter - time.Second, 500, false},
		{"quiet", 2 * time.Minute, 100, false},
		{"quiet, not yet gcFreeAfter", 2*time.Minute + gcFreeAfter - time.Second, 100, false},
		{"quiet for gcFreeAfter: free", 2*time.Minute + gcFreeAfter, 100, true},
		{"quiet on: freed already", 3 * time.Minute, 100, false},
		{"busy once more", 4 * time.Minute, 300, false},
		{"quiet", 5 * time.Minute, 100, false},
		{"quiet for gcFreeAfter again: free", 5*time.Minute + gcFreeAfter, 100, true},
	} {
		if got := g.quiet(at(step.at), step.pct); got != step.want {
			t.Errorf("%s: quiet = %v, want %v", step.name, got, step.want)
		}
	}
}

func TestGCPaceHeadroomIsAQuarterOfTheMemoryLimitAtMost(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		limit      int64
		most, want uint64
	}{
		{math.MaxInt64, 1024 * mib, 1024 * mib}, // no limit
		{1024 * mib, 1024 * mib, 256 * mib},
		{8192 * mib, 1024 * mib, 1024 * mib},
	} {
		if got := mostFor(c.most, c.limit); got != c.want {
			t.Errorf("mostFor(%d, limit %d) = %d, want %d", c.most, c.limit, got, c.want)
		}
	}
}

func readGC() (goal, live, gogc uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: "/gc/heap/live:bytes"}, {Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()
}

// untilGOGC waits up to 30 s for the runtime's GOGC to meet want,
// allocating a MiB of garbage at a time as fast as a loop can (GB a
// second) if busy, otherwise polling.
func untilGOGC(t *testing.T, busy bool, what string, want func(gogc uint64) bool) {
	t.Helper()
	var sink []byte
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, gogc := readGC()
		if want(gogc) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s GOGC is %d; want %s", gogc, what)
		}
		if busy {
			sink = make([]byte, 1<<20)
			sink[0] = 1
		} else {
			time.Sleep(10 * time.Millisecond) // the pacing's reading comes on its own
		}
	}
	runtime.KeepAlive(sink)
}

// A process that allocates fast has its GOGC raised by the pacing (to the
// figures TestGCPaceGrantsTheRateOfTheLastSpell and
// TestGCPercentForGrantsTheHeadroomOnly check); gone idle, it has it back
// without waiting for a collection; stopped, the pacing gives the
// collector back its GOGC.
func TestGCPaceGrantsABusyProcessItsHeadroom(t *testing.T) {
	const most = 64 << 20
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	limit := debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetMemoryLimit(limit)

	g := newGCPace(most)
	defer g.stop() // on a failure before the stop below
	raised := func(gogc uint64) bool { return gogc > 100 }
	untilGOGC(t, true, "over 100 while busy", raised)
	// Idle, no collection comes: the next reading lowers GOGC all the same.
	untilGOGC(t, false, "100 once idle", func(gogc uint64) bool { return gogc == 100 })

	untilGOGC(t, true, "over 100 busy again", raised)
	g.stop()
	runtime.GC()
	if goal, live, gogc := readGC(); goal >= live+most/2 || gogc != 100 {
		t.Fatalf("after stop: heap goal %d over %d live bytes, GOGC %d; want the runtime's own", goal, live, gogc)
	}
}

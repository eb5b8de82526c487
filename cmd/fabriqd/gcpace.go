package main

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// gcEvery is how often, at most, gcPace lets a busy process collect: the
// headroom it grants is what the process allocated in this long.
const gcEvery = time.Second

// gcLook is how often gcPace reads the allocation rate. A busy spell that
// starts just after a reading would otherwise run at the base pace until
// the next one, and the reading after that: on a node of a thousand idle
// partitions, whose every collection costs tens of milliseconds of
// marking, that ramp made the first second of a burst collect every
// 70 ms.
const gcLook = gcEvery / 10

// gcFreeAfter is how long a process that was busy allocates at the base
// pace before gcPace returns its free memory to the system.
const gcFreeAfter = 10 * time.Second

// defaultGCHeadroom is --gc-headroom's default.
const defaultGCHeadroom = 1 << 30

// gcPace lets a busy process's garbage build up to what it allocates in
// gcEvery, up to a bound, before the collector runs. Each gcLook it sets
// GOGC from the allocation rate and the live heap the last collection
// found, never below GOGC as it was. The rate is the highest of those
// read in the last gcEvery, each over one gcLook: a burst is met within
// gcLook, and a pause shorter than gcEvery does not lower the goal (which
// would set off a collection).
//
// Why a node wants it: a node of many idle partitions has thousands of
// goroutines, most of them its idle Raft groups', whose stacks every
// collection marks. At GOGC 100 its live heap of about 100 MB let the
// busy partitions' garbage (several times their payload: Raft's encoding,
// bolt's pages, the followers' decoding) trigger collections several
// times a second, and the collector took 35–45 % of a busy node's CPU;
// the busy partitions then made 60–75 % of their throughput alone. A
// headroom of up to a GiB lifted that to 82–91 % (BENCHMARKS.md). A fixed
// larger GOGC or a fixed heap floor would do the same at a price paid
// always: an idle node holding garbage it has no need to keep, a
// restarted node (a GB or more after the scan of its logs) at several
// times that. Paced by its allocation rate, the goal of a node that goes
// idle is back where Go puts it within a second, its memory is returned
// to the system ten seconds later, and the memory goes to the busy node
// that buys CPU with it. The memory limit (GOMEMLIMIT) still applies over
// all of it, and bounds the headroom to a quarter of itself. A killed
// node pays for the memory it held: the kernel unmaps it before the
// node's sockets close, about 25 ms a GB here, and only then do its peers
// see it gone.
type gcPace struct {
	most uint64 // headroom granted at most
	base int    // GOGC when the pacing started

	quit     chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	// Owned by run.
	set        int       // GOGC last set
	raised     bool      // set over base since the last free
	quietSince time.Time // set to base since, after raised
	readings   []reading // those of the last gcEvery
	samples    []metrics.Sample
}

// reading is what the process had allocated at a time, and the headroom
// its rate since the reading before calls for.
type reading struct {
	allocs   uint64
	at       time.Time
	headroom uint64
}

// The runtime metrics gcPace reads each gcLook: the live heap and the
// roots the last collection found, and the bytes allocated so far.
var gcPaceMetrics = []string{
	"/gc/heap/live:bytes",
	"/gc/scan/stack:bytes",
	"/gc/scan/globals:bytes",
	"/gc/heap/allocs:bytes",
}

// newGCPace paces the collector, granting at most most bytes of headroom,
// until stop, which gives GOGC back its value. It returns nil, leaving
// the collector alone, when most is 0 or GOGC is off.
func newGCPace(most uint64) *gcPace {
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(gogc)
	if gogc[0].Value.Uint64() > math.MaxInt32 { // GOGC=off
		return nil
	}
	base := int(gogc[0].Value.Uint64())
	most = mostFor(most, debug.SetMemoryLimit(-1))
	if most == 0 {
		return nil
	}
	g := &gcPace{most: most, base: base, set: base, quit: make(chan struct{}), done: make(chan struct{})}
	for _, name := range gcPaceMetrics {
		g.samples = append(g.samples, metrics.Sample{Name: name})
	}
	g.read(time.Now()) // the first reading of the allocation rate
	go g.run()
	return g
}

// run sets GOGC each gcLook from what the process allocated lately, until
// stop. Paced by the clock rather than by collections, a node that goes
// idle has its GOGC back within gcEvery (lowered, the goal sets off a
// collection), and its memory is returned once quiet says so.
// Waiting for the next collection instead would leave an idle node's goal
// up until the runtime's forced one, two minutes later.
func (g *gcPace) run() {
	defer close(g.done)
	tick := time.NewTicker(gcLook)
	defer tick.Stop()
	for {
		select {
		case <-g.quit:
			debug.SetGCPercent(g.base)
			return
		case <-tick.C:
		}
		now := time.Now()
		pct, steady := g.read(now)
		if pct != g.set {
			debug.SetGCPercent(pct)
			g.set = pct
		}
		if g.quiet(now, steady) {
			debug.FreeOSMemory()
		}
	}
}

// quiet reports whether the process has now allocated at the base pace
// for gcFreeAfter since it last had a raised GOGC: then the memory its
// garbage took is freed at once, rather than at the runtime's scavenging
// pace (which took minutes for a GB here). Once for each busy spell, so
// that a process whose sends come in bursts does not pay a collection and
// the page faults that follow at every pause.
func (g *gcPace) quiet(now time.Time, pct int) bool {
	switch {
	case pct > g.base:
		g.raised, g.quietSince = true, time.Time{}
	case !g.raised:
	case g.quietSince.IsZero():
		g.quietSince = now
	case now.Sub(g.quietSince) >= gcFreeAfter:
		g.raised = false
		return true
	}
	return false
}

// read reads the runtime's metrics at now and returns what next does.
func (g *gcPace) read(now time.Time) (gogc, steady int) {
	metrics.Read(g.samples)
	live := g.samples[0].Value.Uint64()
	roots := g.samples[1].Value.Uint64() + g.samples[2].Value.Uint64()
	allocs := g.samples[3].Value.Uint64()
	return g.next(now, allocs, live, roots)
}

// next returns GOGC for the next collection, given the time, the bytes
// allocated since the start, and the live and root bytes the last
// collection found: the headroom is the highest rate read in the last
// gcEvery, each over the gcLook before its reading. It also returns the
// GOGC that the rate over the whole of the last gcEvery calls for, which
// tells quiet whether the process is busy: a blip of a few MB in one
// gcLook raises GOGC for a second, but an idle node has those all the
// time, and they must not put off the return of a busy spell's memory.
func (g *gcPace) next(now time.Time, allocs, live, roots uint64) (gogc, steady int) {
	r := reading{allocs: allocs, at: now}
	var spell uint64
	if n := len(g.readings); n > 0 {
		last := g.readings[n-1]
		r.headroom = headroomFor(allocs-last.allocs, now.Sub(last.at), g.most)
	}
	keep := 0
	for keep < len(g.readings) && !g.readings[keep].at.After(now.Add(-gcEvery)) {
		keep++
	}
	if n := len(g.readings); n > 0 {
		first := g.readings[max(keep-1, 0)] // the newest at least gcEvery old, if any
		spell = headroomFor(allocs-first.allocs, now.Sub(first.at), g.most)
	}
	g.readings = append(g.readings[:0], g.readings[keep:]...)
	g.readings = append(g.readings, r)
	var headroom uint64
	for _, r := range g.readings {
		headroom = max(headroom, r.headroom)
	}
	return gcPercentFor(headroom, live, roots, g.base), gcPercentFor(spell, live, roots, g.base)
}

// stop ends the pacing and gives GOGC back its value; it returns once
// done, and may be called again.
func (g *gcPace) stop() {
	g.stopOnce.Do(func() { close(g.quit) })
	<-g.done
}

// mostFor returns the headroom granted at most: most, and no more than a
// quarter of the memory limit when one is set (math.MaxInt64 is none).
func mostFor(most uint64, limit int64) uint64 {
	if limit > 0 && limit < math.MaxInt64 {
		return min(most, uint64(limit)/4)
	}
	return most
}

// headroomFor returns the headroom for a process that allocated allocated
// bytes in elapsed: what it allocates in gcEvery, at most most.
func headroomFor(allocated uint64, elapsed time.Duration, most uint64) uint64 {
	if elapsed <= 0 {
		return most
	}
	perEvery := float64(allocated) * float64(gcEvery) / float64(elapsed)
	if perEvery >= float64(most) {
		return most
	}
	return uint64(perEvery)
}

// heapMinimum is the runtime's least heap goal at GOGC 100; it scales
// with GOGC.
const heapMinimum = 4 << 20

// gcPercentFor returns the GOGC that lets the heap grow by headroom bytes
// over its live ones before the next collection, and never below base.
// Go's pacer sets the goal at live + (live + roots) × GOGC / 100, roots
// being the goroutine stacks and globals it scans, and never below
// heapMinimum × GOGC / 100: on a small heap that floor, not the formula,
// bounds the GOGC that keeps the goal within live + headroom.
func gcPercentFor(headroom, live, roots uint64, base int) int {
	if live+roots == 0 {
		return base
	}
	need := (headroom*100 + live + roots - 1) / (live + roots)
	need = min(need, (live+headroom)*100/heapMinimum, math.MaxInt32)
	return max(base, int(need))
}

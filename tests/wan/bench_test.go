package wan

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/tests/chaos"
)

// benchRegions are the benchmark cluster's hosts: three nodes in eu, so
// that a local stream there has three replicas, two in us, one in ap.
// The producer runs on host 0, in eu.
var benchRegions = []string{"eu", "eu", "eu", "us", "us", "ap"}

// benchDelay is the one-way delay between regions.
const benchDelay = 40 * time.Millisecond

// wanCluster is a fabriqd cluster over regions, and a client in eu.
type wanCluster struct {
	w      *WAN
	c      *chaos.Cluster
	client *client.Client
}

// startCluster builds fabriqd and starts one node per host of
// benchRegions. Replicas are never moved off a dead node: a node killed
// by a benchmark comes back.
func startCluster(b *testing.B) *wanCluster {
	b.Helper()
	dir := b.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/fabriq-io/fabriq/cmd/fabriqd")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building fabriqd: %v\n%s", err, out)
	}
	w, err := New(benchRegions, benchDelay)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Close)
	logs := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		b.Fatal(err)
	}
	c, err := chaos.NewCluster(filepath.Join(dir, "fabriqd"), filepath.Join(dir, "data"), logs, len(benchRegions), w,
		"--replace-dead-after=-1s")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Shutdown)
	for i, n := range c.Nodes {
		n.Append("--region", benchRegions[i])
		if err := c.Start(n); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, n := range c.Nodes {
		if err := c.WaitReady(ctx, n); err != nil {
			log, _ := os.ReadFile(filepath.Join(logs, n.ID+".log"))
			b.Fatalf("%v:\n%s", err, log[max(0, len(log)-4096):])
		}
	}
	cl, err := client.New(client.Options{URL: c.URL(), Dial: w.Dialer(0), OperationTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	return &wanCluster{w: w, c: c, client: cl}
}

// leaderHost returns the host of the node leading partition 0 of stream,
// -1 while it has none.
func (wc *wanCluster) leaderHost(ctx context.Context, stream string) int {
	info, err := wc.client.DescribeStream(ctx, stream)
	if err != nil || len(info.Partitions) == 0 {
		return -1
	}
	id, ok := strings.CutPrefix(info.Partitions[0].Leader, "n")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(id)
	if err != nil || n < 1 || n > len(benchRegions) {
		return -1
	}
	return n - 1
}

// awaitLeader waits until partition 0 of stream is led in region (any
// region if empty) and returns the leader's host.
func (wc *wanCluster) awaitLeader(b *testing.B, stream, region string) int {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if h := wc.leaderHost(ctx, stream); h >= 0 && (region == "" || benchRegions[h] == region) {
			return h
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			b.Fatalf("%s is not led in %q", stream, region)
		}
	}
}

// benchStream is one stream the benchmarks measure.
type benchStream struct {
	name   string
	stream string
	// leader is the region its leader should be in; empty: anywhere.
	leader string
	opts   []client.StreamOption
}

var benchStreams = []benchStream{
	{"global/leader-near", "global-near", "eu", []client.StreamOption{client.WithLeaderRegion("eu")}},
	{"global/leader-far", "global-far", "us", []client.StreamOption{client.WithLeaderRegion("us")}},
	{"global/leader-anywhere", "global-any", "", nil},
	{"local", "local-eu", "eu", []client.StreamOption{client.WithLocal("eu"), client.WithLeaderRegion("eu")}},
}

// create creates a stream of one partition and three replicas and waits
// for its leader.
func (wc *wanCluster) create(b *testing.B, s benchStream) *client.Producer {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := wc.client.CreateStream(ctx, s.stream, 1, 3, s.opts...); err != nil {
		b.Fatalf("create %s: %v", s.stream, err)
	}
	h := wc.awaitLeader(b, s.stream, s.leader)
	info, err := wc.client.DescribeStream(ctx, s.stream)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: replicas %v in %v, leader %s (%s)", s.stream, info.Partitions[0].Replicas, info.Partitions[0].Regions, wc.c.Nodes[h].ID, benchRegions[h])
	p, err := wc.client.CreateProducer(ctx, client.ProducerOptions{Stream: s.stream})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// send sends one 1 KiB message and waits for its receipt.
func send(b *testing.B, p *client.Producer, timeout time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: make([]byte, 1024)}); err != nil {
		b.Fatal(err)
	}
}

// report adds the median, p99 and max of samples, in milliseconds.
func report(b *testing.B, samples []time.Duration, prefix string) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	at := func(q float64) float64 {
		return float64(samples[min(len(samples)-1, int(q*float64(len(samples))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.5), prefix+"p50-ms")
	b.ReportMetric(at(0.99), prefix+"p99-ms")
	b.ReportMetric(at(1), prefix+"max-ms")
}

// BenchmarkWANProduce measures synchronous sends of 1 KiB from a producer
// in eu, with benchDelay each way between regions: to a global stream
// (a replica in each region) led in eu, led in us and led wherever
// placement put it, and to a stream local to eu.
func BenchmarkWANProduce(b *testing.B) {
	wc := startCluster(b)
	for _, s := range benchStreams {
		p := wc.create(b, s)
		for range 10 {
			send(b, p, 30*time.Second)
		}
		b.Run(s.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				send(b, p, 30*time.Second)
				lat = append(lat, time.Since(start))
			}
			report(b, lat, "")
		})
	}
	b.Logf("packets dropped by the links: %d", wc.w.Dropped())
}

// BenchmarkWANFailover kills, b.N times, the node leading a stream in eu
// and measures, from the kill, until a producer in eu has a send
// acknowledged. For the global stream the new leader is in another
// region until the node is back (leadership then returns to eu); for the
// local one it is another eu node. Nothing acknowledged is checked here:
// the chaos suite does.
func BenchmarkWANFailover(b *testing.B) {
	wc := startCluster(b)
	for _, s := range []benchStream{benchStreams[0], benchStreams[3]} {
		p := wc.create(b, s)
		send(b, p, 30*time.Second)
		b.Run(fmt.Sprintf("%s/heartbeat-500ms", s.name), func(b *testing.B) {
			var took []time.Duration
			for range b.N {
				b.StopTimer()
				h := wc.awaitLeader(b, s.stream, s.leader)
				send(b, p, 30*time.Second)
				b.StartTimer()
				start := time.Now()
				wc.c.Kill(wc.c.Nodes[h])
				send(b, p, time.Minute)
				took = append(took, time.Since(start))
				b.StopTimer()
				if err := wc.c.Start(wc.c.Nodes[h]); err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				err := wc.c.WaitReady(ctx, wc.c.Nodes[h])
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			report(b, took, "failover-")
		})
	}
}

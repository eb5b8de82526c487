package tests

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
)

// BenchmarkProduce measures a real fabriqd process with one single-replica
// partition: async sends of 1 KiB with up to 1,000 in flight (throughput),
// and synchronous sends one at a time (latency, p50 and p99).
func BenchmarkProduce(b *testing.B) {
	n := startNode(b, "n1", b.TempDir())
	c, err := client.New(client.Options{URL: n.url(), OperationTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := b.Context()
	payload := make([]byte, 1024)
	for i, name := range []string{"async", "sync"} {
		stream := fmt.Sprintf("persistent://bench/produce/s%d", i)
		if err := c.CreateStream(ctx, stream, 1, 1); err != nil {
			b.Fatal(err)
		}
		p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, MaxPendingMessages: 1000})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			if name == "async" {
				var wg sync.WaitGroup
				var mu sync.Mutex
				var firstErr error
				wg.Add(b.N)
				b.ResetTimer()
				for range b.N {
					p.SendAsync(ctx, &client.ProducerMessage{Payload: payload}, func(_ client.MessageID, _ *client.ProducerMessage, err error) {
						if err != nil {
							mu.Lock()
							firstErr = err
							mu.Unlock()
						}
						wg.Done()
					})
				}
				wg.Wait()
				if firstErr != nil {
					b.Fatal(firstErr)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
				return
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if _, err := p.Send(ctx, &client.ProducerMessage{Payload: payload}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
		p.Close()
	}
}

// BenchmarkFailover kills the leader of a 3-replica partition ten times
// (whatever b.N) and measures, each time, how long from the kill until a
// send is acknowledged again; it reports the median and the maximum. The
// killed node is restarted and caught up before the next kill.
func BenchmarkFailover(b *testing.B) {
	nodes := startCluster(b, 3)
	ctx := b.Context()
	url := "fabriq://" + nodes[0].addr + "," + nodes[1].addr + "," + nodes[2].addr
	c, err := client.New(client.Options{URL: url, OperationTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const stream = "persistent://bench/failover/s"
	if err := c.CreateStream(ctx, stream, 1, 3); err != nil {
		b.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, SendTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("warm")}); err != nil {
		b.Fatal(err)
	}
	var pauses []time.Duration
	for i := range 10 {
		victim := byID(nodes, leaderOf(ctx, b, c, stream))
		victim.kill()
		killed := time.Now()
		if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte(fmt.Sprint("after kill ", i))}); err != nil {
			b.Fatal(err)
		}
		pauses = append(pauses, time.Since(killed))
		victim.restart(b)
		waitIdentical(ctx, b, nodes, stream)
	}
	slices.Sort(pauses)
	b.ReportMetric(float64((pauses[4]+pauses[5])/2)/float64(time.Millisecond), "median-ms")
	b.ReportMetric(float64(pauses[9])/float64(time.Millisecond), "max-ms")
	b.Logf("kill to first acknowledged send: %v", pauses)
}

package tests

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
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
		if err := createStream(ctx, c, stream, 1, 1); err != nil {
			b.Fatal(err)
		}
		p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, MaxPendingMessages: 1000})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			if name == "async" {
				benchAsync(b, func(done func(error)) {
					p.SendAsync(ctx, &client.ProducerMessage{Payload: payload}, func(_ client.MessageID, _ *client.ProducerMessage, err error) { done(err) })
				})
				return
			}
			benchSync(b, func() error { _, err := p.Send(ctx, &client.ProducerMessage{Payload: payload}); return err })
		})
		p.Close()
	}
}

// benchAsync makes b.N sends through send, each reporting its end to
// done, and reports messages a second.
func benchAsync(b *testing.B, send func(done func(error))) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	wg.Add(b.N)
	b.ResetTimer()
	for range b.N {
		send(func(err error) {
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
}

// benchSync makes b.N sends one at a time and reports their latency's
// median and 99th percentile.
func benchSync(b *testing.B, send func() error) {
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := send(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
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
	if err := createStream(ctx, c, stream, 1, 3); err != nil {
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

// BenchmarkKeySharedDispatch measures how fast a key_shared subscription
// delivers a backlog over 3 consumers, 1,000 keys (one real fabriqd, one
// partition, fsync on): b.N messages are produced first, then the timer
// runs from the consumers' subscribe until every message is received and
// acked.
func BenchmarkKeySharedDispatch(b *testing.B) {
	n := startNode(b, "n1", b.TempDir())
	ctx := b.Context()
	c, err := client.New(client.Options{URL: n.url(), OperationTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const stream = "persistent://bench/keys/s"
	if err := createStream(ctx, c, stream, 1, 1); err != nil {
		b.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, KeyBasedBatching: true, MaxPendingMessages: 5000})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 100)
	var failed atomic.Int64
	for i := range b.N {
		p.SendAsync(ctx, &client.ProducerMessage{Key: fmt.Sprint("key-", i%1000), Payload: payload}, func(_ client.MessageID, _ *client.ProducerMessage, err error) {
			if err != nil {
				failed.Add(1)
			}
		})
	}
	if err := p.Flush(ctx); err != nil || failed.Load() > 0 {
		b.Fatalf("produce: %v, %d failed", err, failed.Load())
	}
	b.ResetTimer()
	start := time.Now()
	var received atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	rctx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	for i := range 3 {
		cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "ks", Type: client.KeyShared, Name: fmt.Sprint("c", i), SubscriptionInitialPosition: client.Earliest})
		if err != nil {
			b.Fatal(err)
		}
		defer cons.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := cons.Receive(rctx)
				if err != nil {
					return
				}
				cons.Ack(rctx, m)
				if received.Add(1) == int64(b.N) {
					close(done)
					return
				}
			}
		}()
	}
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msg/s")
}

// BenchmarkKeySharedFailover measures the pause of a key_shared
// subscription across a partition leader's failover: 3 nodes, 3
// consumers, a producer sending all along; the partition's leader is
// SIGKILLed 10 times, each time measuring from the kill to the first
// delivery of a message newer than any delivered before it.
func BenchmarkKeySharedFailover(b *testing.B) {
	nodes := startCluster(b, 3)
	ctx := b.Context()
	url := "fabriq://" + nodes[0].addr + "," + nodes[1].addr + "," + nodes[2].addr
	c, err := client.New(client.Options{URL: url, OperationTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const stream = "persistent://bench/keyfailover/s"
	if err := createStream(ctx, c, stream, 1, 3); err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var newest uint64
	progress := make(chan struct{}, 1)
	var wg sync.WaitGroup
	rctx, stop := context.WithCancel(ctx)
	for i := range 3 {
		cc, err := client.New(client.Options{URL: url, OperationTimeout: 30 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Close()
		cons, err := cc.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "ks", Type: client.KeyShared, Name: fmt.Sprint("c", i)})
		if err != nil {
			b.Fatal(err)
		}
		defer cons.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := cons.Receive(rctx)
				if err != nil {
					return
				}
				mu.Lock()
				if m.ID.Offset > newest {
					newest = m.ID.Offset
					select {
					case progress <- struct{}{}:
					default:
					}
				}
				mu.Unlock()
				cons.Ack(rctx, m)
			}
		}()
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, SendTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			}
			p.SendAsync(rctx, &client.ProducerMessage{Key: fmt.Sprint("key-", i%1000), Payload: []byte("x")}, func(client.MessageID, *client.ProducerMessage, error) {})
		}
	}()
	defer func() { stop(); wg.Wait() }()
	await := func() {
		select {
		case <-progress:
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		}
	}
	await()
	var pauses []time.Duration
	for range 10 {
		victim := byID(nodes, leaderOf(ctx, b, c, stream))
		victim.kill()
		killed := time.Now()
		mu.Lock()
		before := newest
		mu.Unlock()
		for {
			await()
			mu.Lock()
			moved := newest > before
			mu.Unlock()
			if moved {
				break
			}
		}
		pauses = append(pauses, time.Since(killed))
		victim.restart(b)
		waitIdentical(ctx, b, nodes, stream)
	}
	slices.Sort(pauses)
	b.ReportMetric(float64((pauses[4]+pauses[5])/2)/float64(time.Millisecond), "median-ms")
	b.ReportMetric(float64(pauses[9])/float64(time.Millisecond), "max-ms")
	b.Logf("kill to first new key_shared delivery: %v", pauses)
}

// BenchmarkPatternDiscovery measures, on a three-node cluster, how long
// from a stream create until an already running pattern consumer
// receives the stream's first message (created, then produced to at
// once), 20 times whatever b.N; it reports the median and the maximum.
func BenchmarkPatternDiscovery(b *testing.B) {
	nodes := startCluster(b, 3)
	ctx := b.Context()
	c, err := client.New(client.Options{URL: clusterURL(nodes), OperationTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := ensureFabric(ctx, c, "persistent://bench/watch/x"); err != nil {
		b.Fatal(err)
	}
	mc, err := c.SubscribeMulti(ctx, client.MultiOptions{Pattern: "persistent://bench/watch/d-.*"}, client.ConsumerOptions{Subscription: "s"})
	if err != nil {
		b.Fatal(err)
	}
	defer mc.Close()
	const rounds = 20
	lat := make([]time.Duration, 0, rounds)
	var created []time.Duration // of each, the create alone
	b.ResetTimer()
	for i := range rounds {
		stream := fmt.Sprintf("persistent://bench/watch/d-%d", i)
		start := time.Now()
		if err := c.CreateStream(ctx, stream, 1, 3); err != nil {
			b.Fatal(err)
		}
		created = append(created, time.Since(start))
		p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("first")}); err != nil {
			b.Fatal(err)
		}
		m, err := mc.Receive(ctx)
		if err != nil || m.ID.Stream != stream {
			b.Fatalf("received %v, %v; want the first message of %s", m, err, stream)
		}
		lat = append(lat, time.Since(start))
		mc.Ack(ctx, m)
		p.Close()
	}
	slices.Sort(lat)
	slices.Sort(created)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(created[len(created)/2].Microseconds())/1000, "create-median-ms")
}

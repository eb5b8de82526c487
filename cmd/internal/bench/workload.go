package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/transport"
)

// headerSize is what every message of a run starts with: the time it was
// meant to be sent (Unix nanoseconds) and its sequence number, so that
// consumers measure end-to-end latency and the failover run checks that
// nothing acknowledged went missing.
const headerSize = 16

// Workload is what Run runs: producers and consumers on one stream.
type Workload struct {
	// Stream is the stream to use; it is created (Partitions, Replicas)
	// when missing. Empty: a new stream of public/default, deleted after
	// the run unless Keep.
	Stream string `json:"stream,omitempty"`
	Keep   bool   `json:"keep,omitempty"`
	// Partitions and Replicas of a stream Run creates; 0 takes the
	// fabric's defaults.
	Partitions int `json:"partitions"`
	Replicas   int `json:"replicas"`
	// Producers and Consumers: producers each have a producer of their
	// own; consumers share one subscription. Either may be zero: a run of
	// consumers alone reads what is there (Earliest) or what others send.
	Producers int `json:"producers"`
	Consumers int `json:"consumers"`
	// Size is the payload size in bytes, at least 16.
	Size int `json:"size"`
	// Rate is the total send rate in messages a second; 0 sends as fast
	// as InFlight allows. Latencies count from when a message was due,
	// so a producer that falls behind shows it.
	Rate float64 `json:"rate"`
	// InFlight bounds each producer's messages sent and not acknowledged.
	InFlight int `json:"in_flight"`
	// Sync sends one message at a time per producer and waits for each.
	Sync bool `json:"sync"`
	// Keys, when above zero, gives each message one of that many keys,
	// at random, and batches by key.
	Keys int `json:"keys"`
	// DisableBatching sends every message in a frame of its own.
	DisableBatching bool `json:"disable_batching,omitempty"`
	// Type is the subscription's type; Subscription its name (default
	// fabriq-bench); Earliest starts a new subscription at the stream's
	// first message instead of its end.
	Type         client.SubscriptionType `json:"-"`
	TypeName     string                  `json:"subscription_type"`
	Subscription string                  `json:"subscription"`
	Earliest     bool                    `json:"earliest,omitempty"`
	// Messages ends the run after that many messages sent (or, without
	// producers, received); Duration after that long. At least one is
	// set; the first reached ends it.
	Messages int64         `json:"messages,omitempty"`
	Duration time.Duration `json:"-"`
	// Drain is how long consumers may take, once producers are done, to
	// receive what was acknowledged. Default 30s.
	Drain time.Duration `json:"-"`
}

// Validate reports what is wrong with the workload.
func (w Workload) Validate() error {
	switch {
	case w.Producers < 0 || w.Consumers < 0:
		return errors.New("bench: --producers and --consumers must not be negative")
	case w.Producers == 0 && w.Consumers == 0:
		return errors.New("bench: nothing to run: --producers and --consumers are both 0")
	case w.Size < headerSize:
		return fmt.Errorf("bench: --size must be at least %d bytes (a send time and a sequence number), not %d", headerSize, w.Size)
	case w.Rate < 0:
		return fmt.Errorf("bench: --rate must not be negative, not %v", w.Rate)
	case w.InFlight < 1:
		return fmt.Errorf("bench: --in-flight must be at least 1, not %d", w.InFlight)
	case w.Keys < 0:
		return fmt.Errorf("bench: --keys must not be negative, not %d", w.Keys)
	case w.Messages < 0 || w.Duration < 0:
		return errors.New("bench: --messages and --duration must not be negative")
	case w.Messages == 0 && w.Duration == 0:
		return errors.New("bench: say when to stop: --messages or --duration")
	case w.Consumers > 1 && w.Type == client.Exclusive:
		return fmt.Errorf("bench: an exclusive subscription takes one consumer, not %d: use -t shared, failover or key_shared", w.Consumers)
	case w.Partitions < 0 || w.Replicas < 0:
		return errors.New("bench: --partitions and --replicas must not be negative")
	}
	return nil
}

// Result is what a run measured.
type Result struct {
	Workload Workload `json:"workload"`
	Stream   string   `json:"stream"`
	// Elapsed is the whole run, from the first send (or the consumers'
	// start) to the last message received or acknowledged.
	Elapsed  Millis   `json:"elapsed_ms"`
	Produced Produced `json:"produced"`
	Consumed Consumed `json:"consumed"`
}

// Produced is what the producers did.
type Produced struct {
	// Messages were acknowledged; Failed were not (FirstError says why).
	Messages   int64  `json:"messages"`
	Failed     int64  `json:"failed"`
	FirstError string `json:"first_error,omitempty"`
	// Rate and MBps count acknowledged messages from the first send to
	// the last acknowledgement.
	Rate    float64 `json:"msgs_per_sec"`
	MBps    float64 `json:"mb_per_sec"`
	Publish Latency `json:"publish_latency"`
}

// Consumed is what the consumers did.
type Consumed struct {
	// Messages were received and acknowledged (a redelivered message
	// counts each time).
	Messages int64 `json:"messages"`
	// Rate and MBps count from the consumers' start (with producers: the
	// first send) to the last message received.
	Rate     float64 `json:"msgs_per_sec"`
	MBps     float64 `json:"mb_per_sec"`
	EndToEnd Latency `json:"end_to_end_latency"`
}

// run is one Run's state, shared by its producers and consumers.
type run struct {
	w      Workload
	c      *client.Client
	stream string
	keys   []string

	start   time.Time
	sent    atomic.Int64 // messages handed to a producer
	acked   atomic.Int64
	failed  atomic.Int64
	lastAck atomic.Int64 // Unix nanoseconds

	received atomic.Int64
	lastRecv atomic.Int64
	enough   chan struct{} // closed when consumers alone have received Messages
	once     sync.Once

	errMu    sync.Mutex
	firstErr error

	publish, e2e *histogram
}

// Run runs the workload against the cluster c reaches, printing a line
// of progress each second to progress, and returns what it measured. A
// cancelled ctx ends it early, with what it measured so far.
//
// A stream Run created is deleted before it returns; if that fails, the
// result comes with the error.
func Run(ctx context.Context, c *client.Client, w Workload, progress io.Writer) (res *Result, err error) {
	w.Drain = cmp.Or(w.Drain, 30*time.Second)
	w.Subscription = cmp.Or(w.Subscription, "fabriq-bench")
	if err := w.Validate(); err != nil {
		return nil, err
	}
	stream, cleanup, err := prepareStream(ctx, c, w)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := cleanup(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	r := &run{w: w, c: c, stream: stream, enough: make(chan struct{}), publish: newHistogram(), e2e: newHistogram()}
	for i := range w.Keys {
		r.keys = append(r.keys, "key-"+strconv.Itoa(i))
	}

	// Consumers subscribe first, so that a new subscription at the
	// stream's end sees every message the producers send.
	consumers, err := r.subscribe(ctx)
	defer func() {
		for _, cons := range consumers {
			cons.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	producers, err := r.producers(ctx)
	defer func() {
		for _, p := range producers {
			p.Close()
		}
	}()
	if err != nil {
		return nil, err
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	r.start = time.Now()
	for _, cons := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.consume(runCtx, cons)
		}()
	}
	progressDone := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.report(progressDone, progress)
	}()

	r.produce(runCtx, producers)
	r.wait(runCtx)
	stop()
	close(progressDone)
	wg.Wait()
	return r.result(), nil
}

// prepareStream returns the stream to use, creating it when needed, and
// what to do after the run.
func prepareStream(ctx context.Context, c *client.Client, w Workload) (string, func() error, error) {
	stream, created := w.Stream, false
	if stream == "" {
		var b [6]byte
		rand.Read(b[:])
		stream = "persistent://public/default/fabriq-bench-" + hex.EncodeToString(b[:])
	}
	err := c.CreateStream(ctx, stream, w.Partitions, w.Replicas)
	switch {
	case err == nil:
		created = true
	case transport.CodeOf(err) == transport.CodeStreamExists && w.Stream != "":
	default:
		return "", nil, fmt.Errorf("bench: creating %s: %w", stream, err)
	}
	cleanup := func() error { return nil }
	if created && w.Stream == "" && !w.Keep {
		cleanup = func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c.DeleteStream(ctx, stream, true); err != nil {
				return fmt.Errorf("bench: deleting %s: %w", stream, err)
			}
			return nil
		}
	}
	return stream, cleanup, nil
}

// subscribe creates the consumers.
func (r *run) subscribe(ctx context.Context) ([]*client.Consumer, error) {
	var out []*client.Consumer
	initial := client.Latest
	if r.w.Earliest {
		initial = client.Earliest
	}
	for i := range r.w.Consumers {
		cons, err := r.c.Subscribe(ctx, client.ConsumerOptions{
			Stream: r.stream, Subscription: r.w.Subscription, Type: r.w.Type,
			Name: fmt.Sprintf("fabriq-bench-%d", i), SubscriptionInitialPosition: initial,
		})
		if err != nil {
			return out, fmt.Errorf("bench: subscribing to %s: %w", r.stream, err)
		}
		out = append(out, cons)
	}
	return out, nil
}

// producers creates the producers.
func (r *run) producers(ctx context.Context) ([]*client.Producer, error) {
	var out []*client.Producer
	for range r.w.Producers {
		p, err := r.c.CreateProducer(ctx, client.ProducerOptions{
			Stream: r.stream, MaxPendingMessages: r.w.InFlight,
			DisableBatching: r.w.DisableBatching, KeyBasedBatching: r.w.Keys > 0,
		})
		if err != nil {
			return out, fmt.Errorf("bench: producing to %s: %w", r.stream, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// produce runs every producer until the run's messages are sent or its
// duration is over, then waits for what is in flight.
func (r *run) produce(ctx context.Context, producers []*client.Producer) {
	if len(producers) == 0 {
		return
	}
	var wg sync.WaitGroup
	for i, p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.producer(ctx, i, p)
		}()
	}
	wg.Wait()
}

// producer sends one producer's messages.
func (r *run) producer(ctx context.Context, index int, p *client.Producer) {
	var deadline <-chan time.Time
	if r.w.Duration > 0 {
		t := time.NewTimer(time.Until(r.start.Add(r.w.Duration)))
		defer t.Stop()
		deadline = t.C
	}
	sem := make(chan struct{}, r.w.InFlight)
	pace := time.NewTimer(0)
	defer pace.Stop()
	var interval time.Duration
	if r.w.Rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(r.w.Producers) / r.w.Rate)
	}
	for k := int64(0); ; k++ {
		if r.w.Messages > 0 && r.sent.Add(1) > r.w.Messages {
			break
		}
		due := time.Now()
		if interval > 0 {
			due = r.start.Add(time.Duration(k) * interval)
			if d := time.Until(due); d > 0 {
				pace.Reset(d)
				select {
				case <-pace.C:
				case <-deadline:
					return
				case <-ctx.Done():
					return
				}
			}
		}
		select {
		case sem <- struct{}{}:
		case <-deadline:
			return
		case <-ctx.Done():
			return
		}
		msg := r.message(due, uint64(index)<<40|uint64(k))
		done := func(err error) {
			r.sendDone(due, err)
			<-sem
		}
		if r.w.Sync {
			_, err := p.Send(ctx, msg)
			done(err)
			continue
		}
		p.SendAsync(ctx, msg, func(_ client.MessageID, _ *client.ProducerMessage, err error) { done(err) })
	}
	// What is in flight is acknowledged or failed (by the producer's
	// send timeout) before the run ends.
	for range r.w.InFlight {
		sem <- struct{}{}
	}
}

// message builds a message due at due with sequence seq.
func (r *run) message(due time.Time, seq uint64) *client.ProducerMessage {
	payload := make([]byte, r.w.Size)
	binary.BigEndian.PutUint64(payload, uint64(due.UnixNano()))
	binary.BigEndian.PutUint64(payload[8:], seq)
	msg := &client.ProducerMessage{Payload: payload}
	if len(r.keys) > 0 {
		msg.Key = r.keys[mrand.IntN(len(r.keys))]
	}
	return msg
}

// sendDone counts a send's outcome.
func (r *run) sendDone(due time.Time, err error) {
	if err != nil {
		r.failed.Add(1)
		r.errMu.Lock()
		if r.firstErr == nil {
			r.firstErr = err
		}
		r.errMu.Unlock()
		return
	}
	now := time.Now()
	r.publish.record(now.Sub(due))
	r.acked.Add(1)
	storeMax(&r.lastAck, now.UnixNano())
}

// consume receives and acknowledges one consumer's messages until ctx
// ends.
func (r *run) consume(ctx context.Context, cons *client.Consumer) {
	for {
		m, err := cons.Receive(ctx)
		if err != nil {
			return
		}
		now := time.Now()
		if len(m.Payload) >= headerSize {
			sent := time.Unix(0, int64(binary.BigEndian.Uint64(m.Payload)))
			r.e2e.record(now.Sub(sent))
		}
		cons.Ack(ctx, m)
		storeMax(&r.lastRecv, now.UnixNano())
		if n := r.received.Add(1); r.w.Producers == 0 && r.w.Messages > 0 && n >= r.w.Messages {
			r.once.Do(func() { close(r.enough) })
		}
	}
}

// wait waits, once the producers are done, until the consumers have
// what was acknowledged (or Drain is over); without producers, until
// they have received Messages or Duration is over.
func (r *run) wait(ctx context.Context) {
	if r.w.Consumers == 0 {
		return
	}
	var limit <-chan time.Time
	if r.w.Producers > 0 {
		t := time.NewTimer(r.w.Drain)
		defer t.Stop()
		limit = t.C
	} else if r.w.Duration > 0 {
		t := time.NewTimer(time.Until(r.start.Add(r.w.Duration)))
		defer t.Stop()
		limit = t.C
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if r.w.Producers > 0 && r.received.Load() >= r.acked.Load() {
			return
		}
		select {
		case <-r.enough:
			return
		case <-limit:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// report prints a line of progress each second until done is closed.
func (r *run) report(done <-chan struct{}, out io.Writer) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastAcked, lastRecv int64
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		acked, recv := r.acked.Load(), r.received.Load()
		pubP99, _ := r.publish.tick()
		e2eP99, _ := r.e2e.tick()
		line := fmt.Sprintf("%5.0fs", time.Since(r.start).Seconds())
		if r.w.Producers > 0 {
			line += fmt.Sprintf("  sent %s msg/s (%.1f MB/s) publish p99 %s ms", count(acked-lastAcked),
				float64((acked-lastAcked)*int64(r.w.Size))/1e6, Millis(pubP99))
			if f := r.failed.Load(); f > 0 {
				line += fmt.Sprintf(" failed %s", count(f))
			}
		}
		if r.w.Consumers > 0 {
			line += fmt.Sprintf("  received %s msg/s end-to-end p99 %s ms", count(recv-lastRecv), Millis(e2eP99))
			if r.w.Producers > 0 {
				line += fmt.Sprintf("  backlog %s", count(max(acked-recv, 0)))
			}
		}
		fmt.Fprintln(out, line)
		lastAcked, lastRecv = acked, recv
	}
}

// result sums the run up.
func (r *run) result() *Result {
	res := &Result{Workload: r.w, Stream: r.stream}
	res.Workload.TypeName = r.w.Type.String()
	end := max(r.lastAck.Load(), r.lastRecv.Load())
	if end > 0 {
		res.Elapsed = Millis(time.Unix(0, end).Sub(r.start))
	}
	rate := func(n, until int64) (float64, float64) {
		if until == 0 || n == 0 {
			return 0, 0
		}
		s := time.Unix(0, until).Sub(r.start).Seconds()
		return float64(n) / s, float64(n*int64(r.w.Size)) / s / 1e6
	}
	res.Produced.Messages, res.Produced.Failed = r.acked.Load(), r.failed.Load()
	if r.firstErr != nil {
		res.Produced.FirstError = r.firstErr.Error()
	}
	res.Produced.Rate, res.Produced.MBps = rate(res.Produced.Messages, r.lastAck.Load())
	res.Produced.Publish = r.publish.summary()
	res.Consumed.Messages = r.received.Load()
	res.Consumed.Rate, res.Consumed.MBps = rate(res.Consumed.Messages, r.lastRecv.Load())
	res.Consumed.EndToEnd = r.e2e.summary()
	return res
}

// Print writes the result for a reader.
func (res *Result) Print(out io.Writer) {
	w := res.Workload
	fmt.Fprintf(out, "stream %s: producers %d, consumers %d (%s), %d-byte messages", res.Stream, w.Producers, w.Consumers, w.TypeName, w.Size)
	if w.Keys > 0 {
		fmt.Fprintf(out, ", %d keys", w.Keys)
	}
	fmt.Fprintf(out, "; %s s\n", strconv.FormatFloat(time.Duration(res.Elapsed).Seconds(), 'f', 1, 64))
	if w.Producers > 0 {
		p := res.Produced
		fmt.Fprintf(out, "produced  %s msgs  %s msg/s  %.1f MB/s", count(p.Messages), count(int64(p.Rate)), p.MBps)
		if p.Failed > 0 {
			fmt.Fprintf(out, "  FAILED %s (first: %s)", count(p.Failed), p.FirstError)
		}
		fmt.Fprintln(out)
		printLatency(out, "publish", p.Publish)
	}
	if w.Consumers > 0 {
		c := res.Consumed
		fmt.Fprintf(out, "consumed  %s msgs  %s msg/s  %.1f MB/s\n", count(c.Messages), count(int64(c.Rate)), c.MBps)
		printLatency(out, "end-to-end", c.EndToEnd)
	}
}

func printLatency(out io.Writer, name string, l Latency) {
	fmt.Fprintf(out, "  %-10s latency ms  p50 %s  p95 %s  p99 %s  p99.9 %s  max %s\n", name, l.P50, l.P95, l.P99, l.P999, l.Max)
}

// count formats n with thousands separators.
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// storeMax raises v to n.
func storeMax(v *atomic.Int64, n int64) {
	for {
		old := v.Load()
		if n <= old || v.CompareAndSwap(old, n) {
			return
		}
	}
}

package bench

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fabriq-io/fabriq/client"
)

// FailoverConfig is what Failover runs.
type FailoverConfig struct {
	// Kills is how many times the partition's leader is killed.
	Kills int `json:"kills"`
	// Kill is a shell command that kills a node: FABRIQ_NODE (its id)
	// and FABRIQ_NODE_ADDR (its client address) are in its environment.
	Kill string `json:"kill"`
	// Restart, if set, is run (with the same environment) once a kill is
	// measured; without it the node is expected to come back by itself
	// (a supervisor restarts it).
	Restart string `json:"restart,omitempty"`
	// Interval is the quiet time before each kill, once the cluster is
	// whole again. Default 3s.
	Interval time.Duration `json:"-"`
	// Replicas of the stream (one partition). Default 3.
	Replicas int `json:"replicas"`
	// Consumers on the key_shared subscription, and Keys the producer
	// spreads its messages over. Defaults 3 and 1,000.
	Consumers int `json:"consumers"`
	Keys      int `json:"keys"`
	// Size of each message. Default 1,024.
	Size int `json:"size"`
	// Timeout bounds each wait: for sends and deliveries after a kill,
	// for a killed node to come back. Default 2m.
	Timeout time.Duration `json:"-"`
}

// Validate reports what is wrong with the configuration.
func (f FailoverConfig) Validate() error {
	switch {
	case f.Kills < 1:
		return fmt.Errorf("bench failover: --kills must be at least 1, not %d", f.Kills)
	case f.Kill == "":
		return errors.New("bench failover: --kill is required: a shell command that kills the node named by $FABRIQ_NODE")
	case f.Replicas < 0 || f.Consumers < 0 || f.Keys < 0:
		return errors.New("bench failover: --replicas, --consumers and --keys must not be negative")
	case f.Size != 0 && f.Size < headerSize:
		return fmt.Errorf("bench failover: --size must be at least %d bytes, not %d", headerSize, f.Size)
	}
	return nil
}

// KillResult is one kill: the node killed and how long until a send
// made after the kill was acknowledged and until a message sent after
// the kill was delivered.
type KillResult struct {
	Node       string `json:"node"`
	ToAck      Millis `json:"to_ack_ms"`
	ToDelivery Millis `json:"to_delivery_ms"`
}

// FailoverResult is what Failover measured.
type FailoverResult struct {
	Config FailoverConfig `json:"config"`
	Stream string         `json:"stream"`
	Kills  []KillResult   `json:"kills"`
	// Medians and maxima over the kills.
	AckMedian      Millis `json:"to_ack_median_ms"`
	AckMax         Millis `json:"to_ack_max_ms"`
	DeliveryMedian Millis `json:"to_delivery_median_ms"`
	DeliveryMax    Millis `json:"to_delivery_max_ms"`
	// Acked sends; Delivered distinct messages; Missing acknowledged
	// messages never delivered (they must be none), with a few of their
	// sequence numbers; FailedSends were not acknowledged (during a
	// failover a send may time out; its outcome is unknown).
	Acked         int64    `json:"acked"`
	Delivered     int64    `json:"delivered"`
	Missing       int64    `json:"missing"`
	MissingSample []uint64 `json:"missing_sample,omitempty"`
	FailedSends   int64    `json:"failed_sends"`
}

// failover is one Failover's state: the producer and consumers record
// into it; the kill loop reads it.
type failover struct {
	mu        sync.Mutex
	acked     map[uint64]bool
	delivered map[uint64]bool
	// undelivered counts the acknowledged messages not delivered yet.
	undelivered int
	failed      int64
	killAt      time.Time // zero between kills
	toAck       time.Duration
	toDeliver   time.Duration
	changed     chan struct{} // signalled on every record
}

// Failover kills the leader of a new stream's partition cfg.Kills times
// while a synchronous producer and a key_shared subscription run,
// printing a line per kill to progress.
func Failover(ctx context.Context, c *client.Client, cfg FailoverConfig, progress io.Writer) (res *FailoverResult, err error) {
	cfg.Interval = cmp.Or(cfg.Interval, 3*time.Second)
	cfg.Replicas = cmp.Or(cfg.Replicas, 3)
	cfg.Consumers = cmp.Or(cfg.Consumers, 3)
	cfg.Keys = cmp.Or(cfg.Keys, 1000)
	cfg.Size = cmp.Or(cfg.Size, 1024)
	cfg.Timeout = cmp.Or(cfg.Timeout, 2*time.Minute)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	stream, cleanup, err := prepareStream(ctx, c, Workload{Partitions: 1, Replicas: cfg.Replicas})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := cleanup(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	f := &failover{acked: map[uint64]bool{}, delivered: map[uint64]bool{}, changed: make(chan struct{}, 1)}
	res = &FailoverResult{Config: cfg, Stream: stream}

	// The consumers run until every acknowledged message is delivered
	// (or the check gives up), the producer until the last kill.
	consCtx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	var consumers sync.WaitGroup
	defer consumers.Wait()
	defer stopConsumers()
	for i := range cfg.Consumers {
		cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "fabriq-bench-failover",
			Type: client.KeyShared, Name: fmt.Sprintf("fabriq-bench-%d", i), SubscriptionInitialPosition: client.Earliest})
		if err != nil {
			return nil, fmt.Errorf("bench failover: subscribing: %w", err)
		}
		defer cons.Close()
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			f.consume(consCtx, cons)
		}()
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, KeyBasedBatching: true})
	if err != nil {
		return nil, fmt.Errorf("bench failover: producing: %w", err)
	}
	defer p.Close()
	prodCtx, stopProducer := context.WithCancel(ctx)
	defer stopProducer()
	var producer sync.WaitGroup
	defer producer.Wait()
	defer stopProducer()
	producer.Add(1)
	go func() {
		defer producer.Done()
		f.produce(prodCtx, p, cfg)
	}()

	for k := range cfg.Kills {
		kr, err := f.killOnce(ctx, c, stream, cfg)
		if err != nil {
			return res, fmt.Errorf("bench failover: kill %d: %w", k+1, err)
		}
		res.Kills = append(res.Kills, kr)
		fmt.Fprintf(progress, "kill %d/%d: %s; first ack after %s ms, first delivery after %s ms\n", k+1, cfg.Kills, kr.Node, kr.ToAck, kr.ToDelivery)
	}
	stopProducer()
	producer.Wait()
	fmt.Fprintln(progress, "checking that every acknowledged message was delivered")
	f.until(ctx, cfg.Timeout, f.allDelivered)
	stopConsumers()
	consumers.Wait()
	f.summarise(res)
	return res, nil
}

// produce sends synchronously, one message at a time, until ctx ends.
func (f *failover) produce(ctx context.Context, p *client.Producer, cfg FailoverConfig) {
	for seq := uint64(0); ctx.Err() == nil; seq++ {
		start := time.Now()
		payload := make([]byte, cfg.Size)
		binary.BigEndian.PutUint64(payload, uint64(start.UnixNano()))
		binary.BigEndian.PutUint64(payload[8:], seq)
		sctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		_, err := p.Send(sctx, &client.ProducerMessage{Payload: payload, Key: "key-" + strconv.Itoa(mrand.IntN(cfg.Keys))})
		cancel()
		now := time.Now()
		f.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				f.failed++
			}
		} else {
			f.acked[seq] = true
			if !f.delivered[seq] {
				f.undelivered++
			}
			if !f.killAt.IsZero() && !start.Before(f.killAt) && f.toAck == 0 {
				f.toAck = now.Sub(f.killAt)
			}
		}
		f.mu.Unlock()
		f.signal()
	}
}

// consume records one consumer's deliveries until ctx ends.
func (f *failover) consume(ctx context.Context, cons *client.Consumer) {
	for {
		m, err := cons.Receive(ctx)
		if err != nil {
			return
		}
		now := time.Now()
		cons.Ack(ctx, m)
		if len(m.Payload) < headerSize {
			continue
		}
		sent := time.Unix(0, int64(binary.BigEndian.Uint64(m.Payload)))
		f.mu.Lock()
		if seq := binary.BigEndian.Uint64(m.Payload[8:]); !f.delivered[seq] {
			f.delivered[seq] = true
			if f.acked[seq] {
				f.undelivered--
			}
		}
		if !f.killAt.IsZero() && !sent.Before(f.killAt) && f.toDeliver == 0 {
			f.toDeliver = now.Sub(f.killAt)
		}
		f.mu.Unlock()
		f.signal()
	}
}

func (f *failover) signal() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// until waits until cond holds (checked on every record), ctx ends or
// timeout passes.
func (f *failover) until(ctx context.Context, timeout time.Duration, cond func() bool) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		f.mu.Lock()
		ok := cond()
		f.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-f.changed:
		case <-t.C:
			return fmt.Errorf("not within %v", timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// killOnce waits for a whole cluster and a quiet interval, kills the
// partition's leader and measures; then brings the node back.
func (f *failover) killOnce(ctx context.Context, c *client.Client, stream string, cfg FailoverConfig) (KillResult, error) {
	if _, _, err := awaitWhole(ctx, c, stream, cfg.Timeout); err != nil {
		return KillResult{}, err
	}
	if err := sleep(ctx, cfg.Interval); err != nil {
		return KillResult{}, err
	}
	// The leader may have moved during the interval.
	node, addr, err := awaitWhole(ctx, c, stream, cfg.Timeout)
	if err != nil {
		return KillResult{}, err
	}
	// The kill counts from when the command returns: a send made while it
	// runs may still be acknowledged by the node it kills.
	if err := shell(ctx, cfg.Kill, node, addr); err != nil {
		return KillResult{}, fmt.Errorf("--kill: %w", err)
	}
	f.mu.Lock()
	f.killAt, f.toAck, f.toDeliver = time.Now(), 0, 0
	f.mu.Unlock()
	err = f.until(ctx, cfg.Timeout, func() bool { return f.toAck > 0 && f.toDeliver > 0 })
	f.mu.Lock()
	kr := KillResult{Node: node, ToAck: Millis(f.toAck), ToDelivery: Millis(f.toDeliver)}
	f.killAt = time.Time{}
	f.mu.Unlock()
	if err != nil {
		return kr, fmt.Errorf("no send acknowledged and delivered after killing %s: %w", node, err)
	}
	if cfg.Restart != "" {
		if err := shell(ctx, cfg.Restart, node, addr); err != nil {
			return kr, fmt.Errorf("--restart: %w", err)
		}
	}
	return kr, nil
}

// awaitWhole waits until every node is alive and the stream's partition
// has a leader, and returns the leader's id and client address.
func awaitWhole(ctx context.Context, c *client.Client, stream string, timeout time.Duration) (string, string, error) {
	deadline := time.Now().Add(timeout)
	for {
		node, addr, whole := whole(ctx, c, stream)
		if whole {
			return node, addr, nil
		}
		if time.Now().After(deadline) {
			return "", "", fmt.Errorf("the cluster is not whole again after %v: a node is not alive or %s has no leader (restart the killed node: --restart, or a supervisor)", timeout, stream)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return "", "", err
		}
	}
}

// whole reports the leader of the stream's partition and whether every
// node is alive.
func whole(ctx context.Context, c *client.Client, stream string) (string, string, bool) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := c.ClusterStatus(qctx)
	if err != nil {
		return "", "", false
	}
	info, err := c.DescribeStream(qctx, stream)
	if err != nil || len(info.Partitions) == 0 || info.Partitions[0].Leader == "" {
		return "", "", false
	}
	leader, addr := info.Partitions[0].Leader, ""
	for _, n := range st.Nodes {
		if n.State != "alive" {
			return "", "", false
		}
		if n.ID == leader {
			addr = n.ClientAddr
		}
	}
	return leader, addr, addr != ""
}

// allDelivered reports whether every acknowledged message was
// delivered; f.mu is held.
func (f *failover) allDelivered() bool { return f.undelivered == 0 }

// summarise fills in the medians, maxima and the check.
func (f *failover) summarise(res *FailoverResult) {
	var acks, dels []time.Duration
	for _, k := range res.Kills {
		acks, dels = append(acks, time.Duration(k.ToAck)), append(dels, time.Duration(k.ToDelivery))
	}
	res.AckMedian, res.AckMax = medianMax(acks)
	res.DeliveryMedian, res.DeliveryMax = medianMax(dels)
	f.mu.Lock()
	defer f.mu.Unlock()
	res.Acked, res.FailedSends = int64(len(f.acked)), f.failed
	res.Delivered = int64(len(f.delivered))
	for seq := range f.acked {
		if !f.delivered[seq] {
			res.Missing++
			res.MissingSample = append(res.MissingSample, seq)
		}
	}
	slices.Sort(res.MissingSample)
	res.MissingSample = res.MissingSample[:min(len(res.MissingSample), 10)]
}

func medianMax(d []time.Duration) (Millis, Millis) {
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	return Millis(d[len(d)/2]), Millis(d[len(d)-1])
}

// Print writes the result for a reader.
func (res *FailoverResult) Print(out io.Writer) {
	fmt.Fprintf(out, "stream %s: %d kills of the partition leader, %d replicas, a synchronous producer, %d key_shared consumers\n",
		res.Stream, len(res.Kills), res.Config.Replicas, res.Config.Consumers)
	fmt.Fprintf(out, "kill -> first acknowledged send     median %s ms  max %s ms\n", res.AckMedian, res.AckMax)
	fmt.Fprintf(out, "kill -> first delivery of a new one  median %s ms  max %s ms\n", res.DeliveryMedian, res.DeliveryMax)
	fmt.Fprintf(out, "acknowledged %s, delivered %s, missing %s, sends failed %s\n", count(res.Acked), count(res.Delivered), count(res.Missing), count(res.FailedSends))
	if res.Missing > 0 {
		fmt.Fprintf(out, "MISSING acknowledged messages, first sequence numbers: %v\n", res.MissingSample)
	}
}

// shell runs a command with the node in its environment.
func shell(ctx context.Context, command, node, addr string) error {
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Env = append(os.Environ(), "FABRIQ_NODE="+node, "FABRIQ_NODE_ADDR="+addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%q for %s: %v: %s", command, node, err, out)
	}
	return nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

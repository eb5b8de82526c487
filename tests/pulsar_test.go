package tests

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/pulsarwire"
	"github.com/fabriq-io/fabriq/pulsarwire/pb"
)

// pulsarURL is a Pulsar service URL of the cluster's nodes.
func pulsarURL(nodes []*clusterNode) string {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.addr
	}
	return "pulsar://" + strings.Join(addrs, ",")
}

// newPulsarClient returns a pulsar-client-go client of the cluster, closed
// at the test's end.
func newPulsarClient(t testing.TB, nodes []*clusterNode) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               pulsarURL(nodes),
		OperationTimeout:  30 * time.Second,
		ConnectionTimeout: 5 * time.Second,
		Logger:            plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// testWriter writes a client's logs to the test's.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// A Pulsar producer and an exclusive Pulsar consumer on a short topic
// name; a fabriq consumer reads what the Pulsar producer sent.
func TestPulsarProduceConsume(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	pc := newPulsarClient(t, nodes)

	p, err := pc.CreateProducer(pulsar.ProducerOptions{Topic: "orders", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cons, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: "orders", SubscriptionName: "billing", Type: pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for i := range 10 {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: fmt.Sprint("k", i), Payload: []byte(fmt.Sprint("m", i)),
			Properties: map[string]string{"i": fmt.Sprint(i)}}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for i := range 10 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if string(m.Payload()) != fmt.Sprint("m", i) || m.Key() != fmt.Sprint("k", i) || m.Properties()["i"] != fmt.Sprint(i) {
			t.Fatalf("message %d: %q key %q properties %v", i, m.Payload(), m.Key(), m.Properties())
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	// A connection that sends a broken Pulsar frame is closed, and no
	// other: the producer's goes on.
	raw, err := net.DialTimeout("tcp", nodes[0].addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(30 * time.Second))
	// A total size of 12, a command size of 8 that is not protobuf.
	if _, err := raw.Write([]byte{0, 0, 0, 12, 0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, raw); err != nil {
		t.Fatalf("the broken connection was not closed: %v", err)
	}
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatalf("the producer after another connection broke: %v", err)
	}

	fc := newClient(t, clusterURL(nodes))
	fcons, err := fc.Subscribe(ctx, client.ConsumerOptions{Stream: "orders", Subscription: "fabriq", SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer fcons.Close()
	for i := range 10 {
		m, err := fcons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload) != fmt.Sprint("m", i) || m.Key != fmt.Sprint("k", i) {
			t.Fatalf("fabriq read %d: %q key %q", i, m.Payload, m.Key)
		}
	}
}

// Batches, key-based batches and compressed batches from Pulsar
// producers arrive whole, in order, with their keys and properties, read
// by a Pulsar consumer and by a fabriq consumer; what a fabriq producer
// sends a Pulsar consumer reads.
func TestPulsarBatchesAndCompression(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	pc := newPulsarClient(t, nodes)
	fc := newClient(t, clusterURL(nodes))
	for _, tc := range []struct {
		name string
		opts pulsar.ProducerOptions
	}{
		{"batched", pulsar.ProducerOptions{BatchingMaxMessages: 10, BatchingMaxPublishDelay: 50 * time.Millisecond}},
		{"key-based", pulsar.ProducerOptions{BatcherBuilderType: pulsar.KeyBasedBatchBuilder, BatchingMaxPublishDelay: 50 * time.Millisecond}},
		{"lz4", pulsar.ProducerOptions{CompressionType: pulsar.LZ4, BatchingMaxPublishDelay: 50 * time.Millisecond}},
		{"zstd", pulsar.ProducerOptions{CompressionType: pulsar.ZSTD, BatchingMaxPublishDelay: 50 * time.Millisecond}},
	} {
		topic := "persistent://public/default/batch-" + tc.name
		tc.opts.Topic = topic
		p, err := pc.CreateProducer(tc.opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		const n = 200
		done := make(chan error, n)
		for i := range n {
			p.SendAsync(ctx, &pulsar.ProducerMessage{Key: fmt.Sprint("k", i%7), Payload: []byte(fmt.Sprint(tc.name, "-", i)),
				Properties: map[string]string{"i": fmt.Sprint(i)}}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { done <- err })
		}
		for range n {
			if err := <-done; err != nil {
				t.Fatalf("%s: send: %v", tc.name, err)
			}
		}
		p.Close()
		// Per key, in order, through a Pulsar consumer.
		cons, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		last := map[string]int{}
		for range n {
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatalf("%s: receive: %v", tc.name, err)
			}
			var i int
			fmt.Sscan(m.Properties()["i"], &i)
			if string(m.Payload()) != fmt.Sprint(tc.name, "-", i) || m.Key() != fmt.Sprint("k", i%7) {
				t.Fatalf("%s: %q key %q properties %v", tc.name, m.Payload(), m.Key(), m.Properties())
			}
			if prev, ok := last[m.Key()]; ok && prev >= i {
				t.Fatalf("%s: key %s: %d after %d", tc.name, m.Key(), i, prev)
			}
			last[m.Key()] = i
			cons.Ack(m)
		}
		cons.Close()
		// The same messages through fabriq's client.
		fcons, err := fc.Subscribe(ctx, client.ConsumerOptions{Stream: topic, Subscription: "f", SubscriptionInitialPosition: client.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		for range n {
			m, err := fcons.Receive(ctx)
			if err != nil || m.Properties["i"] == "" || string(m.Payload) != fmt.Sprint(tc.name, "-", m.Properties["i"]) {
				t.Fatalf("%s: fabriq read %+v %v", tc.name, m, err)
			}
		}
		fcons.Close()
	}

	// The reverse: a fabriq producer, a Pulsar consumer.
	if err := createStream(ctx, fc, "persistent://public/default/from-fabriq", 1, 3); err != nil {
		t.Fatal(err)
	}
	fp, err := fc.CreateProducer(ctx, client.ProducerOptions{Stream: "persistent://public/default/from-fabriq"})
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	cons, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: "from-fabriq", SubscriptionName: "p", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for i := range 5 {
		if _, err := fp.Send(ctx, &client.ProducerMessage{Key: fmt.Sprint("k", i), Payload: []byte(fmt.Sprint("f", i)),
			Properties: map[string]string{"from": "fabriq"}, EventTime: time.UnixMilli(1_700_000_000_000 + int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload()) != fmt.Sprint("f", i) || m.Key() != fmt.Sprint("k", i) || m.Properties()["from"] != "fabriq" ||
			m.EventTime().UnixMilli() != 1_700_000_000_000+int64(i) || m.PublishTime().IsZero() {
			t.Fatalf("message %d: %q key %q %v event %v publish %v", i, m.Payload(), m.Key(), m.Properties(), m.EventTime(), m.PublishTime())
		}
		cons.Ack(m)
	}
}

// sendPulsar sends n messages with keys k0..k(keys-1), payloads prefix-i,
// waiting for each receipt.
func sendPulsar(ctx context.Context, t *testing.T, pc pulsar.Client, topic, prefix string, n, keys int) {
	t.Helper()
	p, err := pc.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxPublishDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan error, n)
	for i := range n {
		p.SendAsync(ctx, &pulsar.ProducerMessage{Key: fmt.Sprint("k", i%keys), Payload: []byte(fmt.Sprint(prefix, i))},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { done <- err })
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// receiveN receives n messages from any of consumers, acking them when
// ack; it returns, per consumer, the payloads it got in order.
func receiveN(ctx context.Context, t *testing.T, n int, ack bool, consumers ...pulsar.Consumer) [][]pulsar.Message {
	t.Helper()
	got := make([][]pulsar.Message, len(consumers))
	ch := make(chan pulsar.ConsumerMessage, n)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case m := <-c.Chan():
					ch <- m
				case <-stop:
					return
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	for range n {
		select {
		case m := <-ch:
			for i, c := range consumers {
				if c == m.Consumer {
					got[i] = append(got[i], m.Message)
				}
			}
			if ack {
				if err := m.Consumer.Ack(m.Message); err != nil {
					t.Fatal(err)
				}
			}
		case <-ctx.Done():
			total := 0
			for _, g := range got {
				total += len(g)
			}
			t.Fatalf("received %d of %d", total, n)
		}
	}
	return got
}

// The four subscription types through pulsar-client-go.
func TestPulsarSubscriptionTypes(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	pc := newPulsarClient(t, nodes)
	// Acks wait for their ACK_RESPONSE: a consumer closed after its acks
	// leaves nothing to redeliver.
	sub := func(topic, name string, typ pulsar.SubscriptionType, consumer string, ks *pulsar.KeySharedPolicy) (pulsar.Consumer, error) {
		return pc.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: name, Type: typ, Name: consumer, KeySharedPolicy: ks,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, AckWithResponse: true})
	}

	t.Run("exclusive refuses a second consumer", func(t *testing.T) {
		a, err := sub("excl", "s", pulsar.Exclusive, "a", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if b, err := sub("excl", "s", pulsar.Exclusive, "b", nil); err == nil {
			b.Close()
			t.Fatal("a second exclusive consumer was let in")
		} else if !strings.Contains(err.Error(), "ConsumerBusy") {
			t.Fatalf("the second consumer: %v, want ConsumerBusy", err)
		}
	})

	t.Run("shared spreads and redelivers a closed consumer's unacked", func(t *testing.T) {
		a, err := sub("shared", "s", pulsar.Shared, "a", nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := sub("shared", "s", pulsar.Shared, "b", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		sendPulsar(ctx, t, pc, "shared", "m", 100, 10)
		got := receiveN(ctx, t, 100, false, a, b)
		if len(got[0]) == 0 || len(got[1]) == 0 {
			t.Fatalf("shared did not spread: a %d, b %d", len(got[0]), len(got[1]))
		}
		for _, m := range got[1] {
			b.Ack(m)
		}
		a.Close() // unacked: they go to b
		again := receiveN(ctx, t, len(got[0]), true, b)
		if len(again[0]) != len(got[0]) {
			t.Fatalf("b got %d of a's %d", len(again[0]), len(got[0]))
		}
		for _, m := range again[0] {
			if m.RedeliveryCount() == 0 {
				t.Fatalf("%s redelivered with count 0", m.Payload())
			}
		}
	})

	t.Run("failover picks a master and the next takes over", func(t *testing.T) {
		a, err := sub("fo", "s", pulsar.Failover, "a", nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := sub("fo", "s", pulsar.Failover, "b", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		sendPulsar(ctx, t, pc, "fo", "m", 20, 1)
		got := receiveN(ctx, t, 20, true, a, b)
		master, standby := 0, 1
		if len(got[1]) > 0 {
			master, standby = 1, 0
		}
		if len(got[standby]) != 0 {
			t.Fatalf("both consumers got messages: %d and %d", len(got[0]), len(got[1]))
		}
		for i, m := range got[master] {
			if string(m.Payload()) != fmt.Sprint("m", i) {
				t.Fatalf("out of order: %s at %d", m.Payload(), i)
			}
		}
		[]pulsar.Consumer{a, b}[master].Close()
		sendPulsar(ctx, t, pc, "fo", "n", 10, 1)
		next := receiveN(ctx, t, 10, true, []pulsar.Consumer{a, b}[standby])
		for i, m := range next[0] {
			if string(m.Payload()) != fmt.Sprint("n", i) {
				t.Fatalf("the next in line got %s at %d", m.Payload(), i)
			}
		}
		if master == 0 {
			a = nil
		} else {
			a.Close()
		}
	})

	for _, ks := range []struct {
		name   string
		policy func(i int) *pulsar.KeySharedPolicy
	}{
		{"auto split", func(int) *pulsar.KeySharedPolicy { return nil }},
		{"sticky", func(i int) *pulsar.KeySharedPolicy {
			return &pulsar.KeySharedPolicy{Mode: pulsar.KeySharedPolicyModeSticky,
				HashRanges: [][]int{{0, 32767}, {32768, 65535}}[i]}
		}},
	} {
		t.Run("key_shared "+ks.name+" keeps one consumer per key, in order", func(t *testing.T) {
			topic := "ks-" + strings.ReplaceAll(ks.name, " ", "-")
			var cs []pulsar.Consumer
			for i := range 2 {
				c, err := sub(topic, "s", pulsar.KeyShared, fmt.Sprint("c", i), ks.policy(i))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				cs = append(cs, c)
			}
			sendPulsar(ctx, t, pc, topic, "m", 200, 20)
			got := receiveN(ctx, t, 200, true, cs...)
			owner := map[string]int{}
			for ci, ms := range got {
				last := map[string]int{}
				for _, m := range ms {
					if o, ok := owner[m.Key()]; ok && o != ci {
						t.Fatalf("key %s on two consumers", m.Key())
					}
					owner[m.Key()] = ci
					var i int
					fmt.Sscanf(string(m.Payload()), "m%d", &i)
					if p, ok := last[m.Key()]; ok && p >= i {
						t.Fatalf("key %s: %d after %d", m.Key(), i, p)
					}
					last[m.Key()] = i
				}
			}
			if len(got[0]) == 0 || len(got[1]) == 0 {
				t.Fatalf("one consumer got every key: %d and %d", len(got[0]), len(got[1]))
			}
		})
	}
}

// A partitioned topic of 4 partitions: a Pulsar producer routes by key
// (each key to one partition), a consumer reads every partition; a regex
// consumer picks up a topic created after it subscribed.
func TestPulsarPartitionsAndPattern(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	pc := newPulsarClient(t, nodes)
	fc := newClient(t, clusterURL(nodes))
	if err := createStream(ctx, fc, "persistent://public/default/parts", 4, 3); err != nil {
		t.Fatal(err)
	}
	cons, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: "parts", SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	sendPulsar(ctx, t, pc, "parts", "m", 200, 16)
	got := receiveN(ctx, t, 200, true, cons)
	partOf := map[string]string{}
	parts := map[string]bool{}
	for _, m := range got[0] {
		p := m.Topic()
		if q, ok := partOf[m.Key()]; ok && q != p {
			t.Fatalf("key %s on %s and %s", m.Key(), q, p)
		}
		partOf[m.Key()] = p
		parts[p] = true
	}
	if len(parts) < 2 {
		t.Fatalf("16 keys went to %d partition(s): %v", len(parts), parts)
	}

	// A pattern consumer, and a topic created after it.
	pat, err := pc.Subscribe(pulsar.ConsumerOptions{TopicsPattern: "persistent://public/default/later-.*", SubscriptionName: "p",
		AutoDiscoveryPeriod: 500 * time.Millisecond, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer pat.Close()
	if err := createStream(ctx, fc, "persistent://public/default/later-1", 1, 3); err != nil {
		t.Fatal(err)
	}
	if err := createStream(ctx, fc, "persistent://public/default/other-1", 1, 3); err != nil {
		t.Fatal(err)
	}
	sendPulsar(ctx, t, pc, "persistent://public/default/other-1", "no", 3, 1)
	sendPulsar(ctx, t, pc, "persistent://public/default/later-1", "yes", 3, 1)
	later := receiveN(ctx, t, 3, true, pat)
	for i, m := range later[0] {
		if string(m.Payload()) != fmt.Sprint("yes", i) {
			t.Fatalf("the pattern consumer got %s", m.Payload())
		}
	}
}

// Nacks come back with a redelivery count and go to a dead-letter topic
// after the policy's deliveries; seek by id and by time; readers from the
// earliest message and from a message id.
func TestPulsarNackSeekReader(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	pc := newPulsarClient(t, nodes)
	sendPulsar(ctx, t, pc, "jobs", "m", 10, 1)

	cons, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: "jobs", SubscriptionName: "s", Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, NackRedeliveryDelay: 100 * time.Millisecond,
		DLQ: &pulsar.DLQPolicy{MaxDeliveries: 3, DeadLetterTopic: "persistent://public/default/jobs-dlq"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	dlq, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: "persistent://public/default/jobs-dlq", SubscriptionName: "d",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	// m3 is always nacked; the others acked.
	counts := []uint32{}
	for acked := 0; acked < 9 || len(counts) < 3; {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload()) == "m3" {
			counts = append(counts, m.RedeliveryCount())
			if len(counts) > 3 {
				t.Fatalf("m3 delivered past the policy's 3 deliveries: counts %v", counts)
			}
			cons.Nack(m)
			continue
		}
		cons.Ack(m)
		acked++
	}
	d, err := dlq.Receive(ctx)
	if err != nil || string(d.Payload()) != "m3" {
		t.Fatalf("the dead-letter topic got %v %v", d, err)
	}
	if len(counts) != 3 || counts[0] != 0 || counts[2] != 2 {
		t.Fatalf("m3's redelivery counts: %v, want 0 1 2", counts)
	}

	// Seek: a second subscription reads all, then seeks back to m5's id
	// and to the start by time.
	seeker, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: "jobs", SubscriptionName: "seek", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer seeker.Close()
	var ids []pulsar.MessageID
	for range 10 {
		m, err := seeker.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID())
		seeker.Ack(m)
	}
	if err := seeker.Seek(ids[5]); err != nil {
		t.Fatal(err)
	}
	// As against Pulsar: the client skips the id it sought (its start is
	// exclusive unless StartMessageIDInclusive), so m6 comes next.
	if m, err := seeker.Receive(ctx); err != nil || string(m.Payload()) != "m6" {
		t.Fatalf("after a seek to m5's id: %v %v", m, err)
	}
	// By time, on a subscription that starts at the end. (Not on the one
	// above: pulsar-client-go keeps the id it sought as a floor for the
	// messages it lets through, against Pulsar as here.)
	byTime, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: "jobs", SubscriptionName: "by-time"})
	if err != nil {
		t.Fatal(err)
	}
	defer byTime.Close()
	if err := byTime.SeekByTime(time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if m, err := byTime.Receive(ctx); err != nil || string(m.Payload()) != fmt.Sprint("m", i) {
			t.Fatalf("after a seek to the epoch, %d: %v %v", i, m, err)
		}
	}

	// Readers.
	r, err := pc.CreateReader(pulsar.ReaderOptions{Topic: "jobs", StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range 10 {
		m, err := r.Next(ctx)
		if err != nil || string(m.Payload()) != fmt.Sprint("m", i) {
			t.Fatalf("reader from the earliest, %d: %v %v", i, m, err)
		}
	}
	from, err := pc.CreateReader(pulsar.ReaderOptions{Topic: "jobs", StartMessageID: ids[7], StartMessageIDInclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer from.Close()
	for i := 7; i < 10; i++ {
		m, err := from.Next(ctx)
		if err != nil || string(m.Payload()) != fmt.Sprint("m", i) {
			t.Fatalf("reader from m7's id, %d: %v %v", i, m, err)
		}
	}
	if from.HasNext() {
		t.Fatal("the reader has a next message past the last")
	}
}

// The partition's leader SIGKILLed under a Pulsar producer and two Pulsar
// key_shared consumers: every message acknowledged to the producer is
// delivered, each key's messages in order, each key on the same consumer
// before and after.
func TestPulsarLeaderKilled(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	fc := newClient(t, clusterURL(nodes))
	const topic = "persistent://public/default/ks-kill"
	if err := createStream(ctx, fc, topic, 1, 3); err != nil {
		t.Fatal(err)
	}
	pc := newPulsarClient(t, nodes)
	var cs []pulsar.Consumer
	for i := range 2 {
		c, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared, Name: fmt.Sprint("c", i),
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, AckWithResponse: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	p, err := pc.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// The consumers read all along: owner and order per key.
	var mu sync.Mutex
	owner := map[string]int{}
	last := map[string]int{}
	got := map[string]bool{}
	var failure error
	recvCtx, stopRecv := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for ci, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := c.Receive(recvCtx)
				if err != nil {
					return
				}
				var k, n int
				fmt.Sscanf(string(m.Payload()), "k%d-%d", &k, &n)
				key := m.Key()
				mu.Lock()
				if o, ok := owner[key]; ok && o != ci && failure == nil {
					failure = fmt.Errorf("key %s on consumer %d, then on %d", key, o, ci)
				}
				owner[key] = ci
				if !got[string(m.Payload())] {
					if l, ok := last[key]; ok && n <= l && failure == nil {
						failure = fmt.Errorf("key %s: message %d after %d", key, n, l)
					}
					last[key] = n
					got[string(m.Payload())] = true
				}
				mu.Unlock()
				c.Ack(m)
			}
		}()
	}

	leader := byID(nodes, leaderOf(ctx, t, fc, topic))
	acked := map[string]bool{}
	const keys, total = 8, 400
	for i := range total {
		if i == total/2 {
			leader.kill()
		}
		payload := fmt.Sprintf("k%d-%d", i%keys, i)
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: fmt.Sprint("k", i%keys), Payload: []byte(payload)}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		acked[payload] = true
	}
	eventually(ctx, t, "every acknowledged message delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for p := range acked {
			if !got[p] {
				return false
			}
		}
		return true
	})
	stopRecv()
	wg.Wait()
	if failure != nil {
		t.Fatal(failure)
	}
	if len(owner) != keys {
		t.Fatalf("%d keys seen, want %d", len(owner), keys)
	}
}

// Pulsar's token authentication over TLS: a Pulsar client presents
// fabriq's JWT as its token; a token of another tenant, or none, is
// refused.
func TestPulsarTokenAndTLS(t *testing.T) {
	s := secure(t)
	nodes := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.addr
	}
	connect := func(token string) pulsar.Client {
		opts := pulsar.ClientOptions{URL: "pulsar+ssl://" + strings.Join(addrs, ","), TLSTrustCertsFilePath: s.caFile,
			OperationTimeout: 10 * time.Second, ConnectionTimeout: 5 * time.Second,
			Logger: plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError})))}
		if token != "" {
			opts.Authentication = pulsar.NewAuthenticationToken(token)
		}
		c, err := pulsar.NewClient(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	fc := newClient(t, clusterURL(nodes))
	if err := fc.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := fc.CreateFabric(ctx, "acme/prod", client.FabricOptions{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	const topic = "persistent://acme/prod/orders"
	acme := connect(cliToken(t, "--secret-file", s.secretFile, "--subject", "acme", "--tenant", "acme", "--actions", "produce,consume", "--expires", "1h"))
	p, err := acme.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("acme's token produces to acme: %v", err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	cons, err := acme.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if m, err := cons.Receive(ctx); err != nil || string(m.Payload()) != "hello" {
		t.Fatalf("receive: %v %v", m, err)
	}

	other := connect(cliToken(t, "--secret-file", s.secretFile, "--subject", "other", "--tenant", "other", "--actions", "produce,consume", "--expires", "1h"))
	if _, err := other.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil || !strings.Contains(err.Error(), "Authoriz") {
		t.Fatalf("another tenant's token produces to acme: %v", err)
	}
	if _, err := other.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "x"}); err == nil || !strings.Contains(err.Error(), "Authoriz") {
		t.Fatalf("another tenant's token consumes from acme: %v", err)
	}
	none := connect("")
	if _, err := none.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil {
		t.Fatal("a client without a token produces")
	}
}

// A cumulative ack on a shared subscription is refused, as fabriq's own
// clients are told (pulsar-client-go refuses it before sending; a client
// of another language may not).
func TestPulsarCumulativeAckRefusedInShared(t *testing.T) {
	n := startNode(t, "n1", t.TempDir())
	nc, err := net.DialTimeout("tcp", n.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	send := func(b *pb.BaseCommand) {
		t.Helper()
		frame, err := pulsarwire.AppendFrame(nil, b, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(frame); err != nil {
			t.Fatal(err)
		}
	}
	// next returns the next frame other than a PING (which it answers).
	next := func() *pb.BaseCommand {
		t.Helper()
		for {
			f, _, err := pulsarwire.ReadFrame(nc, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if f.Command.GetType() != pb.BaseCommand_PING {
				return f.Command
			}
			send(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
		}
	}
	send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{ClientVersion: proto.String("raw"), ProtocolVersion: proto.Int32(20)}})
	if c := next(); c.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("got %v, want CONNECTED", c)
	}
	// As clients do: the lookup waits for the node to be ready.
	send(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(), PartitionMetadata: &pb.CommandPartitionedTopicMetadata{
		Topic: proto.String("raw-shared"), RequestId: proto.Uint64(10)}})
	if c := next(); c.GetPartitionMetadataResponse().GetResponse() != pb.CommandPartitionedTopicMetadataResponse_Success {
		t.Fatalf("partitioned metadata: %v", c)
	}
	send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{Topic: proto.String("raw-shared"), RequestId: proto.Uint64(11)}})
	if c := next(); c.GetLookupTopicResponse().GetResponse() != pb.CommandLookupTopicResponse_Connect {
		t.Fatalf("lookup: %v", c)
	}
	send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{Topic: proto.String("raw-shared"),
		Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Shared.Enum(), ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1)}})
	if c := next(); c.GetType() != pb.BaseCommand_SUCCESS || c.GetSuccess().GetRequestId() != 1 {
		t.Fatalf("subscribe: %v", c)
	}
	send(&pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{ConsumerId: proto.Uint64(1), AckType: pb.CommandAck_Cumulative.Enum(),
		MessageId: []*pb.MessageIdData{{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(0)}}, RequestId: proto.Uint64(2)}})
	c := next()
	if r := c.GetAckResponse(); c.GetType() != pb.BaseCommand_ACK_RESPONSE || r.GetRequestId() != 2 || r.GetError() != pb.ServerError_NotAllowedError {
		t.Fatalf("a cumulative ack on a shared subscription: %v", c)
	}
	// A request fabriq does not serve, GET_SCHEMA (34, request id 3), is
	// refused with an ERROR naming it, and the connection goes on.
	raw := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 34)
	raw = protowire.AppendTag(raw, 34, protowire.BytesType)
	raw = protowire.AppendBytes(raw, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 3))
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(raw)+4))
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(raw)))
	if _, err := nc.Write(append(frame, raw...)); err != nil {
		t.Fatal(err)
	}
	if c := next(); c.GetType() != pb.BaseCommand_ERROR || c.GetError().GetRequestId() != 3 {
		t.Fatalf("GET_SCHEMA: %v", c)
	}
	send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	if c := next(); c.GetType() != pb.BaseCommand_PONG {
		t.Fatalf("PING after the refusal: %v", c)
	}
}

package tests

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fabriq-io/fabriq/client"
)

// scrape fetches a node's /metrics and parses it.
func scrape(ctx context.Context, t testing.TB, n *node) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := getHTTP(ctx, t, n, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics answered %d %q", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v", err)
	}
	return fams
}

// sumOf sums a family's series whose labels start with the given values
// (label=prefix), gauges and counters alike; found says a series matched.
func sumOf(fams map[string]*dto.MetricFamily, name, label, prefix string) (sum float64, found bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if label != "" {
			match := false
			for _, l := range m.GetLabel() {
				if l.GetName() == label && strings.HasPrefix(l.GetValue(), prefix) {
					match = true
				}
			}
			if !match {
				continue
			}
		}
		found = true
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		}
	}
	return sum, found
}

// A node's /metrics follows a stream as it is used: messages in, the
// log's size, a subscription's backlog and consumers, connections, the
// partitions it leads, and the free disk space.
func TestMetricsFollowTheLoad(t *testing.T) {
	n := startNode(t, "n1", t.TempDir())
	ctx := testContext(t, 2*time.Minute)
	c := newClient(t, n.url())
	const stream = "persistent://public/default/metered"
	if err := createStream(ctx, c, stream, 2, 1); err != nil {
		t.Fatal(err)
	}
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "sub", Type: client.Shared,
		AckWithReceipt: true, SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	want := func(fams map[string]*dto.MetricFamily, name, label string, v float64) {
		t.Helper()
		got, found := sumOf(fams, name, label, stream)
		if !found || got != v {
			t.Errorf("%s of %s: %v (found %v), want %v", name, stream, got, found, v)
		}
	}
	fams := scrape(ctx, t, n)
	want(fams, "fabriq_partition_messages_in_total", "partition", 0)
	want(fams, "fabriq_partition_leader", "partition", 2)
	want(fams, "fabriq_subscription_consumers", "partition", 2)
	want(fams, "fabriq_subscription_backlog", "partition", 0)
	if conns, _ := sumOf(fams, "fabriq_client_connections", "", ""); conns < 1 {
		t.Errorf("fabriq_client_connections %v with a client connected", conns)
	}
	if free, _ := sumOf(fams, "fabriq_disk_free_bytes", "", ""); free <= 0 {
		t.Errorf("fabriq_disk_free_bytes %v", free)
	}
	if _, found := sumOf(fams, "go_goroutines", "", ""); !found {
		t.Error("no go_goroutines: Go's metrics are missing")
	}
	sizeBefore, _ := sumOf(fams, "fabriq_partition_log_bytes", "partition", stream)

	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const count = 100
	payload := make([]byte, 1024)
	for range count {
		if _, err := p.Send(ctx, &client.ProducerMessage{Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	fams = scrape(ctx, t, n)
	want(fams, "fabriq_partition_messages_in_total", "partition", count)
	want(fams, "fabriq_partition_bytes_in_total", "partition", count*1024)
	// One send at a time: each its own Raft entry, each committed once;
	// and the producer's opening on each partition (an empty batch).
	if h := fams["fabriq_raft_commit_seconds"]; h == nil || h.GetMetric()[0].GetHistogram().GetSampleCount() != count+2 {
		t.Errorf("fabriq_raft_commit_seconds: %v, want %d commits", h, count+2)
	}
	// Delivered, not acknowledged: still the backlog.
	want(fams, "fabriq_subscription_backlog", "partition", count)
	if size, _ := sumOf(fams, "fabriq_partition_log_bytes", "partition", stream); size-sizeBefore < count*1024 {
		t.Errorf("the log grew %v bytes for %d messages of 1 KiB", size-sizeBefore, count)
	}

	for range count {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := cons.Ack(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	fams = scrape(ctx, t, n)
	want(fams, "fabriq_subscription_backlog", "partition", 0)
	want(fams, "fabriq_subscription_consumers", "partition", 2)
	// Counted once the frame is queued for the connection: maybe a moment
	// after the consumer has it.
	eventually(ctx, t, "100 messages out", func() bool {
		out, _ := sumOf(scrape(ctx, t, n), "fabriq_partition_messages_out_total", "partition", stream)
		return out == count
	})
	fams = scrape(ctx, t, n)
	want(fams, "fabriq_partition_bytes_out_total", "partition", count*1024)
	// The metadata group and both partitions elected this node.
	for _, name := range []string{"fabriq_raft_elections_total", "fabriq_raft_leader_changes_total"} {
		if v, _ := sumOf(fams, name, "", ""); v < 3 {
			t.Errorf("%s = %v; three groups elected a leader", name, v)
		}
	}
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}
	fams = scrape(ctx, t, n)
	want(fams, "fabriq_subscription_consumers", "partition", 0)
	want(fams, "fabriq_partition_messages_in_total", "partition", count)
}

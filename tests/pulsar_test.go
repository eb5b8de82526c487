package tests

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/fabriq-io/fabriq/client"
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

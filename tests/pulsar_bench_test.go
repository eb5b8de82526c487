package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/fabriq-io/fabriq/client"
)

// BenchmarkPulsarProduce measures pulsar-client-go next to fabriq's own
// client, on one real fabriqd with single-replica partitions (one-node)
// and on 3 nodes with 3 replicas (three-nodes): async sends of 1 KiB with
// up to 1,000 in flight (batched, as each client does by default) and
// synchronous sends one at a time.
//
//	go test -run '^$' -bench 'PulsarProduce/.*/.*/async' -benchtime 100000x ./tests
//	go test -run '^$' -bench 'PulsarProduce/.*/.*/^sync' -benchtime 3000x ./tests
func BenchmarkPulsarProduce(b *testing.B) {
	b.Run("one-node", func(b *testing.B) {
		n := startNode(b, "n1", b.TempDir())
		benchPulsarProduce(b, n.url(), "pulsar://"+n.addr, 1)
	})
	b.Run("three-nodes", func(b *testing.B) {
		nodes := startCluster(b, 3)
		benchPulsarProduce(b, clusterURL(nodes), pulsarURL(nodes), 3)
	})
}

func benchPulsarProduce(b *testing.B, fabriqURL, pulsarURL string, replicas int) {
	fc, err := client.New(client.Options{URL: fabriqURL, OperationTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer fc.Close()
	pc, err := pulsar.NewClient(pulsar.ClientOptions{URL: pulsarURL, OperationTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer pc.Close()
	ctx := b.Context()
	payload := make([]byte, 1024)
	type sender struct {
		async func(done func(error))
		sync  func() error
		close func()
	}
	senders := map[string]func(stream string) sender{
		"fabriq": func(stream string) sender {
			p, err := fc.CreateProducer(ctx, client.ProducerOptions{Stream: stream, MaxPendingMessages: 1000})
			if err != nil {
				b.Fatal(err)
			}
			return sender{
				async: func(done func(error)) {
					p.SendAsync(ctx, &client.ProducerMessage{Payload: payload}, func(_ client.MessageID, _ *client.ProducerMessage, err error) { done(err) })
				},
				sync:  func() error { _, err := p.Send(ctx, &client.ProducerMessage{Payload: payload}); return err },
				close: func() { p.Close() },
			}
		},
		"pulsar": func(stream string) sender {
			p, err := pc.CreateProducer(pulsar.ProducerOptions{Topic: stream, MaxPendingMessages: 1000})
			if err != nil {
				b.Fatal(err)
			}
			return sender{
				async: func(done func(error)) {
					p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { done(err) })
				},
				sync:  func() error { _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: payload}); return err },
				close: p.Close,
			}
		},
	}
	for _, who := range []string{"fabriq", "pulsar"} {
		for _, mode := range []string{"async", "sync"} {
			stream := fmt.Sprintf("persistent://public/default/bench-%s-%s", who, mode)
			if err := createStream(ctx, fc, stream, 1, replicas); err != nil {
				b.Fatal(err)
			}
			s := senders[who](stream)
			b.Run(who+"/"+mode, func(b *testing.B) {
				b.SetBytes(int64(len(payload)))
				if mode == "async" {
					benchAsync(b, s.async)
					return
				}
				benchSync(b, s.sync)
			})
			s.close()
		}
	}
}

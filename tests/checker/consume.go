package checker

import (
	"cmp"
	"context"
	"fmt"
	"sync"

	"github.com/fabriq-io/fabriq/client"
)

// Keys returns n key names, key-0 … key-(n-1).
func Keys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	return keys
}

// Each says n messages were sent for every key: what CheckOrder and
// Missing expect.
func Each(keys []string, n int) map[string]int {
	out := make(map[string]int, len(keys))
	for _, k := range keys {
		out[k] = n
	}
	return out
}

// Payload is a message of a key's send order: "KEY SEQ".
func Payload(key string, seq int) []byte { return fmt.Appendf(nil, "%s %d", key, seq) }

// Seq returns a message's place in its key's send order, from a Payload.
func Seq(m *client.Message) int {
	var key string
	var seq int
	fmt.Sscanf(string(m.Payload), "%s %d", &key, &seq)
	return seq
}

// Consume receives on a consumer until ctx ends, recording each message
// in h and acking it, unless hold keeps it (the caller acks it later and
// calls Released). A failed ack means a redelivery, which the checks allow.
func Consume(ctx context.Context, cons *client.Consumer, h *KeyHistory, hold func(*client.Message) bool) {
	for {
		m, err := cons.Receive(ctx)
		if err != nil {
			return
		}
		h.Received(Delivery{Consumer: cons.Name(), Key: m.Key, Seq: Seq(m), Offset: m.ID.Offset, Redelivery: m.RedeliveryCount})
		if hold != nil && hold(m) {
			continue
		}
		h.Released(cons.Name(), m.Key)
		cons.Ack(ctx, m)
	}
}

// Produce sends rounds [from, to) of one message per key, payload "KEY SEQ",
// and returns the acknowledged ids and the first failure.
func Produce(ctx context.Context, p *client.Producer, keys []string, from, to int) ([]client.MessageID, error) {
	var mu sync.Mutex
	var ids []client.MessageID
	var failed error
	for seq := from; seq < to; seq++ {
		for _, k := range keys {
			p.SendAsync(ctx, &client.ProducerMessage{Key: k, Payload: Payload(k, seq)}, func(id client.MessageID, _ *client.ProducerMessage, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = cmp.Or(failed, err)
					return
				}
				ids = append(ids, id)
			})
		}
	}
	err := p.Flush(ctx)
	mu.Lock()
	defer mu.Unlock()
	return ids, cmp.Or(failed, err)
}

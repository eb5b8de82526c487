package subscription

import (
	"fmt"
	"testing"
)

// BenchmarkEngine measures the engine alone, per mode: 1,000 keys, each
// message delivered once and acked, consumers granting permits as they
// ack; the figure is per message. Exclusive has one consumer; shared,
// failover and key_shared three (failover delivers to its master).
func BenchmarkEngine(b *testing.B) {
	for _, c := range []struct {
		mode      Mode
		consumers int
	}{{Exclusive, 1}, {Shared, 3}, {Failover, 3}, {KeyShared, 3}} {
		b.Run(c.mode.String(), func(b *testing.B) { benchEngine(b, c.mode, c.consumers) })
	}
}

func benchEngine(b *testing.B, mode Mode, consumers int) {
	t := &testing.T{}
	bn := newBench(t, Config{Mode: mode, Durable: true})
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	for i := range b.N {
		bn.log = append(bn.log, msg{key: keys[i%len(keys)]})
	}
	for i := range consumers {
		bn.attach(fmt.Sprint("c", i), 0, 1000)
	}
	b.ResetTimer()
	done := 0
	for done < b.N {
		if bn.pump() == 0 {
			b.Fatalf("stuck after %d of %d", done, b.N)
		}
		for id, offs := range bn.got {
			bn.ack(offs...)
			bn.d.Flow(id, int64(len(offs)), 1000)
			done += len(offs)
		}
		clear(bn.got)
	}
}

// BenchmarkHash measures the key hash that places a key on the key_shared
// ring (and, the same function, a keyed message on a partition).
func BenchmarkHash(b *testing.B) {
	for _, n := range []int{8, 64} {
		key := string(make([]byte, n))
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			var sink uint32
			for b.Loop() {
				sink += Hash(key)
			}
			_ = sink
		})
	}
}

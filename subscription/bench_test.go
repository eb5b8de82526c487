package subscription

import (
	"fmt"
	"testing"
)

// BenchmarkKeySharedEngine measures the engine alone on a key_shared
// subscription: 3 consumers, 1,000 keys, each message delivered once and
// acked; the figure is per message.
func BenchmarkKeySharedEngine(b *testing.B) {
	t := &testing.T{}
	bn := newBench(t, Config{Mode: KeyShared, Durable: true})
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	for i := range b.N {
		bn.log = append(bn.log, msg{key: keys[i%len(keys)]})
	}
	for _, n := range []string{"c0", "c1", "c2"} {
		bn.attach(n, 0, 1000)
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

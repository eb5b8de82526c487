package fsm

import (
	"testing"

	"github.com/hashicorp/raft"

	"github.com/fabriq-io/fabriq/storage"
)

// BenchmarkApplySend measures the state machine applying committed send
// entries as a follower and the leader do: each entry one producer's
// batch of 100 messages of 1 KiB, decoded, deduplicated and appended to
// the partition's log. The figure is per entry.
func BenchmarkApplySend(b *testing.B) {
	const perEntry, size = 100, 1024
	log, err := storage.Open(b.TempDir(), storage.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { log.Close() })
	f := newFSM(log, b.TempDir(), nil)
	payload := make([]byte, size)
	b.SetBytes(perEntry * size)
	seq := uint64(0)
	for i := range b.N {
		b.StopTimer()
		batch := Batch{Producer: "p", Messages: make([]Message, perEntry)}
		for j := range batch.Messages {
			batch.Messages[j] = Message{SequenceID: seq, Key: "key", Payload: payload}
			seq++
		}
		data, err := Encode(Send{PublishTime: 1000, Batches: []Batch{batch}})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res := f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: data})
		if r, ok := res.([]SendResult); !ok || len(r) != 1 || r[0].Err != nil || len(r[0].Offsets) != perEntry {
			b.Fatalf("entry %d: %#v", i+1, res)
		}
	}
	b.ReportMetric(float64(b.N*perEntry)/b.Elapsed().Seconds(), "msgs/s")
}

package partition

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/fabriq-io/fabriq/broker/fsm"
	"github.com/fabriq-io/fabriq/storage"
)

// A partition refuses reads below its replicated start even where its own
// log still holds them.
func TestPartitionReadBelowStart(t *testing.T) {
	l, err := storage.Open(t.TempDir(), storage.Config{SegmentMaxBytes: 10 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	f := fsm.New(fsm.Config{Log: l, SnapshotDir: t.TempDir()})
	commit := func(index uint64, data []byte, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data})
	}
	for i := range 100 {
		data, err := fsm.Encode(fsm.Send{PublishTime: 1000, Batches: []fsm.Batch{{Producer: "p", Messages: []fsm.Message{{SequenceID: uint64(i), Payload: []byte(fmt.Sprint("p", i))}}}}})
		commit(uint64(i+1), data, err)
	}
	// Inside the first segment: nothing can be deleted, yet offset 10
	// and later are all that is served.
	data, err := fsm.Encode(fsm.Retain{Start: 10})
	commit(101, data, err)
	if l.Info().StartOffset != 0 {
		t.Fatalf("the log's first segment went: %+v", l.Info())
	}
	p := &Partition{fsm: f, log: l}
	if _, err := p.read(9, 1, 1<<20); !errors.Is(err, storage.ErrTrimmed) {
		t.Fatalf("read below the start: %v, want ErrTrimmed", err)
	}
	msgs, err := p.read(10, 1, 1<<20)
	if err != nil || len(msgs) != 1 || msgs[0].Offset != 10 {
		t.Fatalf("read at the start: %v %v", msgs, err)
	}
}

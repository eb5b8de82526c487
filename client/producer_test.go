package client

import (
	"errors"
	"testing"

	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// A receipt reports success only for the messages it gives an offset: a
// message it names no offset for (older brokers put 2^64-1 there for a
// duplicate they no longer remembered), or that it leaves out, fails with
// ErrNoOffset.
func TestReceiptWithoutOffsetIsNoSuccess(t *testing.T) {
	st, err := geofabric.ParseStream("persistent://t/f/s")
	if err != nil {
		t.Fatal(err)
	}
	p := &Producer{stream: st, opts: ProducerOptions{MaxPendingMessages: 8}}
	pp := newPartitionProducer(p, st.String(), 0)
	t.Cleanup(pp.cancel)
	x := &cnx{}
	pp.x = x
	type result struct {
		id  MessageID
		err error
	}
	var got []result
	b := &pendingBatch{first: 5}
	for range 3 {
		pp.sem <- struct{}{}
		b.msgs = append(b.msgs, &pendingMsg{msg: &ProducerMessage{}, callback: func(id MessageID, _ *ProducerMessage, err error) {
			got = append(got, result{id, err})
		}})
	}
	pp.inflight = []*pendingBatch{b}
	pp.receipt(x, &transport.SendReceipt{SequenceID: 5, Offsets: []uint64{10, ^uint64(0)}})
	if len(got) != 3 {
		t.Fatalf("%d callbacks, want 3", len(got))
	}
	if got[0].err != nil || got[0].id.Offset != 10 {
		t.Fatalf("message with offset 10: %+v", got[0])
	}
	for i, r := range got[1:] {
		if !errors.Is(r.err, ErrNoOffset) {
			t.Fatalf("message %d without an offset: %+v, want ErrNoOffset", i+1, r)
		}
	}
	if len(pp.inflight) != 0 || len(pp.sem) != 0 {
		t.Fatalf("after the receipt: %d batches in flight, %d pending", len(pp.inflight), len(pp.sem))
	}
}

package client

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

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

// At most maxSentBatches batches of a partition producer are on the wire
// (the broker's deduplication window): the next goes when one is
// answered, and a new attach is sent the oldest maxSentBatches again.
// Then a resent batch the broker stored always has fewer than 64 stored
// after it, and the broker answers it with its offsets.
func TestSentBatchesBoundedByDedupWindow(t *testing.T) {
	st, err := geofabric.ParseStream("persistent://t/f/s")
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	ca, err := transport.NewConn(a, transport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := transport.NewConn(b, transport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ca.Close(); cb.Close() })
	// The broker's side: every Send, and a Ping the test writes after
	// them as a marker.
	frames := make(chan transport.Command, 1000)
	go func() {
		// Owned by the test: it ends when the pipe closes.
		for {
			cmd, err := cb.Receive()
			if err != nil {
				close(frames)
				return
			}
			frames <- cmd
		}
	}()

	opts := ProducerOptions{DisableBatching: true, SendTimeout: -1}
	opts.setDefaults()
	p := &Producer{c: &Client{opts: Options{OperationTimeout: 5 * time.Second}}, stream: st, opts: opts}
	pp := newPartitionProducer(p, st.String(), 0)
	x := &cnx{conn: ca}
	pp.x, pp.id, pp.seqKnown = x, 7, true
	pp.start()
	t.Cleanup(func() { close(pp.stop); pp.wg.Wait(); pp.cancel() })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// sentUntilMarker returns the sequence ids and producer ids of the
	// Sends written before a Ping the test writes now.
	sentUntilMarker := func() (seqs []uint64, ids map[uint64]bool) {
		t.Helper()
		// Producer writes happen under its lock: the marker follows them.
		pp.mu.Lock()
		err := x.send(ctx, &transport.Ping{})
		pp.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		ids = map[uint64]bool{}
		for {
			select {
			case cmd := <-frames:
				switch c := cmd.(type) {
				case *transport.Ping:
					return seqs, ids
				case *transport.Send:
					seqs = append(seqs, c.Messages[0].SequenceID)
					ids[c.ProducerID] = true
				}
			case <-ctx.Done():
				t.Fatal("no marker")
			}
		}
	}

	for range 100 {
		pp.sendAsync(ctx, &ProducerMessage{Payload: []byte("m")}, func(MessageID, *ProducerMessage, error) {})
	}
	seqs, _ := sentUntilMarker()
	if len(seqs) != maxSentBatches || seqs[0] != 0 || seqs[len(seqs)-1] != maxSentBatches-1 {
		t.Fatalf("%d batches on the wire (%v), want ids 0..%d", len(seqs), seqs, maxSentBatches-1)
	}

	// One answered: the next one goes, through the producer's loop.
	pp.receipt(x, &transport.SendReceipt{SequenceID: 0, Offsets: []uint64{0}})
	var next []uint64
	for len(next) == 0 {
		select {
		case cmd := <-frames:
			if s, ok := cmd.(*transport.Send); ok {
				next = append(next, s.Messages[0].SequenceID)
			}
		case <-ctx.Done():
			t.Fatal("no batch sent after a receipt")
		}
	}
	if more, _ := sentUntilMarker(); next[0] != maxSentBatches || len(more) != 0 {
		t.Fatalf("after one receipt, sent %v then %v; want id %d alone", next, more, maxSentBatches)
	}

	// A new attach of the producer gets the oldest 64 again.
	pp.mu.Lock()
	pp.id = 8
	pp.pumpLocked()
	pp.mu.Unlock()
	seqs, ids := sentUntilMarker()
	if len(seqs) != maxSentBatches || seqs[0] != 1 || !ids[8] || len(ids) != 1 {
		t.Fatalf("after a new attach: %d batches (%v) under producer ids %v, want ids 1..%d under 8", len(seqs), seqs, ids, maxSentBatches)
	}
}

package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/transport"
)

// rawProducer is one producer on a raw protocol connection to a node, so
// that a test chooses its sequence ids and the order they are sent in.
type rawProducer struct {
	t    *testing.T
	ctx  context.Context
	conn *transport.Conn
}

const rawProducerID = 1

func newRawProducer(ctx context.Context, t *testing.T, addr, partition, name string) *rawProducer {
	t.Helper()
	tc := rawConn(ctx, t, addr, "raw", transport.Config{})
	t.Cleanup(func() { tc.Close() })
	rp := &rawProducer{t: t, ctx: ctx, conn: tc}
	if err := tc.Send(ctx, &transport.CreateProducer{RequestID: 1, ProducerID: rawProducerID, Stream: partition, ProducerName: name}); err != nil {
		t.Fatal(err)
	}
	ready, ok := rp.next().(*transport.ProducerReady)
	if !ok || ready.LastSequenceID != -1 {
		t.Fatalf("create producer answered %#v, want ProducerReady with no sequence id stored", ready)
	}
	return rp
}

// payloadOf is the payload every send of a sequence id carries.
func payloadOf(seq uint64) string { return fmt.Sprint("raw-", seq) }

// send writes one Send of the given ids without waiting for its answer.
func (rp *rawProducer) send(seqs ...uint64) {
	rp.t.Helper()
	s := &transport.Send{ProducerID: rawProducerID}
	for _, seq := range seqs {
		s.Messages = append(s.Messages, transport.MessageData{SequenceID: seq, Payload: []byte(payloadOf(seq))})
	}
	if err := rp.conn.Send(rp.ctx, s); err != nil {
		rp.t.Fatal(err)
	}
}

// next returns the next command from the node, answering its pings.
func (rp *rawProducer) next() transport.Command {
	rp.t.Helper()
	return rawNext(rp.ctx, rp.t, rp.conn)
}

// MSG-4: a producer pipelines sends 1 and 3..80 (2 is lost on the way),
// then retries 2 once 78 later sends are committed, past the 64 sends the
// broker remembers for deduplication. The retry is refused
// (OutOfOrderSequence), never acknowledged; so is a retry of 3, which was
// stored long ago but cannot be told from 2. A retry inside the window is
// answered with its first offset, and an id skipped inside one send is
// refused. Read back from a reader: every offset any receipt named holds
// the payload sent under that id, and nothing was stored twice.
func TestResendOlderThanDedupWindow(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	const stream = "persistent://acme/prod/dedup"
	admin := newClient(t, nodes[0].url())
	if err := createStream(ctx, admin, stream, 1, 3); err != nil {
		t.Fatal(err)
	}
	leader := byID(nodes, leaderOf(ctx, t, admin, stream))
	rp := newRawProducer(ctx, t, leader.addr, stream, "raw")

	type ack struct{ seq, offset uint64 }
	var acked []ack // every (id, offset) a receipt named
	first := map[uint64]uint64{}
	// answer reads the answer to a send of seqs: the receipt's offsets,
	// recorded, or the refusal.
	answer := func(seqs ...uint64) ([]uint64, *transport.SendError) {
		t.Helper()
		switch a := rp.next().(type) {
		case *transport.SendReceipt:
			if a.SequenceID != seqs[0] {
				t.Fatalf("receipt for id %d, want %d", a.SequenceID, seqs[0])
			}
			for i, o := range a.Offsets {
				if i < len(seqs) {
					acked = append(acked, ack{seqs[i], o})
				}
			}
			if len(a.Offsets) != len(seqs) {
				t.Errorf("receipt for %v names %d offsets", seqs, len(a.Offsets))
			}
			return a.Offsets, nil
		case *transport.SendError:
			if a.SequenceID != seqs[0] {
				t.Fatalf("send error for id %d, want %d", a.SequenceID, seqs[0])
			}
			return nil, a
		default:
			t.Fatalf("send of %v answered %#v", seqs, a)
		}
		return nil, nil
	}
	refused := func(why string, seqs ...uint64) {
		t.Helper()
		rp.send(seqs...)
		offsets, e := answer(seqs...)
		if e == nil {
			t.Errorf("%s: resend of %v acknowledged with offsets %v", why, seqs, offsets)
			return
		}
		if e.Code != transport.CodeOutOfOrderSequence {
			t.Errorf("%s: resend of %v refused with %v %q, want OutOfOrderSequence", why, seqs, e.Code, e.Message)
		}
		t.Logf("%s: %v %s", why, e.Code, e.Message)
	}

	// Pipelined: every send is written before any answer is read.
	sent := [][]uint64{{1}}
	for seq := uint64(3); seq <= 80; seq++ {
		sent = append(sent, []uint64{seq})
	}
	for _, seqs := range sent {
		rp.send(seqs...)
	}
	for _, seqs := range sent {
		offsets, e := answer(seqs...)
		if e != nil {
			t.Fatalf("send of %v refused: %v %s", seqs, e.Code, e.Message)
		}
		first[seqs[0]] = offsets[0]
	}

	refused("never stored, older than the window", 2)
	refused("stored long ago, older than the window", 3)

	// Inside the window a duplicate is answered with its first offset.
	rp.send(50)
	if offsets, e := answer(50); e != nil || len(offsets) != 1 || offsets[0] != first[50] {
		t.Errorf("duplicate of 50 answered %v %v, first stored at %d", offsets, e, first[50])
	}

	// An id skipped inside one send was never stored.
	rp.send(81, 83)
	if _, e := answer(81, 83); e != nil {
		t.Fatalf("send of 81, 83 refused: %v %s", e.Code, e.Message)
	}
	refused("skipped inside a send", 82)

	// Read everything back.
	const stored = 81 // 1, 3..80, 81, 83
	r, err := admin.CreateReader(ctx, client.ReaderOptions{Stream: stream, StartPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	held := map[uint64]string{}
	count := map[string]int{}
	for len(held) < stored {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", len(held), stored, err)
		}
		held[m.ID.Offset] = string(m.Payload)
		count[string(m.Payload)]++
	}
	for _, a := range acked {
		p, ok := held[a.offset]
		if !ok {
			t.Errorf("id %d acknowledged at offset %d, which the log does not hold", a.seq, a.offset)
		} else if p != payloadOf(a.seq) {
			t.Errorf("id %d acknowledged at offset %d, which holds %q", a.seq, a.offset, p)
		}
	}
	for p, n := range count {
		if n > 1 {
			t.Errorf("%s stored %d times", p, n)
		}
	}
	info, err := admin.DescribeStream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Partitions[0].NextOffset; got != stored {
		t.Errorf("the log holds %d messages, want %d", got, stored)
	}
	waitIdentical(ctx, t, nodes, stream)
}

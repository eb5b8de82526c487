package broker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/tests/tmpfs"
	"github.com/fabriq-io/fabriq/transport"
)

// The reserve refuses sends once admitting them would leave less free
// space than the minimum, with the retryable DiskFull code, and admits
// them again once space is freed and read again.
func TestDiskReserveRefusesBelowTheMinimum(t *testing.T) {
	disk := tmpfs.New(t, 16<<20)
	r := newDiskReserve(disk, 8<<20, slog.New(slog.DiscardHandler))
	if err := r.refresh(); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	var refusal error
	for range 100 {
		if refusal = r.Admit(256 << 10); refusal != nil {
			break
		}
		admitted++
	}
	// 8 MiB above the reserve, each send costing twice its size.
	if admitted < 14 || admitted > 16 || transport.CodeOf(refusal) != transport.CodeDiskFull {
		t.Fatalf("admitted %d sends of 256 KiB above a reserve of 8 MiB on 16 MiB, then %v; want 14 to 16, then DiskFull", admitted, refusal)
	}
	if err := r.refresh(); err != nil {
		t.Fatal(err)
	}
	if err := r.Admit(256 << 10); err != nil {
		t.Fatalf("nothing was written, and a reading after the refusal still refuses: %v", err)
	}
	filler := tmpfs.Fill(t, disk, 0)
	if err := r.refresh(); err != nil {
		t.Fatal(err)
	}
	if err := r.Admit(1); transport.CodeOf(err) != transport.CodeDiskFull {
		t.Fatalf("on a full disk admit answered %v, want DiskFull", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := r.refresh(); err != nil {
		t.Fatal(err)
	}
	if err := r.Admit(1 << 20); err != nil {
		t.Fatalf("with space freed admit answered %v", err)
	}
	var off *diskReserve
	if err := off.Admit(1 << 30); err != nil || newDiskReserve(disk, -1, nil) != nil {
		t.Fatalf("a reserve turned off refused: %v", err)
	}
}

// rawProducer is a producer on a raw protocol connection, so that a test
// sees each refusal as the broker sends it.
type rawProducer struct {
	t    *testing.T
	conn *transport.Conn
	id   uint64
}

func openRawProducer(t *testing.T, ctx context.Context, addr, stream, name string, id uint64) *rawProducer {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := transport.NewConn(nc, transport.Config{ReadIdleTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := transport.Handshake(ctx, conn, &transport.Connect{ClientName: "test"}); err != nil {
		t.Fatal(err)
	}
	p := &rawProducer{t: t, conn: conn, id: id}
	if res := p.roundTrip(ctx, &transport.CreateProducer{RequestID: 1, ProducerID: id, Stream: stream, ProducerName: name}); res == nil {
		t.Fatal("no answer to CreateProducer")
	} else if _, ok := res.(*transport.ProducerReady); !ok {
		t.Fatalf("CreateProducer answered %#v", res)
	}
	return p
}

func (p *rawProducer) roundTrip(ctx context.Context, cmd transport.Command) transport.Command {
	p.t.Helper()
	if err := p.conn.Send(ctx, cmd); err != nil {
		p.t.Fatal(err)
	}
	for {
		res, err := p.conn.Receive()
		if err != nil {
			p.t.Fatal(err)
		}
		if _, ping := res.(*transport.Ping); ping {
			continue
		}
		return res
	}
}

// send sends one message of 64 KiB with sequence id seq and returns the
// code it was refused with, 0 when it was stored.
func (p *rawProducer) send(ctx context.Context, seq uint64) transport.ErrorCode {
	p.t.Helper()
	msg := transport.MessageData{SequenceID: seq, Payload: bytes.Repeat([]byte{'m'}, 64<<10)}
	switch res := p.roundTrip(ctx, &transport.Send{ProducerID: p.id, Messages: []transport.MessageData{msg}}).(type) {
	case *transport.SendReceipt:
		return 0
	case *transport.SendError:
		if res.Code != transport.CodeDiskFull {
			p.t.Logf("send %d refused: %v: %s", seq, res.Code, res.Message)
		}
		return res.Code
	default:
		p.t.Fatalf("a send answered %#v", res)
		return 0
	}
}

// Once a producer's send is refused with DiskFull, its later sends are
// refused too, even after space is freed, until it is created again: a
// later batch stored ahead of the refused one would turn the resend into
// a sequence gap. Other producers go on as soon as space is back.
func TestDiskFullRefusesTheProducersLaterSends(t *testing.T) {
	disk := tmpfs.New(t, 48<<20)
	n, err := NewNode(Config{
		NodeID: "n1", DataDir: filepath.Join(disk, "data"), ClientAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0",
		MinFreeDisk: 16 << 20,
		Raft:        RaftTimings{HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c, err := client.New(client.Options{URL: "fabriq://" + n.Addr(), OperationTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	const stream = "persistent://public/default/refused"
	if err := c.CreateStream(ctx, stream, 1, 1); err != nil {
		t.Fatal(err)
	}
	a := openRawProducer(t, ctx, n.Addr(), stream, "a", 1)
	if code := a.send(ctx, 0); code != 0 {
		t.Fatalf("a send with space to spare was refused: %v", code)
	}
	// Below the reserve, with room left for what is admitted until the
	// node reads the free space again (sends paced to keep within it).
	filler := tmpfs.Fill(t, disk, 12<<20)
	pace := time.NewTicker(50 * time.Millisecond)
	defer pace.Stop()
	seq := uint64(1)
	for code := a.send(ctx, seq); code != transport.CodeDiskFull; code = a.send(ctx, seq) {
		if code != 0 || ctx.Err() != nil {
			t.Fatalf("below the reserve a send answered %v, want DiskFull", code)
		}
		seq++
		<-pace.C
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// Another producer goes on once the node has read the free space
	// again.
	b := openRawProducer(t, ctx, n.Addr(), stream, "b0", 1)
	for i := 1; b.send(ctx, 0) != 0; i++ {
		if ctx.Err() != nil {
			t.Fatal("with space freed another producer's sends were still refused")
		}
		// That producer is refused for good now: try with a new one.
		b = openRawProducer(t, ctx, n.Addr(), stream, fmt.Sprint("b", i), 1)
		<-pace.C
	}
	if code := a.send(ctx, seq+1); code != transport.CodeDiskFull {
		t.Fatalf("after a DiskFull refusal a later send of the producer answered %v, want DiskFull", code)
	}
	// Created again on its connection, as the client does, it resends
	// in order and goes on.
	if res := a.roundTrip(ctx, &transport.CreateProducer{RequestID: 2, ProducerID: 2, Stream: stream, ProducerName: "a"}); res == nil {
		t.Fatal("no answer to CreateProducer")
	} else if _, ok := res.(*transport.ProducerReady); !ok {
		t.Fatalf("creating the producer again answered %#v", res)
	}
	a.id = 2
	for _, s := range []uint64{seq, seq + 1} {
		if code := a.send(ctx, s); code != 0 {
			t.Fatalf("the producer created again: send %d answered %v", s, code)
		}
	}
}

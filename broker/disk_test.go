package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/storage"
	"github.com/fabriq-io/fabriq/tests/tmpfs"
	"github.com/fabriq-io/fabriq/transport"
)

// applyRecovered applies an entry and turns a panic into a value.
func applyRecovered(f *fsm, index uint64, data []byte) (res any, panicked any) {
	defer func() { panicked = recover() }()
	return apply(f, index, data), nil
}

// A log that cannot take a committed send (its disk is full) stops the
// state machine of that partition instead of panicking the node: the
// entry and every later one are answered errHalted and count as applied
// nowhere (offsets, dedup, cursors, snapshots); the node is told once.
// Opened again with space, the same entries replayed from Raft are
// stored, at the offsets they would have had.
func TestFSMStopsWhenTheLogCannotAppend(t *testing.T) {
	disk := tmpfs.New(t, 4<<20)
	logDir, snapDir := filepath.Join(disk, "log"), filepath.Join(disk, "snapshots")
	l, err := storage.Open(logDir, storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var applied int
	f := newFSM(l, snapDir, func(uint64, bool) { applied++ })
	var halts []error
	f.halted = func(err error) { halts = append(halts, err) }

	big := sendOf("a", 2)
	big.Batches[0].Messages[0].Payload = bytes.Repeat([]byte{'p'}, 64<<10)
	big.Batches = append(big.Batches, sendOf("b", 0).Batches[0])
	entries := [][]byte{
		mustEntry(t, entrySend, sendOf("a", 0, 1)),
		mustEntry(t, entryCreateSubscription, createSubscriptionEntry{Name: "s", Initial: transport.Earliest}),
		mustEntry(t, entrySend, big),
		mustEntry(t, entryAcks, ackEntry{Acks: []subAcks{{Sub: "s", Offsets: []uint64{0}}}}),
		mustEntry(t, entrySend, sendOf("a", 3)),
	}
	for i, e := range entries[:2] {
		if _, p := applyRecovered(f, uint64(i+1), e); p != nil {
			t.Fatalf("entry %d: %v", i+1, p)
		}
	}
	filler := tmpfs.Fill(t, disk, 0)

	for i, e := range entries[2:] {
		index := uint64(i + 3)
		res, p := applyRecovered(f, index, e)
		if p != nil {
			t.Fatalf("entry %d on a full disk panicked: %v", index, p)
		}
		if err, _ := res.(error); !errors.Is(err, errHalted) {
			t.Fatalf("entry %d on a full disk answered %v, want errHalted", index, res)
		}
	}
	if len(halts) != 1 || !errors.Is(halts[0], syscall.ENOSPC) {
		t.Fatalf("the node was told %d times (%v), want once, of ENOSPC", len(halts), halts)
	}
	if applied != 2 {
		t.Errorf("the partition was told of %d applied entries, want 2 (none after the failure)", applied)
	}
	if next := f.nextOffset(); next != 2 {
		t.Errorf("next offset %d after the failed append, want 2", next)
	}
	if a, b := f.lastSequence("a"), f.lastSequence("b"); a != 1 || b != -1 {
		t.Errorf("last sequences a=%d b=%d after the failed append, want 1 and -1 (nothing of it stored)", a, b)
	}
	if f.isAcked("s", 0) {
		t.Error("an ack after the failure was applied")
	}
	if _, err := f.Snapshot(); !errors.Is(err, errHalted) {
		t.Errorf("a snapshot after the failure: %v, want errHalted (it would count the failed entry as applied)", err)
	}
	if err := l.Close(); err != nil {
		t.Logf("closing the failed log: %v", err)
	}

	// Space comes back, the node restarts: Raft replays its log.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	l = testLog(t, logDir)
	f = newFSM(l, snapDir, nil)
	f.halted = func(err error) { t.Errorf("halted again with space: %v", err) }
	var results []any
	for i, e := range entries {
		res, p := applyRecovered(f, uint64(i+1), e)
		if p != nil {
			t.Fatalf("replaying entry %d: %v", i+1, p)
		}
		results = append(results, res)
	}
	if r, _ := results[2].([]sendResult); len(r) != 2 || fmt.Sprint(r[0].Offsets, r[1].Offsets) != "[2] [3]" {
		t.Fatalf("the replayed send answered %v, want offsets [2] and [3]", results[2])
	}
	if r, _ := results[4].([]sendResult); len(r) != 1 || fmt.Sprint(r[0].Offsets) != "[4]" {
		t.Fatalf("the send after it answered %v, want offset [4]", results[4])
	}
	msgs, err := l.Read(0, 10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, fmt.Sprintf("%s/%d/%d", m.ProducerName, m.SequenceID, len(m.Payload)))
	}
	if want := "[a/0/2 a/1/2 a/2/65536 b/0/2 a/3/2]"; fmt.Sprint(got) != want {
		t.Fatalf("log after the replay holds %v, want %v", got, want)
	}
	if !f.isAcked("s", 0) || f.lastSequence("a") != 3 || f.lastSequence("b") != 0 {
		t.Fatalf("after the replay: acked %v, last sequences %d %d", f.isAcked("s", 0), f.lastSequence("a"), f.lastSequence("b"))
	}
}

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
		if refusal = r.admit(256 << 10); refusal != nil {
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
	if err := r.admit(256 << 10); err != nil {
		t.Fatalf("nothing was written, and a reading after the refusal still refuses: %v", err)
	}
	filler := tmpfs.Fill(t, disk, 0)
	if err := r.refresh(); err != nil {
		t.Fatal(err)
	}
	if err := r.admit(1); transport.CodeOf(err) != transport.CodeDiskFull {
		t.Fatalf("on a full disk admit answered %v, want DiskFull", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := r.refresh(); err != nil {
		t.Fatal(err)
	}
	if err := r.admit(1 << 20); err != nil {
		t.Fatalf("with space freed admit answered %v", err)
	}
	var off *diskReserve
	if err := off.admit(1 << 30); err != nil || newDiskReserve(disk, -1, nil) != nil {
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
	const stream = "persistent://acme/prod/refused"
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

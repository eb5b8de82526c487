package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/fabriq-io/fabriq/storage"
	"github.com/fabriq-io/fabriq/tests/tmpfs"
)

// applyRecovered applies an entry and turns a panic into a value.
func applyRecovered(f *Machine, index uint64, data []byte) (res any, panicked any) {
	defer func() { panicked = recover() }()
	return apply(f, index, data), nil
}

// A log that cannot take a committed send (its disk is full) stops the
// state machine of that partition instead of panicking the node: the
// entry and every later one are answered ErrHalted and count as applied
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
	var halts []error
	f := New(Config{Log: l, SnapshotDir: snapDir, Applied: func(uint64, bool) { applied++ }, Halted: func(err error) { halts = append(halts, err) }})

	big := sendOf("a", 2)
	big.Batches[0].Messages[0].Payload = bytes.Repeat([]byte{'p'}, 64<<10)
	big.Batches = append(big.Batches, sendOf("b", 0).Batches[0])
	entries := [][]byte{
		mustEntry(t, sendOf("a", 0, 1)),
		mustEntry(t, joinOf("s", "c", Earliest)),
		mustEntry(t, big),
		mustEntry(t, Acks{Acks: []SubAcks{{Sub: "s", Offsets: []uint64{0}}}}),
		mustEntry(t, sendOf("a", 3)),
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
		if err, _ := res.(error); !errors.Is(err, ErrHalted) {
			t.Fatalf("entry %d on a full disk answered %v, want ErrHalted", index, res)
		}
	}
	if len(halts) != 1 || !errors.Is(halts[0], syscall.ENOSPC) {
		t.Fatalf("the node was told %d times (%v), want once, of ENOSPC", len(halts), halts)
	}
	if applied != 2 {
		t.Errorf("the partition was told of %d applied entries, want 2 (none after the failure)", applied)
	}
	if next := f.NextOffset(); next != 2 {
		t.Errorf("next offset %d after the failed append, want 2", next)
	}
	if a, b := f.lastSequence("a"), f.lastSequence("b"); a != 1 || b != -1 {
		t.Errorf("last sequences a=%d b=%d after the failed append, want 1 and -1 (nothing of it stored)", a, b)
	}
	if f.IsAcked("s", 0) {
		t.Error("an ack after the failure was applied")
	}
	if _, err := f.Snapshot(); !errors.Is(err, ErrHalted) {
		t.Errorf("a snapshot after the failure: %v, want ErrHalted (it would count the failed entry as applied)", err)
	}
	if err := l.Close(); err != nil {
		t.Logf("closing the failed log: %v", err)
	}

	// Space comes back, the node restarts: Raft replays its log.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	replayWithSpace(t, logDir, snapDir, entries)
}

// replayWithSpace opens the log again and replays the entries of
// TestFSMStopsWhenTheLogCannotAppend, which are stored this time, at the
// offsets they would have had.
func replayWithSpace(t *testing.T, logDir, snapDir string, entries [][]byte) {
	t.Helper()
	l := testLog(t, logDir)
	f := New(Config{Log: l, SnapshotDir: snapDir, Halted: func(err error) { t.Errorf("halted again with space: %v", err) }})
	var results []any
	for i, e := range entries {
		res, p := applyRecovered(f, uint64(i+1), e)
		if p != nil {
			t.Fatalf("replaying entry %d: %v", i+1, p)
		}
		results = append(results, res)
	}
	if r, _ := results[2].([]SendResult); len(r) != 2 || fmt.Sprint(r[0].Offsets, r[1].Offsets) != "[2] [3]" {
		t.Fatalf("the replayed send answered %v, want offsets [2] and [3]", results[2])
	}
	if r, _ := results[4].([]SendResult); len(r) != 1 || fmt.Sprint(r[0].Offsets) != "[4]" {
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
	if !f.IsAcked("s", 0) || f.lastSequence("a") != 3 || f.lastSequence("b") != 0 {
		t.Fatalf("after the replay: acked %v, last sequences %d %d", f.IsAcked("s", 0), f.lastSequence("a"), f.lastSequence("b"))
	}
}

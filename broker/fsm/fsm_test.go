package fsm

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/fabriq-io/fabriq/storage"
)

func testLog(t *testing.T, dir string) *storage.Log {
	t.Helper()
	l, err := storage.Open(dir, storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// newFSM returns a state machine over log, making log snapshots in
// snapDir, telling applied (may be nil) of every entry applied.
func newFSM(log *storage.Log, snapDir string, applied func(uint64, bool)) *Machine {
	return New(Config{Log: log, SnapshotDir: snapDir, Applied: applied})
}

// mustEntry returns the Raft entry of a command.
func mustEntry[R any](t *testing.T, c Command[R]) []byte {
	t.Helper()
	b, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sendOf(producer string, seqs ...uint64) Send {
	b := Batch{Producer: producer}
	for _, s := range seqs {
		b.Messages = append(b.Messages, Message{SequenceID: s, Payload: []byte(fmt.Sprint(producer, s))})
	}
	return Send{PublishTime: 1000, Batches: []Batch{b}}
}

// joinOf is a join of consumer c that creates subscription sub, if
// needed, at the initial position.
func joinOf(sub, c string, initial InitialPosition) Join {
	return Join{Sub: sub, Initial: initial, Member: Member{Name: c}}
}

func apply(f *Machine, index uint64, data []byte) any {
	return f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data})
}

// MSG-4: a retried sequence id is dropped and answered with its first
// offset, across producers interleaved in one entry.
func TestFSMSendDeduplicates(t *testing.T) {
	f := newFSM(testLog(t, t.TempDir()), t.TempDir(), nil)
	r := apply(f, 1, mustEntry(t, sendOf("a", 0, 1, 2))).([]SendResult)
	if fmt.Sprint(r[0].Offsets) != "[0 1 2]" {
		t.Fatalf("offsets %v", r[0].Offsets)
	}
	e := Send{PublishTime: 2000, Batches: []Batch{sendOf("b", 0).Batches[0], sendOf("a", 1, 2, 3).Batches[0]}}
	r = apply(f, 2, mustEntry(t, e)).([]SendResult)
	if fmt.Sprint(r[0].Offsets) != "[3]" || fmt.Sprint(r[1].Offsets) != "[1 2 4]" {
		t.Fatalf("offsets %v %v", r[0].Offsets, r[1].Offsets)
	}
	if got := f.log.NextOffset(); got != 5 {
		t.Fatalf("log holds %d messages, want 5", got)
	}
	if f.lastSequence("a") != 3 || f.lastSequence("b") != 0 || f.lastSequence("c") != -1 {
		t.Fatalf("last sequences %d %d %d", f.lastSequence("a"), f.lastSequence("b"), f.lastSequence("c"))
	}
}

// A restart replays Raft entries the log already holds: the state machine
// rebuilds the same offsets and dedup state, and the log gains nothing.
func TestFSMReplayAfterRestart(t *testing.T) {
	dir := t.TempDir()
	l, err := storage.Open(dir, storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var entries [][]byte
	entries = append(entries, mustEntry(t, sendOf("a", 0, 1)))
	entries = append(entries, mustEntry(t, joinOf("s", "c", Earliest)))
	entries = append(entries, mustEntry(t, sendOf("a", 2)))
	entries = append(entries, mustEntry(t, Acks{Acks: []SubAcks{{Sub: "s", Offsets: []uint64{0, 2}}}}))
	f := newFSM(l, t.TempDir(), nil)
	for i, e := range entries {
		apply(f, uint64(i+1), e)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := testLog(t, dir)
	g := newFSM(l2, t.TempDir(), nil)
	for i, e := range entries {
		apply(g, uint64(i+1), e)
	}
	r := apply(g, 5, mustEntry(t, sendOf("a", 2, 3))).([]SendResult)
	if fmt.Sprint(r[0].Offsets) != "[2 3]" {
		t.Fatalf("after replay offsets %v, want [2 3]", r[0].Offsets)
	}
	c, _, ok := g.Cursor("s")
	if !ok || c.Floor != 1 || !c.IsAcked(2) || c.IsAcked(1) {
		t.Fatalf("cursor after replay %+v", c)
	}
	if got := l2.NextOffset(); got != 4 {
		t.Fatalf("log holds %d messages, want 4", got)
	}
}

func TestFSMSubscriptions(t *testing.T) {
	f := newFSM(testLog(t, t.TempDir()), t.TempDir(), nil)
	apply(f, 1, mustEntry(t, sendOf("a", 0, 1, 2)))
	// SUB-3 latest by default: starts after what exists.
	if res := apply(f, 2, mustEntry(t, joinOf("late", "c1", Latest))).(JoinResult); res.Err != nil || res.Gen != 2 {
		t.Fatalf("join answered %+v", res)
	}
	apply(f, 3, mustEntry(t, joinOf("early", "c1", Earliest)))
	// CUR-3: the initial position applies only at creation.
	apply(f, 4, mustEntry(t, joinOf("late", "c2", Earliest)))
	late, _, _ := f.Cursor("late")
	early, _, _ := f.Cursor("early")
	if late.Floor != 3 || early.Floor != 0 {
		t.Fatalf("floors late %d early %d", late.Floor, early.Floor)
	}
	errs := apply(f, 5, mustEntry(t, Acks{Acks: []SubAcks{
		{Sub: "early", Offsets: []uint64{1}, Cumulative: true}, {Sub: "nope", Offsets: []uint64{0}},
	}})).([]error)
	if errs[0] != nil || !errors.Is(errs[1], ErrSubscriptionNotFound) {
		t.Fatalf("ack results %v", errs)
	}
	if err := apply(f, 6, mustEntry(t, Seek{Name: "early", Offset: 0})); err != nil {
		t.Fatalf("seek answered %v", err)
	}
	if f.IsAcked("early", 0) {
		t.Fatal("seek did not reset the cursor")
	}
	apply(f, 7, mustEntry(t, DeleteSubscription{Name: "early"}))
	if _, _, ok := f.Cursor("early"); ok {
		t.Fatal("subscription not deleted")
	}
}

// memSink is a snapshot sink in memory; with adopt it takes directories
// like the cluster's snapshot store.
type memSink struct {
	buf     []byte
	adopted string
}

func (s *memSink) Write(p []byte) (int, error) { s.buf = append(s.buf, p...); return len(p), nil }
func (s *memSink) Close() error                { return nil }
func (s *memSink) ID() string                  { return "mem" }
func (s *memSink) Cancel() error               { return nil }

type adoptingSink struct{ memSink }

func (s *adoptingSink) AdoptDir(path string) error { s.adopted = path; return nil }

func TestFSMSnapshotRestore(t *testing.T) {
	for _, adopt := range []bool{false, true} {
		t.Run(fmt.Sprint("adopt=", adopt), func(t *testing.T) {
			root := t.TempDir()
			f := newFSM(testLog(t, filepath.Join(root, "a")), filepath.Join(root, "snaps"), nil)
			apply(f, 1, mustEntry(t, sendOf("p", 0, 1, 2, 3)))
			apply(f, 2, mustEntry(t, joinOf("s", "c", Earliest)))
			apply(f, 3, mustEntry(t, Acks{Acks: []SubAcks{{Sub: "s", Offsets: []uint64{0, 2}}}}))
			snap, err := f.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			var stream []byte
			if adopt {
				s := &adoptingSink{}
				if err := snap.Persist(s); err != nil {
					t.Fatal(err)
				}
				if s.adopted == "" {
					t.Fatal("directory not adopted")
				}
				w := &memSink{buf: s.buf}
				if err := ExpandLogSnapshot(s.adopted, w); err != nil {
					t.Fatal(err)
				}
				stream = w.buf
			} else {
				s := &memSink{}
				if err := snap.Persist(s); err != nil {
					t.Fatal(err)
				}
				stream = s.buf
			}
			snap.Release()
			// A new replica restores everything.
			g := newFSM(testLog(t, filepath.Join(root, "b")), filepath.Join(root, "snaps-b"), nil)
			if err := g.Restore(nopCloser(stream)); err != nil {
				t.Fatal(err)
			}
			msgs, err := g.log.Read(0, 10, math.MaxInt)
			if err != nil || len(msgs) != 4 || string(msgs[3].Payload) != "p3" {
				t.Fatalf("restored log: %d messages, %v", len(msgs), err)
			}
			c, _, ok := g.Cursor("s")
			if !ok || c.Floor != 1 || !c.IsAcked(2) {
				t.Fatalf("restored cursor %+v", c)
			}
			if g.lastSequence("p") != 3 {
				t.Fatal("dedup state not restored")
			}
			r := apply(g, 4, mustEntry(t, sendOf("p", 3, 4))).([]SendResult)
			if fmt.Sprint(r[0].Offsets) != "[3 4]" {
				t.Fatalf("offsets after restore %v", r[0].Offsets)
			}
		})
	}
}

type readCloser struct {
	b []byte
}

func (r *readCloser) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}
func (r *readCloser) Close() error { return nil }

func nopCloser(b []byte) *readCloser { return &readCloser{b: b} }

func TestFSMRefusesUnknownEntries(t *testing.T) {
	f := newFSM(testLog(t, t.TempDir()), t.TempDir(), nil)
	for _, data := range [][]byte{{}, {99}, {byte(entrySend), 0xc1}, {byte(entrySend | ignoreUnknown), 0xc1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("entry %v applied without stopping", data)
				}
			}()
			apply(f, 1, data)
		}()
	}
}

// A batch whose sequence ids lie below the producer's last stored id, in
// the remembered window, and were never stored is refused, not
// acknowledged as a duplicate: an earlier send failed while a later one
// succeeded, and acknowledging it would lose it.
func TestFSMRefusesSequenceGap(t *testing.T) {
	f := newFSM(testLog(t, t.TempDir()), t.TempDir(), nil)
	apply(f, 1, mustEntry(t, sendOf("p", 0, 1)))
	apply(f, 2, mustEntry(t, sendOf("p", 5, 6))) // 2..4 failed
	r := apply(f, 3, mustEntry(t, sendOf("p", 2, 3, 4))).([]SendResult)
	if !errors.Is(r[0].Err, ErrSequenceGap) || r[0].LastSeq != 6 {
		t.Fatalf("resend of a lost batch: %+v", r[0])
	}
	// A true duplicate is still answered with its offsets.
	r = apply(f, 4, mustEntry(t, sendOf("p", 5, 6))).([]SendResult)
	if r[0].Err != nil || fmt.Sprint(r[0].Offsets) != "[2 3]" {
		t.Fatalf("duplicate: %+v", r[0])
	}
	// Opening reports the last stored id after everything before it.
	e := Send{Batches: []Batch{sendOf("p", 7).Batches[0], {Producer: "p"}, {Producer: "q"}}}
	r = apply(f, 5, mustEntry(t, e)).([]SendResult)
	if r[1].LastSeq != 7 || r[2].LastSeq != -1 || len(r[1].Offsets) != 0 {
		t.Fatalf("open results %+v", r)
	}
	if f.log.NextOffset() != 5 {
		t.Fatalf("log holds %d messages, want 5", f.log.NextOffset())
	}
}

// Dedup state of a producer silent for longer than producerTTL goes, at
// the same entry on every replica.
func TestFSMExpiresIdleProducers(t *testing.T) {
	f := newFSM(testLog(t, t.TempDir()), t.TempDir(), nil)
	apply(f, 1, mustEntry(t, sendOf("old", 0)))
	late := sendOf("new", 0)
	late.PublishTime = 1000 + producerTTL.Milliseconds() + 1
	apply(f, expiryEvery, mustEntry(t, late))
	if f.lastSequence("old") != -1 || f.lastSequence("new") != 0 {
		t.Fatalf("after expiry: old %d new %d", f.lastSequence("old"), f.lastSequence("new"))
	}
}

// sends applies one send entry per batch of ids, each batch of producer
// p, from Raft index *index on, and returns the results.
func sends(t *testing.T, f *Machine, index *uint64, p string, batches ...[]uint64) []SendResult {
	t.Helper()
	var out []SendResult
	for _, ids := range batches {
		*index++
		out = append(out, apply(f, *index, mustEntry(t, sendOf(p, ids...))).([]SendResult)[0])
	}
	return out
}

// holds fails unless the log holds, at offset o, producer p's message
// with sequence id seq and its payload.
func holds(t *testing.T, f *Machine, o uint64, p string, seq uint64) {
	t.Helper()
	if o == noOffset || o >= f.log.NextOffset() {
		t.Fatalf("%s/%d answered with offset %d; the log holds offsets below %d", p, seq, o, f.log.NextOffset())
	}
	msgs, err := f.log.Read(o, 1, math.MaxInt)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("read offset %d: %d messages, %v", o, len(msgs), err)
	}
	if m := msgs[0]; m.ProducerName != p || m.SequenceID != seq || string(m.Payload) != fmt.Sprint(p, seq) {
		t.Fatalf("offset %d holds %s/%d %q, want %s/%d", o, m.ProducerName, m.SequenceID, m.Payload, p, seq)
	}
}

// sequenceCheck sends batches of producer p, one entry each, and checks
// how the state machine answers them.
type sequenceCheck struct {
	t     *testing.T
	f     *Machine
	index uint64
	first map[uint64]uint64 // sequence id → offset its send was given
}

// store sends batches and fails unless each is stored.
func (c *sequenceCheck) store(batches ...[]uint64) {
	c.t.Helper()
	for i, r := range sends(c.t, c.f, &c.index, "p", batches...) {
		if r.Err != nil {
			c.t.Fatalf("send of %v: %v", batches[i], r.Err)
		}
		for j, seq := range batches[i] {
			holds(c.t, c.f, r.Offsets[j], "p", seq)
			c.first[seq] = r.Offsets[j]
		}
	}
}

// refused sends ids and fails unless the batch is refused with want and
// nothing of it is stored.
func (c *sequenceCheck) refused(want error, ids ...uint64) {
	c.t.Helper()
	before := c.f.log.NextOffset()
	r := sends(c.t, c.f, &c.index, "p", ids)[0]
	if !errors.Is(r.Err, want) {
		c.t.Fatalf("resend of %v: err %v offsets %v, want %v", ids, r.Err, r.Offsets, want)
	}
	if r.Offsets != nil {
		c.t.Fatalf("resend of %v refused with offsets %v", ids, r.Offsets)
	}
	if c.f.log.NextOffset() != before {
		c.t.Fatalf("resend of %v refused, yet the log grew from %d to %d", ids, before, c.f.log.NextOffset())
	}
}

// answered sends ids already stored and fails unless each is answered
// with the offset it was first stored at.
func (c *sequenceCheck) answered(ids ...uint64) {
	c.t.Helper()
	r := sends(c.t, c.f, &c.index, "p", ids)[0]
	if r.Err != nil {
		c.t.Fatalf("duplicate %v: %v", ids, r.Err)
	}
	for j, seq := range ids {
		if r.Offsets[j] != c.first[seq] {
			c.t.Fatalf("duplicate %d answered with offset %d, first stored at %d", seq, r.Offsets[j], c.first[seq])
		}
		holds(c.t, c.f, r.Offsets[j], "p", seq)
	}
}

// MSG-4: a sequence id at or below the producer's last stored one is
// answered only when the state machine can prove it stored, with the offset
// that holds it. One it cannot prove is refused and nothing is stored:
// never stored inside the remembered window (a gap), or older than the
// window, where a send that failed and one stored long ago look the same.
func TestFSMRefusesUnprovenSequence(t *testing.T) {
	c := &sequenceCheck{t: t, f: newFSM(testLog(t, t.TempDir()), t.TempDir(), nil), first: map[uint64]uint64{}}
	store, refused, answered := c.store, c.refused, c.answered
	f := c.f
	index := &c.index

	// 1, then 3..80 one send each: 79 sends, 2 never stored.
	store([]uint64{1})
	for seq := uint64(3); seq <= 80; seq++ {
		store([]uint64{seq})
	}
	// The window holds the last 64 sends, 17..80.
	refused(ErrSequenceForgotten, 2)      // never stored, older than the window
	refused(ErrSequenceForgotten, 3)      // stored long ago: cannot be told from 2
	refused(ErrSequenceForgotten, 1, 2)   // a batch wholly below the window
	refused(ErrSequenceForgotten, 16, 81) // one unproven id refuses the batch, new ids with it
	answered(17)
	answered(50, 51, 52)
	answered(80)

	// Inside the window: 82 never stored.
	store([]uint64{81}, []uint64{83, 84})
	refused(ErrSequenceGap, 82)
	refused(ErrSequenceGap, 82, 83) // a gap and a duplicate
	answered(83, 84)
	// A duplicate and new ids in one batch: the duplicate is answered with
	// its offset, the new ids stored.
	r := sends(t, f, index, "p", []uint64{84, 85, 86})[0]
	if r.Err != nil || r.Offsets[0] != c.first[84] {
		t.Fatalf("duplicate 84 with new 85, 86: %+v", r)
	}
	holds(t, f, r.Offsets[1], "p", 85)
	holds(t, f, r.Offsets[2], "p", 86)
	c.first[85], c.first[86] = r.Offsets[1], r.Offsets[2]

	// Ids that skip inside one send: 88 and 90 are stored, 89 is not.
	store([]uint64{88, 90, 91})
	refused(ErrSequenceGap, 89)
	refused(ErrSequenceGap, 87)
	answered(88, 90, 91)

	// Ids that do not increase within a batch are refused whole.
	refused(ErrSequenceOrder, 95, 92)
	refused(ErrSequenceOrder, 96, 96)

	if f.lastSequence("p") != 91 {
		t.Fatalf("last sequence %d, want 91", f.lastSequence("p"))
	}
	// The window moves on: 17 is forgotten once 64 later sends are stored.
	for seq := uint64(100); seq < 164; seq++ {
		store([]uint64{seq})
	}
	refused(ErrSequenceForgotten, 17)
	refused(ErrSequenceForgotten, 91)
	answered(100)
}

// A producer's resend can land in the same entry as its first copy (the
// session reconnected while the first was queued): the copy is answered
// with the offsets the first was just given.
func TestFSMDuplicateInSameEntry(t *testing.T) {
	f := newFSM(testLog(t, t.TempDir()), t.TempDir(), nil)
	apply(f, 1, mustEntry(t, sendOf("p", 0, 1)))
	b := sendOf("p", 2, 3).Batches[0]
	e := Send{PublishTime: 1000, Batches: []Batch{b, sendOf("q", 0).Batches[0], b}}
	r := apply(f, 2, mustEntry(t, e)).([]SendResult)
	if r[0].Err != nil || r[2].Err != nil || fmt.Sprint(r[0].Offsets) != "[2 3]" || fmt.Sprint(r[2].Offsets) != "[2 3]" {
		t.Fatalf("first copy %+v, second copy %+v: want offsets [2 3] for both", r[0], r[2])
	}
	if f.log.NextOffset() != 5 {
		t.Fatalf("log holds %d messages, want 5", f.log.NextOffset())
	}
	// The same for a producer's very first send.
	b = sendOf("new", 7).Batches[0]
	r = apply(f, 3, mustEntry(t, Send{PublishTime: 1000, Batches: []Batch{b, b}})).([]SendResult)
	if r[0].Err != nil || r[1].Err != nil || fmt.Sprint(r[0].Offsets) != "[5]" || fmt.Sprint(r[1].Offsets) != "[5]" {
		t.Fatalf("first copy %+v, second copy %+v: want offset [5] for both", r[0], r[1])
	}
}

// Whatever order a producer's sends and resends come in, every answered
// id is held by the log at the offset given, with its payload, and an id
// is stored at most once.
func TestFSMAnswersOnlyStoredOffsets(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			f := newFSM(testLog(t, t.TempDir()), t.TempDir(), nil)
			stored := map[uint64]bool{}
			next := uint64(0)
			for index := uint64(1); index <= 400; index++ {
				var e Send
				e.PublishTime = 1000
				for range 1 + rng.IntN(3) {
					var ids []uint64
					if rng.IntN(3) == 0 && next > 0 {
						// a resend of older ids
						start := rng.Uint64N(next)
						for s := start; s < next && len(ids) < 1+rng.IntN(4); s++ {
							ids = append(ids, s)
						}
					} else {
						// new ids, sometimes with a hole before or inside
						next += rng.Uint64N(2)
						for range 1 + rng.IntN(4) {
							ids = append(ids, next)
							next += 1 + rng.Uint64N(2)
						}
					}
					e.Batches = append(e.Batches, sendOf("p", ids...).Batches[0])
				}
				rs := apply(f, index, mustEntry(t, e)).([]SendResult)
				for i, r := range rs {
					if r.Err != nil {
						continue
					}
					for j, m := range e.Batches[i].Messages {
						holds(t, f, r.Offsets[j], "p", m.SequenceID)
						stored[m.SequenceID] = true
					}
				}
			}
			if f.log.NextOffset() != uint64(len(stored)) {
				t.Fatalf("log holds %d messages for %d ids answered", f.log.NextOffset(), len(stored))
			}
		})
	}
}

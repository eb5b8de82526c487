package fsm

import (
	"bytes"
	"errors"
	"log/slog"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/fabriq-io/fabriq/storage"
)

// An entry of an unknown type flagged ignorable is skipped, logged once
// per type, and the entries after it apply; a known type applies whether
// flagged or not; an unknown type without the flag stops the node.
func TestFSMIgnorableUnknownEntries(t *testing.T) {
	var logs bytes.Buffer
	f := New(Config{Log: testLog(t, t.TempDir()), SnapshotDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	unknown := entryType(42) | ignoreUnknown
	for i, data := range [][]byte{{byte(unknown), 0x80}, {byte(unknown)}, {byte(entryType(43) | ignoreUnknown)}} {
		if res := apply(f, uint64(i+1), data); res != nil {
			t.Fatalf("a skipped entry answered %v", res)
		}
	}
	if n := strings.Count(logs.String(), "skipping partition entries"); n != 2 {
		t.Fatalf("logged %d times for 2 unknown types:\n%s", n, logs.String())
	}
	flagged := mustEntry(t, sendOf("p", 0))
	flagged[0] |= byte(ignoreUnknown)
	if r, ok := apply(f, 4, flagged).([]SendResult); !ok || len(r) != 1 || r[0].Offsets[0] != 0 {
		t.Fatalf("a send flagged ignorable answered %v", r)
	}
	apply(f, 5, mustEntry(t, sendOf("p", 1)))
	if f.NextOffset() != 2 || f.lastSequence("p") != 1 {
		t.Fatalf("after the skipped entries: next %d, last sequence %d", f.NextOffset(), f.lastSequence("p"))
	}
	defer func() {
		if recover() == nil {
			t.Fatal("an unknown type without the flag was applied")
		}
	}()
	apply(f, 6, []byte{42})
}

// entryCreateSubscription is no longer proposed, but logs written by
// older versions hold it: it still creates a subscription, once, at its
// initial position.
func TestFSMAppliesCreateSubscription(t *testing.T) {
	f := newFSM(testLog(t, t.TempDir()), t.TempDir(), nil)
	apply(f, 1, mustEntry(t, sendOf("a", 0, 1, 2)))
	if res := apply(f, 2, mustEntry(t, createSubscription{Name: "late"})).(createResult); !res.Created {
		t.Fatal("not created")
	}
	apply(f, 3, mustEntry(t, createSubscription{Name: "early", Mode: Shared, Initial: Earliest}))
	// CUR-3: the initial position applies only at creation.
	if res := apply(f, 4, mustEntry(t, createSubscription{Name: "late", Initial: Earliest})).(createResult); res.Created {
		t.Fatal("created twice")
	}
	late, _, _ := f.Cursor("late")
	early, mode, _ := f.Cursor("early")
	if late.Floor != 3 || early.Floor != 0 || mode != Shared {
		t.Fatalf("floors late %d early %d, mode %d", late.Floor, early.Floor, mode)
	}
}

// Answer types what the state machine answered, and reports a stopped
// state machine or an answer of another type as errors.
func TestAnswer(t *testing.T) {
	if r, err := Answer(Join{}, JoinResult{Gen: 7}); err != nil || r.Gen != 7 {
		t.Fatalf("join: %+v %v", r, err)
	}
	if r, err := Answer(Seek{}, nil); err != nil || r != nil {
		t.Fatalf("seek answered nil: %v %v", r, err)
	}
	if r, err := Answer(Seek{}, ErrSubscriptionNotFound); err != nil || r != ErrSubscriptionNotFound {
		t.Fatalf("seek answered not found: %v %v", r, err)
	}
	if _, err := Answer(Leave{}, struct{}{}); err != nil {
		t.Fatalf("leave: %v", err)
	}
	halted := errors.Join(ErrHalted, errors.New("disk full"))
	if _, err := Answer(Seek{}, halted); !errors.Is(err, ErrHalted) {
		t.Fatalf("a stopped state machine's answer to a seek: %v", err)
	}
	if _, err := Answer(Send{}, halted); !errors.Is(err, ErrHalted) {
		t.Fatalf("a stopped state machine's answer to a send: %v", err)
	}
	if _, err := Answer(Send{}, nil); !errors.Is(err, ErrAnswer) {
		t.Fatalf("a send answered nil: %v", err)
	}
	if _, err := Answer(Acks{}, JoinResult{}); !errors.Is(err, ErrAnswer) {
		t.Fatalf("acks answered a join result: %v", err)
	}
}

// fakeLog is a Log that records what the processor does to it.
type fakeLog struct {
	next    uint64
	trimmed []uint64
}

func (l *fakeLog) NextOffset() uint64 { return l.next }

func (l *fakeLog) Append(_ uint64, msgs []storage.Message) (uint64, error) {
	off := l.next
	l.next += uint64(len(msgs))
	return off, nil
}

func (l *fakeLog) TrimBefore(start uint64) (storage.RetainResult, error) {
	l.trimmed = append(l.trimmed, start)
	return storage.RetainResult{}, nil
}

// The processor works on the state and a Log: a replay of an entry the log
// holds (a restart) appends nothing and gives the same answer, and a
// retain entry trims the log below the replicated start, whatever the
// entry asked.
func TestProcessorOnReplicatedState(t *testing.T) {
	log := &fakeLog{}
	run := func(s *state, index uint64, data []byte) any {
		t.Helper()
		res, err := handlers[entryType(data[0])].apply(s, log, index, data[1:])
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	s := newState()
	first := run(&s, 1, mustEntry(t, sendOf("p", 0, 1, 2)))
	restarted := newState()
	if again := run(&restarted, 1, mustEntry(t, sendOf("p", 0, 1, 2))); !reflect.DeepEqual(first, again) || log.next != 3 {
		t.Fatalf("replay answered %v (first %v), log next %d", again, first, log.next)
	}
	if !reflect.DeepEqual(s, restarted) {
		t.Fatalf("replayed state %+v, want %+v", restarted, s)
	}
	run(&s, 2, mustEntry(t, Retain{Start: 2}))
	run(&s, 3, mustEntry(t, Retain{Start: 1})) // never back
	run(&s, 4, mustEntry(t, Retain{Start: 9})) // never past Next
	if !reflect.DeepEqual(log.trimmed, []uint64{2, 2, 3}) || s.Start != 3 {
		t.Fatalf("start %d, trims %v; want 3 and [2 2 3]", s.Start, log.trimmed)
	}
}

var _ raft.FSM = (*Machine)(nil)

// A send's entry is encoded into a buffer sized for it: what it encodes
// to never exceeds the size Encode reserves, whatever its messages carry
// (so the buffer is allocated once, not grown by doubling on the write
// path of every message).
func TestSendEncodesWithinItsReservedSize(t *testing.T) {
	big := make([]byte, 64<<10)
	sends := map[string]Send{
		"empty batch": {PublishTime: 1, Batches: []Batch{{Producer: "p"}}},
		"one tiny":    {Batches: []Batch{{Producer: "p", Messages: []Message{{SequenceID: 1}}}}},
		"every field": {PublishTime: 1 << 62, Batches: []Batch{{Producer: "a-long-producer-name-" + string(big[:200]), Messages: []Message{{
			Key: "k", OrderingKey: []byte("ok"), Properties: map[string]string{"a": "b", "": "", "long": string(big[:300])},
			EventTime: 1 << 62, PublishTime: 1 << 62, SequenceID: 1 << 63, Payload: big,
		}}}}},
	}
	many := Batch{Producer: "p"}
	for i := range 1000 {
		many.Messages = append(many.Messages, Message{Key: "key", SequenceID: uint64(i) << 40, EventTime: 1 << 40, Payload: big[:1024]})
	}
	sends["1,000 of 1 KiB, two producers"] = Send{PublishTime: 1 << 40, Batches: []Batch{many, many}}
	for name, s := range sends {
		data, err := Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > s.encodedSize() {
			t.Errorf("%s: encoded to %d bytes, %d reserved", name, len(data), s.encodedSize())
		}
		if raceEnabled {
			continue
		}
		// The encoder's own allocations (a few per message, a few
		// hundred bytes with them) come on top of the buffer's.
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _ = Encode(s)
		runtime.ReadMemStats(&after)
		if got, most := after.TotalAlloc-before.TotalAlloc, uint64(s.encodedSize())*5/4+1024; got > most {
			t.Errorf("%s: %d bytes allocated to encode %d, want at most %d", name, got, len(data), most)
		}
	}
}

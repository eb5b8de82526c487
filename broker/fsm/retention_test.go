package fsm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fabriq-io/fabriq/storage"
)

// segs builds contiguous segments of 100 offsets and 1000 bytes each,
// segment i's newest message published at time (i+1)*1000; the last is
// active.
func segs(n int) []storage.SegmentInfo {
	out := make([]storage.SegmentInfo, n)
	for i := range out {
		out[i] = storage.SegmentInfo{BaseOffset: uint64(i * 100), NextOffset: uint64(i*100 + 100), Bytes: 1000,
			MaxPublishTime: int64(i+1) * 1000, Active: i == n-1}
	}
	return out
}

// The leader's decision, as a pure function of segments, cursors, times
// and the policy.
func TestDecideRetention(t *testing.T) {
	const now = 10_000
	tests := []struct {
		name   string
		in     RetentionInput
		start  uint64
		ack    uint64
		exceed bool
	}{
		{name: "acknowledged segments go at once by default",
			in: RetentionInput{Segments: segs(5), Next: 500, Floors: []uint64{250, 320}}, start: 200},
		{name: "never past the slowest subscription",
			in: RetentionInput{Segments: segs(5), Next: 500, Floors: []uint64{0, 480}}, start: 0},
		{name: "no subscription: every sealed segment goes, never the active one",
			in: RetentionInput{Segments: segs(5), Next: 500}, start: 400},
		{name: "retention time keeps young acknowledged segments",
			in: RetentionInput{Policy: RetentionPolicy{RetentionTimeMs: 7500}, Segments: segs(5), Next: 500}, start: 200},
		{name: "retention size keeps acknowledged segments while the partition is small enough",
			in: RetentionInput{Policy: RetentionPolicy{RetentionBytes: 2500}, Segments: segs(5), Next: 500}, start: 300},
		{name: "time and size: a segment goes once past either",
			in: RetentionInput{Policy: RetentionPolicy{RetentionTimeMs: 8500, RetentionBytes: 3500}, Segments: segs(5), Next: 500}, start: 200},
		{name: "-1 keeps everything",
			in: RetentionInput{Policy: RetentionPolicy{RetentionTimeMs: -1, RetentionBytes: -1}, Segments: segs(5), Next: 500}, start: 0},
		{name: "retention applies to acknowledged messages only",
			in: RetentionInput{Policy: RetentionPolicy{RetentionTimeMs: 1}, Segments: segs(5), Next: 500, Floors: []uint64{150}}, start: 100},
		{name: "message TTL acknowledges what is older on every subscription",
			in:    RetentionInput{Policy: RetentionPolicy{MessageTTLMs: 7000}, Segments: segs(5), Next: 500, Floors: []uint64{10, 50}, TTLFloor: 300},
			start: 300, ack: 300},
		{name: "message TTL does nothing to subscriptions past it",
			in:    RetentionInput{Policy: RetentionPolicy{MessageTTLMs: 7000}, Segments: segs(5), Next: 500, Floors: []uint64{350}, TTLFloor: 300},
			start: 300},
		{name: "producer_exception: a backlog over the quota refuses sends and deletes nothing unacknowledged",
			in:    RetentionInput{Policy: RetentionPolicy{BacklogQuotaBytes: 2000}, Segments: segs(5), Next: 500, Floors: []uint64{150, 400}},
			start: 100, exceed: true},
		{name: "producer_exception: a backlog within the quota",
			in:    RetentionInput{Policy: RetentionPolicy{BacklogQuotaBytes: 2000}, Segments: segs(5), Next: 500, Floors: []uint64{350}},
			start: 300},
		{name: "consumer_backlog_eviction moves the slowest cursors past whole segments",
			in: RetentionInput{Policy: RetentionPolicy{BacklogQuotaBytes: 2000, QuotaPolicy: ConsumerBacklogEviction},
				Segments: segs(5), Next: 500, Floors: []uint64{150, 400}},
			start: 300, ack: 300},
		{name: "consumer_backlog_eviction goes into the active segment by its share of the bytes, never deletes it",
			in: RetentionInput{Policy: RetentionPolicy{BacklogQuotaBytes: 100, QuotaPolicy: ConsumerBacklogEviction},
				Segments: segs(5), Next: 500, Floors: []uint64{0}},
			start: 400, ack: 490},
		{name: "the start never moves back",
			in: RetentionInput{Segments: segs(5)[2:], Start: 250, Next: 500, Floors: []uint64{250}}, start: 250},
		{name: "segments below the start are not counted again",
			in: RetentionInput{Policy: RetentionPolicy{RetentionBytes: 2500}, Segments: segs(5), Start: 200, Next: 500}, start: 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Now = now
			d := DecideRetention(tt.in)
			if d.Start != tt.start || d.AckBelow != tt.ack || d.QuotaExceeded != tt.exceed {
				t.Fatalf("decision %+v; want start %d, ack below %d, quota exceeded %v", d, tt.start, tt.ack, tt.exceed)
			}
			boundary := d.Start == tt.in.Start
			for _, s := range tt.in.Segments {
				boundary = boundary || s.BaseOffset == d.Start
			}
			if !boundary {
				t.Fatalf("start %d is not a segment boundary", d.Start)
			}
			for _, f := range tt.in.Floors {
				if d.Start > max(f, d.AckBelow) {
					t.Fatalf("start %d is past a subscription at %d", d.Start, f)
				}
			}
		})
	}
}

// smallLog opens a log whose segments roll every segBytes.
func smallLog(t *testing.T, dir string, segBytes int64) *storage.Log {
	t.Helper()
	l, err := storage.Open(dir, storage.Config{SegmentMaxBytes: segBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// The retain entry: every replica applies the same start, whatever its
// own segments, trims its log to the segment boundary at or below it,
// moves cursors below it up, and serves a new Earliest subscription from
// it; a snapshot carries it to a new replica.
func TestFSMRetainReplicated(t *testing.T) {
	root := t.TempDir()
	// Replica c's node rolls segments at another size: its log's own
	// start differs from the others' once they trim.
	replicas := []*Machine{
		newFSM(smallLog(t, filepath.Join(root, "a"), 4<<10), filepath.Join(root, "snap-a"), nil),
		newFSM(smallLog(t, filepath.Join(root, "b"), 4<<10), filepath.Join(root, "snap-b"), nil),
		newFSM(smallLog(t, filepath.Join(root, "c"), 10<<10), filepath.Join(root, "snap-c"), nil),
	}
	var index uint64
	applyAll := func(data []byte) {
		index++
		for _, f := range replicas {
			apply(f, index, data)
		}
	}
	applyAll(mustEntry(t, joinOf("fast", "c", Earliest)))
	applyAll(mustEntry(t, joinOf("slow", "c", Earliest)))
	for i := range 300 {
		applyAll(mustEntry(t, sendOf("p", uint64(3*i), uint64(3*i+1), uint64(3*i+2))))
	}
	applyAll(mustEntry(t, Acks{Acks: []SubAcks{{Sub: "fast", Offsets: []uint64{799}, Cumulative: true}}}))
	applyAll(mustEntry(t, Acks{Acks: []SubAcks{{Sub: "slow", Offsets: []uint64{599}, Cumulative: true}}}))

	// The leader (a) decides from its own segments and cursors.
	leader := replicas[0]
	start, next, floors := leader.Floors()
	in := RetentionInput{Segments: leader.log.Segments(), Start: start, Next: next}
	for _, f := range floors {
		in.Floors = append(in.Floors, f)
	}
	d := DecideRetention(in)
	if d.Start == 0 || d.Start > 600 {
		t.Fatalf("decision %+v: want a start in 1..600", d)
	}
	// TTL: everything below 700 is acknowledged on every subscription.
	applyAll(mustEntry(t, Retain{Start: d.Start, AckBelow: 700}))

	checkRetained(t, replicas, d.Start)
	// A new subscription from the earliest message starts at the
	// partition's start on every replica, through both entry kinds.
	applyAll(mustEntry(t, createSubscription{Name: "new", Initial: Earliest}))
	applyAll(mustEntry(t, joinOf("joined", "c1", Earliest)))
	// A seek below the start lands on it.
	applyAll(mustEntry(t, Seek{Name: "fast", Offset: 0}))
	for i, f := range replicas {
		for _, sub := range []string{"new", "joined", "fast"} {
			if c, _, _ := f.Cursor(sub); c.Floor != d.Start {
				t.Fatalf("replica %c: subscription %s starts at %d, want the partition's start %d", 'a'+i, sub, c.Floor, d.Start)
			}
		}
	}
	// A start behind the current one changes nothing.
	applyAll(mustEntry(t, Retain{Start: 1}))
	for _, f := range replicas {
		if f.StartOffset() != d.Start {
			t.Fatalf("start moved back to %d", f.StartOffset())
		}
	}

	// A snapshot of replica c carries the start to a new replica.
	restoredStart(t, replicas[2], filepath.Join(root, "d"), index+1, d.Start)
}

// checkRetained fails unless every replica starts at start, its log at or
// below it (at it for replicas a and b, whose segments are the leader's;
// below it for c, whose segments differ), with the cursors moved up to the
// retain entry's AckBelow, 700.
func checkRetained(t *testing.T, replicas []*Machine, start uint64) {
	t.Helper()
	for i, f := range replicas {
		name := string(rune('a' + i))
		if got := f.StartOffset(); got != start {
			t.Fatalf("replica %s starts at %d, want %d", name, got, start)
		}
		li := f.log.Info()
		if li.StartOffset > start {
			t.Fatalf("replica %s's log starts at %d, past the partition's start %d", name, li.StartOffset, start)
		}
		if i < 2 && li.StartOffset != start {
			t.Fatalf("replica %s's log starts at %d; its segments are the leader's, so want %d", name, li.StartOffset, start)
		}
		if c, _, _ := f.Cursor("slow"); c.Floor != 700 {
			t.Fatalf("replica %s: slow cursor at %d, want 700", name, c.Floor)
		}
		if c, _, _ := f.Cursor("fast"); c.Floor != 800 {
			t.Fatalf("replica %s: fast cursor at %d, want 800", name, c.Floor)
		}
	}
	if replicas[2].log.Info().StartOffset == start {
		t.Fatalf("replica c's log starts at the same offset as the others: the test needs it to differ")
	}
}

// restoredStart restores a snapshot of f on a new replica in dir and fails
// unless it starts at start, and a subscription created from the earliest
// message at Raft index index starts there too.
func restoredStart(t *testing.T, f *Machine, dir string, index, start uint64) {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	g := newFSM(smallLog(t, filepath.Join(dir, "log"), 4<<10), filepath.Join(dir, "snapshots"), nil)
	if err := g.Restore(nopCloser(sink.buf)); err != nil {
		t.Fatal(err)
	}
	if g.StartOffset() != start {
		t.Fatalf("restored replica starts at %d, want %d", g.StartOffset(), start)
	}
	apply(g, index, mustEntry(t, joinOf("after-restore", "c", Earliest)))
	if c, _, _ := g.Cursor("after-restore"); c.Floor != start {
		t.Fatalf("a subscription created after the restore starts at %d, want %d", c.Floor, start)
	}
}

// A replica whose log was trimmed down to its active segment, and which
// then lost that segment's unsynced batches (a power loss), replays its
// Raft log from the first entry (no Raft snapshot yet): the entries whose
// messages lie below what the log holds were stored before and are not
// appended again, and the state comes out as it was. Found by the chaos
// suite: the replica took the first send for new and stopped on the
// offsets ("log gave offset 11314, state machine expected 0").
func TestFSMReplayIntoTrimmedLog(t *testing.T) {
	dir := t.TempDir()
	l, err := storage.Open(dir, storage.Config{SegmentMaxBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	var entries [][]byte
	entries = append(entries, mustEntry(t, joinOf("s", "c", Earliest)))
	for i := range 100 {
		entries = append(entries, mustEntry(t, sendOf("p", uint64(3*i), uint64(3*i+1), uint64(3*i+2))))
	}
	entries = append(entries, mustEntry(t, Acks{Acks: []SubAcks{{Sub: "s", Offsets: []uint64{299}, Cumulative: true}}}))
	f := newFSM(l, t.TempDir(), nil)
	for i, e := range entries {
		apply(f, uint64(i+1), e)
	}
	// Everything is acknowledged: retention moves the start to the next
	// offset and deletes every sealed segment.
	retain := mustEntry(t, Retain{Start: 300})
	entries = append(entries, retain)
	apply(f, uint64(len(entries)), retain)
	want := f.NextOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// The power loss: the active segment, the only one left, keeps
	// nothing of its batches, and nothing says they were synced (as when
	// it was rolled to after the last sync).
	names, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(names) != 1 || filepath.Base(names[0]) == "00000000000000000000.log" {
		t.Fatalf("segments left after retention: %v; want one, not the first", names)
	}
	if err := os.Truncate(names[0], 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "checkpoint")); err != nil {
		t.Fatal(err)
	}
	l2, err := storage.Open(dir, storage.Config{SegmentMaxBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l2.Close() })
	g := newFSM(l2, t.TempDir(), nil)
	for i, e := range entries {
		if err, ok := apply(g, uint64(i+1), e).(error); ok {
			t.Fatalf("replaying entry %d: %v", i+1, err)
		}
	}
	if g.NextOffset() != want || l2.NextOffset() != want {
		t.Fatalf("after the replay the state machine's next offset is %d and the log's %d; want %d", g.NextOffset(), l2.NextOffset(), want)
	}
}

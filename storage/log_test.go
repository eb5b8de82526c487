package storage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// smallConfig rolls segments every few KiB so tests cross many segments.
func smallConfig() Config {
	return Config{SegmentMaxBytes: 4 << 10, IndexIntervalBytes: 256}
}

func openLog(t *testing.T, dir string, cfg Config) *Log {
	t.Helper()
	l, err := Open(dir, cfg)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// fill appends batches of 1..5 messages with consecutive Raft indexes from
// raft on, and returns every message appended with its offset.
func fill(t *testing.T, l *Log, raft uint64, batches int) []Message {
	t.Helper()
	var all []Message
	next := int(l.NextOffset())
	for b := range batches {
		msgs := testMessages(next, 1+b%5)
		off, err := l.Append(raft+uint64(b), msgs)
		if err != nil {
			t.Fatalf("append batch %d: %v", b, err)
		}
		if off != uint64(next) {
			t.Fatalf("batch %d got offset %d, want %d", b, off, next)
		}
		for i := range msgs {
			msgs[i].Offset = off + uint64(i)
		}
		all = append(all, msgs...)
		next += len(msgs)
	}
	return all
}

// readAll reads the log from its start offset to its end in small reads.
func readAll(l *Log) ([]Message, error) {
	info := l.Info()
	var out []Message
	for off := info.StartOffset; off < info.NextOffset; {
		msgs, err := l.Read(off, 7, 1<<10)
		if err != nil {
			return out, err
		}
		if len(msgs) == 0 {
			return out, fmt.Errorf("empty read at %d before next offset %d", off, info.NextOffset)
		}
		out = append(out, msgs...)
		off = msgs[len(msgs)-1].Offset + 1
	}
	return out, nil
}

func sameMessages(t *testing.T, want, got []Message) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("got %d messages, want %d", len(got), len(want))
	}
	for i := range want {
		if want[i].Offset != got[i].Offset {
			t.Fatalf("message %d has offset %d, want %d", i, got[i].Offset, want[i].Offset)
		}
		sameMessage(t, want[i], got[i])
	}
}

// crashImage copies the log's files as a crash would leave them on disk if
// everything written so far had reached it, and returns the copy.
func crashImage(t *testing.T, dir string) string {
	t.Helper()
	img := t.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(img, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return img
}

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	return files
}

func TestAppendAndReadAcrossSegments(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig())
	want := fill(t, l, 1, 300)
	info := l.Info()
	if info.Segments < 10 {
		t.Fatalf("only %d segments; the test must cross many", info.Segments)
	}
	if info.NextOffset != uint64(len(want)) || info.LastRaftIndex != 300 {
		t.Fatalf("info %+v", info)
	}
	got, err := readAll(l)
	if err != nil {
		t.Fatal(err)
	}
	sameMessages(t, want, got)
	// One read spanning every segment.
	got, err = l.Read(0, len(want), math.MaxInt)
	if err != nil {
		t.Fatal(err)
	}
	sameMessages(t, want, got)
}

func TestReadFromEveryOffset(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig())
	want := fill(t, l, 1, 60)
	for off := range want {
		got, err := l.Read(uint64(off), 3, math.MaxInt)
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		n := min(3, len(want)-off)
		sameMessages(t, want[off:off+n], got)
	}
}

func TestReadFromMiddleOfBatch(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{})
	msgs := testMessages(0, 10)
	if _, err := l.Append(1, msgs); err != nil {
		t.Fatal(err)
	}
	got, err := l.Read(4, 100, math.MaxInt)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 || got[0].Offset != 4 {
		t.Fatalf("read from mid-batch got %d messages starting at %d", len(got), got[0].Offset)
	}
	for i, m := range got {
		sameMessage(t, msgs[4+i], m)
	}
}

func TestReadLimits(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{})
	big := Message{Payload: bytes.Repeat([]byte("x"), 10_000)}
	if _, err := l.Append(1, []Message{big, {Payload: []byte("a")}, {Payload: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	t.Run("one message larger than maxBytes comes alone", func(t *testing.T) {
		got, err := l.Read(0, 10, 100)
		if err != nil || len(got) != 1 || len(got[0].Payload) != 10_000 {
			t.Fatalf("got %d messages, err %v", len(got), err)
		}
	})
	t.Run("byte budget stops before the next record", func(t *testing.T) {
		got, err := l.Read(1, 10, 1)
		if err != nil || len(got) != 1 || string(got[0].Payload) != "a" {
			t.Fatalf("got %v, err %v", got, err)
		}
	})
	t.Run("count limit", func(t *testing.T) {
		got, err := l.Read(0, 2, math.MaxInt)
		if err != nil || len(got) != 2 {
			t.Fatalf("got %d messages, err %v", len(got), err)
		}
	})
	t.Run("at the end nothing", func(t *testing.T) {
		got, err := l.Read(3, 10, math.MaxInt)
		if err != nil || len(got) != 0 {
			t.Fatalf("got %d messages, err %v", len(got), err)
		}
	})
	t.Run("past the end", func(t *testing.T) {
		if _, err := l.Read(4, 10, math.MaxInt); !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("err %v, want ErrOutOfRange", err)
		}
	})
	t.Run("bad limits", func(t *testing.T) {
		if _, err := l.Read(0, 0, 10); err == nil {
			t.Fatal("zero count accepted")
		}
		if _, err := l.Read(0, 10, -1); err == nil {
			t.Fatal("negative bytes accepted")
		}
	})
}

func TestAppendRefusals(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{MaxBatchBytes: 1 << 10})
	if _, err := l.Append(1, nil); !errors.Is(err, ErrEmptyBatch) {
		t.Fatalf("empty batch: %v", err)
	}
	if _, err := l.Append(1, []Message{{Payload: make([]byte, 2<<10)}}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("large batch: %v", err)
	}
	if _, err := l.Append(5, testMessages(0, 1)); err != nil {
		t.Fatal(err)
	}
	for _, idx := range []uint64{0, 4, 5} {
		if _, err := l.Append(idx, testMessages(0, 1)); !errors.Is(err, ErrAlreadyApplied) {
			t.Fatalf("raft index %d: %v, want ErrAlreadyApplied", idx, err)
		}
	}
	if n := l.NextOffset(); n != 1 {
		t.Fatalf("refused appends changed the log: next offset %d", n)
	}
}

func TestReopenSkipsAppliedRaftIndexes(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, smallConfig())
	if err != nil {
		t.Fatal(err)
	}
	want := fill(t, l, 1, 50)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, smallConfig())
	if got := l.LastRaftIndex(); got != 50 {
		t.Fatalf("last raft index after reopen %d, want 50", got)
	}
	// A Raft replay from index 1 adds nothing.
	for idx := uint64(1); idx <= 50; idx++ {
		if _, err := l.Append(idx, testMessages(0, 1)); !errors.Is(err, ErrAlreadyApplied) {
			t.Fatalf("replayed index %d: %v", idx, err)
		}
	}
	want = append(want, fill(t, l, 51, 5)...)
	got, err := readAll(l)
	if err != nil {
		t.Fatal(err)
	}
	sameMessages(t, want, got)
}

// A crash loses the unsynced tail; replaying the caller's Raft log puts
// back exactly what was lost, with the same offsets and no duplicates.
func TestCrashThenReplay(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallConfig())
	batches := make([][]Message, 41)
	for idx := 1; idx <= 40; idx++ {
		batches[idx] = testMessages(idx*10, 1+idx%4)
		if _, err := l.Append(uint64(idx), batches[idx]); err != nil {
			t.Fatal(err)
		}
		if idx == 25 {
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	want, err := readAll(l)
	if err != nil {
		t.Fatal(err)
	}
	img := crashImage(t, dir)
	// The page cache lost the end of the active segment: cut it inside
	// its last batch.
	segs := segmentFiles(t, img)
	last := segs[len(segs)-1]
	fi, err := os.Stat(last)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(last, fi.Size()-3); err != nil {
		t.Fatal(err)
	}
	r := openLog(t, img, smallConfig())
	if got := r.LastRaftIndex(); got != 39 {
		t.Fatalf("after the crash the log holds up to raft index %d, want 39", got)
	}
	for idx := 1; idx <= 40; idx++ {
		_, err := r.Append(uint64(idx), batches[idx])
		if err != nil && !errors.Is(err, ErrAlreadyApplied) {
			t.Fatalf("replay %d: %v", idx, err)
		}
	}
	got, err := readAll(r)
	if err != nil {
		t.Fatal(err)
	}
	sameMessages(t, want, got)
}

func TestTornTailIsCut(t *testing.T) {
	damages := []struct {
		name string
		// damage changes the active segment past its sync mark and
		// returns how many of the unsynced batches must survive.
		damage func(b []byte, mark int, ends []int) ([]byte, int)
	}{
		{"cut inside a header", func(b []byte, mark int, ends []int) ([]byte, int) {
			return b[:ends[len(ends)-2]+5], len(ends) - 1
		}},
		{"cut inside a batch", func(b []byte, mark int, ends []int) ([]byte, int) {
			return b[:ends[len(ends)-1]-1], len(ends) - 1
		}},
		{"zeros after the last batch", func(b []byte, mark int, ends []int) ([]byte, int) {
			return append(b, make([]byte, 4096)...), len(ends)
		}},
		{"garbage after the last batch", func(b []byte, mark int, ends []int) ([]byte, int) {
			return append(b, "not a batch at all, just noise"...), len(ends)
		}},
		{"zeroed page in an unsynced batch", func(b []byte, mark int, ends []int) ([]byte, int) {
			for i := ends[0] + 40; i < ends[1]; i++ {
				b[i] = 0
			}
			return b, 1
		}},
		{"flipped byte in the first unsynced batch", func(b []byte, mark int, ends []int) ([]byte, int) {
			b[mark+batchHeaderSize+2] ^= 0x10
			return b, 0
		}},
	}
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, Config{})
			synced := fill(t, l, 1, 5)
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			mark := int(l.Info().Bytes)
			var ends []int
			var unsynced [][]Message
			for i := range 4 {
				msgs := testMessages(1000+i*10, 3)
				if _, err := l.Append(uint64(10+i), msgs); err != nil {
					t.Fatal(err)
				}
				ends = append(ends, int(l.Info().Bytes))
				unsynced = append(unsynced, msgs)
			}
			img := crashImage(t, dir)
			path := segmentFiles(t, img)[0]
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b, keep := d.damage(b, mark, ends)
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			r := openLog(t, img, Config{})
			want := synced
			off := uint64(len(synced))
			for _, msgs := range unsynced[:keep] {
				for _, m := range msgs {
					m.Offset = off
					off++
					want = append(want, m)
				}
			}
			got, err := readAll(r)
			if err != nil {
				t.Fatal(err)
			}
			sameMessages(t, want, got)
			if fi, _ := os.Stat(path); keep < len(ends) && fi.Size() != int64(append([]int{mark}, ends...)[keep]) {
				t.Fatalf("segment is %d bytes after recovery, want %d", fi.Size(), append([]int{mark}, ends...)[keep])
			}
			// The log takes appends again after recovery.
			if _, err := r.Append(100, testMessages(0, 1)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDamageToSyncedDataIsAnError(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Config{})
	fill(t, l, 1, 10)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	img := crashImage(t, dir)
	path := segmentFiles(t, img)[0]
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[100] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(img, Config{})
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open of a damaged synced segment: %v, want a *CorruptError", err)
	}
	if ce.File != path || ce.Position > 100 || !strings.Contains(err.Error(), path) {
		t.Fatalf("error does not name the file and position: %v", err)
	}
}

func TestDamagedSealedSegmentFailsReads(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallConfig())
	want := fill(t, l, 1, 100)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs := segmentFiles(t, dir)
	victim := segs[1]
	b, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-5] ^= 0x01 // inside the last record's payload
	if err := os.WriteFile(victim, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := openLog(t, dir, smallConfig())
	base, _ := parseSegmentName(filepath.Base(victim))
	got, err := r.Read(0, int(base), math.MaxInt)
	if err != nil {
		t.Fatalf("segments before the damage must read: %v", err)
	}
	sameMessages(t, want[:base], got)
	_, err = readAll(r)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != victim {
		t.Fatalf("reading the damaged segment: %v, want a *CorruptError naming %s", err, victim)
	}
}

func TestDamagedIndexIsRebuilt(t *testing.T) {
	damages := map[string]func(path string) error{
		"deleted":   os.Remove,
		"truncated": func(p string) error { return os.Truncate(p, 7) },
		"flipped": func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[3] ^= 0x80
			return os.WriteFile(p, b, 0o644)
		},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, smallConfig())
			want := fill(t, l, 1, 80)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			idx := indexPath(segmentFiles(t, dir)[2])
			before, err := os.ReadFile(idx)
			if err != nil {
				t.Fatal(err)
			}
			if err := damage(idx); err != nil {
				t.Fatal(err)
			}
			r := openLog(t, dir, smallConfig())
			got, err := readAll(r)
			if err != nil {
				t.Fatal(err)
			}
			sameMessages(t, want, got)
			after, err := os.ReadFile(idx)
			if err != nil || !bytes.Equal(before, after) {
				t.Fatalf("index not rebuilt identically (err %v)", err)
			}
		})
	}
}

func TestTruncatedSealedSegmentIsAnError(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallConfig())
	fill(t, l, 1, 80)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	victim := segmentFiles(t, dir)[1]
	fi, err := os.Stat(victim)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(victim, fi.Size()-10); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, smallConfig())
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != victim {
		t.Fatalf("open with a truncated sealed segment: %v, want a *CorruptError naming it", err)
	}
}

// Random truncations and flipped bytes anywhere in the log's files either
// leave a log whose every message is the original one at its offset, or
// give a clear corruption error; never garbage, never a panic. Only damage
// past the sync mark may lose messages.
func TestRandomDamage(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallConfig())
	fill(t, l, 1, 60)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	fill(t, l, 61, 3) // an unsynced tail
	want, err := readAll(l)
	if err != nil {
		t.Fatal(err)
	}
	wantNext := l.NextOffset()
	active := segmentFiles(t, dir)
	activeName := filepath.Base(active[len(active)-1])
	mark := l.readCheckpoint(l.active().base)

	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		img := crashImage(t, dir)
		files, _ := filepath.Glob(filepath.Join(img, "*"))
		path := files[rng.IntN(len(files))]
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			continue
		}
		pos := rng.IntN(len(b))
		what := "flip"
		if rng.IntN(2) == 0 {
			what = "truncate"
			b = b[:pos]
		} else {
			b[pos] ^= byte(1 + rng.IntN(255))
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		lossAllowed := filepath.Base(path) == activeName && int64(pos) >= mark
		desc := fmt.Sprintf("trial %d: %s %s at %d", trial, what, filepath.Base(path), pos)

		r, err := Open(img, smallConfig())
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s: open failed with an unclear error: %v", desc, err)
			}
			continue
		}
		got, err := readAll(r)
		next := r.NextOffset()
		r.Close()
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: read failed with an unclear error: %v", desc, err)
		}
		for _, m := range got {
			sameMessage(t, want[m.Offset], m)
		}
		if err == nil && next != wantNext && !lossAllowed {
			t.Fatalf("%s: log silently shrank to next offset %d from %d", desc, next, wantNext)
		}
	}
}

func TestOffsetForTime(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig())
	// Publish times 1000, 1010, ... with one step back at offset 50.
	var off uint64
	for raft := uint64(1); off < 200; raft++ {
		var msgs []Message
		for range 4 {
			ts := 1000 + int64(off)*10
			if off == 50 {
				ts = 500
			}
			msgs = append(msgs, Message{PublishTime: ts, Payload: []byte("p")})
			off++
		}
		if _, err := l.Append(raft, msgs); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		t    int64
		want uint64
	}{
		{0, 0}, {500, 0}, {1000, 0}, {1001, 1}, {1010, 1}, {1490, 49}, {1495, 51}, {1500, 51}, {1505, 51},
		{2990, 199}, {2991, 200}, {5000, 200},
	}
	for _, tt := range tests {
		got, err := l.OffsetForTime(tt.t)
		if err != nil || got != tt.want {
			t.Errorf("OffsetForTime(%d) = %d, %v; want %d", tt.t, got, err, tt.want)
		}
	}
}

// Retention by age and size; never at or above the floor. CUR-6 rests on
// the floor: a broker that applies retention gives it the oldest unacked
// offset of all subscriptions (the broker applies no retention yet).
func TestRetention(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	build := func(t *testing.T, cfg Config) (*Log, []Message) {
		cfg.SegmentMaxBytes, cfg.IndexIntervalBytes = 4<<10, 256
		l := openLog(t, t.TempDir(), cfg)
		// Message i is published i minutes before now... oldest first.
		var all []Message
		for b := range 100 {
			var msgs []Message
			for range 3 {
				i := len(all) + len(msgs)
				msgs = append(msgs, Message{PublishTime: now.Add(time.Duration(i-300) * time.Minute).UnixMilli(),
					Payload: bytes.Repeat([]byte{'r'}, 100)})
			}
			off, err := l.Append(uint64(b+1), msgs)
			if err != nil {
				t.Fatal(err)
			}
			for i := range msgs {
				msgs[i].Offset = off + uint64(i)
			}
			all = append(all, msgs...)
		}
		return l, all
	}
	t.Run("by age, never the active segment", func(t *testing.T) {
		l, all := build(t, Config{RetentionMaxAge: time.Minute})
		res, err := l.Retain(now.Add(24*time.Hour), math.MaxUint64)
		if err != nil {
			t.Fatal(err)
		}
		info := l.Info()
		if info.Segments != 1 || res.StartOffset != info.StartOffset || res.Messages != info.StartOffset {
			t.Fatalf("after retention: %+v, result %+v", info, res)
		}
		got, err := readAll(l)
		if err != nil {
			t.Fatal(err)
		}
		sameMessages(t, all[info.StartOffset:], got)
		if _, err := l.Read(0, 1, 1); !errors.Is(err, ErrTrimmed) {
			t.Fatalf("read of a deleted offset: %v, want ErrTrimmed", err)
		}
	})
	t.Run("by age keeps what is young enough", func(t *testing.T) {
		l, all := build(t, Config{RetentionMaxAge: 100 * time.Minute})
		if _, err := l.Retain(now, math.MaxUint64); err != nil {
			t.Fatal(err)
		}
		start := l.Info().StartOffset
		// Message 200 is exactly 100 minutes old: it must still be there,
		// and the segment before the start held only older messages.
		if start > 200 || start == 0 {
			t.Fatalf("start offset %d after retention", start)
		}
		if all[start-1].PublishTime >= now.Add(-100*time.Minute).UnixMilli() {
			t.Fatalf("a message younger than the max age was deleted")
		}
	})
	t.Run("the floor holds", func(t *testing.T) {
		l, _ := build(t, Config{RetentionMaxAge: time.Minute})
		floor := uint64(100)
		if _, err := l.Retain(now.Add(24*time.Hour), floor); err != nil {
			t.Fatal(err)
		}
		start := l.Info().StartOffset
		if start > floor || start == 0 {
			t.Fatalf("start offset %d with floor %d", start, floor)
		}
		if _, err := l.Read(floor, 1, 1); err != nil {
			t.Fatalf("offset at the floor is gone: %v", err)
		}
	})
	t.Run("by size", func(t *testing.T) {
		l, _ := build(t, Config{RetentionMaxBytes: 10 << 10})
		if _, err := l.Retain(now, math.MaxUint64); err != nil {
			t.Fatal(err)
		}
		info := l.Info()
		if info.Bytes > 10<<10 || info.Bytes+4<<10+1<<10 < 10<<10 {
			t.Fatalf("log is %d bytes after size retention", info.Bytes)
		}
	})
	t.Run("survives reopen", func(t *testing.T) {
		dir := t.TempDir()
		l, err := Open(dir, Config{SegmentMaxBytes: 1 << 10, RetentionMaxBytes: 1})
		if err != nil {
			t.Fatal(err)
		}
		fill(t, l, 1, 50)
		res, err := l.Retain(now, math.MaxUint64)
		if err != nil || res.Segments == 0 {
			t.Fatalf("retain: %+v %v", res, err)
		}
		info := l.Info()
		l.Close()
		r := openLog(t, dir, Config{SegmentMaxBytes: 1 << 10})
		if got := r.Info(); got != info {
			t.Fatalf("after reopen %+v, before %+v", got, info)
		}
	})
}

func TestSnapshotAndRestore(t *testing.T) {
	root := t.TempDir()
	src := openLog(t, filepath.Join(root, "src"), smallConfig())
	want := fill(t, src, 1, 120)
	snap, err := src.Snapshot(filepath.Join(root, "snap"))
	if err != nil {
		t.Fatal(err)
	}
	// The snapshot holds the segments themselves, not copies.
	for _, seg := range snap.Info().Segments {
		a, err1 := os.Stat(filepath.Join(root, "src", segmentName(seg.Base)))
		b, err2 := os.Stat(filepath.Join(root, "snap", segmentName(seg.Base)))
		if err1 != nil || err2 != nil || !os.SameFile(a, b) {
			t.Fatalf("segment %d is not a hard link (%v %v)", seg.Base, err1, err2)
		}
	}
	// Appends after the snapshot do not change it.
	fill(t, src, 121, 10)
	var stream bytes.Buffer
	if _, err := snap.WriteTo(&stream); err != nil {
		t.Fatal(err)
	}

	// Restore on an empty replica and on one that holds other data.
	for _, name := range []string{"empty", "nonempty"} {
		t.Run(name, func(t *testing.T) {
			dst := openLog(t, filepath.Join(root, "dst-"+name), Config{})
			if name == "nonempty" {
				fill(t, dst, 1, 500)
			}
			if err := dst.Restore(bytes.NewReader(stream.Bytes())); err != nil {
				t.Fatal(err)
			}
			got, err := readAll(dst)
			if err != nil {
				t.Fatal(err)
			}
			sameMessages(t, want, got)
			if dst.LastRaftIndex() != 120 || dst.NextOffset() != uint64(len(want)) {
				t.Fatalf("restored log %+v", dst.Info())
			}
			// Byte-identical segments.
			for _, seg := range snap.Info().Segments {
				a, _ := os.ReadFile(filepath.Join(root, "snap", segmentName(seg.Base)))
				b, err := os.ReadFile(filepath.Join(root, "dst-"+name, segmentName(seg.Base)))
				if err != nil || !bytes.Equal(a[:seg.Size], b) {
					t.Fatalf("segment %d differs after restore (%v)", seg.Base, err)
				}
			}
			// It goes on where the snapshot ended, and reopens.
			more := fill(t, dst, 121, 3)
			if err := dst.Close(); err != nil {
				t.Fatal(err)
			}
			re := openLog(t, filepath.Join(root, "dst-"+name), Config{})
			got, err = readAll(re)
			if err != nil {
				t.Fatal(err)
			}
			sameMessages(t, append(slices.Clone(want), more...), got)
		})
	}

	t.Run("reopened snapshot streams the same bytes", func(t *testing.T) {
		again, err := OpenSnapshot(filepath.Join(root, "snap"))
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if _, err := again.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), stream.Bytes()) {
			t.Fatal("streams differ")
		}
		if err := again.Remove(); err != nil {
			t.Fatal(err)
		}
		if _, err := readAll(src); err != nil {
			t.Fatalf("removing the snapshot broke the log: %v", err)
		}
	})
}

func TestRestoreRefusesBadStreams(t *testing.T) {
	root := t.TempDir()
	src := openLog(t, filepath.Join(root, "src"), smallConfig())
	fill(t, src, 1, 40)
	snap, err := src.Snapshot(filepath.Join(root, "snap"))
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if _, err := snap.WriteTo(&stream); err != nil {
		t.Fatal(err)
	}
	good := stream.Bytes()
	damaged := map[string][]byte{
		"empty":          nil,
		"not a snapshot": []byte("hello, world, this is not a snapshot"),
		"cut short":      good[:len(good)-100],
		"flipped byte":   func() []byte { b := bytes.Clone(good); b[len(b)-50] ^= 4; return b }(),
		"flipped header": func() []byte { b := bytes.Clone(good); b[20] ^= 4; return b }(),
	}
	dst := openLog(t, filepath.Join(root, "dst"), Config{})
	want := fill(t, dst, 1, 7)
	for name, b := range damaged {
		t.Run(name, func(t *testing.T) {
			err := dst.Restore(bytes.NewReader(b))
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("restore: %v, want ErrBadSnapshot", err)
			}
			got, err := readAll(dst)
			if err != nil {
				t.Fatal(err)
			}
			sameMessages(t, want, got)
			if _, err := os.Stat(filepath.Join(root, "dst", restoreDir)); !os.IsNotExist(err) {
				t.Fatalf("staging directory left behind: %v", err)
			}
		})
	}
	t.Run("io error from the stream", func(t *testing.T) {
		r := io.MultiReader(bytes.NewReader(good[:len(good)/2]), errReader{})
		if err := dst.Restore(r); err == nil {
			t.Fatal("restore succeeded on a failing stream")
		}
	})
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

// A crash during Restore: a complete staging directory is installed by the
// next Open, an incomplete one is dropped.
func TestInterruptedRestore(t *testing.T) {
	root := t.TempDir()
	src := openLog(t, filepath.Join(root, "src"), smallConfig())
	want := fill(t, src, 1, 30)
	snap, err := src.Snapshot(filepath.Join(root, "snap"))
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if _, err := snap.WriteTo(&stream); err != nil {
		t.Fatal(err)
	}
	for _, complete := range []bool{true, false} {
		t.Run(fmt.Sprintf("complete=%v", complete), func(t *testing.T) {
			dir := filepath.Join(root, fmt.Sprint("dst-", complete))
			dst, err := Open(dir, Config{})
			if err != nil {
				t.Fatal(err)
			}
			old := fill(t, dst, 1, 3)
			staging := filepath.Join(dir, restoreDir)
			if err := os.Mkdir(staging, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := dst.stage(staging, bytes.NewReader(stream.Bytes())); err != nil {
				t.Fatal(err)
			}
			if !complete {
				os.Remove(filepath.Join(staging, restoreDone))
			}
			dst.Close()
			re := openLog(t, dir, Config{})
			got, err := readAll(re)
			if err != nil {
				t.Fatal(err)
			}
			if complete {
				sameMessages(t, want, got)
			} else {
				sameMessages(t, old, got)
			}
			if _, err := os.Stat(staging); !os.IsNotExist(err) {
				t.Fatalf("staging directory left behind: %v", err)
			}
		})
	}
}

func TestOpenIsExclusive(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Config{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	// The same directory spelt another way is the same directory.
	other := filepath.Join(dir, "..", filepath.Base(dir)) + string(filepath.Separator)
	if _, err := Open(other, Config{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("open as %s: %v, want ErrLocked", other, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(dir, Config{})
	if err != nil {
		t.Fatalf("open after the first log closed: %v", err)
	}
	// A directory renamed while its log is open (a copy set aside) stays
	// held under its new name; a new one under the old name is free.
	aside := dir + "@old"
	if err := os.Rename(dir, aside); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(aside, Config{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("open of the renamed directory: %v, want ErrLocked", err)
	}
	fresh, err := Open(dir, Config{})
	if err != nil {
		t.Fatalf("open of a new directory under the old name: %v", err)
	}
	fresh.Close()
	again.Close()
	// A log that fails to open releases the directory too.
	// (An empty segment followed by another: a sealed segment is never
	// empty.)
	bad := t.TempDir()
	for _, base := range []uint64{0, 5} {
		if err := os.WriteFile(filepath.Join(bad, segmentName(base)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := Open(bad, Config{}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("open of a damaged log: %v, want ErrCorrupt (not ErrLocked)", err)
		}
	}
}

// A log whose directory was renamed while it was open (a copy set aside)
// and replaced by a new one leaves the new one alone when it closes: its
// checkpoint, written by path, would land in the new copy.
func TestCloseAfterDirectoryMovedLeavesTheNewOneAlone(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "p", "log")
	old := openLog(t, dir, Config{})
	oldMsgs := fill(t, old, 1, 3) // appended, not synced: Close would write a checkpoint
	if err := os.Rename(filepath.Join(parent, "p"), filepath.Join(parent, "p@old")); err != nil {
		t.Fatal(err)
	}
	fresh, err := Open(dir, Config{})
	if err != nil {
		t.Fatal(err)
	}
	want := fill(t, fresh, 1, 2)
	if err := fresh.Sync(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(dir, checkpointFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(filepath.Join(dir, checkpointFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("closing the log set aside rewrote the new copy's checkpoint")
	}
	if err := fresh.Close(); err != nil {
		t.Fatal(err)
	}
	again := openLog(t, dir, Config{})
	got, err := again.Read(0, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	sameMessages(t, want, got)
	// The copy set aside kept its messages: synced by its file.
	aside := openLog(t, filepath.Join(parent, "p@old", "log"), Config{})
	got, err = aside.Read(0, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	sameMessages(t, oldMsgs, got)
}

func TestClosedLog(t *testing.T) {
	l, err := Open(t.TempDir(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, l, 1, 2)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := l.Append(9, testMessages(0, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("append: %v", err)
	}
	if _, err := l.Read(0, 1, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("read: %v", err)
	}
	if err := l.Sync(); !errors.Is(err, ErrClosed) {
		t.Fatalf("sync: %v", err)
	}
	if _, err := l.Snapshot(filepath.Join(t.TempDir(), "s")); !errors.Is(err, ErrClosed) {
		t.Fatalf("snapshot: %v", err)
	}
}

func TestConcurrentAppendsAndReads(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig())
	const batches = 300
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			for {
				select {
				case <-done:
					return
				default:
				}
				next := l.NextOffset()
				if next == 0 {
					continue
				}
				off := rng.Uint64N(next)
				msgs, err := l.Read(off, 10, 4096)
				if err != nil {
					errs <- err
					return
				}
				for _, m := range msgs {
					want := testMessage(int(m.Offset))
					if !bytes.Equal(m.Payload, want.Payload) || m.Key != want.Key {
						errs <- fmt.Errorf("offset %d holds the wrong message", m.Offset)
						return
					}
				}
			}
		}()
	}
	fill(t, l, 1, batches)
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{SegmentMaxBytes: -1},
		{SegmentMaxBytes: MaxSegmentBytes + 1},
		{MaxBatchBytes: MaxBatchBytesLimit + 1},
		{IndexIntervalBytes: -5},
		{RetentionMaxAge: -time.Second},
		{RetentionMaxBytes: -1},
		{SegmentMaxAge: -time.Second},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate accepted %+v", c)
		}
		if _, err := Open(t.TempDir(), c); err == nil {
			t.Errorf("Open accepted %+v", c)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
}

// FuzzRecoverSegment opens a log whose only segment holds arbitrary bytes,
// with a sync mark taken from the input. Open must either fail with a clear
// corruption error or recover a log whose every message reads back.
func FuzzRecoverSegment(f *testing.F) {
	var good []byte
	good = appendBatch(good, 0, 1, testMessages(0, 3))
	good = appendBatch(good, 3, 2, testMessages(3, 2))
	f.Add(uint16(0), good)
	f.Add(uint16(len(good)), good)
	f.Add(uint16(10), good[:len(good)-7])
	f.Add(uint16(0), []byte("garbage"))
	f.Fuzz(func(t *testing.T, mark uint16, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segmentName(0)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := writeCheckpoint(dir, 0, int64(mark)); err != nil {
			t.Fatal(err)
		}
		l, err := Open(dir, Config{})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("unclear error: %v", err)
			}
			return
		}
		defer l.Close()
		if _, err := readAll(l); err != nil {
			t.Fatalf("recovered log does not read: %v", err)
		}
		if _, err := l.Append(l.LastRaftIndex()+1, testMessages(0, 1)); err != nil {
			t.Fatalf("recovered log does not take appends: %v", err)
		}
	})
}

// A synced segment cut exactly between two batches still reads cleanly,
// but it lost durable data: that is corruption, not a torn tail.
func TestSyncedDataCutAtBatchBoundaryIsAnError(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Config{})
	fill(t, l, 1, 3)
	cut := l.Info().Bytes
	fill(t, l, 4, 3)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	img := crashImage(t, dir)
	if err := os.Truncate(segmentFiles(t, img)[0], cut); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(img, Config{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open of a synced segment cut short: %v, want ErrCorrupt", err)
	}
}

// Install leaves a log that already holds the snapshot alone, and restores
// one that is behind.
func TestInstall(t *testing.T) {
	root := t.TempDir()
	src := openLog(t, filepath.Join(root, "src"), smallConfig())
	want := fill(t, src, 1, 40)
	snap, err := src.Snapshot(filepath.Join(root, "snap"))
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if _, err := snap.WriteTo(&stream); err != nil {
		t.Fatal(err)
	}
	more := fill(t, src, 41, 5)
	// The source itself holds it, and more: nothing to do.
	restored, err := src.Install(bytes.NewReader(stream.Bytes()))
	if err != nil || restored {
		t.Fatalf("install on a log that holds the snapshot: restored=%v err=%v", restored, err)
	}
	got, err := readAll(src)
	if err != nil {
		t.Fatal(err)
	}
	sameMessages(t, append(slices.Clone(want), more...), got)
	// A log that is behind is replaced.
	dst := openLog(t, filepath.Join(root, "dst"), smallConfig())
	fill(t, dst, 1, 3)
	restored, err = dst.Install(bytes.NewReader(stream.Bytes()))
	if err != nil || !restored {
		t.Fatalf("install on a log that is behind: restored=%v err=%v", restored, err)
	}
	got, err = readAll(dst)
	if err != nil {
		t.Fatal(err)
	}
	sameMessages(t, want, got)
}

// TrimBefore deletes exactly the sealed segments wholly below the given
// offset: the log starts at the segment boundary at or below it, the same
// on every log holding the same segments, and Segments describes them.
func TestTrimBefore(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallConfig())
	all := fill(t, l, 1, 200)
	segs := l.Segments()
	if len(segs) < 4 {
		t.Fatalf("want several segments, have %d", len(segs))
	}
	for i, s := range segs {
		if s.Active != (i == len(segs)-1) || s.Bytes <= 0 || s.MaxPublishTime == 0 {
			t.Fatalf("segment %d: %+v", i, s)
		}
		if i > 0 && s.BaseOffset != segs[i-1].NextOffset {
			t.Fatalf("segment %d starts at %d, the one before ends at %d", i, s.BaseOffset, segs[i-1].NextOffset)
		}
	}
	// Inside the third segment: the first two go, the third stays.
	start := segs[2].BaseOffset + 1
	res, err := l.TrimBefore(start)
	if err != nil {
		t.Fatal(err)
	}
	if res.Segments != 2 || res.StartOffset != segs[2].BaseOffset || res.Messages != segs[2].BaseOffset {
		t.Fatalf("trim to %d: %+v, segments %+v", start, res, segs[:3])
	}
	if _, err := l.Read(segs[2].BaseOffset-1, 1, 1); !errors.Is(err, ErrTrimmed) {
		t.Fatalf("read below the start: %v, want ErrTrimmed", err)
	}
	got, err := readAll(l)
	if err != nil {
		t.Fatal(err)
	}
	sameMessages(t, all[segs[2].BaseOffset:], got)
	// A start past the end never deletes the active segment.
	if _, err := l.TrimBefore(math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	if info := l.Info(); info.Segments != 1 || info.StartOffset != segs[len(segs)-1].BaseOffset {
		t.Fatalf("after trimming everything: %+v", info)
	}
	info := l.Info()
	l.Close()
	if got := openLog(t, dir, smallConfig()).Info(); got != info {
		t.Fatalf("after reopen %+v, before %+v", got, info)
	}
}

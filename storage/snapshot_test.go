package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// chunkWriter collects what is written to it; its ReadFrom reads in
// chunks of a fixed size, so that batch headers and batches straddle
// Reads.
type chunkWriter struct {
	bytes.Buffer
	chunk int
}

func (w *chunkWriter) ReadFrom(r io.Reader) (int64, error) {
	buf := make([]byte, w.chunk)
	var total int64
	for {
		n, err := r.Read(buf)
		w.Write(buf[:n])
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// seekSizeWriter is cluster's sizeWriter: it counts the bytes written to
// it, and its ReadFrom measures an io.Seeker by seeking to its end. It
// counts the readers it had to read.
type seekSizeWriter struct {
	n     int64
	reads int
}

func (w *seekSizeWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

func (w *seekSizeWriter) ReadFrom(r io.Reader) (int64, error) {
	if sk, ok := r.(io.Seeker); ok {
		if cur, err := sk.Seek(0, io.SeekCurrent); err == nil {
			if end, err := sk.Seek(0, io.SeekEnd); err == nil && end >= cur {
				w.n += end - cur
				return end - cur, nil
			}
		}
	}
	w.reads++
	return io.Copy(struct{ io.Writer }{w}, r)
}

// batchStarts returns the position of every batch in a segment's bytes.
func batchStarts(t *testing.T, b []byte) []int64 {
	t.Helper()
	var starts []int64
	for pos := int64(0); pos < int64(len(b)); {
		starts = append(starts, pos)
		h, err := parseHeader(b[pos:], MaxBatchBytesLimit)
		if err != nil {
			t.Fatalf("segment bytes at %d: %v", pos, err)
		}
		pos += h.size()
	}
	return starts
}

// snapshotOf fills a log with several sealed segments and snapshots it.
func snapshotOf(t *testing.T, root string) (*Snapshot, []Message) {
	t.Helper()
	l := openLog(t, filepath.Join(root, "src"), smallConfig())
	want := fill(t, l, 1, 120)
	snap, err := l.Snapshot(filepath.Join(root, "snap"))
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Info().Segments) < 4 {
		t.Fatalf("snapshot holds %d segments, want several sealed ones", len(snap.Info().Segments))
	}
	return snap, want
}

func TestSnapshotStreamsAndInstalls(t *testing.T) {
	root := t.TempDir()
	snap, want := snapshotOf(t, root)
	var ref bytes.Buffer
	if _, err := snap.WriteTo(struct{ io.Writer }{&ref}); err != nil {
		t.Fatal(err)
	}
	writers := map[string]interface {
		io.Writer
		Bytes() []byte
	}{
		"bytes.Buffer":  &bytes.Buffer{},
		"1-byte reads":  &chunkWriter{chunk: 1},
		"7-byte reads":  &chunkWriter{chunk: 7},
		"4 KiB reads":   &chunkWriter{chunk: 4 << 10},
		"64 KiB reads":  &chunkWriter{chunk: 64 << 10},
		"batch headers": &chunkWriter{chunk: batchHeaderSize},
	}
	for name, w := range writers {
		t.Run(name, func(t *testing.T) {
			n, err := snap.WriteTo(w)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(len(w.Bytes())) || !bytes.Equal(w.Bytes(), ref.Bytes()) {
				t.Fatalf("wrote %d bytes (reported %d), want the %d of the reference stream", len(w.Bytes()), n, ref.Len())
			}
			dst := openLog(t, filepath.Join(t.TempDir(), "dst"), Config{})
			restored, err := dst.Install(bytes.NewReader(w.Bytes()))
			if err != nil || !restored {
				t.Fatalf("install: restored=%v err=%v", restored, err)
			}
			got, err := readAll(dst)
			if err != nil {
				t.Fatal(err)
			}
			sameMessages(t, want, got)
		})
	}
}

// A sealed segment damaged on disk after the snapshot was taken makes
// WriteTo fail with a *CorruptError naming the segment and the damaged
// batch, before it has written that batch whole.
func TestSnapshotWriteToRefusesDamage(t *testing.T) {
	damages := []struct {
		name string
		// damage changes the segment's bytes and returns the index of the
		// batch it damaged.
		damage func(b []byte, starts []int64) ([]byte, int)
	}{
		{"bit in a record", func(b []byte, starts []int64) ([]byte, int) {
			i := len(starts) / 2
			b[starts[i]+batchHeaderSize+3] ^= 0x10
			return b, i
		}},
		{"bit in the last byte", func(b []byte, starts []int64) ([]byte, int) {
			b[len(b)-1] ^= 0x01
			return b, len(starts) - 1
		}},
		{"bit in a stored checksum", func(b []byte, starts []int64) ([]byte, int) {
			b[starts[0]+5] ^= 0x80
			return b, 0
		}},
		{"bit in a base offset", func(b []byte, starts []int64) ([]byte, int) {
			i := len(starts) - 2
			b[starts[i]+17] ^= 0x01
			return b, i
		}},
		{"length one short", func(b []byte, starts []int64) ([]byte, int) {
			i := 1
			binary.BigEndian.PutUint32(b[starts[i]:], binary.BigEndian.Uint32(b[starts[i]:])-1)
			return b, i
		}},
		{"length far too large", func(b []byte, starts []int64) ([]byte, int) {
			i := len(starts) / 2
			binary.BigEndian.PutUint32(b[starts[i]:], 0x00ff0000)
			return b, i
		}},
		{"file cut inside a batch", func(b []byte, starts []int64) ([]byte, int) {
			i := len(starts) - 1
			return b[:starts[i]+batchHeaderSize+2], i
		}},
		{"file cut inside a batch header", func(b []byte, starts []int64) ([]byte, int) {
			i := len(starts) - 1
			return b[:starts[i]+5], i
		}},
	}
	chunks := []int{1, 7, batchHeaderSize, 32 << 10}
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			root := t.TempDir()
			snap, _ := snapshotOf(t, root)
			var clean bytes.Buffer
			if _, err := snap.WriteTo(&clean); err != nil {
				t.Fatal(err)
			}
			segs := snap.Info().Segments
			victim := filepath.Join(snap.Dir(), segmentName(segs[1].Base))
			b, err := os.ReadFile(victim)
			if err != nil {
				t.Fatal(err)
			}
			starts := batchStarts(t, b)
			b, bad := d.damage(b, starts)
			// Rewrite the linked inode in place, as damage on disk would.
			f, err := os.OpenFile(victim, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(b); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			// The stream up to the damaged segment, and the end of the
			// damaged batch in the stream.
			before := int64(clean.Len()) - snap.Info().Bytes() + segs[0].Size
			batchEnd := before + segs[1].Size
			if bad+1 < len(starts) {
				batchEnd = before + starts[bad+1]
			}
			for _, chunk := range chunks {
				w := &chunkWriter{chunk: chunk}
				n, err := snap.WriteTo(w)
				var ce *CorruptError
				if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
					t.Fatalf("%d-byte reads: WriteTo: %v, want a *CorruptError", chunk, err)
				}
				if ce.File != victim || ce.Position != starts[bad] {
					t.Fatalf("%d-byte reads: %v, want %s at byte %d", chunk, err, victim, starts[bad])
				}
				if n != int64(w.Len()) || n >= batchEnd {
					t.Fatalf("%d-byte reads: wrote %d bytes (reported %d), the damaged batch ends at %d", chunk, w.Len(), n, batchEnd)
				}
				if m := min(n, before+starts[bad]); !bytes.Equal(w.Bytes()[:m], clean.Bytes()[:m]) {
					t.Fatalf("%d-byte reads: the bytes before the damage differ from the clean stream", chunk)
				}
			}
		})
	}
}

// Measuring a snapshot with a writer that seeks, as cluster's snapshot
// store does, reads no segment data: it gets the full size even when a
// segment is damaged.
func TestSnapshotMeasureBySeeking(t *testing.T) {
	root := t.TempDir()
	snap, _ := snapshotOf(t, root)
	var clean bytes.Buffer
	if _, err := snap.WriteTo(&clean); err != nil {
		t.Fatal(err)
	}
	for _, damaged := range []bool{false, true} {
		if damaged {
			victim := filepath.Join(snap.Dir(), segmentName(snap.Info().Segments[1].Base))
			f, err := os.OpenFile(victim, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			var b [1]byte
			if _, err := f.ReadAt(b[:], 100); err != nil {
				t.Fatal(err)
			}
			b[0] ^= 0x04
			if _, err := f.WriteAt(b[:], 100); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if _, err := snap.WriteTo(io.Discard); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("writing the damaged snapshot: %v, want ErrCorrupt", err)
			}
		}
		var w seekSizeWriter
		n, err := snap.WriteTo(&w)
		if err != nil {
			t.Fatalf("damaged=%v: measure: %v", damaged, err)
		}
		if n != int64(clean.Len()) || w.n != n {
			t.Fatalf("damaged=%v: measured %d (reported %d), want %d", damaged, w.n, n, clean.Len())
		}
		if w.reads != 0 {
			t.Fatalf("damaged=%v: measuring read %d segments", damaged, w.reads)
		}
	}
}

// How checking follows a seek: on at the position it reached, again from
// the start at 0, EOF at the end, and an error, with no bytes, anywhere
// else.
func TestCheckedSegmentSeek(t *testing.T) {
	root := t.TempDir()
	snap, _ := snapshotOf(t, root)
	seg := snap.Info().Segments[0]
	path := filepath.Join(snap.Dir(), segmentName(seg.Base))
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want = want[:seg.Size]
	const head = 100 // bytes read before the seek
	cases := []struct {
		name   string
		offset int64
		whence int
		rest   []byte // what reading to the end returns; nil for an error
	}{
		{"current", 0, io.SeekCurrent, want[head:]},
		{"back to where checking is", head, io.SeekStart, want[head:]},
		{"start", 0, io.SeekStart, want},
		{"end", 0, io.SeekEnd, []byte{}},
		{"past the end", 10, io.SeekEnd, []byte{}},
		{"middle", head + 1, io.SeekStart, nil},
		{"back", -1, io.SeekCurrent, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			r := newCheckedSegment(f, path, seg)
			if _, err := io.ReadFull(r, make([]byte, head)); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Seek(0, io.SeekEnd); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Seek(head, io.SeekStart); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Seek(c.offset, c.whence); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			if c.rest == nil {
				if err == nil || errors.Is(err, ErrCorrupt) || len(got) != 0 {
					t.Fatalf("read %d bytes, err %v; want no bytes and an error", len(got), err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, c.rest) {
				t.Fatalf("read %d bytes, err %v; want the %d bytes of the segment", len(got), err, len(c.rest))
			}
		})
	}
}

// A snapshot's manifest carries its checksum: a bit flipped in it, even in
// a number that still parses, fails OpenSnapshot with ErrCorrupt; a
// manifest without one (older versions) opens unchecked.
func TestSnapshotManifestChecksum(t *testing.T) {
	snap, _ := snapshotOf(t, t.TempDir())
	path := filepath.Join(snap.Dir(), manifestFile)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(orig, []byte(`"next_offset":`))
	if i < 0 {
		t.Fatalf("no next_offset in %s", orig)
	}
	b := bytes.Clone(orig)
	b[i+len(`"next_offset":`)] ^= 0x01 // the first digit: still a number
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSnapshot(snap.Dir()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("manifest with a flipped digit: %v, want ErrCorrupt", err)
	}
	j := bytes.LastIndex(orig, []byte(manifestCRCMark))
	if j < 0 {
		t.Fatalf("manifest without a checksum: %q", orig)
	}
	if err := os.WriteFile(path, orig[:j], 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := OpenSnapshot(snap.Dir())
	if err != nil {
		t.Fatalf("manifest without a checksum: %v", err)
	}
	if got.Info().NextOffset != snap.Info().NextOffset {
		t.Fatalf("next offset %d, want %d", got.Info().NextOffset, snap.Info().NextOffset)
	}
}

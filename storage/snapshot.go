package storage

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

const (
	manifestFile    = "MANIFEST"
	manifestCRCMark = "\ncrc32c "
	snapshotMagic   = "FQSNAP01"
	manifestVersion = 1
	// maxManifestBytes bounds the manifest read from a snapshot stream.
	maxManifestBytes = 16 << 20
)

// SnapshotSegment is one segment of a snapshot.
type SnapshotSegment struct {
	Base uint64 `json:"base"`
	Size int64  `json:"size"`
}

// SnapshotInfo describes a snapshot: the log as it was when it was taken.
type SnapshotInfo struct {
	Version       int               `json:"version"`
	StartOffset   uint64            `json:"start_offset"`
	NextOffset    uint64            `json:"next_offset"`
	LastRaftIndex uint64            `json:"last_raft_index"`
	Segments      []SnapshotSegment `json:"segments"`
}

// Bytes is the total size of the snapshot's segments.
func (i SnapshotInfo) Bytes() int64 {
	var n int64
	for _, s := range i.Segments {
		n += s.Size
	}
	return n
}

func (i SnapshotInfo) validate() error {
	if i.Version != manifestVersion {
		return fmt.Errorf("%w: manifest version %d", ErrBadSnapshot, i.Version)
	}
	if len(i.Segments) == 0 {
		return fmt.Errorf("%w: no segments", ErrBadSnapshot)
	}
	if i.Segments[0].Base != i.StartOffset {
		return fmt.Errorf("%w: first segment at %d, start offset %d", ErrBadSnapshot, i.Segments[0].Base, i.StartOffset)
	}
	for j, s := range i.Segments {
		if s.Size < 0 || s.Size > MaxSegmentBytes+MaxBatchBytesLimit {
			return fmt.Errorf("%w: segment %d has size %d", ErrBadSnapshot, s.Base, s.Size)
		}
		if j > 0 && s.Base <= i.Segments[j-1].Base {
			return fmt.Errorf("%w: segments out of order", ErrBadSnapshot)
		}
	}
	return nil
}

// Snapshot is a point-in-time copy of a Log, kept as hard links to the
// log's segment files in a directory of its own: taking one costs a few
// file-system operations per segment, whatever the log's size. Appends
// after the snapshot may grow the linked active segment; the snapshot reads
// only the sizes its manifest recorded.
type Snapshot struct {
	dir  string
	info SnapshotInfo
}

// Snapshot syncs the log and records its current content in dir, which must
// not exist yet and must be on the log's file system.
func (l *Log) Snapshot(dir string) (*Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return nil, err
	}
	if l.failed != nil {
		return nil, fmt.Errorf("%w: %v", ErrFailed, l.failed)
	}
	if err := l.syncLocked(); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: snapshot: %w", err)
	}
	info := SnapshotInfo{
		Version:       manifestVersion,
		StartOffset:   l.segments[0].base,
		NextOffset:    l.active().next,
		LastRaftIndex: l.raft,
	}
	for _, s := range l.segments {
		if err := os.Link(s.path, filepath.Join(dir, filepath.Base(s.path))); err != nil {
			os.RemoveAll(dir)
			if errors.Is(err, syscall.EXDEV) {
				return nil, fmt.Errorf("storage: snapshot directory %s must be on the log's file system: %w", dir, err)
			}
			return nil, fmt.Errorf("storage: snapshot: %w", err)
		}
		info.Segments = append(info.Segments, SnapshotSegment{Base: s.base, Size: s.size})
	}
	b, err := json.Marshal(info)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("storage: snapshot: %w", err)
	}
	b = fmt.Appendf(b, "%s%08x\n", manifestCRCMark, crc32.Checksum(b, crcTable))
	if err := writeFileAtomic(filepath.Join(dir, manifestFile), b); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &Snapshot{dir: dir, info: info}, nil
}

// OpenSnapshot opens a snapshot that Log.Snapshot wrote to dir.
func OpenSnapshot(dir string) (*Snapshot, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	// The manifest's JSON is followed by its CRC-32C (older manifests
	// have none and are read unchecked).
	if i := bytes.LastIndex(b, []byte(manifestCRCMark)); i >= 0 {
		var crc uint32
		if _, err := fmt.Sscanf(string(b[i+len(manifestCRCMark):]), "%08x\n", &crc); err != nil || crc != crc32.Checksum(b[:i], crcTable) {
			return nil, fmt.Errorf("%w: snapshot manifest %s does not match its checksum", ErrCorrupt, filepath.Join(dir, manifestFile))
		}
		b = b[:i]
	}
	var info SnapshotInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrBadSnapshot, err)
	}
	if err := info.validate(); err != nil {
		return nil, err
	}
	return &Snapshot{dir: dir, info: info}, nil
}

// Info returns what the snapshot holds.
func (s *Snapshot) Info() SnapshotInfo { return s.info }

// Dir returns the snapshot's directory.
func (s *Snapshot) Dir() string { return s.dir }

// Remove deletes the snapshot's directory; the log is not affected.
func (s *Snapshot) Remove() error {
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	return nil
}

// WriteTo streams the snapshot: a header with the manifest, then every
// segment's bytes up to the size the manifest recorded. Log.Restore reads
// this stream.
//
// It checks every batch as it streams it (its header and CRC, and that
// offsets and Raft indexes follow), so a segment damaged on disk since it
// was written fails WriteTo with a *CorruptError (errors.Is ErrCorrupt)
// naming the segment file and the batch's position, and the damaged batch
// never reaches w whole: a replica that would refuse the stream is not sent
// it again and again. Segments are read through an io.Seeker, so a writer
// whose ReadFrom measures a seeker by seeking to its end takes the size
// without reading any data (and so without checking it).
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	b, err := json.Marshal(s.info)
	if err != nil {
		return 0, fmt.Errorf("storage: %w", err)
	}
	hdr := append([]byte(snapshotMagic), binary.BigEndian.AppendUint32(nil, uint32(len(b)))...)
	hdr = append(hdr, b...)
	hdr = binary.BigEndian.AppendUint32(hdr, crc32.Checksum(b, crcTable))
	n, err := w.Write(hdr)
	total := int64(n)
	if err != nil {
		return total, err
	}
	for _, seg := range s.info.Segments {
		path := filepath.Join(s.dir, segmentName(seg.Base))
		f, err := os.Open(path)
		if err != nil {
			return total, fmt.Errorf("storage: snapshot: %w", err)
		}
		n, err := io.Copy(w, newCheckedSegment(f, path, seg))
		f.Close()
		total += n
		if err != nil {
			return total, err
		}
		if n != seg.Size {
			return total, fmt.Errorf("%w: segment %d holds %d bytes, manifest says %d", ErrBadSnapshot, seg.Base, n, seg.Size)
		}
	}
	return total, nil
}

// checkedSegment reads one segment of a snapshot through an
// io.SectionReader and checks its batches as the bytes pass through Read,
// holding no more than a batch header: each batch's header is parsed, its
// CRC-32C is computed as its bytes go by and compared when its last byte
// arrives, and its offset and Raft index must follow the previous batch's.
// A damaged batch is a *CorruptError, from that Read on; that Read returns
// only the bytes before the damaged batch, so the batch is never passed on
// whole. A segment that ends inside a batch is damaged too.
//
// Seek moves the SectionReader, so io.Copy into a ReaderFrom that measures
// a seeker by seeking reads nothing. Checking follows batches in order from
// the start of the segment: after a seek, a Read at the position checking
// reached goes on checking, a Read at 0 starts checking again from the
// first batch, a Read at or past the end returns io.EOF, and a Read
// anywhere else fails and reads nothing rather than return unchecked bytes.
type checkedSegment struct {
	r    *io.SectionReader
	path string
	base uint64
	pos  int64 // position of the SectionReader
	err  error // damage found; every later Read returns it

	// Checking state. checked is the position up to which bytes went
	// through check; start is the position of the batch being read.
	checked, start int64
	hdr            [batchHeaderSize]byte
	nhdr           int         // bytes of the batch's header seen so far
	h              batchHeader // the batch's header once nhdr is full
	left           int64       // bytes of the batch still to come after its header
	crc            uint32      // CRC-32C of the batch's bytes from byte 8 seen so far
	next           uint64      // offset the next batch must start at
	raft           uint64      // Raft index of the previous batch
}

func newCheckedSegment(f *os.File, path string, seg SnapshotSegment) *checkedSegment {
	return &checkedSegment{r: io.NewSectionReader(f, 0, seg.Size), path: path, base: seg.Base, next: seg.Base}
}

func (c *checkedSegment) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.pos != c.checked {
		switch {
		case c.pos == 0:
			c.checked, c.start, c.nhdr, c.left, c.next, c.raft = 0, 0, 0, 0, c.base, 0
		case c.pos >= c.r.Size():
			return 0, io.EOF
		default:
			return 0, fmt.Errorf("storage: snapshot segment %s: cannot check a read at byte %d after a seek", c.path, c.pos)
		}
	}
	n, err := c.r.Read(p)
	c.pos += int64(n)
	if bad := c.check(p[:n]); bad != nil {
		return c.fail(n, bad)
	}
	if err == io.EOF && c.nhdr > 0 {
		reason := "segment ends inside a batch"
		if c.nhdr < batchHeaderSize {
			reason = "batch header cut short"
		}
		return c.fail(n, c.corrupt(reason))
	}
	return n, err
}

// fail records the damage found in the n bytes just read and returns the
// part of them before the damaged batch.
func (c *checkedSegment) fail(n int, bad error) (int, error) {
	c.err = bad
	return int(max(0, c.start-(c.pos-int64(n)))), bad
}

// check runs b, the bytes that follow c.checked, through the batch checks.
// On damage, c.start is the damaged batch's position.
func (c *checkedSegment) check(b []byte) error {
	for len(b) > 0 {
		if c.nhdr < batchHeaderSize {
			k := copy(c.hdr[c.nhdr:], b)
			c.nhdr += k
			c.checked += int64(k)
			b = b[k:]
			if c.nhdr < batchHeaderSize {
				return nil
			}
			h, err := parseHeader(c.hdr[:], MaxBatchBytesLimit)
			if err != nil {
				return c.corrupt(err.Error())
			}
			if c.start+h.size() > c.r.Size() {
				return c.corrupt("batch runs past the end of the segment")
			}
			c.h, c.left = h, h.size()-batchHeaderSize
			c.crc = crc32.Checksum(c.hdr[8:], crcTable)
		}
		k := min(c.left, int64(len(b)))
		c.crc = crc32.Update(c.crc, crcTable, b[:k])
		c.left -= k
		c.checked += k
		b = b[k:]
		if c.left > 0 {
			return nil
		}
		switch h := c.h; {
		case h.crc != c.crc:
			return c.corrupt(fmt.Sprintf("checksum mismatch: stored %#08x, computed %#08x", h.crc, c.crc))
		case h.baseOffset != c.next:
			return c.corrupt(fmt.Sprintf("batch starts at offset %d, expected %d", h.baseOffset, c.next))
		case c.start > 0 && h.raftIndex <= c.raft:
			return c.corrupt(fmt.Sprintf("raft index %d does not follow %d", h.raftIndex, c.raft))
		}
		c.start += c.h.size()
		c.nhdr, c.next, c.raft = 0, c.h.next(), c.h.raftIndex
	}
	return nil
}

func (c *checkedSegment) corrupt(reason string) error {
	return &CorruptError{File: c.path, Position: c.start, Offset: c.next, Reason: reason}
}

// Seek moves the underlying SectionReader; see checkedSegment for how
// checking follows.
func (c *checkedSegment) Seek(offset int64, whence int) (int64, error) {
	p, err := c.r.Seek(offset, whence)
	if err == nil {
		c.pos = p
	}
	return p, err
}

// readSnapshotHeader reads the header that WriteTo writes.
func readSnapshotHeader(r io.Reader) (SnapshotInfo, error) {
	var info SnapshotInfo
	var hdr [len(snapshotMagic) + 4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return info, fmt.Errorf("%w: header: %v", ErrBadSnapshot, err)
	}
	if string(hdr[:len(snapshotMagic)]) != snapshotMagic {
		return info, fmt.Errorf("%w: not a log snapshot", ErrBadSnapshot)
	}
	n := binary.BigEndian.Uint32(hdr[len(snapshotMagic):])
	if n > maxManifestBytes {
		return info, fmt.Errorf("%w: manifest of %d bytes", ErrBadSnapshot, n)
	}
	b := make([]byte, n+4)
	if _, err := io.ReadFull(r, b); err != nil {
		return info, fmt.Errorf("%w: manifest: %v", ErrBadSnapshot, err)
	}
	if crc32.Checksum(b[:n], crcTable) != binary.BigEndian.Uint32(b[n:]) {
		return info, fmt.Errorf("%w: manifest checksum mismatch", ErrBadSnapshot)
	}
	if err := json.Unmarshal(b[:n], &info); err != nil {
		return info, fmt.Errorf("%w: manifest: %v", ErrBadSnapshot, err)
	}
	return info, info.validate()
}

// Restore replaces the log's whole content with a snapshot stream written
// by Snapshot.WriteTo. The stream is written to a staging directory and
// every batch is checked before the log is touched; the switch itself
// survives a crash (Open finishes it). Reads and appends wait only for the
// switch, not for the stream.
func (l *Log) Restore(r io.Reader) error {
	info, err := readSnapshotHeader(r)
	if err != nil {
		return err
	}
	return l.restore(info, r)
}

// restore installs the snapshot whose header was read.
func (l *Log) restore(info SnapshotInfo, r io.Reader) error {
	l.restoreMu.Lock()
	defer l.restoreMu.Unlock()
	l.mu.RLock()
	closed := l.closed
	l.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	staging := filepath.Join(l.dir, restoreDir)
	if err := os.RemoveAll(staging); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	if err := os.Mkdir(staging, 0o755); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	if err := l.stageBody(staging, info, r); err != nil {
		os.RemoveAll(staging)
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		os.RemoveAll(staging)
		return ErrClosed
	}
	l.closeFiles()
	if err := l.load(); err != nil {
		// The staged snapshot stays complete on disk: Open finishes it.
		l.closeFiles()
		l.segments, l.failed = nil, err
		return err
	}
	return nil
}

// Install is Restore for a replica that may already hold the snapshot: it
// reads the stream's header and, when the log already holds every batch
// the snapshot holds (its LastRaftIndex and NextOffset are at least the
// snapshot's), leaves the log as it is and reads no further. It reports
// whether it restored. A Raft state machine calls it on every snapshot
// restore, including the one at start-up, so a restart does not rewrite a
// log that is already there.
func (l *Log) Install(r io.Reader) (bool, error) {
	info, err := readSnapshotHeader(r)
	if err != nil {
		return false, err
	}
	have := l.Info()
	if have.LastRaftIndex >= info.LastRaftIndex && have.NextOffset >= info.NextOffset {
		return false, nil
	}
	return true, l.restore(info, r)
}

// stage writes and checks a snapshot stream in the staging directory, then
// marks it complete.
func (l *Log) stage(staging string, r io.Reader) error {
	info, err := readSnapshotHeader(r)
	if err != nil {
		return err
	}
	return l.stageBody(staging, info, r)
}

// stageBody stages the segments that follow a snapshot header.
func (l *Log) stageBody(staging string, info SnapshotInfo, r io.Reader) error {
	br := bufio.NewReaderSize(r, readBufferSize)
	var prev *segment
	var raft uint64
	for i, sm := range info.Segments {
		s, err := l.stageSegment(staging, br, sm, i == len(info.Segments)-1)
		if err != nil {
			return err
		}
		if prev != nil && s.base != prev.next {
			return fmt.Errorf("%w: segment %d does not follow the one ending at %d", ErrBadSnapshot, s.base, prev.next)
		}
		if prev != nil && !s.empty() && s.raft <= prev.raft {
			return fmt.Errorf("%w: raft indexes go back at segment %d", ErrBadSnapshot, s.base)
		}
		prev = s
		if !s.empty() {
			raft = s.raft
		}
	}
	if raft != info.LastRaftIndex {
		return fmt.Errorf("%w: last raft index %d, manifest says %d", ErrBadSnapshot, raft, info.LastRaftIndex)
	}
	if prev.next != info.NextOffset {
		return fmt.Errorf("%w: segments end at %d, manifest says %d", ErrBadSnapshot, prev.next, info.NextOffset)
	}
	if err := writeCheckpoint(staging, prev.base, prev.size); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(staging, restoreDone), nil)
}

// stageSegment copies one segment from the stream into the staging
// directory, checks every batch and, for a sealed one, writes its index.
func (l *Log) stageSegment(staging string, r io.Reader, sm SnapshotSegment, last bool) (*segment, error) {
	path := filepath.Join(staging, segmentName(sm.Base))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	defer f.Close()
	n, err := io.Copy(f, io.LimitReader(r, sm.Size))
	if err != nil {
		return nil, fmt.Errorf("storage: restore: %w", err)
	}
	if n != sm.Size {
		return nil, fmt.Errorf("%w: stream ended inside segment %d", ErrBadSnapshot, sm.Base)
	}
	s := &segment{base: sm.Base, path: path, f: f, next: sm.Base}
	_, bad, err := s.scan(sm.Size, l.cfg.IndexIntervalBytes, l.cfg.MaxBatchBytes)
	if err != nil {
		return nil, err
	}
	if bad != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, bad)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("storage: sync %s: %w", path, err)
	}
	if !last {
		if s.empty() {
			return nil, fmt.Errorf("%w: sealed segment %d is empty", ErrBadSnapshot, sm.Base)
		}
		// stage syncs the directory after the last segment.
		if err := s.writeIndex(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// recoverRestore finishes a Restore whose staging directory is complete
// and drops one that is not.
func (l *Log) recoverRestore() error {
	staging := filepath.Join(l.dir, restoreDir)
	if _, err := os.Stat(filepath.Join(staging, restoreDone)); err != nil {
		if err := os.RemoveAll(staging); err != nil {
			return fmt.Errorf("storage: %w", err)
		}
		return nil
	}
	old, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	for _, e := range old {
		name := e.Name()
		if _, ok := parseSegmentName(name); ok || filepath.Ext(name) == indexSuffix || name == checkpointFile {
			if err := os.Remove(filepath.Join(l.dir, name)); err != nil {
				return fmt.Errorf("storage: %w", err)
			}
		}
	}
	staged, err := os.ReadDir(staging)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	for _, e := range staged {
		if e.Name() == restoreDone {
			continue
		}
		if err := os.Rename(filepath.Join(staging, e.Name()), filepath.Join(l.dir, e.Name())); err != nil {
			return fmt.Errorf("storage: %w", err)
		}
	}
	// Everything moved must be durable before the marker goes.
	if err := syncDir(l.dir); err != nil {
		return err
	}
	if err := os.RemoveAll(staging); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	l.cfg.Logger.Info("installed restored snapshot", "dir", l.dir)
	return syncDir(l.dir)
}

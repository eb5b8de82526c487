package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	checkpointFile = "checkpoint"
	restoreDir     = "restore.tmp"
	restoreDone    = "COMPLETE"
)

// Log is a partition's message log: a directory of segment files. It is
// safe for concurrent use; appends are serialised, reads run in parallel
// with each other.
type Log struct {
	dir  string
	cfg  Config
	held dirID // dir's, in heldDirs

	// restoreMu lets one Restore run at a time; it is taken before mu.
	restoreMu sync.Mutex

	mu       sync.RWMutex
	segments []*segment // by base offset; the last one is active
	raft     uint64     // Raft index of the last batch
	synced   int64      // the sync mark: bytes of the active segment the checkpoint says are on disk
	closed   bool
	failed   error // a write error that left the active segment unknown
	buf      []byte
}

// Info describes a Log at one moment.
type Info struct {
	StartOffset   uint64 // first offset still held
	NextOffset    uint64 // offset the next message will get
	LastRaftIndex uint64 // Raft index of the last batch, 0 if none
	Segments      int
	Bytes         int64
}

// Open opens the log in dir, creating it if needed, and recovers it: a torn
// tail of the last segment is cut back, missing or damaged indexes of sealed
// segments are rebuilt, and an interrupted Restore is finished or dropped.
// Damage that recovery cannot explain is a *CorruptError.
func Open(dir string, cfg Config) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	held, err := holdDir(dir)
	if err != nil {
		return nil, err
	}
	l := &Log{dir: dir, cfg: cfg.withDefaults(), held: held}
	if err := l.load(); err != nil {
		l.closeFiles()
		releaseDir(held)
		return nil, err
	}
	return l, nil
}

// heldDirs are the directories the open Logs of this process hold, by
// device and inode: a directory renamed while its Log is open (a copy set
// aside) stays held under its new name, and a new directory made under
// the old name is free. A Log once held its directory with a flocked lock
// file of its own, which behaved the same: one more open file per
// partition, which a killed node's process releases before the last of
// its sockets close (cluster/DESIGN.md). Another process is kept out by
// the directory's owner: a node holds its whole data directory.
var heldDirs = struct {
	sync.Mutex
	dirs map[dirID]bool
}{dirs: map[dirID]bool{}}

// dirID names a directory, whatever path leads to it.
type dirID struct{ dev, ino uint64 }

// holdDir records dir as held by a Log of this process and returns its
// id, or ErrLocked if a Log holds it already.
func holdDir(dir string) (dirID, error) {
	id, err := dirIDOf(dir)
	if err != nil {
		return dirID{}, err
	}
	heldDirs.Lock()
	defer heldDirs.Unlock()
	if heldDirs.dirs[id] {
		return dirID{}, fmt.Errorf("%w: %s", ErrLocked, dir)
	}
	heldDirs.dirs[id] = true
	return id, nil
}

// dirIDOf returns the id of the directory at path.
func dirIDOf(path string) (dirID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return dirID{}, fmt.Errorf("storage: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return dirID{}, fmt.Errorf("storage: %s: no device and inode to know it by", path)
	}
	return dirID{dev: uint64(st.Dev), ino: st.Ino}, nil
}

// releaseDir gives back a directory holdDir recorded.
func releaseDir(id dirID) {
	heldDirs.Lock()
	delete(heldDirs.dirs, id)
	heldDirs.Unlock()
}

// load reads the directory into l.segments and recovers it.
func (l *Log) load() error {
	l.segments, l.raft, l.synced, l.failed = nil, 0, 0, nil
	if err := l.recoverRestore(); err != nil {
		return err
	}
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	var bases []uint64
	names := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		names[name] = true
		if strings.HasSuffix(name, tmpSuffix) {
			if err := os.Remove(filepath.Join(l.dir, name)); err != nil {
				return fmt.Errorf("storage: %w", err)
			}
		}
		if base, ok := parseSegmentName(name); ok {
			bases = append(bases, base)
		}
	}
	// An index whose segment is gone is what an interrupted retention
	// leaves behind.
	for name := range names {
		if seg, ok := strings.CutSuffix(name, indexSuffix); ok && !names[seg+segmentSuffix] {
			if err := os.Remove(filepath.Join(l.dir, name)); err != nil {
				return fmt.Errorf("storage: %w", err)
			}
		}
	}
	slices.Sort(bases)
	if len(bases) == 0 {
		s, err := l.createSegment(0)
		if err != nil {
			return err
		}
		l.segments = []*segment{s}
		return nil
	}
	for i, base := range bases {
		if err := l.loadSegment(base, i == len(bases)-1); err != nil {
			return err
		}
	}
	for i := len(l.segments) - 1; i >= 0; i-- {
		if !l.segments[i].empty() {
			l.raft = l.segments[i].raft
			break
		}
	}
	return nil
}

// loadSegment opens one segment and appends it to l.segments.
func (l *Log) loadSegment(base uint64, last bool) error {
	path := filepath.Join(l.dir, segmentName(base))
	flag := os.O_RDONLY
	if last {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	s := &segment{base: base, path: path, f: f, next: base}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("storage: %w", err)
	}
	var prev *segment
	if n := len(l.segments); n > 0 {
		prev = l.segments[n-1]
	}
	if prev != nil && base != prev.next {
		f.Close()
		return &CorruptError{File: path, Offset: prev.next,
			Reason: fmt.Sprintf("segment starts at offset %d but the one before it ends at %d", base, prev.next)}
	}
	if !last {
		if err := l.loadSealed(s, fi.Size()); err != nil {
			f.Close()
			return err
		}
		l.segments = append(l.segments, s)
		return nil
	}
	if err := removeIfExists(indexPath(path)); err != nil {
		f.Close()
		return err
	}
	if err := l.recoverActive(s, fi.Size()); err != nil {
		f.Close()
		return err
	}
	if s.empty() && prev != nil {
		// A roll that crashed before its first batch: the segment before
		// becomes active again.
		f.Close()
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("storage: %w", err)
		}
		if err := l.reopenActive(prev); err != nil {
			return err
		}
		return syncDir(l.dir)
	}
	l.segments = append(l.segments, s)
	return nil
}

// loadSealed loads a sealed segment's index, rebuilding it when it is
// missing or does not match the segment.
func (l *Log) loadSealed(s *segment, size int64) error {
	s.sealed = true
	ok, err := s.loadIndex(size)
	if err != nil || ok {
		return err
	}
	_, bad, err := s.scan(size, l.cfg.IndexIntervalBytes, l.cfg.MaxBatchBytes)
	if err != nil {
		return err
	}
	if bad != nil {
		return bad
	}
	if s.empty() {
		return s.corrupt(0, s.base, "sealed segment is empty")
	}
	l.cfg.Logger.Warn("rebuilt segment index", "segment", s.path)
	if err := s.writeIndex(); err != nil {
		return err
	}
	return syncDir(l.dir)
}

// recoverActive scans the last segment and cuts a torn tail.
func (l *Log) recoverActive(s *segment, size int64) error {
	badPos, bad, err := s.scan(size, l.cfg.IndexIntervalBytes, l.cfg.MaxBatchBytes)
	if err != nil {
		return err
	}
	mark := l.readCheckpoint(s.base)
	if bad != nil {
		if badPos < mark {
			return bad
		}
		l.cfg.Logger.Warn("cutting torn tail of segment", "segment", s.path,
			"position", badPos, "dropped_bytes", size-badPos, "reason", bad.Error())
		if err := s.f.Truncate(badPos); err != nil {
			return fmt.Errorf("storage: truncate %s: %w", s.path, err)
		}
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("storage: sync %s: %w", s.path, err)
		}
	}
	if s.size < mark {
		return s.corrupt(s.size, s.next, fmt.Sprintf("segment holds %d bytes but %d were synced", s.size, mark))
	}
	l.synced = mark
	return nil
}

// reopenActive makes a sealed segment writable again.
func (l *Log) reopenActive(s *segment) error {
	f, err := os.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	s.f.Close()
	s.f = f
	s.sealed = false
	// It was sealed, so it is durable: say so before its index goes.
	if err := writeCheckpoint(l.dir, s.base, s.size); err != nil {
		return err
	}
	l.synced = s.size
	return removeIfExists(indexPath(s.path))
}

// readCheckpoint returns the sync mark of the segment at base, 0 if the
// checkpoint names another segment or cannot be read.
func (l *Log) readCheckpoint(base uint64) int64 {
	b, err := os.ReadFile(filepath.Join(l.dir, checkpointFile))
	if err != nil || len(b) != 20 || crc32.Checksum(b[:16], crcTable) != binary.BigEndian.Uint32(b[16:]) {
		return 0
	}
	if binary.BigEndian.Uint64(b) != base {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b[8:]))
}

// writeCheckpoint records in dir that the segment at base is durable up
// to mark bytes.
func writeCheckpoint(dir string, base uint64, mark int64) error {
	b := binary.BigEndian.AppendUint64(nil, base)
	b = binary.BigEndian.AppendUint64(b, uint64(mark))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
	return writeFileAtomic(filepath.Join(dir, checkpointFile), b)
}

// usable returns why the log cannot serve a call, or nil.
func (l *Log) usable() error {
	if l.closed {
		return ErrClosed
	}
	if len(l.segments) == 0 {
		return fmt.Errorf("%w: %v", ErrFailed, l.failed)
	}
	return nil
}

// createSegment creates an empty segment file and syncs the directory,
// which also makes durable whatever else was renamed into it before.
func (l *Log) createSegment(base uint64) (*segment, error) {
	path := filepath.Join(l.dir, segmentName(base))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	if err := syncDir(l.dir); err != nil {
		f.Close()
		return nil, err
	}
	return &segment{base: base, path: path, f: f, next: base}, nil
}

func (l *Log) active() *segment { return l.segments[len(l.segments)-1] }

// Append writes msgs as one batch produced by the Raft entry at raftIndex
// and returns the offset of the first message; the others follow in order.
// A raftIndex at or below LastRaftIndex returns ErrAlreadyApplied and writes
// nothing, which makes replaying a Raft log after a restart safe.
func (l *Log) Append(raftIndex uint64, msgs []Message) (uint64, error) {
	if len(msgs) == 0 {
		return 0, ErrEmptyBatch
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return 0, err
	}
	switch {
	case l.failed != nil:
		return 0, fmt.Errorf("%w: %v", ErrFailed, l.failed)
	case raftIndex <= l.raft:
		return 0, fmt.Errorf("%w: %d, log holds up to %d", ErrAlreadyApplied, raftIndex, l.raft)
	}
	a := l.active()
	base := a.next
	if uint64(len(msgs)) > math.MaxUint32 {
		return 0, fmt.Errorf("%w: %d messages in one batch", ErrTooLarge, len(msgs))
	}
	size := batchHeaderSize
	for i := range msgs {
		size += encodedRecordSize(&msgs[i])
		if size > 2*l.cfg.MaxBatchBytes {
			break
		}
	}
	if size > 2*l.cfg.MaxBatchBytes {
		return 0, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, l.cfg.MaxBatchBytes)
	}
	// Sized once: grown by doubling, a batch above the 1 MiB the log keeps
	// between appends cost about twice its size in allocations.
	l.buf = appendBatch(slices.Grow(l.buf[:0], size), base, raftIndex, msgs)
	if len(l.buf) > l.cfg.MaxBatchBytes {
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(l.buf), l.cfg.MaxBatchBytes)
	}
	h, err := parseHeader(l.buf, l.cfg.MaxBatchBytes)
	if err != nil {
		return 0, fmt.Errorf("storage: encoded batch does not parse: %w", err)
	}
	if !a.empty() && (a.size+h.size() > l.cfg.SegmentMaxBytes ||
		h.maxTime-a.firstTime >= l.cfg.SegmentMaxAge.Milliseconds() ||
		h.next()-a.base > math.MaxUint32) {
		if err := l.roll(); err != nil {
			l.failed = err
			return 0, err
		}
		a = l.active()
	}
	if _, err := a.f.WriteAt(l.buf, a.size); err != nil {
		// Whatever part of the batch reached the file is cut on reopen;
		// until then the log refuses to guess.
		l.failed = err
		return 0, fmt.Errorf("storage: write %s: %w", a.path, err)
	}
	a.addBatch(a.size, h, l.cfg.IndexIntervalBytes)
	l.raft = raftIndex
	if cap(l.buf) > 1<<20 {
		l.buf = nil // do not pin a huge batch's buffer
	}
	return base, nil
}

// roll seals the active segment and starts a new one at its next offset.
func (l *Log) roll() error {
	a := l.active()
	if err := a.f.Sync(); err != nil {
		return fmt.Errorf("storage: sync %s: %w", a.path, err)
	}
	if err := a.writeIndex(); err != nil {
		return err
	}
	a.sealed = true
	s, err := l.createSegment(a.next)
	if err != nil {
		return err
	}
	l.segments = append(l.segments, s)
	l.synced = 0
	return nil
}

// Read returns up to maxMessages messages from offset on. Past the first
// message it stops before maxBytes of encoded records, so one message larger
// than maxBytes still comes back alone. An offset equal to NextOffset
// returns no messages and no error. Payloads of messages from one batch
// share one buffer.
func (l *Log) Read(offset uint64, maxMessages, maxBytes int) ([]Message, error) {
	if maxMessages <= 0 || maxBytes <= 0 {
		return nil, fmt.Errorf("storage: read limits must be positive: %d messages, %d bytes", maxMessages, maxBytes)
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.usable(); err != nil {
		return nil, err
	}
	if err := l.checkOffset(offset); err != nil {
		return nil, err
	}
	i := sort.Search(len(l.segments), func(i int) bool { return l.segments[i].base > offset }) - 1
	r := segmentRead{offset: offset, maxMessages: maxMessages, maxBytes: maxBytes, maxLen: l.cfg.MaxBatchBytes}
	for ; i < len(l.segments); i++ {
		if done, err := r.from(l.segments[i]); done || err != nil {
			return r.out, err
		}
	}
	return r.out, nil
}

// segmentRead is one Read in progress over the segments it crosses.
type segmentRead struct {
	offset                uint64 // next offset wanted
	maxMessages, maxBytes int
	maxLen                int
	out                   []Message
	taken                 int // encoded bytes in out
}

// from reads segment s from r.offset on; done means the read is complete.
func (r *segmentRead) from(s *segment) (done bool, err error) {
	br := newBatchReader(s, s.seek(r.offset), s.size, r.maxLen)
	defer br.close()
	for {
		h, b, err := br.next()
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			var ce *CorruptError
			if errors.As(err, &ce) {
				ce.Offset = r.offset
			}
			return true, err
		}
		if h.next() <= r.offset {
			continue
		}
		n := len(r.out)
		r.out, r.taken, err = decodeRecords(b, h, r.offset, r.maxMessages-len(r.out), r.maxBytes, r.taken, r.out)
		if err != nil {
			return true, s.corrupt(br.pos-h.size(), r.offset, err.Error())
		}
		if len(r.out) == r.maxMessages || len(r.out)-n < int(h.next()-max(r.offset, h.baseOffset)) {
			return true, nil
		}
		r.offset = h.next()
	}
}

func (l *Log) checkOffset(offset uint64) error {
	start, next := l.segments[0].base, l.active().next
	switch {
	case offset < start:
		return fmt.Errorf("%w: offset %d, log starts at %d", ErrTrimmed, offset, start)
	case offset > next:
		return fmt.Errorf("%w: offset %d, next offset is %d", ErrOutOfRange, offset, next)
	}
	return nil
}

// OffsetForTime returns the first offset whose publish time (in ms since
// the Unix epoch) is at or after t, or NextOffset when there is none. Publish
// times are taken as their running maximum, so a clock that stepped back
// cannot hide later messages.
func (l *Log) OffsetForTime(t int64) (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.usable(); err != nil {
		return 0, err
	}
	for _, s := range l.segments {
		if s.empty() || s.maxTime < t {
			continue
		}
		if off, found, err := s.offsetForTime(t, l.cfg.MaxBatchBytes); found || err != nil {
			return off, err
		}
	}
	return l.active().next, nil
}

// offsetForTime is OffsetForTime within one segment.
func (s *segment) offsetForTime(t int64, maxLen int) (off uint64, found bool, err error) {
	br := newBatchReader(s, s.seekTime(t), s.size, maxLen)
	defer br.close()
	for {
		h, b, err := br.next()
		if err == io.EOF {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, err
		}
		if h.maxTime < t {
			continue
		}
		msgs, _, err := decodeRecords(b, h, h.baseOffset, int(h.count), math.MaxInt, 0, nil)
		if err != nil {
			return 0, false, s.corrupt(br.pos-h.size(), h.baseOffset, err.Error())
		}
		for _, m := range msgs {
			if m.PublishTime >= t {
				return m.Offset, true, nil
			}
		}
	}
}

// RetainResult says what Retain or TrimBefore deleted.
type RetainResult struct {
	Segments    int
	Messages    uint64
	Bytes       int64
	StartOffset uint64 // the log's start offset afterwards
}

// Retain deletes whole sealed segments, oldest first, while the oldest is
// older than Config.RetentionMaxAge (its newest publish time before now
// minus the age) or the log is larger than Config.RetentionMaxBytes. It
// never deletes the active segment, nor a segment holding an offset at or
// above floor: pass the lowest offset a subscription still needs
// (math.MaxUint64 for none).
func (l *Log) Retain(now time.Time, floor uint64) (RetainResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return RetainResult{}, err
	}
	var total int64
	for _, s := range l.segments {
		total += s.size
	}
	cutoff := now.Add(-l.cfg.RetentionMaxAge).UnixMilli()
	return l.deleteOldest(func(s *segment) bool {
		byAge := l.cfg.RetentionMaxAge > 0 && s.maxTime < cutoff
		bySize := l.cfg.RetentionMaxBytes > 0 && total > l.cfg.RetentionMaxBytes
		if s.next > floor || !(byAge || bySize) {
			return false
		}
		total -= s.size
		return true
	})
}

// TrimBefore deletes the whole sealed segments, oldest first, whose every
// offset is below start: the log then starts at the segment boundary at or
// below start. It is how a caller that decides retention itself (a
// replicated state machine, so that every replica trims at the same
// offset) applies its decision. The active segment is never deleted.
func (l *Log) TrimBefore(start uint64) (RetainResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return RetainResult{}, err
	}
	return l.deleteOldest(func(s *segment) bool { return s.next <= start })
}

// deleteOldest deletes sealed segments, oldest first, while del says so.
// The caller holds mu.
func (l *Log) deleteOldest(del func(*segment) bool) (RetainResult, error) {
	var res RetainResult
	for len(l.segments) > 1 {
		s := l.segments[0]
		if !del(s) {
			break
		}
		s.f.Close()
		if err := os.Remove(s.path); err != nil {
			return res, fmt.Errorf("storage: %w", err)
		}
		if err := removeIfExists(indexPath(s.path)); err != nil {
			return res, err
		}
		l.segments = l.segments[1:]
		res.Segments++
		res.Messages += s.next - s.base
		res.Bytes += s.size
	}
	res.StartOffset = l.segments[0].base
	if res.Segments > 0 {
		return res, syncDir(l.dir)
	}
	return res, nil
}

// SegmentInfo describes one segment of a Log.
type SegmentInfo struct {
	BaseOffset uint64 // offset of its first message
	NextOffset uint64 // offset after its last message
	Bytes      int64
	// MaxPublishTime is the largest publish time in it (ms since the
	// epoch), 0 when it is empty.
	MaxPublishTime int64
	// Active is true for the last segment, the one appends go to; the
	// others are sealed.
	Active bool
}

// Segments returns the log's segments, oldest first; the last one is the
// active segment.
func (l *Log) Segments() []SegmentInfo {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]SegmentInfo, len(l.segments))
	for i, s := range l.segments {
		out[i] = SegmentInfo{BaseOffset: s.base, NextOffset: s.next, Bytes: s.size, Active: i == len(l.segments)-1}
		if !s.empty() {
			out[i].MaxPublishTime = s.maxTime
		}
	}
	return out
}

// Sync makes every appended batch durable and records the sync mark that
// recovery trusts.
func (l *Log) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	return l.syncLocked()
}

func (l *Log) syncLocked() error {
	a := l.active()
	if l.synced == a.size {
		return nil
	}
	if err := a.f.Sync(); err != nil {
		return fmt.Errorf("storage: sync %s: %w", a.path, err)
	}
	if err := writeCheckpoint(l.dir, a.base, a.size); err != nil {
		return err
	}
	l.synced = a.size
	return nil
}

// Info returns the log's offsets and size.
func (l *Log) Info() Info {
	l.mu.RLock()
	defer l.mu.RUnlock()
	info := Info{LastRaftIndex: l.raft, Segments: len(l.segments)}
	if len(l.segments) > 0 {
		info.StartOffset = l.segments[0].base
		info.NextOffset = l.active().next
	}
	for _, s := range l.segments {
		info.Bytes += s.size
	}
	return info
}

// NextOffset returns the offset the next appended message will get.
func (l *Log) NextOffset() uint64 { return l.Info().NextOffset }

// LastRaftIndex returns the Raft index of the last batch, 0 if none.
func (l *Log) LastRaftIndex() uint64 { return l.Info().LastRaftIndex }

// Close syncs the active segment, closes every file and releases the
// directory. It is idempotent; every other method returns ErrClosed after.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var err error
	switch {
	case l.failed != nil || len(l.segments) == 0:
	case l.movedAway():
		// The checkpoint is written by path, which now names another
		// directory (a copy set aside while this log closed, and a new
		// copy made under its name): sync the segment only.
		if serr := l.active().f.Sync(); serr != nil {
			err = fmt.Errorf("storage: sync %s: %w", l.active().path, serr)
		}
	default:
		err = l.syncLocked()
	}
	l.closeFiles()
	releaseDir(l.held)
	return err
}

// movedAway reports whether the log's path no longer leads to its
// directory.
func (l *Log) movedAway() bool {
	id, err := dirIDOf(l.dir)
	return err != nil || id != l.held
}

func (l *Log) closeFiles() {
	for _, s := range l.segments {
		s.f.Close()
	}
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("storage: %w", err)
	}
	return nil
}

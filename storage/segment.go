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
	"sort"
	"strconv"
	"strings"
)

const (
	segmentSuffix = ".log"
	indexSuffix   = ".index"
	tmpSuffix     = ".tmp"
)

// indexEntry points at the start of a batch. maxTimeBefore is the largest
// publish time of every message in the segment before that batch, so it
// never decreases along the index and can be binary-searched for a time.
type indexEntry struct {
	relOffset     uint32
	pos           uint32
	maxTimeBefore int64
}

const indexEntrySize = 16

// segment is one file of the log, named after the offset of its first
// message. The last segment of a Log is its active segment; every other one
// is sealed: complete, synced, with its index on disk.
type segment struct {
	base    uint64
	path    string
	f       *os.File
	size    int64  // bytes of whole batches
	next    uint64 // offset after the last message
	raft    uint64 // Raft index of the last batch, 0 when empty
	maxTime int64  // largest publish time, meaningful when size > 0
	// firstTime is the largest publish time of the first batch, used to
	// roll by age.
	firstTime int64
	index     []indexEntry
	// lastIndexed is the position of the last index entry.
	lastIndexed int64
	sealed      bool
}

func segmentName(base uint64) string { return fmt.Sprintf("%020d%s", base, segmentSuffix) }

func indexPath(segPath string) string {
	return strings.TrimSuffix(segPath, segmentSuffix) + indexSuffix
}

// parseSegmentName returns the base offset of a segment file name.
func parseSegmentName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, segmentSuffix)
	if !ok || len(digits) != 20 {
		return 0, false
	}
	base, err := strconv.ParseUint(digits, 10, 64)
	return base, err == nil
}

func (s *segment) corrupt(pos int64, off uint64, reason string) error {
	return &CorruptError{File: s.path, Position: pos, Offset: off, Reason: reason}
}

func (s *segment) empty() bool { return s.size == 0 }

// addBatch records a batch written at pos in the segment's state.
func (s *segment) addBatch(pos int64, h batchHeader, interval int64) {
	if s.empty() {
		s.firstTime = h.maxTime
		s.maxTime = h.maxTime
	}
	if len(s.index) == 0 || pos-s.lastIndexed >= interval {
		s.index = append(s.index, indexEntry{
			relOffset:     uint32(h.baseOffset - s.base),
			pos:           uint32(pos),
			maxTimeBefore: s.maxTime,
		})
		s.lastIndexed = pos
	}
	s.maxTime = max(s.maxTime, h.maxTime)
	s.size = pos + h.size()
	s.next = h.next()
	s.raft = h.raftIndex
}

// reset forgets every batch, for a segment about to be rebuilt by scan.
func (s *segment) reset() {
	s.size, s.next, s.raft, s.maxTime, s.firstTime = 0, s.base, 0, 0, 0
	s.index, s.lastIndexed = nil, 0
}

// scan reads every batch of the file from the start, checks it and rebuilds
// the segment's state. It stops at the first bad batch and returns it as a
// *CorruptError with its position; a clean scan returns nil.
func (s *segment) scan(fileSize int64, interval int64, maxLen int) (badPos int64, bad error, err error) {
	s.reset()
	br := newBatchReader(s, 0, fileSize, maxLen)
	defer br.close()
	br.reuse = true
	for {
		pos := br.pos
		h, b, err := br.next()
		if err == io.EOF {
			return 0, nil, nil
		}
		var ce *CorruptError
		if errors.As(err, &ce) {
			ce.Offset = s.next
			return pos, ce, nil
		}
		if err != nil {
			return 0, nil, err
		}
		reason := ""
		switch {
		case h.baseOffset != s.next:
			reason = fmt.Sprintf("batch starts at offset %d, expected %d", h.baseOffset, s.next)
		case h.next()-s.base > math.MaxUint32:
			reason = "segment holds more than 2^32 messages"
		case !s.empty() && h.raftIndex <= s.raft:
			reason = fmt.Sprintf("raft index %d does not follow %d", h.raftIndex, s.raft)
		default:
			// Messages must decode too, so that a reader never meets a
			// batch that passed the scan but cannot be read.
			if err := checkRecords(b, h); err != nil {
				reason = err.Error()
			}
		}
		if reason != "" {
			return pos, s.corrupt(pos, s.next, reason), nil
		}
		s.addBatch(pos, h, interval)
	}
}

// Index file layout: n entries of indexEntrySize bytes (relOffset u32,
// pos u32, maxTimeBefore i64), then a footer.
const (
	indexMagic      = 0x46514958 // "FQIX"
	indexVersion    = 1
	indexFooterSize = 4 + 4 + 8 + 8 + 8 + 8 + 8 + 4 + 4
)

// writeIndex writes the sealed segment's index next to it, atomically.
func (s *segment) writeIndex() error {
	b := make([]byte, 0, len(s.index)*indexEntrySize+indexFooterSize)
	for _, e := range s.index {
		b = binary.BigEndian.AppendUint32(b, e.relOffset)
		b = binary.BigEndian.AppendUint32(b, e.pos)
		b = binary.BigEndian.AppendUint64(b, uint64(e.maxTimeBefore))
	}
	b = binary.BigEndian.AppendUint32(b, indexMagic)
	b = binary.BigEndian.AppendUint32(b, indexVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(s.size))
	b = binary.BigEndian.AppendUint64(b, s.next)
	b = binary.BigEndian.AppendUint64(b, s.raft)
	b = binary.BigEndian.AppendUint64(b, uint64(s.maxTime))
	b = binary.BigEndian.AppendUint64(b, uint64(s.firstTime))
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.index)))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
	return writeFile(indexPath(s.path), b)
}

// loadIndex reads the segment's index file and checks it against the
// segment file; it returns false, and leaves the segment untouched, when
// the index is missing or does not match, so the caller rebuilds it.
func (s *segment) loadIndex(fileSize int64) (bool, error) {
	b, err := os.ReadFile(indexPath(s.path))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("storage: read index: %w", err)
	}
	if len(b) < indexFooterSize || (len(b)-indexFooterSize)%indexEntrySize != 0 {
		return false, nil
	}
	f := b[len(b)-indexFooterSize:]
	if crc32.Checksum(b[:len(b)-4], crcTable) != binary.BigEndian.Uint32(f[52:]) ||
		binary.BigEndian.Uint32(f[0:]) != indexMagic || binary.BigEndian.Uint32(f[4:]) != indexVersion {
		return false, nil
	}
	n := int(binary.BigEndian.Uint32(f[48:]))
	size := int64(binary.BigEndian.Uint64(f[8:]))
	next := binary.BigEndian.Uint64(f[16:])
	if n != (len(b)-indexFooterSize)/indexEntrySize || size != fileSize || size == 0 || n == 0 || next <= s.base {
		return false, nil
	}
	index := make([]indexEntry, n)
	for i := range index {
		e := b[i*indexEntrySize:]
		index[i] = indexEntry{
			relOffset:     binary.BigEndian.Uint32(e[0:]),
			pos:           binary.BigEndian.Uint32(e[4:]),
			maxTimeBefore: int64(binary.BigEndian.Uint64(e[8:])),
		}
		if i == 0 && (index[i].relOffset != 0 || index[i].pos != 0) {
			return false, nil
		}
		if i > 0 && (index[i].relOffset <= index[i-1].relOffset || index[i].pos <= index[i-1].pos ||
			index[i].maxTimeBefore < index[i-1].maxTimeBefore || int64(index[i].pos) >= size ||
			uint64(index[i].relOffset) >= next-s.base) {
			return false, nil
		}
	}
	s.index = index
	s.lastIndexed = int64(index[n-1].pos)
	s.size = size
	s.next = next
	s.raft = binary.BigEndian.Uint64(f[24:])
	s.maxTime = int64(binary.BigEndian.Uint64(f[32:]))
	s.firstTime = int64(binary.BigEndian.Uint64(f[40:]))
	return true, nil
}

// seek returns the position of the last indexed batch that starts at or
// before offset.
func (s *segment) seek(offset uint64) int64 {
	rel := offset - s.base
	i := sort.Search(len(s.index), func(i int) bool { return uint64(s.index[i].relOffset) > rel })
	if i == 0 {
		return 0
	}
	return int64(s.index[i-1].pos)
}

// seekTime returns the position of the last indexed batch before which
// every publish time is below t.
func (s *segment) seekTime(t int64) int64 {
	i := sort.Search(len(s.index), func(i int) bool { return s.index[i].maxTimeBefore >= t })
	if i == 0 {
		return 0
	}
	return int64(s.index[i-1].pos)
}

// batchReader reads whole batches of a segment from a position on.
type batchReader struct {
	s      *segment
	r      *readAhead
	pos    int64
	end    int64
	maxLen int
	// reuse makes next return batches in one reused buffer, for callers
	// that do not keep them.
	reuse bool
	buf   []byte
}

func newBatchReader(s *segment, pos, end int64, maxLen int) *batchReader {
	return &batchReader{
		s:      s,
		r:      newReadAhead(s.f, pos, end),
		pos:    pos,
		end:    end,
		maxLen: maxLen,
	}
}

// close gives the reader's buffer back for other reads.
func (br *batchReader) close() { br.r.release() }

// next returns the next batch, freshly allocated, or io.EOF at end. A
// damaged batch is a *CorruptError.
func (br *batchReader) next() (batchHeader, []byte, error) {
	if br.pos >= br.end {
		return batchHeader{}, nil, io.EOF
	}
	var hdr [batchHeaderSize]byte
	if br.end-br.pos < batchHeaderSize {
		return batchHeader{}, nil, br.s.corrupt(br.pos, 0, "batch header cut short")
	}
	if _, err := io.ReadFull(br.r, hdr[:]); err != nil {
		return batchHeader{}, nil, fmt.Errorf("storage: read %s: %w", br.s.path, err)
	}
	h, err := parseHeader(hdr[:], br.maxLen)
	if err != nil {
		return h, nil, br.s.corrupt(br.pos, h.baseOffset, err.Error())
	}
	if br.pos+h.size() > br.end {
		return h, nil, br.s.corrupt(br.pos, h.baseOffset, "batch runs past the end of the segment")
	}
	var b []byte
	if br.reuse {
		if cap(br.buf) < int(h.size()) {
			br.buf = make([]byte, h.size())
		}
		b = br.buf[:h.size()]
	} else {
		b = make([]byte, h.size())
	}
	copy(b, hdr[:])
	if _, err := io.ReadFull(br.r, b[batchHeaderSize:]); err != nil {
		return h, nil, fmt.Errorf("storage: read %s: %w", br.s.path, err)
	}
	if _, err := checkBatch(b, br.maxLen); err != nil {
		return h, nil, br.s.corrupt(br.pos, h.baseOffset, err.Error())
	}
	br.pos += h.size()
	return h, b, nil
}

// writeFileAtomic writes data to path through a synced temporary file and a
// rename, then syncs the directory.
func writeFileAtomic(path string, data []byte) error {
	if err := writeFile(path, data); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// writeFile is writeFileAtomic without the directory sync, for callers that
// sync the directory once after several files.
func writeFile(path string, data []byte) error {
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("storage: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("storage: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("storage: close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	return nil
}

// syncDir makes the directory's entries (created, renamed, removed files)
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("storage: sync directory %s: %w", dir, err)
	}
	return nil
}

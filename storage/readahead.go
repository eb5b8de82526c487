package storage

import (
	"io"
	"sync"
)

const (
	// readBufferSize is the largest read-ahead of a sequential scan.
	readBufferSize = 64 << 10
	// firstFill is the read-ahead of a reader's first fill; each later fill
	// doubles it up to readBufferSize.
	firstFill = 4 << 10
)

// readBuffers holds the read-ahead buffers of finished readers, so that a
// read does not allocate (and clear) 64 KiB each time.
var readBuffers = sync.Pool{New: func() any {
	b := make([]byte, readBufferSize)
	return &b
}}

// readAhead reads the region [pos, end) of a file in order. Its fills start
// at firstFill and double up to readBufferSize, so that a read that needs
// one small batch copies a few KiB from the page cache while a long scan
// still reads 64 KiB at a time. A caller's buffer at least as large as the
// next fill is read into directly.
type readAhead struct {
	f        io.ReaderAt
	pos, end int64   // next file position to fill from, end of the region
	buf      *[]byte // from readBuffers, taken at the first fill
	r, w     int     // unread bytes are (*buf)[r:w]
	fill     int
}

func newReadAhead(f io.ReaderAt, pos, end int64) *readAhead {
	return &readAhead{f: f, pos: pos, end: end, fill: firstFill}
}

// Read implements io.Reader.
func (ra *readAhead) Read(p []byte) (int, error) {
	if ra.r == ra.w {
		if ra.pos >= ra.end {
			return 0, io.EOF
		}
		if len(p) >= ra.fill {
			n := int(min(int64(len(p)), ra.end-ra.pos))
			n, err := ra.readAt(p[:n])
			return n, err
		}
		if ra.buf == nil {
			ra.buf = readBuffers.Get().(*[]byte)
		}
		n := int(min(int64(ra.fill), ra.end-ra.pos))
		n, err := ra.readAt((*ra.buf)[:n])
		ra.r, ra.w = 0, n
		ra.fill = min(2*ra.fill, readBufferSize)
		if n == 0 {
			return 0, err
		}
	}
	n := copy(p, (*ra.buf)[ra.r:ra.w])
	ra.r += n
	return n, nil
}

// readAt reads b at the fill position and moves it on. A short read is
// io.ErrUnexpectedEOF: the region was promised to be there.
func (ra *readAhead) readAt(b []byte) (int, error) {
	n, err := ra.f.ReadAt(b, ra.pos)
	ra.pos += int64(n)
	if n == len(b) {
		return n, nil
	}
	if err == io.EOF || err == nil {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// release gives the buffer back; the reader must not be used after it.
func (ra *readAhead) release() {
	if ra.buf != nil {
		readBuffers.Put(ra.buf)
		ra.buf = nil
	}
	ra.r, ra.w = 0, 0
}

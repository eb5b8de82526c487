package lazyfs

import (
	"fmt"
	"io"
	"sync"

	"golang.org/x/sys/unix"
)

// inodeKey names a backing file for as long as it exists.
type inodeKey struct {
	dev, ino uint64
}

// undoLog holds, oldest first, how to undo the changes to one backing
// file since its last sync. Its fields are guarded by mu, which is held
// across each change so that the bytes saved are the bytes the change
// overwrote.
type undoLog struct {
	mu   sync.Mutex
	fd   int // a read-write descriptor of the file while recs is not empty, else -1
	recs []undo
	next uint64 // seq of the next record
}

// undo is how to undo one change: set the size back, then put back the
// bytes it overwrote.
type undo struct {
	seq     uint64
	size    int64  // the file's size before the change
	off     int64  // where old goes
	old     []byte // the bytes at [off, off+len(old)) before the change
	written int    // bytes a write wrote; 0 for a size change
	trunc   bool   // a size change rather than a write
}

// noteWrite records how to undo a write of n bytes at off to the file
// open, readable and writable, as fd.
func (l *undoLog) noteWrite(fd int, off int64, n int) error {
	size, err := fileSize(fd)
	if err != nil {
		return err
	}
	u := undo{size: size, off: off, written: n}
	if off < size {
		u.old = make([]byte, min(int64(n), size-off))
		if err := preadFull(fd, u.old, off); err != nil {
			return err
		}
	}
	return l.add(fd, u)
}

// noteTruncate records how to undo setting the size of the file open,
// readable and writable, as fd to size.
func (l *undoLog) noteTruncate(fd int, size int64) error {
	old, err := fileSize(fd)
	if err != nil || old == size {
		return err
	}
	return l.noteRange(fd, old, size, old)
}

// noteAllocate records how to undo a fallocate of n bytes at off to the
// file open, readable and writable, as fd; zeroes tells that the call may
// change the bytes in that range (punching a hole, zeroing).
func (l *undoLog) noteAllocate(fd int, off, n int64, zeroes bool) error {
	old, err := fileSize(fd)
	if err != nil {
		return err
	}
	if !zeroes {
		n = 0
	}
	return l.noteRange(fd, old, off, off+n)
}

// noteRange records a size change of the file of size old, saving the
// bytes it has in [lo, hi).
func (l *undoLog) noteRange(fd int, old, lo, hi int64) error {
	u := undo{size: old, off: lo, trunc: true}
	if hi = min(hi, old); lo < hi {
		u.old = make([]byte, hi-lo)
		if err := preadFull(fd, u.old, lo); err != nil {
			return err
		}
	}
	return l.add(fd, u)
}

// add appends u, keeping a descriptor of the file to undo it with.
func (l *undoLog) add(fd int, u undo) error {
	if l.fd < 0 {
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("keep a descriptor: %w", err)
		}
		l.fd = dup
	}
	u.seq = l.next
	l.next++
	l.recs = append(l.recs, u)
	return nil
}

// synced forgets the records before seq upto: a sync that started after
// them made them durable.
func (l *undoLog) synced(upto uint64) {
	i := 0
	for i < len(l.recs) && l.recs[i].seq < upto {
		i++
	}
	if i == 0 {
		return
	}
	l.recs = append([]undo(nil), l.recs[i:]...)
	if len(l.recs) == 0 {
		l.forget()
	}
}

// forget drops every record and the descriptor.
func (l *undoLog) forget() {
	if l.fd >= 0 {
		unix.Close(l.fd)
	}
	l.fd = -1
	l.recs = nil
}

// undo undoes every record, newest first, and forgets them.
func (l *undoLog) undo() (Dropped, error) {
	var d Dropped
	if len(l.recs) == 0 {
		return d, nil
	}
	defer l.forget()
	d.Files = 1
	for i := len(l.recs) - 1; i >= 0; i-- {
		u := l.recs[i]
		if err := unix.Ftruncate(l.fd, u.size); err != nil {
			return d, err
		}
		if len(u.old) > 0 {
			if err := pwriteFull(l.fd, u.old, u.off); err != nil {
				return d, err
			}
		}
		if u.trunc {
			d.Truncates++
		} else {
			d.Writes++
			d.Bytes += int64(u.written)
		}
	}
	return d, nil
}

func fileSize(fd int) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Size, nil
}

func preadFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pread(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

func pwriteFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

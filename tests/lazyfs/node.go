package lazyfs

import (
	"context"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a loopback node whose open files record their changes. Every
// node of the tree is one: the root wraps its children as go-fuse creates
// them (NodeWrapChilder), and so do they.
type node struct {
	*fs.LoopbackNode
	fs *FS
}

var (
	_ fs.NodeWrapChilder     = (*node)(nil)
	_ fs.NodeOpener          = (*node)(nil)
	_ fs.NodeCreater         = (*node)(nil)
	_ fs.NodeTmpfiler        = (*node)(nil)
	_ fs.NodeSetattrer       = (*node)(nil)
	_ fs.NodeCopyFileRanger  = (*node)(nil)
	_ fs.NodeStatfser        = (*node)(nil)
	_ fs.InodeEmbedder       = (*node)(nil)
	_ fs.FileHandle          = (*handle)(nil)
	_ fs.FileReader          = (*handle)(nil)
	_ fs.FileWriter          = (*handle)(nil)
	_ fs.FileWritever        = (*handle)(nil)
	_ fs.FileFsyncer         = (*handle)(nil)
	_ fs.FileAllocater       = (*handle)(nil)
	_ fs.FileFlusher         = (*handle)(nil)
	_ fs.FileReleaser        = (*handle)(nil)
	_ fs.FileGetattrer       = (*handle)(nil)
	_ fs.FileStatxer         = (*handle)(nil)
	_ fs.FileLseeker         = (*handle)(nil)
	_ fs.FilePassthroughFder = (*fs.LoopbackFile)(nil) // how wrap gets the descriptor
)

// WrapChild makes every node go-fuse creates under n a lazyfs node.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fs: n.fs}
}

// Statfs reports the backing file system's figures, with no free blocks
// while the file system acts as full.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	if errno := n.LoopbackNode.Statfs(ctx, out); errno != 0 {
		return errno
	}
	if n.fs.full.Load() {
		out.Bfree, out.Bavail = 0, 0
	}
	return 0
}

// Open opens the backing file read-write even when asked for write-only,
// so that a write can read what it overwrites.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, readWrite(flags)&^syscall.O_TRUNC)
	if errno != 0 {
		return nil, 0, errno
	}
	h, errno := n.fs.wrap(ctx, fh, flags)
	return h, fuseFlags, errno
}

// Create creates the backing file, read-write like Open.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	inode, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, readWrite(flags)&^syscall.O_TRUNC, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	h, errno := n.fs.wrap(ctx, fh, flags)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return inode, h, fuseFlags, 0
}

// Tmpfile creates an unnamed backing file (O_TMPFILE), read-write like
// Open.
func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	inode, fh, fuseFlags, errno := n.LoopbackNode.Tmpfile(ctx, readWrite(flags), mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	h, errno := n.fs.wrap(ctx, fh, 0)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return inode, h, fuseFlags, 0
}

// Setattr records a size change before passing it on; the rest of the
// attributes are durable at once.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	h, _ := f.(*handle)
	if size, ok := in.GetSize(); ok {
		var errno syscall.Errno
		if h != nil {
			errno = h.truncate(int64(size))
		} else {
			errno = n.truncate(int64(size))
		}
		if errno != 0 {
			return errno
		}
		in.Valid &^= fuse.FATTR_SIZE
	}
	if h != nil {
		f = h.inner
	}
	return n.LoopbackNode.Setattr(ctx, f, in, out)
}

// truncate sets the size of the file by its path (truncate(2)).
func (n *node) truncate(size int64) syscall.Errno {
	p := filepath.Join(n.RootData.Path, n.Path(n.Root()))
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer unix.Close(fd)
	if n.fs.full.Load() {
		if cur, err := fileSize(fd); err != nil || size > cur {
			return syscall.ENOSPC
		}
	}
	return n.fs.change(fd, func(l *undoLog) error {
		if err := l.noteTruncate(fd, size); err != nil {
			return err
		}
		return unix.Ftruncate(fd, size)
	})
}

// CopyFileRange is not supported: the kernel falls back to reads and
// writes, which lazyfs records.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}

// readWrite turns a write-only open into a read-write one.
func readWrite(flags uint32) uint32 {
	if flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		flags = flags&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return flags
}

// wrap wraps a loopback file handle so that its changes are recorded,
// and truncates the file if flags ask for it (O_TRUNC, which go-fuse
// leaves to a separate SETATTR but an open may still carry).
func (f *FS) wrap(ctx context.Context, fh fs.FileHandle, flags uint32) (*handle, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	var fd int
	if ok {
		fd, ok = lf.PassthroughFd()
	}
	if !ok {
		if r, ok := fh.(fs.FileReleaser); ok {
			r.Release(ctx)
		}
		return nil, syscall.EIO
	}
	h := &handle{inner: lf, fd: fd, fs: f}
	if flags&syscall.O_TRUNC != 0 {
		if errno := h.truncate(0); errno != 0 {
			lf.Release(ctx)
			return nil, errno
		}
	}
	return h, 0
}

// handle is an open backing file whose writes, size changes and syncs go
// through the undo log of its file.
type handle struct {
	inner *fs.LoopbackFile
	fd    int // inner's descriptor, valid until Release
	fs    *FS
}

func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return h.inner.Read(ctx, buf, off)
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if h.fs.full.Load() && len(data) > 0 && !allocated(h.fd, off, int64(len(data))) {
		return 0, syscall.ENOSPC
	}
	var written uint32
	errno := h.fs.change(h.fd, func(l *undoLog) error {
		if err := l.noteWrite(h.fd, off, len(data)); err != nil {
			return err
		}
		n, errno := h.inner.Write(ctx, data, off)
		written = n
		return errOf(errno)
	})
	return written, errno
}

// allocated reports whether the bytes [off, off+n) of the file open as fd
// are all within its size and not in a hole: a full disk still lets a
// program overwrite blocks it was given, not write where none are.
func allocated(fd int, off, n int64) bool {
	size, err := fileSize(fd)
	if err != nil || off+n > size {
		return false
	}
	hole, err := unix.Seek(fd, off, unix.SEEK_HOLE)
	return err == nil && hole >= off+n
}

func (h *handle) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	var all []byte
	for _, b := range data {
		all = append(all, b...)
	}
	return h.Write(ctx, all, off)
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.fs.sync(h.fd, func() syscall.Errno { return h.inner.Fsync(ctx, flags) })
}

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	if mode&(unix.FALLOC_FL_COLLAPSE_RANGE|unix.FALLOC_FL_INSERT_RANGE) != 0 {
		return syscall.EOPNOTSUPP // moves data: not undoable with a saved range
	}
	zeroes := mode&(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0
	if h.fs.full.Load() && mode&unix.FALLOC_FL_PUNCH_HOLE == 0 {
		return syscall.ENOSPC
	}
	return h.fs.change(h.fd, func(l *undoLog) error {
		if err := l.noteAllocate(h.fd, int64(off), int64(size), zeroes); err != nil {
			return err
		}
		return errOf(h.inner.Allocate(ctx, off, size, mode))
	})
}

func (h *handle) truncate(size int64) syscall.Errno {
	if h.fs.full.Load() {
		if cur, err := fileSize(h.fd); err != nil || size > cur {
			return syscall.ENOSPC
		}
	}
	return h.fs.change(h.fd, func(l *undoLog) error {
		if err := l.noteTruncate(h.fd, size); err != nil {
			return err
		}
		return unix.Ftruncate(h.fd, size)
	})
}

func (h *handle) Flush(ctx context.Context) syscall.Errno { return h.inner.Flush(ctx) }

func (h *handle) Release(ctx context.Context) syscall.Errno { return h.inner.Release(ctx) }

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.inner.Getattr(ctx, out)
}

func (h *handle) Statx(ctx context.Context, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return h.inner.Statx(ctx, flags, mask, out)
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.inner.Lseek(ctx, off, whence)
}

// errOf turns an errno into an error, nil for 0.
func errOf(errno syscall.Errno) error {
	if errno == 0 {
		return nil
	}
	return errno
}

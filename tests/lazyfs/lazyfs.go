package lazyfs

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Errors of the package.
var (
	// ErrNoFUSE is returned by Mount when /dev/fuse is missing or cannot
	// be opened.
	ErrNoFUSE = errors.New("lazyfs: /dev/fuse is not available")
	// ErrUnmounted is returned by Crash after Unmount: the unsynced
	// changes were kept, nothing is left to drop.
	ErrUnmounted = errors.New("lazyfs: already unmounted")
)

// stopTimeout bounds how long stopping waits for the kernel to let go of
// a mount that had to be detached because something still used it.
const stopTimeout = 30 * time.Second

// FS is a mounted lazyfs: a loopback of a backing directory that can
// drop every change not yet synced. Its methods are safe for concurrent
// use.
type FS struct {
	backing    string
	mountpoint string
	server     *fuse.Server
	served     chan struct{} // closed when the serve loop has returned

	// gate is held shared by every change to a backing file and every
	// sync, and exclusively by Crash, so that once crashed is set no
	// change reaches a backing file.
	gate    sync.RWMutex
	crashed bool

	// full makes the file system refuse new data with ENOSPC (SetFull).
	full atomic.Bool

	mu      sync.Mutex // guards the fields below
	logs    map[inodeKey]*undoLog
	syncs   int
	dropped Dropped

	life    sync.Mutex // serialises Crash and Unmount
	undone  bool       // Crash applied the undo logs
	stopped bool       // the file system is no longer served
}

// Dropped is what Crash undid.
type Dropped struct {
	Files     int   // files with at least one change undone
	Writes    int   // writes undone
	Bytes     int64 // bytes those writes had written
	Truncates int   // size changes undone (truncate, O_TRUNC, fallocate)
}

// Mount serves backing at mountpoint, an existing empty directory. The
// caller must end it with Crash or Unmount.
func Mount(backing, mountpoint string) (*FS, error) {
	if err := unix.Access("/dev/fuse", unix.R_OK|unix.W_OK); err != nil {
		return nil, fmt.Errorf("%w: %v (create it with: mknod -m 666 /dev/fuse c 10 229)", ErrNoFUSE, err)
	}
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	mountpoint, err = filepath.Abs(mountpoint)
	if err != nil {
		return nil, err
	}
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: %w", err)
	}
	f := &FS{
		backing:    backing,
		mountpoint: mountpoint,
		served:     make(chan struct{}),
		logs:       make(map[inodeKey]*undoLog),
	}
	second := time.Second
	opts := &fs.Options{
		EntryTimeout: &second,
		AttrTimeout:  &second,
		MountOptions: fuse.MountOptions{
			FsName: backing,
			Name:   "lazyfs",
			// mount(2) itself, without fusermount, which a test machine
			// may not have; we run as root.
			DirectMountStrict: true,
			// Passthrough would let the kernel write the backing file
			// without us seeing the writes.
			DisabledCapabilities: fuse.CAP_PASSTHROUGH,
			Logger:               log.New(os.Stderr, "lazyfs: ", log.LstdFlags),
		},
	}
	top := &node{LoopbackNode: root.(*fs.LoopbackNode), fs: f}
	server, err := fuse.NewServer(fs.NewNodeFS(top, opts), mountpoint, &opts.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mount %s on %s: %w", backing, mountpoint, err)
	}
	f.server = server
	go func() {
		// Owned by f: it ends when the file system is unmounted, which
		// Crash and Unmount wait for.
		server.Serve()
		close(f.served)
	}()
	if err := server.WaitMount(); err != nil {
		return nil, errors.Join(fmt.Errorf("lazyfs: mount %s on %s: %w", backing, mountpoint, err), f.stop())
	}
	return f, nil
}

// SetFull makes the file system act as a full disk, or stop doing so:
// while full, writes that need new blocks (past the end of a file, or into
// a hole) and size increases fail with ENOSPC, and statfs reports no free
// blocks; overwrites of blocks a file has, reads, syncs, shrinking
// truncations and removals go on, as on a real full disk (one that does
// not copy on write).
func (f *FS) SetFull(full bool) { f.full.Store(full) }

// Mountpoint returns where the file system is mounted.
func (f *FS) Mountpoint() string { return f.mountpoint }

// Backing returns the backing directory.
func (f *FS) Backing() string { return f.backing }

// Crash simulates a power loss: from now on no change reaches the backing
// directory (operations fail with EIO), every change not synced is
// undone, newest first, and the file system is unmounted, lazily if
// something still uses it. Calling it again does nothing; after Unmount
// it returns ErrUnmounted.
func (f *FS) Crash() error {
	f.life.Lock()
	defer f.life.Unlock()
	if f.stopped && !f.undone {
		return ErrUnmounted
	}
	var errs []error
	if !f.undone {
		f.gate.Lock()
		f.crashed = true
		f.mu.Lock()
		for key, l := range f.logs {
			l.mu.Lock()
			d, err := l.undo()
			l.mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("lazyfs: undo inode %d: %w", key.ino, err))
			}
			f.dropped.Files += d.Files
			f.dropped.Writes += d.Writes
			f.dropped.Bytes += d.Bytes
			f.dropped.Truncates += d.Truncates
		}
		f.logs = map[inodeKey]*undoLog{}
		f.mu.Unlock()
		f.gate.Unlock()
		f.undone = true
	}
	if !f.stopped {
		if err := f.stop(); err != nil {
			errs = append(errs, err)
		} else {
			f.stopped = true
		}
	}
	return errors.Join(errs...)
}

// Unmount ends the file system and keeps every change, synced or not, in
// the backing directory. Calling it again, or after Crash, does nothing.
func (f *FS) Unmount() error {
	f.life.Lock()
	defer f.life.Unlock()
	if f.stopped {
		return nil
	}
	if err := f.stop(); err != nil {
		return err
	}
	f.stopped = true
	f.gate.Lock()
	f.mu.Lock()
	for _, l := range f.logs {
		l.mu.Lock()
		l.forget()
		l.mu.Unlock()
	}
	f.logs = map[inodeKey]*undoLog{}
	f.mu.Unlock()
	f.gate.Unlock()
	return nil
}

// Dropped returns what Crash undid; zero before Crash.
func (f *FS) Dropped() Dropped {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dropped
}

// Syncs returns how many fsync and fdatasync calls of files (not
// directories) the file system has passed on.
func (f *FS) Syncs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncs
}

// stop unmounts and waits for the serve loop to return. If the mount is
// busy it is detached: it disappears from the tree at once, and the
// kernel ends the connection when its last user lets go. If something
// keeps the connection alive (a copy of the mount in another mount
// namespace, a process stuck in a request), the connection is aborted
// through the fuse control file system, which ends it at once.
func (f *FS) stop() error {
	select {
	case <-f.served:
		return nil // unmounted from outside
	default:
	}
	conn := ""
	var st unix.Stat_t
	if unix.Stat(f.mountpoint, &st) == nil {
		conn = fmt.Sprint(st.Dev) // the connection's name under fusectl
	}
	unmounted := make(chan error, 1)
	go func() {
		// Owned by stop: it returns once the connection ends, which the
		// abort below forces if nothing else does.
		unmounted <- f.server.Unmount()
	}()
	select {
	case err := <-unmounted:
		if err != nil {
			if derr := unix.Unmount(f.mountpoint, unix.MNT_DETACH); derr != nil {
				return fmt.Errorf("lazyfs: unmount %s: %w; detach: %w", f.mountpoint, err, derr)
			}
		}
	case <-time.After(abortAfter):
		unix.Unmount(f.mountpoint, unix.MNT_DETACH)
		if err := abort(conn); err != nil {
			return fmt.Errorf("lazyfs: %s still in use after %v and not aborted: %w", f.mountpoint, abortAfter, err)
		}
	}
	select {
	case <-f.served:
		return nil
	case <-time.After(stopTimeout):
		if err := abort(conn); err != nil {
			return fmt.Errorf("lazyfs: %s detached but still in use after %v: %w", f.mountpoint, stopTimeout, err)
		}
		<-f.served
		return nil
	}
}

// abortAfter is how long stop lets an unmount wait for the connection to
// end before it aborts the connection.
const abortAfter = 5 * time.Second

// fusectl is where the fuse control file system is mounted.
const fusectl = "/sys/fs/fuse/connections"

// abort ends a FUSE connection by its name under fusectl, mounting the
// control file system if it is not.
func abort(conn string) error {
	if conn == "" {
		return errors.New("the connection is not known")
	}
	file := filepath.Join(fusectl, conn, "abort")
	if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
		if err := unix.Mount("fusectl", fusectl, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount fusectl: %w", err)
		}
	}
	return os.WriteFile(file, []byte("1"), 0)
}

// change runs fn, which changes the backing file open as fd, with the
// file's undo log locked. It fails with EIO after Crash.
func (f *FS) change(fd int, fn func(l *undoLog) error) syscall.Errno {
	f.gate.RLock()
	defer f.gate.RUnlock()
	if f.crashed {
		return syscall.EIO
	}
	l, err := f.logOf(fd)
	if err != nil {
		return fs.ToErrno(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return fs.ToErrno(fn(l))
}

// sync runs fsync, a sync of the backing file open as fd, and then
// forgets the changes to that file made before it started. It fails with
// EIO after Crash.
func (f *FS) sync(fd int, fsync func() syscall.Errno) syscall.Errno {
	f.gate.RLock()
	defer f.gate.RUnlock()
	if f.crashed {
		return syscall.EIO
	}
	l, err := f.logOf(fd)
	if err != nil {
		return fs.ToErrno(err)
	}
	l.mu.Lock()
	upto := l.next
	l.mu.Unlock()
	if errno := fsync(); errno != 0 {
		return errno
	}
	l.mu.Lock()
	l.synced(upto)
	l.mu.Unlock()
	f.mu.Lock()
	f.syncs++
	f.mu.Unlock()
	return 0
}

// logOf returns the undo log of the backing file open as fd.
func (f *FS) logOf(fd int) (*undoLog, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	key := inodeKey{dev: st.Dev, ino: st.Ino}
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.logs[key]
	if !ok {
		l = &undoLog{fd: -1}
		f.logs[key] = l
	}
	return l, nil
}

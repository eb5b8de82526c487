// Package lazyfs is a FUSE file system for power-loss tests, after
// Jepsen's LazyFS: it passes every operation through to a backing
// directory, and remembers for each file how to undo the writes and
// truncations that no fsync of that file has made durable yet. Crash
// stops serving and undoes them, newest first, so that the backing
// directory holds what a power loss would have left on a disk: the data
// that was synced, and nothing written after.
//
// A test mounts a backing directory, runs a program on the mountpoint,
// kills the program (SIGKILL: the kernel's page cache would survive that,
// a power loss would not), calls Crash, and starts the program again on
// the backing directory. Whatever the program acknowledged before the
// crash must still be there.
//
//	fsys, err := lazyfs.Mount(backing, mountpoint)
//	...
//	program.kill()
//	err = fsys.Crash()
//	d := fsys.Dropped() // what the crash undid
//
// # What it models
//
// Writes (write, pwrite, writev, writes of shared mmap pages) and size
// changes (truncate, ftruncate, O_TRUNC, fallocate) are volatile until an
// fsync or fdatasync of the same file, through any of its descriptors
// (both arrive as FUSE FSYNC). An undo record holds the file's size and
// the bytes the change overwrote; appends past the end cost no memory, so
// what lazyfs holds is bounded by the unsynced data the program
// overwrote, plus one descriptor per file with unsynced changes. Syncing
// drops the file's records; a sync that runs while writes go on keeps
// the records of the writes that began after it did.
//
// Undo records follow the inode, not the name: they hold a descriptor of
// the backing file, so a file renamed or unlinked after a write is still
// undone, and its inode number cannot be reused meanwhile.
//
// # Limits
//
//   - Directory operations (create, mkdir, rename, link, unlink, rmdir,
//     symlink, mknod) and metadata (mode, owner, times, xattrs) are
//     durable at once, as if every directory were synced after each
//     change. A real file system can lose an unsynced rename or create;
//     lazyfs cannot show that bug. A file created and never synced comes
//     back empty, which real file systems do (ext4's zero-length files).
//   - Crash loses every unsynced change, whole. A real disk may keep some
//     unsynced pages and lose others (torn and reordered writes); lazyfs
//     shows that what a program synced is enough, not that its recovery
//     copes with any mix of kept and lost pages.
//   - O_SYNC and O_DSYNC are not honoured: such writes are lost unless an
//     fsync follows (pessimistic; fabriq does not use them).
//   - Writes that bypass FUSE cannot be seen: lazyfs turns off FUSE
//     passthrough (which would hand the kernel the backing file) and
//     copy_file_range (the kernel falls back to reads and writes).
//   - Undoing a truncation that cut a file short needs the bytes it cut,
//     read when it happens; truncating a large file keeps them in memory.
//   - Locks (flock, fcntl) are kept by the kernel, not passed through.
//   - Linux only, as root (or with CAP_SYS_ADMIN): it mounts with
//     mount(2) directly and needs /dev/fuse; no fusermount.
//
// # Mount options
//
// Entries and attributes are cached for a second: every change goes
// through the mount, so the kernel's view cannot be stale. The kernel's
// write-back cache is off (go-fuse does not ask for it), so each write
// reaches lazyfs before the write call returns, and no handle is opened
// with direct I/O, so programs can map files MAP_SHARED (bbolt maps its
// file read-only and writes with pwrite). AllowOther is not needed: the
// program runs as the user that mounted.
package lazyfs

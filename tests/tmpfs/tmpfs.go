// Package tmpfs gives a test a small file system of its own, to fill up:
// a size-limited tmpfs mounted under the test's temporary directory, so
// that what a full disk does to the code under test touches nothing else.
// Mounting needs root, as the CI runs; without it the test fails and says
// why.
package tmpfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Mount mounts a tmpfs of size bytes on dir, which it creates, and
// unmounts it when the test ends (registered now, so it runs after what
// the test starts later is cleaned up).
func Mount(t testing.TB, dir string, size int64) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Fatalf("this test needs a small file system of its own: mounting a tmpfs on %s failed (run the tests as root): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// New mounts a tmpfs of size bytes on a new directory under the test's
// temporary directory and returns it.
func New(t testing.TB, size int64) string {
	t.Helper()
	return Mount(t, filepath.Join(t.TempDir(), "disk"), size)
}

// Free returns the bytes free on dir's file system.
func Free(t testing.TB, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// Fill appends to the file "filler" in dir until about leave bytes stay
// free on its file system (0: until not one byte more fits), and returns
// the file's path.
func Fill(t testing.TB, dir string, leave int64) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{'f'}, 256<<10)
	for free := Free(t, dir); free > leave; free = Free(t, dir) {
		n := min(int64(len(chunk)), free-leave)
		if _, err := f.Write(chunk[:n]); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatalf("filling %s: %v", dir, err)
		}
	}
	if leave == 0 {
		// The last pages, a byte at a time.
		for _, err := f.Write([]byte{'f'}); err == nil; _, err = f.Write([]byte{'f'}) {
		}
	}
	return path
}

package lazyfs

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// mount mounts a fresh backing directory and returns the file system,
// the backing directory and the mountpoint. The mount goes when the test
// ends, before the directories are removed.
func mount(t *testing.T) (*FS, string, string) {
	t.Helper()
	backing, mnt := t.TempDir(), t.TempDir()
	fsys, err := Mount(backing, mnt)
	if err != nil {
		t.Fatalf("mount: %v", err) // never skip: a missing /dev/fuse is a broken machine
	}
	t.Cleanup(func() {
		if err := fsys.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return fsys, backing, mnt
}

// step is one operation on the open file f.
type step func(t *testing.T, f *os.File)

func write(b string) step {
	return func(t *testing.T, f *os.File) {
		t.Helper()
		if _, err := f.Write([]byte(b)); err != nil {
			t.Fatal(err)
		}
	}
}

func writeAt(b string, off int64) step {
	return func(t *testing.T, f *os.File) {
		t.Helper()
		if _, err := f.WriteAt([]byte(b), off); err != nil {
			t.Fatal(err)
		}
	}
}

func truncate(size int64) step {
	return func(t *testing.T, f *os.File) {
		t.Helper()
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
	}
}

func fsync(t *testing.T, f *os.File) {
	t.Helper()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func fdatasync(t *testing.T, f *os.File) {
	t.Helper()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
}

// After a crash a file holds exactly what it held at its last sync.
func TestCrashKeepsSynced(t *testing.T) {
	for _, tc := range []struct {
		name    string
		steps   []step
		want    string
		dropped Dropped
	}{
		{"nothing synced", []step{write("lost")}, "", Dropped{Files: 1, Writes: 1, Bytes: 4}},
		{"append after sync", []step{write("kept-"), fsync, write("lost"), write("lost")}, "kept-",
			Dropped{Files: 1, Writes: 2, Bytes: 8}},
		{"overwrite after sync", []step{write("0123456789"), fsync, writeAt("xx", 2), writeAt("yyyyyyyyyyyy", 6)}, "0123456789",
			Dropped{Files: 1, Writes: 2, Bytes: 14}},
		{"fdatasync", []step{write("kept"), writeAt("KE", 0), fdatasync, writeAt("lo", 0)}, "KEpt",
			Dropped{Files: 1, Writes: 1, Bytes: 2}},
		{"WriteAt and Sync", []step{writeAt("bbbb", 4), writeAt("aaaa", 0), fsync, writeAt("cccc", 8), writeAt("AA", 1)}, "aaaabbbb",
			Dropped{Files: 1, Writes: 2, Bytes: 6}},
		{"truncate shorter", []step{write("0123456789"), fsync, truncate(3)}, "0123456789",
			Dropped{Files: 1, Truncates: 1}},
		{"truncate longer", []step{write("0123"), fsync, truncate(100), writeAt("z", 50)}, "0123",
			Dropped{Files: 1, Writes: 1, Bytes: 1, Truncates: 1}},
		{"truncate synced", []step{write("0123456789"), fsync, truncate(3), writeAt("abc", 3), fsync, truncate(0), write("lost")}, "012abc",
			Dropped{Files: 1, Writes: 1, Bytes: 4, Truncates: 1}},
		{"everything synced", []step{write("a"), write("b"), fsync}, "ab", Dropped{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys, backing, mnt := mount(t)
			f, err := os.Create(filepath.Join(mnt, "f"))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.steps {
				s(t, f)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if err := fsys.Crash(); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(backing, "f"))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("after the crash the file holds %q, want %q", got, tc.want)
			}
			if d := fsys.Dropped(); d != tc.dropped {
				t.Errorf("dropped %+v, want %+v", d, tc.dropped)
			}
		})
	}
}

// Undo follows the file, not the name: a file written, renamed and
// unlinked is undone where it is; directory changes themselves stay.
func TestCrashFollowsRenames(t *testing.T) {
	fsys, backing, mnt := mount(t)
	put := func(name, data string, sync bool) {
		t.Helper()
		f, err := os.Create(filepath.Join(mnt, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(data); err != nil {
			t.Fatal(err)
		}
		if sync {
			fsync(t, f)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	put("synced.tmp", "durable", true)
	put("unsynced.tmp", "volatile", false)
	put("gone", "whatever", false)
	if err := os.Mkdir(filepath.Join(mnt, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{"synced.tmp": "d/synced", "unsynced.tmp": "d/unsynced"} {
		if err := os.Rename(filepath.Join(mnt, from), filepath.Join(mnt, to)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(mnt, "gone")); err != nil {
		t.Fatal(err)
	}
	// A new file in the old name of an unsynced one.
	put("unsynced.tmp", "new", true)
	if err := fsys.Crash(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"d/synced": "durable", "d/unsynced": "", "unsynced.tmp": "new"} {
		got, err := os.ReadFile(filepath.Join(backing, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s holds %q, want %q", name, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(backing, "gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an unlinked file is back: %v", err)
	}
	if d := fsys.Dropped(); d.Files != 2 || d.Bytes != int64(len("volatile")+len("whatever")) {
		t.Errorf("dropped %+v, want 2 files and 16 bytes", d)
	}
}

// A file mapped MAP_SHARED, read-only, and written with pwrite (as bbolt
// does) sees its writes through the map, and fdatasync makes them
// durable.
func TestMappedFile(t *testing.T) {
	fsys, backing, mnt := mount(t)
	f, err := os.OpenFile(filepath.Join(mnt, "db"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := os.Getpagesize()
	if err := f.Truncate(int64(4 * page)); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, 4*page, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	synced := bytes.Repeat([]byte("s"), page)
	writeAt(string(synced), int64(page))(t, f)
	fdatasync(t, f)
	writeAt(strings.Repeat("u", page), int64(2*page))(t, f)
	if !bytes.Equal(m[page:2*page], synced) || m[2*page] != 'u' {
		t.Fatalf("the map does not show the writes: %q... %q...", m[page:page+8], m[2*page:2*page+8])
	}
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Crash(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(backing, "db"))
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 4*page)
	copy(want[page:], synced)
	if !bytes.Equal(got, want) {
		t.Errorf("after the crash the file differs from its synced content (%d bytes, want %d)", len(got), len(want))
	}
}

// A file still open at the crash: the mount is detached, the file's
// later writes fail and reach nothing, and Crash returns once the file is
// closed.
func TestCrashWhileOpen(t *testing.T) {
	fsys, backing, mnt := mount(t)
	f, err := os.Create(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatal(err)
	}
	write("kept")(t, f)
	fsync(t, f)
	write("lost")(t, f)
	crashed := make(chan error, 1)
	go func() { crashed <- fsys.Crash() }()
	// The crash has undone the write once the mount is detached.
	deadline := time.Now().Add(10 * time.Second)
	for mounted(t, mnt) {
		if time.Now().After(deadline) {
			t.Fatal("the mount is still there 10s after Crash began")
		}
		time.Sleep(10 * time.Millisecond) // polling the mount table; nothing to wait on
	}
	if _, err := f.Write([]byte("after")); err == nil {
		t.Error("a write after the crash succeeded")
	}
	f.Close()
	if err := <-crashed; err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(backing, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "kept" {
		t.Errorf("after the crash the file holds %q, want %q", got, "kept")
	}
}

// Unmount keeps everything, synced or not; Crash after it fails.
func TestUnmountKeepsAll(t *testing.T) {
	fsys, backing, mnt := mount(t)
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("unsynced"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Unmount(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Unmount(); err != nil {
		t.Fatalf("second unmount: %v", err)
	}
	if err := fsys.Crash(); !errors.Is(err, ErrUnmounted) {
		t.Fatalf("crash after unmount: %v, want ErrUnmounted", err)
	}
	got, err := os.ReadFile(filepath.Join(backing, "f"))
	if err != nil || string(got) != "unsynced" {
		t.Fatalf("after unmount: %q, %v", got, err)
	}
}

// mounted tells whether dir is a mountpoint.
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if fields := strings.Fields(line); len(fields) > 4 && fields[4] == dir {
			return true
		}
	}
	return false
}

// A copy of the mount in another mount namespace (what `ip netns exec`
// gives a program) keeps the FUSE connection alive after the unmount:
// Crash must not wait for it forever, it aborts the connection.
func TestCrashWithACopyElsewhere(t *testing.T) {
	fsys, backing, mnt := mount(t)
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("lost"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A process in a new mount namespace, holding a copy of the mount;
	// it says "ready" once the copy exists.
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", "echo ready; exec sleep 120")
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	t.Cleanup(func() {
		holder.Process.Kill()
		holder.Wait()
	})
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fsys.Crash() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Crash still waits a minute later")
	}
	if got, err := os.ReadFile(filepath.Join(backing, "f")); err != nil || len(got) != 0 {
		t.Fatalf("after the crash: %q, %v", got, err)
	}
}

// SetFull: while full, writes that need new blocks and growth fail with
// ENOSPC and statfs shows no free blocks; overwrites, reads, syncs,
// shrinking and removals go on; once no longer full, writes work again.
func TestFullRefusesNewData(t *testing.T) {
	fsys, _, mnt := mount(t)
	path := filepath.Join(mnt, "f")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 10); err != nil { // a hole after "kept"
		t.Fatal(err)
	}
	fsys.SetFull(true)
	if _, err := f.WriteAt([]byte("more"), 64<<10); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("write past the end while full: %v, want ENOSPC", err)
	}
	if _, err := f.WriteAt([]byte("hole"), 32<<10); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("write into a hole while full: %v, want ENOSPC", err)
	}
	if _, err := f.WriteAt([]byte("KE"), 0); err != nil {
		t.Fatalf("overwrite of written bytes while full: %v", err)
	}
	if err := f.Truncate(128 << 10); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("growing truncate while full: %v, want ENOSPC", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil || st.Bavail != 0 || st.Bfree != 0 {
		t.Fatalf("statfs while full: %+v, %v; want no free blocks", st, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("sync while full: %v", err)
	}
	b := make([]byte, 4)
	if _, err := f.ReadAt(b, 0); err != nil || string(b) != "KEpt" {
		t.Fatalf("read while full: %q, %v", b, err)
	}
	if err := f.Truncate(2); err != nil {
		t.Fatalf("shrinking truncate while full: %v", err)
	}
	fsys.SetFull(false)
	if err := unix.Statfs(mnt, &st); err != nil || st.Bavail == 0 {
		t.Fatalf("statfs once no longer full: %+v, %v", st, err)
	}
	if _, err := f.WriteAt([]byte("pt"), 2); err != nil {
		t.Fatalf("write once no longer full: %v", err)
	}
}

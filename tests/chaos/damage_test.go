package chaos

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// file is what a test remembers of a file: its bytes and inode.
type file struct {
	data []byte
	ino  uint64
}

// tree reads every regular file below dir.
func tree(t *testing.T, dir string) map[string]file {
	t.Helper()
	out := map[string]file{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = file{data: b, ino: fi.Sys().(*syscall.Stat_t).Ino}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// flipped compares two readings of a tree: it returns the files that
// changed (every name of one inode when it has hard links) and the offset
// of the one bit that changed, failing unless exactly one bit of one inode
// changed and nothing was added or removed.
func flipped(t *testing.T, before, after map[string]file) (names []string, at int) {
	t.Helper()
	if len(before) != len(after) {
		t.Fatalf("%d files before, %d after", len(before), len(after))
	}
	var ino uint64
	at = -1
	for name, b := range before {
		a, ok := after[name]
		if !ok {
			t.Fatalf("%s is gone", name)
		}
		if bytes.Equal(a.data, b.data) {
			continue
		}
		if len(a.data) != len(b.data) {
			t.Fatalf("%s changed size: %d to %d", name, len(b.data), len(a.data))
		}
		n, first := 0, -1
		for i := range a.data {
			if d := bits.OnesCount8(a.data[i] ^ b.data[i]); d > 0 {
				n += d
				if first < 0 {
					first = i
				}
			}
		}
		if n != 1 {
			t.Fatalf("%s has %d bits changed, want 1", name, n)
		}
		if ino != 0 && b.ino != ino {
			t.Fatalf("two files changed: %v and %s", names, name)
		}
		ino, at = b.ino, first
		names = append(names, name)
	}
	if len(names) == 0 {
		t.Fatal("nothing changed")
	}
	return names, at
}

// write makes a file with its directories.
func write(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// noise returns n seeded random bytes.
func noise(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// boltFile makes a bolt file of raft-boltdb's shape with some entries and
// returns its bytes and how many of them bolt has allocated (tx.Size).
func boltFile(t *testing.T) ([]byte, int64) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "raft.db")
	db, err := bolt.Open(p, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		logs, err := tx.CreateBucket([]byte("logs"))
		if err != nil {
			return err
		}
		for i := range 400 {
			if err := logs.Put(fmt.Appendf(nil, "%08d", i), noise(uint64(i), 300)); err != nil {
				return err
			}
		}
		_, err = tx.CreateBucket([]byte("conf"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	db.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b, used
}

// The bolt high-water mark as boltInUse reads it is bolt's own, and a
// file whose meta pages are bad is eligible whole.
func TestBoltInUse(t *testing.T) {
	b, want := boltFile(t)
	p := filepath.Join(t.TempDir(), "raft.db")
	write(t, p, b)
	size, used, err := boltInUse(p)
	if err != nil || size != int64(len(b)) || used != want {
		t.Fatalf("size %d, in use %d (%v); want %d, %d", size, used, err, len(b), want)
	}
	if used >= size {
		t.Logf("bolt allocated all %d bytes of its file", size)
	}
	// A bit of the newest meta's pgid flipped (page 0's: the file had two
	// transactions, bolt's own and ours): its checksum fails, and bolt
	// reads page 1's, the older transaction's mark.
	b0 := bytes.Clone(b)
	b0[boltMetaAt+42] ^= 0x10
	write(t, p, b0)
	db, err := bolt.Open(p, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var older int64
	db.View(func(tx *bolt.Tx) error { older = tx.Size(); return nil })
	db.Close()
	if _, used, _ := boltInUse(p); used != older || used >= want {
		t.Fatalf("page 0's meta damaged: in use %d, want bolt's %d", used, older)
	}
	write(t, p, noise(1, 10000))
	if size, used, _ := boltInUse(p); used != size {
		t.Fatalf("no valid meta page: in use %d of %d, want all", used, size)
	}
}

// dataDir makes a node's data directory: two live copies and one set
// aside, with segments, raft.db files and snapshots, and the metadata
// group's raft.db and snapshot. snaps says whether the live copies have
// snapshots. It returns the directory and the bytes bolt allocated of the
// first copy's raft.db (a real bolt file; the second's is noise).
func dataDir(t *testing.T, snaps bool) (string, int64) {
	t.Helper()
	dir := t.TempDir()
	db, used := boltFile(t)
	live0 := filepath.Join(dir, "partitions", "t", "f", "s-partition-0")
	live1 := filepath.Join(dir, "partitions", "t", "f", "s-partition-1")
	aside := filepath.Join(dir, "partitions", "t", "f", "s-partition-1@n3")
	seg := bytes.Repeat([]byte("0123456789abcdef"), 256)
	for i, c := range []string{live0, live1, aside} {
		raftDB := db
		if i > 0 {
			raftDB = noise(uint64(i), 8192)
		}
		write(t, filepath.Join(c, "raft", "raft.db"), raftDB)
		write(t, filepath.Join(c, "log", "00000000000000000000.log"), seg)
		write(t, filepath.Join(c, "log", "00000000000000000100.log"), seg[:1000])
		// An unfinished snapshot, which is no snapshot.
		tmp := filepath.Join(c, "raft", "snapshots", "2-150-1700000009000.tmp")
		write(t, filepath.Join(tmp, "state.bin"), noise(20, 100))
		if !snaps && c != aside {
			continue
		}
		for j, id := range []string{"2-90-1700000000000", "2-120-1700000005000"} {
			s := filepath.Join(c, "raft", "snapshots", id)
			write(t, filepath.Join(s, "meta.json"), fmt.Appendf(nil, `{"ID":%q,"Index":%d,"Term":2,"state_crc":123}`, id, 90+30*j))
			write(t, filepath.Join(s, "state.bin"), noise(uint64(10+j), 200))
			write(t, filepath.Join(s, "data", "MANIFEST"), []byte(`{"version":1,"segments":[{"base":0,"size":4096}]}`))
			// Both hold a hard link to the live log's sealed segment.
			if err := os.Link(filepath.Join(c, "log", "00000000000000000000.log"), filepath.Join(s, "data", "00000000000000000000.log")); err != nil {
				t.Fatal(err)
			}
		}
	}
	meta := filepath.Join(dir, "meta")
	write(t, filepath.Join(meta, "raft.db"), db)
	write(t, filepath.Join(meta, "snapshots", "1-40-1700000000000", "meta.json"), []byte(`{"ID":"1-40-1700000000000"}`))
	write(t, filepath.Join(meta, "snapshots", "1-40-1700000000000", "state.bin"), noise(30, 300))
	return dir, used
}

// DamageRaftDB flips one bit of a live copy's raft.db, below bolt's
// high-water mark for a real bolt file, and nothing else: never a copy
// set aside, never the metadata group's.
func TestDamageRaftDB(t *testing.T) {
	hit := map[string]int{}
	for seed := uint64(1); seed <= 24; seed++ {
		dir, used := dataDir(t, true)
		before := tree(t, dir)
		what, err := DamageRaftDB(dir, seed)
		if err != nil {
			t.Fatal(err)
		}
		names, at := flipped(t, before, tree(t, dir))
		if len(names) != 1 || !strings.HasSuffix(names[0], "/raft/raft.db") || !strings.HasPrefix(names[0], "partitions/") || strings.Contains(names[0], "@") {
			t.Fatalf("seed %d (%s): damaged %v", seed, what, names)
		}
		if !strings.Contains(what, names[0]) || !strings.Contains(what, fmt.Sprintf("byte %d ", at)) {
			t.Fatalf("seed %d: %q does not say byte %d of %s", seed, what, at, names[0])
		}
		if strings.Contains(names[0], "partition-0") && int64(at) >= used {
			t.Fatalf("seed %d (%s): byte %d is past bolt's %d bytes in use", seed, what, at, used)
		}
		hit[names[0]]++
	}
	if len(hit) != 2 {
		t.Fatalf("24 seeds damaged %v: want both live copies", hit)
	}
	what, err := DamageRaftDB(t.TempDir(), 1)
	if err != nil || what != "no raft log to damage" {
		t.Fatalf("an empty data directory: %q, %v", what, err)
	}
}

// DamageSnapshotFile flips one bit of one file of a finished snapshot of
// a live copy, meta.json, state.bin and the data/ files alike, and nothing
// else (a data/ segment's hard link to the live log changes with it);
// without a snapshot it changes nothing.
func TestDamageSnapshotFile(t *testing.T) {
	hit := map[string]int{}
	for seed := uint64(1); seed <= 32; seed++ {
		dir, _ := dataDir(t, true)
		before := tree(t, dir)
		what, err := DamageSnapshotFile(dir, seed)
		if err != nil {
			t.Fatal(err)
		}
		// Several names change when the file has hard links (flipped
		// checks they are one inode): the live segment, and both
		// snapshots' links to it.
		names, at := flipped(t, before, tree(t, dir))
		snap := ""
		for _, n := range names {
			if !strings.HasPrefix(n, "partitions/t/f/s-partition-") || strings.Contains(n, "@") || strings.Contains(n, ".tmp/") {
				t.Fatalf("seed %d (%s): %s changed", seed, what, n)
			}
			if strings.Contains(n, "/raft/snapshots/") && strings.Contains(what, n) {
				snap = n
			}
		}
		if snap == "" || len(names) > 1 && filepath.Base(snap) != "00000000000000000000.log" {
			t.Fatalf("seed %d (%s): damaged %v", seed, what, names)
		}
		if !strings.Contains(what, fmt.Sprintf("byte %d ", at)) {
			t.Fatalf("seed %d: %q does not say byte %d of %s", seed, what, at, snap)
		}
		hit[filepath.Base(snap)]++
	}
	for _, name := range []string{"meta.json", "state.bin", "MANIFEST", "00000000000000000000.log"} {
		if hit[name] == 0 {
			t.Errorf("32 seeds damaged %v: no %s", hit, name)
		}
	}
	for name, snaps := range map[string]bool{"no snapshots": false, "empty": true} {
		dir, _ := dataDir(t, snaps)
		if name == "empty" {
			os.RemoveAll(filepath.Join(dir, "partitions"))
		}
		before := tree(t, dir)
		what, err := DamageSnapshotFile(dir, 7)
		if err != nil || what != "no snapshot to damage" {
			t.Fatalf("%s: %q, %v", name, what, err)
		}
		after := tree(t, dir)
		for p, f := range before {
			if !bytes.Equal(after[p].data, f.data) {
				t.Fatalf("%s: %s changed", name, p)
			}
		}
	}
}

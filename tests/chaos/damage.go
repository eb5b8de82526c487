package chaos

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// liveCopies returns the partition copies of a data directory, sorted:
// DATA/partitions/TENANT/FABRIC/LEAF, without the copies set aside (a name
// with "@", never opened again). The metadata group lives under DATA/meta
// and is never among them.
func liveCopies(dataDir string) ([]string, error) {
	root := filepath.Join(dataDir, "partitions")
	dirs, err := filepath.Glob(filepath.Join(root, "*", "*", "*"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range dirs {
		if rel, _ := filepath.Rel(root, d); strings.Contains(rel, "@") {
			continue
		}
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out, nil
}

// DamageRaftDB flips one bit of the Raft log store (raft/raft.db, a bolt
// file) of one partition copy under a stopped node's data directory,
// chosen by seed: the copy uniformly among those that have a raft.db, the
// bit uniformly among the bytes bolt has allocated. Those are the first
// pgid × page size bytes, the high-water mark of the newest valid meta
// page (the meta pages, the freelist, branch and leaf pages, and pages
// freed but not yet reused); bolt grows its file ahead of need (to the
// next power of two, or 16 MiB past the mark), and a flip in what lies
// beyond would touch nothing. Without a valid meta page the whole file is
// eligible. Copies set aside and the metadata group's raft.db are never
// touched. It says what it did.
func DamageRaftDB(dataDir string, seed uint64) (string, error) {
	r := rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d))
	copies, err := liveCopies(dataDir)
	if err != nil {
		return "", err
	}
	var dbs []string
	for _, c := range copies {
		p := filepath.Join(c, "raft", "raft.db")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			dbs = append(dbs, p)
		}
	}
	if len(dbs) == 0 {
		return "no raft log to damage", nil
	}
	p := dbs[r.IntN(len(dbs))]
	size, used, err := boltInUse(p)
	if err != nil {
		return "", err
	}
	at, bit := r.Int64N(used), r.IntN(8)
	if err := flipBit(p, at, bit); err != nil {
		return "", err
	}
	return fmt.Sprintf("flipped bit %d of byte %d of raft log %s (%d bytes, %d in use by bolt)", bit, at, relName(dataDir, p), size, used), nil
}

// DamageSnapshotFile flips one bit of one file of one Raft snapshot of a
// partition copy under a stopped node's data directory, chosen by seed:
// the copy uniformly among those with a snapshot
// (raft/snapshots/TERM-INDEX-MILLIS, not an unfinished one ending in
// ".tmp"), the snapshot uniformly among the copy's, the file uniformly
// among its meta.json, its state.bin and the files of its data/ directory
// (a partition log snapshot: hard links to log segments, and a manifest),
// the bit uniformly in the file. A data/*.log file may be a hard link to a
// segment of the live log, whose copy of the bit flips with it; a flip
// past the size the snapshot recorded for a linked active segment damages
// the live log only. Empty files are skipped. A node without a snapshot
// is left alone ("no snapshot to damage"). Copies set aside and the
// metadata group are never touched. It says what it did.
func DamageSnapshotFile(dataDir string, seed uint64) (string, error) {
	r := rand.New(rand.NewPCG(seed, seed^0x61c8864680b583eb))
	copies, err := liveCopies(dataDir)
	if err != nil {
		return "", err
	}
	var withSnap [][]string // per copy, its snapshot directories
	for _, c := range copies {
		entries, err := os.ReadDir(filepath.Join(c, "raft", "snapshots"))
		if err != nil {
			continue
		}
		var snaps []string
		for _, e := range entries {
			if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
				snaps = append(snaps, filepath.Join(c, "raft", "snapshots", e.Name()))
			}
		}
		if len(snaps) > 0 {
			withSnap = append(withSnap, snaps)
		}
	}
	if len(withSnap) == 0 {
		return "no snapshot to damage", nil
	}
	snaps := withSnap[r.IntN(len(withSnap))]
	snap := snaps[r.IntN(len(snaps))]
	var files []string
	for _, name := range []string{"meta.json", "state.bin"} {
		if fi, err := os.Lstat(filepath.Join(snap, name)); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			files = append(files, filepath.Join(snap, name))
		}
	}
	filepath.WalkDir(filepath.Join(snap, "data"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if fi, err := d.Info(); err == nil && fi.Size() > 0 {
			files = append(files, p)
		}
		return nil
	})
	if len(files) == 0 {
		return "no file to damage in snapshot " + relName(dataDir, snap), nil
	}
	p := files[r.IntN(len(files))]
	fi, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	at, bit := r.Int64N(fi.Size()), r.IntN(8)
	if err := flipBit(p, at, bit); err != nil {
		return "", err
	}
	links := ""
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		links = fmt.Sprintf(", %d links", st.Nlink)
	}
	return fmt.Sprintf("flipped bit %d of byte %d of snapshot file %s (%d bytes%s)", bit, at, relName(dataDir, p), fi.Size(), links), nil
}

// relName names a file by its path below the data directory.
func relName(dataDir, p string) string {
	if rel, err := filepath.Rel(dataDir, p); err == nil {
		return rel
	}
	return p
}

// flipBit flips bit of the byte at of a file, in place, and syncs it.
func flipBit(path string, at int64, bit int) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at); err != nil {
		return err
	}
	b[0] ^= 1 << bit
	if _, err := f.WriteAt(b, at); err != nil {
		return err
	}
	return f.Sync()
}

// Bolt's file format (go.etcd.io/bbolt, native byte order): pages 0 and 1
// hold a meta each, after a 16-byte page header; the newest valid one (the
// higher txid whose checksum, FNV-64a of the meta's bytes before it,
// matches) names the high-water mark pgid.
const (
	boltMagic    = 0xED0CDAED
	boltVersion  = 2
	boltMetaAt   = 16 // page header: id, flags, count, overflow
	boltMetaSize = 56 // magic … txid, then the checksum
)

// boltInUse returns a bolt file's size and how many of its first bytes
// bolt has allocated (pgid × page size of the newest valid meta page, at
// most the size); the size when no meta page is valid.
func boltInUse(path string) (size, used int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	size = fi.Size()
	type meta struct {
		pageSize, pgid, txid uint64
	}
	read := func(page int64) (meta, bool) {
		b := make([]byte, boltMetaSize+8)
		if _, err := f.ReadAt(b, page+boltMetaAt); err != nil && err != io.EOF {
			return meta{}, false
		}
		ne := binary.NativeEndian
		if ne.Uint32(b[0:]) != boltMagic || ne.Uint32(b[4:]) != boltVersion {
			return meta{}, false
		}
		h := fnv.New64a()
		h.Write(b[:boltMetaSize])
		if sum := ne.Uint64(b[boltMetaSize:]); sum != 0 && sum != h.Sum64() {
			return meta{}, false
		}
		return meta{pageSize: uint64(ne.Uint32(b[8:])), pgid: ne.Uint64(b[40:]), txid: ne.Uint64(b[48:])}, true
	}
	m0, ok0 := read(0)
	ps := int64(os.Getpagesize()) // where bolt looks for page 1 when page 0 is bad
	if ok0 && m0.pageSize > 0 {
		ps = int64(m0.pageSize)
	}
	m1, ok1 := read(ps)
	best, ok := m0, ok0
	if ok1 && (!ok0 || m1.txid > m0.txid) {
		best, ok = m1, true
	}
	if !ok || best.pageSize == 0 || best.pgid == 0 {
		return size, size, nil
	}
	if best.pgid > uint64(size)/best.pageSize {
		return size, size, nil
	}
	return size, int64(best.pgid * best.pageSize), nil
}

package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

func openStore(t *testing.T, dir string, retain int, expand ExpandFunc) *SnapshotStore {
	t.Helper()
	s, err := OpenSnapshotStore(dir, SnapshotStoreConfig{Retain: retain, Expand: expand, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func createSink(t *testing.T, s *SnapshotStore, index uint64) DirSink {
	t.Helper()
	conf := raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: "127.0.0.1:7650", Suffrage: raft.Voter}}}
	sink, err := s.Create(1, index, 3, conf, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	ds, ok := sink.(DirSink)
	if !ok {
		t.Fatal("sink is not a DirSink")
	}
	return ds
}

// makeDir makes a directory of files name → content under parent.
func makeDir(t *testing.T, parent string, files map[string]string) string {
	t.Helper()
	dir, err := os.MkdirTemp(parent, "adopt-")
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func readSnapshot(t *testing.T, s *SnapshotStore, id string) (*raft.SnapshotMeta, []byte, error) {
	t.Helper()
	meta, rc, err := s.Open(id)
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return meta, b, err
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestSnapshotStoreStreams(t *testing.T) {
	tests := []struct {
		name   string
		expand bool
		state  []string          // Write calls
		files  map[string]string // adopted directory; nil for none
		want   string
	}{
		{"plain", false, []string{"hello ", "world"}, nil, "hello world"},
		{"plain with expand", true, []string{"state"}, nil, "state"},
		{"adopted", true, []string{"head:"}, map[string]string{"b": "BBB", "a": "AA"}, "head:AABBB"},
		{"adopted, no state", true, nil, map[string]string{"seg": "data"}, "data"},
		{"adopted, empty dir", true, []string{"x"}, map[string]string{}, "x"},
		{"write after adopt", true, []string{"1", "2"}, map[string]string{"z": "Z"}, "12Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			var expand ExpandFunc
			if tt.expand {
				expand = expandDir
			}
			s := openStore(t, filepath.Join(root, "snapshots"), 2, expand)
			sink := createSink(t, s, 10)
			var src string
			for i, w := range tt.state {
				if i == 1 && tt.files != nil && tt.name == "write after adopt" {
					src = makeDir(t, root, tt.files)
					if err := sink.AdoptDir(src); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := sink.Write([]byte(w)); err != nil {
					t.Fatal(err)
				}
			}
			if tt.files != nil && src == "" {
				src = makeDir(t, root, tt.files)
				if err := sink.AdoptDir(src); err != nil {
					t.Fatal(err)
				}
			}
			if err := sink.Close(); err != nil {
				t.Fatal(err)
			}
			if src != "" {
				if _, err := os.Stat(src); !os.IsNotExist(err) {
					t.Fatalf("adopted directory still at its old path: %v", err)
				}
			}
			list, err := s.List()
			if err != nil || len(list) != 1 || list[0].ID != sink.ID() {
				t.Fatalf("List = %v, %v", list, err)
			}
			if list[0].Index != 10 || list[0].Term != 3 || len(list[0].Configuration.Servers) != 1 {
				t.Fatalf("meta = %+v", list[0])
			}
			meta, got, err := readSnapshot(t, s, sink.ID())
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want || meta.Size != int64(len(tt.want)) {
				t.Fatalf("Open yields %q (meta size %d), want %q", got, meta.Size, tt.want)
			}
			// Twice: the stream is the same every time.
			if _, again, err := readSnapshot(t, s, sink.ID()); err != nil || !bytes.Equal(again, got) {
				t.Fatalf("second Open yields %q, %v", again, err)
			}
		})
	}
}

func TestSnapshotStoreAdoptErrors(t *testing.T) {
	root := t.TempDir()
	plain := openStore(t, filepath.Join(root, "plain"), 1, nil)
	sink := createSink(t, plain, 1)
	dir := makeDir(t, root, map[string]string{"f": "x"})
	if err := sink.AdoptDir(dir); !errors.Is(err, ErrNoExpand) {
		t.Fatalf("AdoptDir without Expand: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("refused directory was touched: %v", err)
	}
	sink.Cancel()

	s := openStore(t, filepath.Join(root, "store"), 1, expandDir)
	sink = createSink(t, s, 1)
	if err := sink.AdoptDir(filepath.Join(root, "missing")); err == nil {
		t.Fatal("adopting a missing directory succeeded")
	}
	file := filepath.Join(root, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	if err := sink.AdoptDir(file); err == nil {
		t.Fatal("adopting a file succeeded")
	}
	if err := sink.AdoptDir(dir); err != nil {
		t.Fatal(err)
	}
	other := makeDir(t, root, nil)
	if err := sink.AdoptDir(other); err == nil {
		t.Fatal("second AdoptDir succeeded")
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := sink.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	if err := sink.AdoptDir(other); !errors.Is(err, ErrClosed) {
		t.Fatalf("AdoptDir after Close: %v", err)
	}
}

func TestSnapshotStoreCancel(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, filepath.Join(root, "snapshots"), 2, expandDir)
	sink := createSink(t, s, 5)
	sink.Write([]byte("state"))
	dir := makeDir(t, root, map[string]string{"seg": "data"})
	if err := sink.AdoptDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := sink.Cancel(); err != nil {
		t.Fatal(err)
	}
	if err := sink.Cancel(); err != nil {
		t.Fatalf("second Cancel: %v", err)
	}
	if err := sink.Close(); err != nil {
		t.Fatalf("Close after Cancel: %v", err)
	}
	if names := dirNames(t, s.Dir()); len(names) != 0 {
		t.Fatalf("store holds %v after Cancel", names)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("adopted directory survived Cancel: %v", err)
	}
	if list, err := s.List(); err != nil || len(list) != 0 {
		t.Fatalf("List = %v, %v", list, err)
	}
}

// TestSnapshotStoreReaps keeps the newest Retain snapshots, removes the
// others with their adopted directories, and keeps one that is being read
// until its reader closes.
func TestSnapshotStoreReaps(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, filepath.Join(root, "snapshots"), 2, expandDir)
	var ids []string
	take := func(index uint64) {
		sink := createSink(t, s, index)
		fmt.Fprintf(sink, "state-%d", index)
		if err := sink.AdoptDir(makeDir(t, root, map[string]string{"seg": strings.Repeat("d", int(index))})); err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sink.ID())
	}
	for i := uint64(1); i <= 4; i++ {
		take(i)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range list {
		got = append(got, m.ID)
	}
	if want := []string{ids[3], ids[2]}; !slices.Equal(got, want) {
		t.Fatalf("List = %v, want %v (newest first)", got, want)
	}
	if names := dirNames(t, s.Dir()); !slices.Equal(names, []string{ids[2], ids[3]}) {
		t.Fatalf("store holds %v", names)
	}

	// A snapshot being read outlives its turn to be reaped.
	_, rc, err := s.Open(ids[2])
	if err != nil {
		t.Fatal(err)
	}
	take(5)
	take(6)
	if names := dirNames(t, s.Dir()); !slices.Contains(names, ids[2]) || len(names) != 3 {
		t.Fatalf("store holds %v, want the open snapshot kept", names)
	}
	b, err := io.ReadAll(rc)
	if err != nil || string(b) != "state-3ddd" {
		t.Fatalf("open snapshot yields %q, %v", b, err)
	}
	rc.Close()
	rc.Close()
	if names := dirNames(t, s.Dir()); !slices.Equal(names, ids[4:]) {
		t.Fatalf("store holds %v after the reader closed, want %v", names, ids[4:])
	}
}

// TestSnapshotStoreRecovery: an unfinished sink (a crash before Close)
// leaves a ".tmp" directory with its adopted data; reopening the store
// removes it. A snapshot with damaged metadata is ignored, one with a
// damaged state file cannot be opened, and one whose adopted data changed
// size fails while being read.
func TestSnapshotStoreRecovery(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "snapshots")
	s := openStore(t, dir, 3, expandDir)

	good := createSink(t, s, 1)
	good.Write([]byte("good"))
	good.AdoptDir(makeDir(t, root, map[string]string{"seg": "0123456789"}))
	if err := good.Close(); err != nil {
		t.Fatal(err)
	}
	damaged := createSink(t, s, 2)
	damaged.Write([]byte("damaged"))
	if err := damaged.Close(); err != nil {
		t.Fatal(err)
	}
	badMeta := createSink(t, s, 3)
	if err := badMeta.Close(); err != nil {
		t.Fatal(err)
	}
	unfinished := createSink(t, s, 4)
	t.Cleanup(func() { unfinished.(*snapshotSink).f.Close() })
	unfinished.Write([]byte("never closed"))
	if err := unfinished.AdoptDir(makeDir(t, root, map[string]string{"seg": "x"})); err != nil {
		t.Fatal(err)
	}

	os.WriteFile(filepath.Join(dir, badMeta.ID(), snapMetaFile), []byte("{"), 0o644)
	os.WriteFile(filepath.Join(dir, damaged.ID(), snapStateFile), []byte("DAMAGED"), 0o644)

	s = openStore(t, dir, 3, expandDir)
	if names := dirNames(t, dir); slices.Contains(names, unfinished.ID()+snapTmpSuffix) {
		t.Fatalf("unfinished snapshot not removed: %v", names)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list {
		ids = append(ids, m.ID)
	}
	// The damaged state was removed at open (TestSnapshotStoreRemovesDamagedAtOpen).
	if want := []string{good.ID()}; !slices.Equal(ids, want) {
		t.Fatalf("List = %v, want %v", ids, want)
	}
	if _, _, err := s.Open(damaged.ID()); err == nil {
		t.Fatal("Open of a snapshot removed for a damaged state file succeeded")
	}
	for _, id := range []string{"", "..", "../x", unfinished.ID() + snapTmpSuffix} {
		if _, _, err := s.Open(id); err == nil {
			t.Fatalf("Open(%q) succeeded", id)
		}
	}

	// A store without Expand cannot open an adopted snapshot.
	if _, _, err := openStore(t, dir, 3, nil).Open(good.ID()); !errors.Is(err, ErrNoExpand) {
		t.Fatalf("Open of an adopted snapshot without Expand: %v", err)
	}
	// The adopted data shrinks behind the store's back.
	os.WriteFile(filepath.Join(dir, good.ID(), snapDataDir, "seg"), []byte("01234"), 0o644)
	if _, _, err := readSnapshot(t, s, good.ID()); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("reading changed adopted data: %v", err)
	}
}

// TestSnapshotReaderCloseStopsExpand: closing a reader part way through
// stops the expansion goroutine (goleak checks it is gone).
func TestSnapshotReaderCloseStopsExpand(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, filepath.Join(root, "snapshots"), 1, expandDir)
	sink := createSink(t, s, 1)
	sink.AdoptDir(makeDir(t, root, map[string]string{"a": strings.Repeat("a", 1<<20), "b": strings.Repeat("b", 1<<20)}))
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	meta, rc, err := s.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	if meta.Size != 2<<20 {
		t.Fatalf("size %d", meta.Size)
	}
	if _, err := io.ReadFull(rc, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSizeWriter(t *testing.T) {
	data := strings.Repeat("x", 10000)
	tests := []struct {
		name string
		r    func() io.Reader
	}{
		{"section reader", func() io.Reader { return io.NewSectionReader(strings.NewReader(data), 100, 5000) }},
		{"plain reader", func() io.Reader { return io.LimitReader(strings.NewReader(data), 5000) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w sizeWriter
			w.Write([]byte("abc"))
			n, err := io.Copy(&w, tt.r())
			if err != nil || n != 5000 || w.n != 5003 {
				t.Fatalf("Copy = %d, %v; counted %d", n, err, w.n)
			}
		})
	}
}

// takeSnapshot writes a snapshot at index with the given state and, when
// files is not nil, an adopted directory of them; it returns its id.
func takeSnapshot(t *testing.T, s *SnapshotStore, index uint64, state string, files map[string]string) string {
	t.Helper()
	sink := createSink(t, s, index)
	if _, err := sink.Write([]byte(state)); err != nil {
		t.Fatal(err)
	}
	if files != nil {
		if err := sink.AdoptDir(makeDir(t, s.Dir(), files)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	return sink.ID()
}

// flipBit flips the lowest bit of byte at (negative: from the end) of path.
func flipBit(t *testing.T, path string, at int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if at < 0 {
		at += len(b)
	}
	b[at] ^= 0x01
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func listIDs(t *testing.T, s *SnapshotStore) []string {
	t.Helper()
	metas, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range metas {
		ids = append(ids, m.ID)
	}
	return ids
}

// A snapshot damaged at rest — a bit flipped in its metadata (even in a
// number that still parses) or in its state — is removed when the store
// opens: Raft restores the older one instead of a wrong one.
func TestSnapshotStoreRemovesDamagedAtOpen(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		at   func(b []byte) int
	}{
		// "index":11 becomes "index":10: valid JSON, wrong snapshot.
		{"meta index", snapMetaFile, func(b []byte) int { return bytes.Index(b, []byte(`"Index":11`)) + len(`"Index":11`) - 1 }},
		{"meta size", snapMetaFile, func(b []byte) int { return bytes.Index(b, []byte(`"state_size":`)) + len(`"state_size":`) }},
		{"state", snapStateFile, func(b []byte) int { return len(b) / 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "snaps")
			s := openStore(t, dir, 2, expandDir)
			older := takeSnapshot(t, s, 10, "state at 10", map[string]string{"a": "aaa"})
			newer := takeSnapshot(t, s, 11, "state at 11", map[string]string{"a": "aaaa"})
			path := filepath.Join(dir, newer, tc.file)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			at := tc.at(b)
			if at < 0 || at >= len(b) {
				t.Fatalf("nothing to flip in %s: %s", tc.file, b)
			}
			flipBit(t, path, at)
			s = openStore(t, dir, 2, expandDir)
			if ids := listIDs(t, s); !slices.Equal(ids, []string{older}) {
				t.Fatalf("after damaging %s of %s the store lists %v, want only %s", tc.file, newer, ids, older)
			}
			if slices.Contains(dirNames(t, dir), newer) {
				t.Fatalf("the damaged snapshot %s is still on disk", newer)
			}
			if _, got, err := readSnapshot(t, s, older); err != nil || string(got) != "state at 10aaa" {
				t.Fatalf("older snapshot: %q, %v", got, err)
			}
		})
	}
}

// A snapshot found damaged while it is read (its state, or its adopted
// data as the ExpandFunc reports with ErrDamaged) is set aside: reported
// once through OnDamage, never listed or opened again, and removed once
// its reader is gone.
func TestSnapshotStoreSetsAsideDamagedOnRead(t *testing.T) {
	damagedData := errors.New("segment failed its checksum")
	expand := func(dir string, w io.Writer) error {
		_, measuring := w.(*sizeWriter)
		if _, err := os.Stat(filepath.Join(dir, "bad")); err == nil && !measuring {
			return fmt.Errorf("%w: %w", ErrDamaged, damagedData)
		}
		return expandDir(dir, w)
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		flip  bool // flip a bit of state.bin after the store opened
	}{
		{"state", map[string]string{"a": "aaa"}, true},
		{"data", map[string]string{"bad": "x"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "snaps")
			var reports []error
			s, err := OpenSnapshotStore(dir, SnapshotStoreConfig{Retain: 2, Expand: expand, Logger: testLogger(),
				OnDamage: func(err error) { reports = append(reports, err) }})
			if err != nil {
				t.Fatal(err)
			}
			older := takeSnapshot(t, s, 10, "state at 10", map[string]string{"a": "aaa"})
			newer := takeSnapshot(t, s, 11, "state at 11", tc.files)
			if tc.flip {
				flipBit(t, filepath.Join(dir, newer, snapStateFile), 2)
			}
			_, _, err = readSnapshot(t, s, newer)
			if err == nil {
				t.Fatal("a damaged snapshot was read without an error")
			}
			if len(reports) != 1 || !errors.Is(reports[0], ErrDamaged) {
				t.Fatalf("reports %v, want one matching ErrDamaged", reports)
			}
			if ids := listIDs(t, s); !slices.Equal(ids, []string{older}) {
				t.Fatalf("the store lists %v, want only %s", ids, older)
			}
			if _, _, err := s.Open(newer); !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("open of a snapshot set aside: %v, want ErrBadSnapshot", err)
			}
			if slices.Contains(dirNames(t, dir), newer) {
				t.Fatalf("the damaged snapshot %s is still on disk after its reader closed", newer)
			}
			if len(reports) != 1 {
				t.Fatalf("damage reported %d times, want once", len(reports))
			}
		})
	}
}

// A snapshot written by an older version, whose metadata has no checksum,
// is still read.
func TestSnapshotStoreReadsMetaWithoutChecksum(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "snaps")
	s := openStore(t, dir, 2, expandDir)
	id := takeSnapshot(t, s, 10, "state", nil)
	path := filepath.Join(dir, id, snapMetaFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["meta_crc"]; !ok {
		t.Fatalf("meta.json has no checksum: %s", b)
	}
	delete(m, "meta_crc")
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, 2, expandDir)
	if _, got, err := readSnapshot(t, s, id); err != nil || string(got) != "state" {
		t.Fatalf("snapshot without a meta checksum: %q, %v", got, err)
	}
}

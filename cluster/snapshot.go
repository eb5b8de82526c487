package cluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// Files of a snapshot directory. DESIGN.md describes the layout.
const (
	snapMetaFile  = "meta.json"
	snapStateFile = "state.bin"
	snapDataDir   = "data"
	snapTmpSuffix = ".tmp"
	snapFormat    = 1
	// DefaultSnapshotRetain is how many snapshots a store keeps by default.
	DefaultSnapshotRetain = 2
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ExpandFunc writes the byte stream that an adopted directory stands for to
// w. It must be deterministic: for the same directory it writes the same
// bytes every time, because the store measures the stream once when the
// snapshot is closed and raft announces that size to followers before it
// streams the content. It should copy file content through an io.Seeker
// (io.SectionReader, as storage.Snapshot.WriteTo does): the store's
// measuring writer then takes the size from the seeker instead of reading
// the bytes, and measuring costs no I/O. Any other reader is read once to
// be counted.
type ExpandFunc func(dir string, w io.Writer) error

// DirSink is a snapshot sink that can adopt a directory instead of copying
// its bytes. The sinks of a SnapshotStore implement it; an FSM's Persist
// finds it with a type assertion on the raft.SnapshotSink it is given.
//
// Persist writes its state bytes with Write and may call AdoptDir once with
// a directory it made, typically the hard links of a storage.Snapshot. The
// snapshot's stream, as Open and a restoring FSM see it, is every byte
// written with Write, followed by the store's ExpandFunc applied to the
// adopted directory, whatever the order of the calls.
//
// AdoptDir renames path into the snapshot, so path must be on the snapshot
// store's file system. On success the store owns the directory: Cancel, a
// failed Close and reaping remove it, and the caller must not touch path
// again. On failure nothing moved and the caller still owns path.
// AdoptDir returns ErrNoExpand when the store has no ExpandFunc.
type DirSink interface {
	raft.SnapshotSink
	AdoptDir(path string) error
}

// SnapshotStoreConfig configures a SnapshotStore. The zero value of every
// field means its default.
type SnapshotStoreConfig struct {
	// Retain is how many snapshots to keep, newest first. Default
	// DefaultSnapshotRetain.
	Retain int
	// Expand turns an adopted directory back into bytes. Nil refuses
	// AdoptDir, and the store keeps plain byte snapshots only.
	Expand ExpandFunc
	// Logger receives the store's events. Nil discards them.
	Logger *slog.Logger
	// OnDamage is told when a snapshot is found damaged while it is read
	// (an error matching ErrDamaged); the store has set the snapshot aside
	// already. It must not block. Nil ignores it.
	OnDamage func(error)
}

// SnapshotStore is a raft.SnapshotStore on local disk in which a snapshot
// can hold a directory adopted by rename (see DirSink), so that taking a
// snapshot of a large partition log costs a few file-system operations, not
// a copy of the log. It keeps the newest Retain snapshots.
type SnapshotStore struct {
	dir    string
	retain int
	expand ExpandFunc
	logger *slog.Logger

	onDamage func(error)

	mu      sync.Mutex
	readers map[string]int // open readers per snapshot id; reaping skips them
	// condemned holds the snapshots found damaged while read: they are
	// never listed or opened again, and go once nobody reads them.
	condemned map[string]bool
}

var _ raft.SnapshotStore = (*SnapshotStore)(nil)

// snapshotMeta is meta.json.
type snapshotMeta struct {
	raft.SnapshotMeta        // Size is StateSize + DataSize
	Format            int    `json:"format"`
	StateSize         int64  `json:"state_size"`
	StateCRC          uint32 `json:"state_crc"` // CRC-32C of state.bin
	Adopted           bool   `json:"adopted"`
	DataSize          int64  `json:"data_size"` // bytes Expand writes for data/
	// MetaCRC is the CRC-32C of the metadata encoded with MetaCRC zero.
	// Zero (older versions) is not checked.
	MetaCRC uint32 `json:"meta_crc,omitempty"`
}

// metaChecksum returns the CRC-32C of m's encoding with MetaCRC zero.
func metaChecksum(m snapshotMeta) (uint32, error) {
	m.MetaCRC = 0
	b, err := json.Marshal(&m)
	if err != nil {
		return 0, err
	}
	return crc32.Checksum(b, crcTable), nil
}

// OpenSnapshotStore opens the store in dir, creating it if needed, and
// removes what unfinished sinks left behind (their directories end in
// ".tmp", adopted directories included).
func OpenSnapshotStore(dir string, cfg SnapshotStoreConfig) (*SnapshotStore, error) {
	if cfg.Retain < 0 {
		return nil, fmt.Errorf("cluster: snapshot store: Retain %d is negative", cfg.Retain)
	}
	if cfg.Retain == 0 {
		cfg.Retain = DefaultSnapshotRetain
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: snapshot store: %w", err)
	}
	s := &SnapshotStore{
		dir:       dir,
		retain:    cfg.Retain,
		expand:    cfg.Expand,
		logger:    cfg.Logger,
		onDamage:  cfg.OnDamage,
		readers:   make(map[string]int),
		condemned: make(map[string]bool),
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cluster: snapshot store: %w", err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), snapTmpSuffix) {
			s.logger.Info("removing unfinished snapshot", "name", e.Name())
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return nil, fmt.Errorf("cluster: snapshot store: removing unfinished snapshot: %w", err)
			}
		}
	}
	if err := s.removeDamaged(); err != nil {
		return nil, err
	}
	return s, nil
}

// removeDamaged removes every finished snapshot whose metadata or state
// fails its checks: Raft then restores an older one, or none, and replays
// its log from there (a group whose log no longer reaches back that far
// fails to open with ErrDamaged). The adopted data is not read: its
// batches are checked when a snapshot is streamed.
func (s *SnapshotStore) removeDamaged() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("cluster: snapshot store: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), snapTmpSuffix) {
			continue
		}
		m, err := s.readMeta(e.Name())
		if err == nil {
			err = s.checkState(m)
		}
		if err == nil || !errors.Is(err, ErrBadSnapshot) {
			continue // an I/O error is not damage: List skips it
		}
		s.logger.Error("removing a damaged snapshot", "name", e.Name(), "error", err)
		if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
			return fmt.Errorf("cluster: snapshot store: removing damaged snapshot: %w", err)
		}
	}
	return nil
}

// checkState reads m's state file and checks its size and checksum.
func (s *SnapshotStore) checkState(m *snapshotMeta) error {
	f, err := os.Open(filepath.Join(s.dir, m.ID, snapStateFile))
	if err != nil {
		return fmt.Errorf("cluster: snapshot %s: %w", m.ID, err)
	}
	defer f.Close()
	crc := crc32.New(crcTable)
	n, err := io.Copy(crc, f)
	if err != nil {
		return fmt.Errorf("cluster: snapshot %s: %w", m.ID, err)
	}
	if n != m.StateSize || crc.Sum32() != m.StateCRC {
		return fmt.Errorf("%w: %s: state file does not match its checksum", ErrBadSnapshot, m.ID)
	}
	return nil
}

// Dir returns the store's directory.
func (s *SnapshotStore) Dir() string { return s.dir }

// Create starts a snapshot and returns its sink, a DirSink. Only snapshot
// version 1 is supported; the deprecated Peers field of the metadata, which
// only version 0 snapshots use, is left empty, so trans is not used.
func (s *SnapshotStore) Create(version raft.SnapshotVersion, index, term uint64,
	configuration raft.Configuration, configurationIndex uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	if version != 1 {
		return nil, fmt.Errorf("cluster: unsupported snapshot version %d", version)
	}
	var name, tmp string
	for ms := time.Now().UnixMilli(); ; ms++ {
		name = fmt.Sprintf("%d-%d-%d", term, index, ms)
		if _, err := os.Lstat(filepath.Join(s.dir, name)); err == nil {
			continue
		}
		tmp = filepath.Join(s.dir, name+snapTmpSuffix)
		err := os.Mkdir(tmp, 0o755)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("cluster: create snapshot: %w", err)
		}
	}
	f, err := os.Create(filepath.Join(tmp, snapStateFile))
	if err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("cluster: create snapshot: %w", err)
	}
	s.logger.Debug("creating snapshot", "id", name, "index", index, "term", term)
	return &snapshotSink{
		store: s,
		tmp:   tmp,
		f:     f,
		w:     bufio.NewWriterSize(f, 64<<10),
		crc:   crc32.New(crcTable),
		meta: snapshotMeta{
			SnapshotMeta: raft.SnapshotMeta{
				Version:            version,
				ID:                 name,
				Index:              index,
				Term:               term,
				Configuration:      configuration,
				ConfigurationIndex: configurationIndex,
			},
			Format: snapFormat,
		},
	}, nil
}

// List returns the retained snapshots, newest first.
func (s *SnapshotStore) List() ([]*raft.SnapshotMeta, error) {
	s.mu.Lock()
	metas, err := s.finished()
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out := make([]*raft.SnapshotMeta, 0, min(len(metas), s.retain))
	for _, m := range metas[:min(len(metas), s.retain)] {
		out = append(out, &m.SnapshotMeta)
	}
	return out, nil
}

// finished returns every finished snapshot with readable metadata, newest
// first (by term, then index, then id, as raft's FileSnapshotStore).
// Called with s.mu held.
func (s *SnapshotStore) finished() ([]*snapshotMeta, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("cluster: list snapshots: %w", err)
	}
	var metas []*snapshotMeta
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), snapTmpSuffix) || s.condemned[e.Name()] {
			continue
		}
		m, err := s.readMeta(e.Name())
		if err != nil {
			s.logger.Warn("ignoring unreadable snapshot", "name", e.Name(), "error", err)
			continue
		}
		metas = append(metas, m)
	}
	slices.SortFunc(metas, func(a, b *snapshotMeta) int {
		switch {
		case a.Term != b.Term:
			return cmpDesc(a.Term, b.Term)
		case a.Index != b.Index:
			return cmpDesc(a.Index, b.Index)
		default:
			return strings.Compare(b.ID, a.ID)
		}
	})
	return metas, nil
}

func cmpDesc(a, b uint64) int {
	if a > b {
		return -1
	}
	return 1
}

func (s *SnapshotStore) readMeta(id string) (*snapshotMeta, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, id, snapMetaFile))
	if err != nil {
		return nil, err
	}
	var m snapshotMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: meta: %v", ErrBadSnapshot, id, err)
	}
	if m.Format != snapFormat || m.ID != id {
		return nil, fmt.Errorf("%w: %s: meta format %d, id %q", ErrBadSnapshot, id, m.Format, m.ID)
	}
	if m.StateSize < 0 || m.DataSize < 0 || m.Size != m.StateSize+m.DataSize {
		return nil, fmt.Errorf("%w: %s: sizes do not add up", ErrBadSnapshot, id)
	}
	if m.MetaCRC != 0 {
		if crc, err := metaChecksum(m); err != nil || crc != m.MetaCRC {
			return nil, fmt.Errorf("%w: %s: meta does not match its checksum", ErrBadSnapshot, id)
		}
	}
	return &m, nil
}

// condemn sets aside a snapshot found damaged while read: it is listed and
// opened no more, removed once its last reader is gone, and the damage is
// reported.
func (s *SnapshotStore) condemn(id string, cause error) {
	s.mu.Lock()
	first := !s.condemned[id]
	s.condemned[id] = true
	s.mu.Unlock()
	if !first {
		return
	}
	s.logger.Error("snapshot damaged; set aside", "id", id, "error", cause)
	if err := s.reap(); err != nil {
		s.logger.Warn("reaping snapshots", "error", err)
	}
	if s.onDamage != nil {
		s.onDamage(fmt.Errorf("%w: snapshot %s: %w", ErrDamaged, id, cause))
	}
}

// Open returns a snapshot's metadata and its stream: the bytes written to
// its sink, then, if it adopted a directory, the ExpandFunc's output for it.
// The state bytes are checked against their CRC first; the expanded part
// must have the size measured when the snapshot was closed, or the reader
// fails with ErrBadSnapshot. A snapshot being read is not reaped before its
// reader is closed.
func (s *SnapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	if id == "" || strings.ContainsAny(id, `/\`) || id == "." || id == ".." || strings.HasSuffix(id, snapTmpSuffix) {
		return nil, nil, fmt.Errorf("%w: bad id %q", ErrBadSnapshot, id)
	}
	s.mu.Lock()
	if s.condemned[id] {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("cluster: open snapshot %s: %w: set aside as damaged", id, ErrBadSnapshot)
	}
	m, err := s.readMeta(id)
	if err != nil {
		s.mu.Unlock()
		if errors.Is(err, ErrBadSnapshot) {
			s.condemn(id, err)
		}
		return nil, nil, fmt.Errorf("cluster: open snapshot %s: %w", id, err)
	}
	s.readers[id]++
	s.mu.Unlock()

	rc, err := s.openStream(m)
	if err != nil {
		s.release(id)
		if errors.Is(err, ErrBadSnapshot) {
			s.condemn(id, err)
		}
		return nil, nil, err
	}
	return &m.SnapshotMeta, rc, nil
}

func (s *SnapshotStore) openStream(m *snapshotMeta) (io.ReadCloser, error) {
	dir := filepath.Join(s.dir, m.ID)
	f, err := os.Open(filepath.Join(dir, snapStateFile))
	if err != nil {
		return nil, fmt.Errorf("cluster: open snapshot %s: %w", m.ID, err)
	}
	if err := s.checkState(m); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("cluster: open snapshot %s: %w", m.ID, err)
	}
	r := &snapshotReader{store: s, id: m.ID, state: f}
	if !m.Adopted {
		r.r = bufio.NewReaderSize(f, 64<<10)
		return r, nil
	}
	if s.expand == nil {
		f.Close()
		return nil, fmt.Errorf("cluster: open snapshot %s: %w", m.ID, ErrNoExpand)
	}
	pr, pw := io.Pipe()
	r.pipe = pr
	r.done = make(chan struct{})
	r.r = io.MultiReader(bufio.NewReaderSize(f, 64<<10), pr)
	go func() {
		defer close(r.done)
		cw := &countWriter{w: pw}
		err := s.expand(filepath.Join(dir, snapDataDir), cw)
		if errors.Is(err, ErrDamaged) {
			s.condemn(m.ID, err)
		}
		if err != nil {
			err = fmt.Errorf("cluster: snapshot %s: expand: %w", m.ID, err)
		} else if cw.n != m.DataSize {
			err = fmt.Errorf("%w: %s: expanded to %d bytes, %d when taken", ErrBadSnapshot, m.ID, cw.n, m.DataSize)
			s.condemn(m.ID, err)
		}
		pw.CloseWithError(err) // nil means io.EOF
	}()
	return r, nil
}

// release ends a reader of id, and reaps what its reading kept back.
func (s *SnapshotStore) release(id string) {
	s.mu.Lock()
	s.readers[id]--
	last := s.readers[id] == 0
	if last {
		delete(s.readers, id)
	}
	s.mu.Unlock()
	if last {
		if err := s.reap(); err != nil {
			s.logger.Warn("reaping snapshots", "error", err)
		}
	}
}

// reap removes the snapshots beyond the newest Retain that nobody reads.
func (s *SnapshotStore) reap() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	metas, err := s.finished()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range metas[min(len(metas), s.retain):] {
		if s.readers[m.ID] > 0 {
			s.logger.Debug("keeping old snapshot while it is read", "id", m.ID)
			continue
		}
		s.logger.Debug("reaping snapshot", "id", m.ID)
		if err := os.RemoveAll(filepath.Join(s.dir, m.ID)); err != nil {
			errs = append(errs, err)
		}
	}
	for id := range s.condemned {
		if s.readers[id] > 0 {
			continue
		}
		// The id stays condemned: Open refuses it by name.
		if err := os.RemoveAll(filepath.Join(s.dir, id)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// snapshotReader is what Open returns.
type snapshotReader struct {
	store *SnapshotStore
	id    string
	state *os.File
	r     io.Reader
	pipe  *io.PipeReader // nil for a plain snapshot
	done  chan struct{}  // closed when the Expand goroutine returned
	once  sync.Once
}

func (r *snapshotReader) Read(p []byte) (int, error) { return r.r.Read(p) }

// Close stops the expansion if it is still running, waits for it and closes
// the files.
func (r *snapshotReader) Close() error {
	var err error
	r.once.Do(func() {
		err = r.state.Close()
		if r.pipe != nil {
			r.pipe.Close() // a pending Write in Expand fails
			<-r.done
		}
		r.store.release(r.id)
	})
	return err
}

// countWriter counts what it forwards to w.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// sizeWriter counts the bytes written to it and keeps none. Its ReadFrom
// measures an io.Seeker by seeking to its end rather than reading it, which
// is what io.Copy calls for an io.SectionReader.
type sizeWriter struct{ n int64 }

func (w *sizeWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

func (w *sizeWriter) ReadFrom(r io.Reader) (int64, error) {
	if sk, ok := r.(io.Seeker); ok {
		if cur, err := sk.Seek(0, io.SeekCurrent); err == nil {
			if end, err := sk.Seek(0, io.SeekEnd); err == nil && end >= cur {
				w.n += end - cur
				return end - cur, nil
			}
		}
	}
	// Hide ReadFrom so that io.Copy does not call back here.
	return io.Copy(struct{ io.Writer }{w}, r)
}

// snapshotSink is the DirSink the store's Create returns. Like raft's own
// sinks it is not safe for concurrent use.
type snapshotSink struct {
	store   *SnapshotStore
	meta    snapshotMeta
	tmp     string // the snapshot's directory while in progress
	f       *os.File
	w       *bufio.Writer
	crc     hash.Hash32
	adopted string // parent directory the adopted dir came from, "" if none
	closed  bool
}

var _ DirSink = (*snapshotSink)(nil)

// ID returns the snapshot's id.
func (k *snapshotSink) ID() string { return k.meta.ID }

// Write appends to the snapshot's state bytes.
func (k *snapshotSink) Write(p []byte) (int, error) {
	if k.closed {
		return 0, fmt.Errorf("cluster: snapshot %s: write after close: %w", k.meta.ID, ErrClosed)
	}
	n, err := k.w.Write(p)
	k.crc.Write(p[:n])
	k.meta.StateSize += int64(n)
	return n, err
}

// AdoptDir moves the directory at path into the snapshot. See DirSink.
func (k *snapshotSink) AdoptDir(path string) error {
	switch {
	case k.closed:
		return fmt.Errorf("cluster: snapshot %s: adopt after close: %w", k.meta.ID, ErrClosed)
	case k.store.expand == nil:
		return ErrNoExpand
	case k.adopted != "":
		return fmt.Errorf("cluster: snapshot %s: a directory was adopted already", k.meta.ID)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("cluster: snapshot %s: adopt: %w", k.meta.ID, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("cluster: snapshot %s: adopt %s: not a directory", k.meta.ID, path)
	}
	if err := os.Rename(path, filepath.Join(k.tmp, snapDataDir)); err != nil {
		if errors.Is(err, syscall.EXDEV) {
			return fmt.Errorf("cluster: snapshot %s: adopt %s: it must be on the snapshot store's file system (%s): %w", k.meta.ID, path, k.store.dir, err)
		}
		return fmt.Errorf("cluster: snapshot %s: adopt: %w", k.meta.ID, err)
	}
	k.adopted = filepath.Dir(filepath.Clean(path))
	k.meta.Adopted = true
	return nil
}

// Cancel discards the snapshot, the adopted directory included.
func (k *snapshotSink) Cancel() error {
	if k.closed {
		return nil
	}
	k.closed = true
	k.f.Close()
	if err := os.RemoveAll(k.tmp); err != nil {
		return fmt.Errorf("cluster: cancel snapshot %s: %w", k.meta.ID, err)
	}
	return nil
}

// Close makes the snapshot durable and visible, then reaps old snapshots.
// In order: the state file is flushed and synced; every file and directory
// of the adopted tree is synced, the tree's expanded size measured and the
// directory it was adopted from synced; meta.json is written and synced; the snapshot directory is synced and
// renamed from its ".tmp" name (the commit point); the store directory is
// synced. On failure the snapshot is removed as by Cancel.
func (k *snapshotSink) Close() error {
	if k.closed {
		return nil
	}
	k.closed = true
	if err := k.finish(); err != nil {
		k.f.Close()
		os.RemoveAll(k.tmp)
		k.store.logger.Error("snapshot failed", "id", k.meta.ID, "error", err)
		return fmt.Errorf("cluster: close snapshot %s: %w", k.meta.ID, err)
	}
	k.store.logger.Debug("snapshot taken", "id", k.meta.ID, "index", k.meta.Index, "state_bytes", k.meta.StateSize, "data_bytes", k.meta.DataSize)
	if err := k.store.reap(); err != nil {
		k.store.logger.Warn("reaping snapshots", "error", err)
	}
	return nil
}

func (k *snapshotSink) finish() error {
	if err := k.w.Flush(); err != nil {
		return err
	}
	if err := k.f.Sync(); err != nil {
		return err
	}
	if err := k.f.Close(); err != nil {
		return err
	}
	k.meta.StateCRC = k.crc.Sum32()
	if k.adopted != "" {
		data := filepath.Join(k.tmp, snapDataDir)
		if err := syncTree(data); err != nil {
			return err
		}
		var sw sizeWriter
		if err := k.store.expand(data, &sw); err != nil {
			return fmt.Errorf("measuring adopted directory: %w", err)
		}
		k.meta.DataSize = sw.n
		// The adopted directory left its old parent: make that durable too,
		// so that a crash cannot bring it back there.
		if err := syncDir(k.adopted); err != nil {
			return err
		}
	}
	k.meta.Size = k.meta.StateSize + k.meta.DataSize
	crc, err := metaChecksum(k.meta)
	if err != nil {
		return err
	}
	k.meta.MetaCRC = crc
	b, err := json.Marshal(&k.meta)
	if err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(k.tmp, snapMetaFile), b); err != nil {
		return err
	}
	if err := syncDir(k.tmp); err != nil {
		return err
	}
	final := strings.TrimSuffix(k.tmp, snapTmpSuffix)
	if err := os.Rename(k.tmp, final); err != nil {
		return err
	}
	k.tmp = final // a failure below removes the renamed directory
	return syncDir(k.store.dir)
}

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncTree syncs every regular file and directory under root, root
// included. Files that are hard links to already synced data (a
// storage.Snapshot's segments) cost a system call each, not a write.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return syncDir(path)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	})
}

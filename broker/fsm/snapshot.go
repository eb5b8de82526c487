package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fabriq-io/fabriq/cluster"
	"github.com/fabriq-io/fabriq/storage"
)

// maxStateBytes bounds the state part of a snapshot stream.
const maxStateBytes = 1 << 30

// Snapshot captures the state and a hard-linked snapshot of the log. It
// runs on Raft's goroutine, between applies.
func (m *Machine) Snapshot() (raft.FSMSnapshot, error) {
	m.mu.RLock()
	if m.failed != nil {
		m.mu.RUnlock()
		// A snapshot would count the entry that failed as applied.
		return nil, fmt.Errorf("fsm: %w: %v", ErrHalted, m.failed)
	}
	st, err := msgpack.Marshal(&m.state)
	m.mu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("fsm: encode partition state: %w", err)
	}
	if err := os.MkdirAll(m.snapDir, 0o755); err != nil {
		return nil, fmt.Errorf("fsm: %w", err)
	}
	dir, err := os.MkdirTemp(m.snapDir, "log-")
	if err != nil {
		return nil, fmt.Errorf("fsm: %w", err)
	}
	if err := os.Remove(dir); err != nil { // Log.Snapshot makes it
		return nil, fmt.Errorf("fsm: %w", err)
	}
	snap, err := m.log.Snapshot(dir)
	if err != nil {
		return nil, err
	}
	return &snapshot{state: st, log: snap}, nil
}

// dirSink is the sink of a snapshot store that can take a directory of
// hard links instead of its bytes (cluster.DirSink).
type dirSink interface {
	AdoptDir(path string) error
}

// snapshot is a partition snapshot: the state bytes, length-prefixed,
// then the log's snapshot stream.
type snapshot struct {
	state   []byte
	log     *storage.Snapshot
	adopted bool
}

// Persist writes the state, then hands the log snapshot's directory to a
// store that adopts directories, or writes its stream.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(s.state)))
	if _, err := sink.Write(n[:]); err != nil {
		sink.Cancel()
		return err
	}
	if _, err := sink.Write(s.state); err != nil {
		sink.Cancel()
		return err
	}
	if ds, ok := sink.(dirSink); ok {
		if err := ds.AdoptDir(s.log.Dir()); err != nil {
			sink.Cancel()
			return err
		}
		s.adopted = true
	} else if _, err := s.log.WriteTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release removes the log snapshot unless a store adopted it.
func (s *snapshot) Release() {
	if !s.adopted {
		s.log.Remove()
	}
}

// ExpandLogSnapshot streams a log snapshot directory that a snapshot store
// adopted: the store's Expand function (cluster.ExpandFunc).
func ExpandLogSnapshot(dir string, w io.Writer) error {
	snap, err := storage.OpenSnapshot(dir)
	if err == nil {
		_, err = snap.WriteTo(w)
	}
	if errors.Is(err, storage.ErrCorrupt) || errors.Is(err, storage.ErrBadSnapshot) {
		// Damaged on disk (a batch, the manifest, a segment cut short):
		// the snapshot store sets it aside and the copy is renewed.
		return fmt.Errorf("%w: %w", cluster.ErrDamaged, err)
	}
	return err
}

// Restore replaces the state with a snapshot's. The log is rewritten only
// when it does not already hold the snapshot's messages (storage.Install).
func (m *Machine) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	m.mu.RLock()
	failed := m.failed
	m.mu.RUnlock()
	if failed != nil {
		return fmt.Errorf("fsm: %w: %v", ErrHalted, failed)
	}
	st, err := readState(rc)
	if err != nil {
		return err
	}
	if _, err := m.log.Install(rc); err != nil {
		return err
	}
	m.mu.Lock()
	m.state = st
	trim(m.log, st.Start)
	m.mu.Unlock()
	if m.applied != nil {
		m.applied(st.Next, false)
	}
	return nil
}

// readState reads the length-prefixed state at the head of a snapshot.
func readState(r io.Reader) (state, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return state{}, fmt.Errorf("fsm: snapshot state: %w", err)
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxStateBytes {
		return state{}, fmt.Errorf("fsm: snapshot state of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return state{}, fmt.Errorf("fsm: snapshot state: %w", err)
	}
	var st state
	if err := msgpack.Unmarshal(b, &st); err != nil {
		return state{}, fmt.Errorf("fsm: snapshot state: %w", err)
	}
	if st.Producers == nil {
		st.Producers = map[string]*producer{}
	}
	if st.Subs == nil {
		st.Subs = map[string]*Subscription{}
	}
	return st, nil
}

// CleanSnapshotDir removes log snapshots that no snapshot store adopted:
// what a crash between Snapshot and Persist leaves behind.
func CleanSnapshotDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fsm: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("fsm: %w", err)
		}
	}
	return nil
}

package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// stableFile is the name of a group's stable store in its directory.
const stableFile = "stable"

// A stable store file is two slots of stableSlotSize bytes; each write
// goes to the slot the newest valid one is not, so a torn write leaves
// the other. A slot is: magic, sequence number (uint64), payload length
// (uint32), payload, CRC-32C of all that.
const (
	stableSlotSize = 4096
	stableHeader   = 4 + 8 + 4
	stableMagic    = "FQST"
)

// raftStableKeys are the keys hashicorp/raft keeps in its StableStore.
var raftStableKeys = []string{"CurrentTerm", "LastVoteTerm", "LastVoteCand"}

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// stableStore is a group's raft.StableStore: its current term and last
// vote, in a file of its own whose space is allocated when it is made,
// then overwritten in place. hashicorp/raft panics when it cannot save its
// term, and raft-boltdb grows its file into space a full disk no longer
// has; writing this file never needs new space, so a full disk stops the
// group's log (Raft handles that) without killing the node.
//
// Every write is mirrored, best effort, to the values raft-boltdb keeps
// in raft.db, which is where older versions read them: mirrorAfter after
// it, on a timer (no goroutine waits for it), and before Close returns. Mirrored as part of each write, a term or a vote cost a bolt
// commit, two more syncs, before Raft could answer: after a restart of
// every node of a thousand partitions, that doubled the time until every
// one was led.
// A node that crashed may leave raft.db a moment behind: start it again
// on this version, and stop it, before moving it back to an older one.
type stableStore struct {
	mu     sync.Mutex
	f      *os.File
	seq    uint64
	vals   map[string][]byte // replaced, never changed, by Set
	mirror raft.StableStore
	logger *slog.Logger

	// due copies the values to raft.db when it fires; nil while no copy
	// is due (mu).
	due *time.Timer

	// mirrored are the values raft.db was last given (flushMu); nothing
	// is copied once closed.
	flushMu  sync.Mutex
	mirrored map[string][]byte
	closed   bool
	once     sync.Once
}

var _ raft.StableStore = (*stableStore)(nil)

// openStableStore opens dir's stable store, making it (with the values
// raft.db holds, from older versions) when there is none.
func openStableStore(dir string, mirror raft.StableStore, logger *slog.Logger) (*stableStore, error) {
	path := filepath.Join(dir, stableFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := createStableFile(dir, mirror); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	s := &stableStore{f: f, mirror: mirror, logger: logger, mirrored: map[string][]byte{}}
	if err := s.load(); err != nil {
		f.Close()
		return nil, fmt.Errorf("cluster: %s: %w", path, err)
	}
	for _, k := range raftStableKeys {
		if v, err := mirror.Get([]byte(k)); err == nil {
			s.mirrored[k] = v
		}
	}
	s.mu.Lock()
	s.mirrorLater() // raft.db may lack a value: an earlier copy failed
	s.mu.Unlock()
	return s, nil
}

// mirrorAfter is how long the mirroring waits after a write before it
// copies the values to raft.db. An election writes the term, then the
// vote (two keys), and each key copied is a bolt commit of its own with
// two syncs: copied at once, after a restart of every node of a thousand
// partitions, the copies were an eighth of each node's CPU while the
// groups elected, on cores the elections had to share. Copied later, the
// writes of a burst go in one pass, after it.
const mirrorAfter = 10 * time.Second

// mirrorLater arms the copy to raft.db, mirrorAfter from now, unless one
// is due already. s.mu is held.
func (s *stableStore) mirrorLater() {
	if s.due != nil {
		return
	}
	s.due = time.AfterFunc(mirrorAfter, func() {
		s.mu.Lock()
		s.due = nil
		s.mu.Unlock()
		s.flush()
	})
}

// flush gives raft.db the values it does not hold yet, best effort.
func (s *stableStore) flush() {
	s.mu.Lock()
	vals := s.vals
	s.mu.Unlock()
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if s.closed {
		return
	}
	for _, k := range raftStableKeys {
		v, ok := vals[k]
		if !ok || bytes.Equal(s.mirrored[k], v) {
			continue
		}
		if err := s.mirror.Set([]byte(k), v); err != nil {
			s.logger.Debug("raft.db did not take a copy of a stable value; the stable store has it", "key", k, "err", err)
			continue
		}
		s.mirrored[k] = v
	}
}

// createStableFile writes a new stable store holding the values mirror
// has, its two slots allocated, under a temporary name renamed into place.
func createStableFile(dir string, mirror raft.StableStore) error {
	vals := map[string][]byte{}
	for _, k := range raftStableKeys {
		if v, err := mirror.Get([]byte(k)); err == nil && len(v) > 0 {
			vals[k] = v
		}
	}
	slot, err := encodeStableSlot(1, vals)
	if err != nil {
		return err
	}
	buf := make([]byte, 2*stableSlotSize)
	copy(buf, slot)
	tmp := filepath.Join(dir, stableFile+".tmp")
	if err := writeFileSync(tmp, buf); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, stableFile)); err != nil {
		return err
	}
	return syncDir(dir)
}

// load reads the newest valid slot.
func (s *stableStore) load() error {
	buf := make([]byte, 2*stableSlotSize)
	if _, err := s.f.ReadAt(buf, 0); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	found := false
	for i := range 2 {
		seq, vals, ok := decodeStableSlot(buf[i*stableSlotSize : (i+1)*stableSlotSize])
		if ok && (!found || seq > s.seq) {
			s.seq, s.vals, found = seq, vals, true
		}
	}
	if !found {
		return errors.New("no valid slot: the stable store is damaged")
	}
	return nil
}

// encodeStableSlot encodes one slot; the values must fit in it.
func encodeStableSlot(seq uint64, vals map[string][]byte) ([]byte, error) {
	var payload []byte
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		payload = binary.AppendUvarint(payload, uint64(len(k)))
		payload = append(payload, k...)
		payload = binary.AppendUvarint(payload, uint64(len(vals[k])))
		payload = append(payload, vals[k]...)
	}
	if stableHeader+len(payload)+4 > stableSlotSize {
		return nil, fmt.Errorf("cluster: stable store values of %d bytes do not fit in %d", len(payload), stableSlotSize-stableHeader-4)
	}
	out := make([]byte, 0, stableSlotSize)
	out = append(out, stableMagic...)
	out = binary.BigEndian.AppendUint64(out, seq)
	out = binary.BigEndian.AppendUint32(out, uint32(len(payload)))
	out = append(out, payload...)
	out = binary.BigEndian.AppendUint32(out, crc32.Checksum(out, crc32c))
	return out, nil
}

// decodeStableSlot decodes a slot; ok is false for an empty, torn or
// damaged one.
func decodeStableSlot(b []byte) (seq uint64, vals map[string][]byte, ok bool) {
	if len(b) < stableHeader+4 || !bytes.Equal(b[:4], []byte(stableMagic)) {
		return 0, nil, false
	}
	seq = binary.BigEndian.Uint64(b[4:12])
	n := int(binary.BigEndian.Uint32(b[12:16]))
	if n > len(b)-stableHeader-4 {
		return 0, nil, false
	}
	end := stableHeader + n
	if crc32.Checksum(b[:end], crc32c) != binary.BigEndian.Uint32(b[end:end+4]) {
		return 0, nil, false
	}
	vals = map[string][]byte{}
	p := b[stableHeader:end]
	for len(p) > 0 {
		kl, k := binary.Uvarint(p)
		if k <= 0 || uint64(len(p)-k) < kl {
			return 0, nil, false
		}
		key := string(p[k : k+int(kl)])
		p = p[k+int(kl):]
		vl, k := binary.Uvarint(p)
		if k <= 0 || uint64(len(p)-k) < vl {
			return 0, nil, false
		}
		vals[key] = slices.Clone(p[k : k+int(vl)])
		p = p[k+int(vl):]
	}
	return seq, vals, true
}

// Set stores a value: the next slot is overwritten in place and synced.
func (s *stableStore) Set(key, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	vals := make(map[string][]byte, len(s.vals)+1)
	for k, v := range s.vals {
		vals[k] = v
	}
	vals[string(key)] = slices.Clone(val)
	slot, err := encodeStableSlot(s.seq+1, vals)
	if err != nil {
		return err
	}
	if _, err := s.f.WriteAt(slot, int64((s.seq+1)%2)*stableSlotSize); err != nil {
		return fmt.Errorf("cluster: write stable store: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("cluster: sync stable store: %w", err)
	}
	s.seq++
	s.vals = vals
	s.mirrorLater()
	return nil
}

// Get returns a value, or raft-boltdb's ErrKeyNotFound (hashicorp/raft
// tells a missing key by that error's text).
func (s *stableStore) Get(key []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vals[string(key)]
	if !ok {
		return nil, raftboltdb.ErrKeyNotFound
	}
	return slices.Clone(v), nil
}

// SetUint64 stores a number, encoded as raft-boltdb encodes it.
func (s *stableStore) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns a number.
func (s *stableStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("cluster: stable value %s has %d bytes, not 8", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// Close stops the mirroring, gives raft.db the last values, and closes
// the file. Close it before raft.db's store.
func (s *stableStore) Close() error {
	var err error
	s.once.Do(func() {
		s.mu.Lock()
		if s.due != nil {
			s.due.Stop()
			s.due = nil
		}
		s.mu.Unlock()
		s.flush() // the rest; a copy the timer runs now waits for it, then finds it closed
		s.flushMu.Lock()
		s.closed = true
		s.flushMu.Unlock()
		err = s.f.Close()
	})
	return err
}

package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/raft"
)

// A checked entry carries in raft.Log.Extensions, which nothing else in
// fabriq uses, the magic "FQ", a version byte and the CRC-32C of its index
// (uint64), term (uint64), type (one byte) and data, all big-endian.
const (
	entryCheckMagic   = "FQ"
	entryCheckVersion = 1
	entryCheckLen     = len(entryCheckMagic) + 1 + 4
)

// damagedEntry stands, while a group opens, for an entry that could not be
// read: an empty command whose Extensions no check matches, which the
// group's FSM wrapper never hands on (configFSM.Apply) and no store
// accepts.
var damagedEntry = []byte(entryCheckMagic + "\x00damaged")

// isDamagedEntry reports whether l stands for a damaged entry.
func isDamagedEntry(l *raft.Log) bool { return bytes.Equal(l.Extensions, damagedEntry) }

// entryChecksum is the CRC-32C of what a checked entry's check covers.
func entryChecksum(l *raft.Log) uint32 {
	var hdr [17]byte
	binary.BigEndian.PutUint64(hdr[0:], l.Index)
	binary.BigEndian.PutUint64(hdr[8:], l.Term)
	hdr[16] = byte(l.Type)
	return crc32.Update(crc32.Checksum(hdr[:], crcTable), crcTable, l.Data)
}

// entryCheck returns the Extensions of a checked entry.
func entryCheck(l *raft.Log) []byte {
	b := make([]byte, 0, entryCheckLen)
	b = append(b, entryCheckMagic...)
	b = append(b, entryCheckVersion)
	return binary.BigEndian.AppendUint32(b, entryChecksum(l))
}

// verifyEntry checks an entry against its check. An entry without one
// (written by an older version) passes.
func verifyEntry(l *raft.Log) error {
	if len(l.Extensions) == 0 {
		return nil
	}
	x := l.Extensions
	if len(x) != entryCheckLen || !bytes.HasPrefix(x, []byte(entryCheckMagic)) || x[len(entryCheckMagic)] != entryCheckVersion {
		return fmt.Errorf("entry %d: unknown check %x", l.Index, x)
	}
	if got, want := entryChecksum(l), binary.BigEndian.Uint32(x[len(entryCheckMagic)+1:]); got != want {
		return fmt.Errorf("entry %d: checksum %08x, recorded %08x", l.Index, got, want)
	}
	return nil
}

// checkedStore is a group's raft.LogStore: raft-boltdb's, with a checksum
// on every entry, so that a Raft log damaged on disk is never applied nor
// sent to a follower.
//
// Storing an entry attaches its check (entryCheck), or verifies the one
// it came with (a leader's entries reach followers with theirs), and
// refuses an entry that fails it. Reading one verifies it, and that it is
// the entry asked for; an entry between the first and last index that
// cannot be read (missing, undecodable, or a read that panics in bolt on a
// damaged page) is damage too.
//
// Damage is reported once, to the damaged callback (OnDamage; not while
// the group opens: the open fails instead), and how it is answered
// depends on when it is found. hashicorp/raft panics when it cannot read an
// entry it needs, in two places: while NewRaft replays the configuration
// from every entry after the newest snapshot, and when it applies an
// entry. While the group opens (opening), a damaged entry is answered as
// an empty command entry (damagedEntry), so that NewRaft finishes, and OpenGroup then
// shuts Raft down before it applies anything and fails with ErrDamaged:
// NewRaft reads every entry the group would apply at start. Once open, a
// read of a damaged entry fails with raft.ErrLogNotFound: a leader that
// needed it for a follower sends its newest snapshot instead (taken after
// the entry was applied, since every entry applied at start was checked);
// a follower checking it against its leader's log refuses the request. Entries stored while the group runs are read back by the
// same process within moments, before a disk could damage them at rest;
// the group stops serving on the report anyway (its node renews the copy).
//
// It also keeps the newest entry it stored, when that entry is small
// (lastEntryMax), and answers reads of it from memory: an idle leader's
// Raft reads its last entry for every follower every commit timeout, to
// build an append it then does not send (pipeline.go), and on a node of
// a thousand idle groups those reads, each a bolt transaction and a
// msgpack decode, were a sixth of its CPU. And it keeps, for a few
// seconds, the newest entries it stored, for Raft's reads right after
// (recentEntries).
type checkedStore struct {
	raft.LogStore
	damage *damageReport
	recent recentEntries

	lastMu sync.Mutex
	last   *raft.Log // a copy of the newest entry stored; nil: none kept
	// firstIdx is the first index, 0 when not known, and first a copy of
	// its entry, nil when not kept: a leader's Raft reads both every 10 s
	// for a metric (its oldest entry's age), from bolt, which with a
	// thousand groups was a twentieth of an idle node's CPU. firstGen
	// moves with every delete, before and after it: a read that started
	// before a delete keeps nothing it found.
	firstIdx uint64
	first    *raft.Log
	firstGen uint64

	// grown counts the bytes of entry data stored since the group last
	// asked for a snapshot of its own, and those read while the group
	// opens (Raft's scan of what follows its last snapshot). Once it
	// reaches grownLimit (0: never), grew calls onGrown if set.
	grown      atomic.Int64
	grownLimit int64
	onGrown    atomic.Pointer[func()]
}

// lastEntryMax is the largest entry data checkedStore keeps in memory:
// at most this much per group, and the entries an idle group ends on
// (a no-op, a configuration, a subscription's acknowledgements) fit.
const lastEntryMax = 4 << 10

var _ raft.LogStore = (*checkedStore)(nil)

// damageReport is where a group's stores report damage: the first is kept
// and told to notify (GroupConfig.OnDamage), except while the group opens,
// when the open fails instead.
type damageReport struct {
	opening atomic.Bool
	notify  func(error)

	mu    sync.Mutex
	first error
}

// report records the first damage and tells notify.
func (d *damageReport) report(err error) {
	d.mu.Lock()
	first := d.first == nil
	if first {
		d.first = err
	}
	d.mu.Unlock()
	if first && d.notify != nil && !d.opening.Load() {
		d.notify(err)
	}
}

// found returns the first damage reported, or nil.
func (d *damageReport) found() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.first
}

// guard turns a panic of the store (bolt on a damaged page) into damage.
func (s *checkedStore) guard(op string, err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("%w: raft log: %s: %v", ErrDamaged, op, p)
		s.damage.report(*err)
	}
}

// FirstIndex implements raft.LogStore.
func (s *checkedStore) FirstIndex() (i uint64, err error) {
	s.lastMu.Lock()
	i, gen := s.firstIdx, s.firstGen
	s.lastMu.Unlock()
	if i > 0 {
		return i, nil
	}
	defer s.guard("first index", &err)
	i, err = s.LogStore.FirstIndex()
	if err == nil && i > 0 {
		s.lastMu.Lock()
		if s.firstGen == gen {
			s.firstIdx = i
		}
		s.lastMu.Unlock()
	}
	return i, err
}

// LastIndex implements raft.LogStore.
func (s *checkedStore) LastIndex() (i uint64, err error) {
	defer s.guard("last index", &err)
	return s.LogStore.LastIndex()
}

// GetLog implements raft.LogStore.
func (s *checkedStore) GetLog(index uint64, l *raft.Log) error {
	err := s.getLog(index, l)
	if err == nil {
		return nil
	}
	opening := s.damage.opening.Load()
	if errors.Is(err, raft.ErrLogNotFound) && !opening {
		// Below the first index (compacted) or above the last, it is
		// not damage.
		first, ferr := s.FirstIndex()
		last, lerr := s.LastIndex()
		if ferr != nil || lerr != nil || index < first || index > last {
			return err
		}
	}
	if !errors.Is(err, ErrDamaged) {
		err = fmt.Errorf("%w: raft log: %w", ErrDamaged, err)
	}
	s.damage.report(err)
	if opening {
		*l = raft.Log{Index: index, Type: raft.LogCommand, Extensions: damagedEntry}
		return nil
	}
	// Raft's own sentinel, not err: a leader that cannot read an entry
	// for a follower sends its newest snapshot instead.
	return raft.ErrLogNotFound
}

func (s *checkedStore) getLog(index uint64, l *raft.Log) (err error) {
	if s.recent.get(index, l) || s.cached(index, l) {
		return nil
	}
	s.lastMu.Lock()
	gen := s.firstGen
	s.lastMu.Unlock()
	defer s.guard("read", &err)
	if err := s.LogStore.GetLog(index, l); err != nil {
		return err
	}
	if s.damage.opening.Load() {
		s.grew(len(l.Data))
	}
	if l.Index != index {
		return fmt.Errorf("entry %d read where entry %d is kept", l.Index, index)
	}
	if err := verifyEntry(l); err != nil {
		return err
	}
	s.lastMu.Lock()
	if s.firstGen == gen && s.firstIdx == index && len(l.Data) <= lastEntryMax {
		s.first = copyLog(l)
	}
	s.lastMu.Unlock()
	return nil
}

// StoreLog implements raft.LogStore.
func (s *checkedStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

// StoreLogs implements raft.LogStore: every entry is stored with its
// check; an entry whose check fails is refused, and so is the batch.
func (s *checkedStore) StoreLogs(logs []*raft.Log) (err error) {
	checked := make([]*raft.Log, len(logs))
	size := 0
	for i, l := range logs {
		size += len(l.Data)
		if len(l.Extensions) > 0 {
			if err := verifyEntry(l); err != nil {
				return fmt.Errorf("cluster: refusing to store a damaged entry: %w", err)
			}
			checked[i] = l
			continue
		}
		c := *l
		c.Extensions = entryCheck(l)
		checked[i] = &c
	}
	s.keepLast(nil)
	defer s.guard("write", &err)
	if err := s.LogStore.StoreLogs(checked); err != nil {
		return noSpace(err)
	}
	s.recent.add(checked)
	if n := len(checked); n > 0 && len(checked[n-1].Data) <= lastEntryMax {
		s.keepLast(checked[n-1])
	}
	s.grew(size)
	return nil
}

// grew counts n more bytes of entries since the last snapshot asked for,
// and calls onGrown once they reach grownLimit.
func (s *checkedStore) grew(n int) {
	if s.grownLimit <= 0 || s.grown.Add(int64(n)) < s.grownLimit {
		return
	}
	if f := s.onGrown.Load(); f != nil {
		(*f)()
	}
}

// keepLast keeps a copy of l as the newest entry stored; nil keeps none.
func (s *checkedStore) keepLast(l *raft.Log) {
	var c *raft.Log
	if l != nil {
		c = copyLog(l)
	}
	s.lastMu.Lock()
	s.last = c
	s.lastMu.Unlock()
}

// copyLog returns a copy of l with its own data.
func copyLog(l *raft.Log) *raft.Log {
	c := new(raft.Log)
	*c = *l
	c.Data = bytes.Clone(l.Data)
	c.Extensions = bytes.Clone(l.Extensions)
	return c
}

// cached fills l with entry index when it is the newest or the oldest
// entry kept, with its own copy of the data.
func (s *checkedStore) cached(index uint64, l *raft.Log) bool {
	s.lastMu.Lock()
	c := s.last
	if c == nil || c.Index != index {
		c = s.first
	}
	s.lastMu.Unlock()
	if c == nil || c.Index != index {
		return false
	}
	*l = *c
	l.Data = bytes.Clone(c.Data)
	l.Extensions = bytes.Clone(c.Extensions)
	return true
}

// noSpace makes an error that says the disk is full match syscall.ENOSPC.
// bbolt reports a file it could not grow as text ("file resize error:
// truncate ...: no space left on device"), and the broker tells a client
// to try again elsewhere only for errors that match ENOSPC: as text, a
// full disk under a leader reached consumers as an Unknown error, and
// they gave up.
func noSpace(err error) error {
	if err == nil || errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), syscall.ENOSPC.Error()) {
		return err
	}
	return fmt.Errorf("%w (%w)", err, syscall.ENOSPC)
}

// DeleteRange implements raft.LogStore.
func (s *checkedStore) DeleteRange(lo, hi uint64) (err error) {
	forget := func() {
		s.recent.forget(lo, hi)
		s.lastMu.Lock()
		if s.last != nil && s.last.Index >= lo && s.last.Index <= hi {
			s.last = nil
		}
		s.firstIdx, s.first = 0, nil
		s.firstGen++
		s.lastMu.Unlock()
	}
	forget()
	defer forget()
	defer s.guard("delete", &err)
	return s.LogStore.DeleteRange(lo, hi)
}

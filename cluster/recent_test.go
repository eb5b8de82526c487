package cluster

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

func entries(from, to uint64, size int) []*raft.Log {
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Data: make([]byte, size)})
	}
	return logs
}

// kept returns the indexes recentEntries answers among lo..hi.
func kept(r *recentEntries, lo, hi uint64) []uint64 {
	var out []uint64
	for i := lo; i <= hi; i++ {
		var l raft.Log
		if r.get(i, &l) {
			if l.Index != i {
				panic("answered another entry")
			}
			out = append(out, i)
		}
	}
	return out
}

func equal(a []uint64, from, to uint64) bool {
	if from > to {
		return len(a) == 0
	}
	if uint64(len(a)) != to-from+1 {
		return false
	}
	for i, v := range a {
		if v != from+uint64(i) {
			return false
		}
	}
	return true
}

// The newest entries stored are answered from memory, up to the byte
// bound, the oldest going first; a store that does not follow on starts
// over; deletes forget what they delete; an idle group forgets
// everything.
func TestRecentEntries(t *testing.T) {
	r := &recentEntries{}
	defer func() {
		r.mu.Lock()
		if r.idle != nil {
			r.idle.Stop()
		}
		r.mu.Unlock()
	}()
	r.add(entries(1, 10, 100))
	if got := kept(r, 0, 20); !equal(got, 1, 10) {
		t.Fatalf("kept %v, want 1..10", got)
	}
	// Past the bound the oldest go: 10 entries of a tenth of it.
	r.add(entries(11, 20, recentMaxBytes/10))
	if got := kept(r, 0, 30); !equal(got, 11, 20) {
		t.Fatalf("after entries of a tenth of the bound each, kept %v, want 11..20", got)
	}
	// One entry above the bound is still kept, alone.
	r.add(entries(21, 21, recentMaxBytes+1))
	if got := kept(r, 0, 30); !equal(got, 21, 21) {
		t.Fatalf("after an entry above the bound, kept %v, want 21", got)
	}
	// A store that does not follow on (after a snapshot install) starts
	// over.
	r.add(entries(100, 104, 10))
	if got := kept(r, 0, 200); !equal(got, 100, 104) {
		t.Fatalf("after a store at 100, kept %v, want 100..104", got)
	}
	// A compaction deletes the oldest, a conflict the newest.
	r.forget(1, 101)
	if got := kept(r, 0, 200); !equal(got, 102, 104) {
		t.Fatalf("after deleting up to 101, kept %v, want 102..104", got)
	}
	r.forget(104, 200)
	if got := kept(r, 0, 200); !equal(got, 102, 103) {
		t.Fatalf("after deleting from 104, kept %v, want 102..103", got)
	}
	r.add(entries(104, 110, 10))
	r.forget(105, 106) // never asked by Raft: everything goes
	if got := kept(r, 0, 200); len(got) != 0 {
		t.Fatalf("after deleting in the middle, kept %v, want nothing", got)
	}
	r.add(entries(1, 5, 10))
	if r.bytes != 50 {
		t.Fatalf("%d bytes counted for 5 entries of 10", r.bytes)
	}
	// Idle: the first check finds a store since the last one, the
	// second forgets.
	r.idleCheck()
	if got := kept(r, 0, 10); !equal(got, 1, 5) {
		t.Fatalf("after a check that followed a store, kept %v", got)
	}
	r.idleCheck()
	if got := kept(r, 0, 10); len(got) != 0 || r.bytes != 0 {
		t.Fatalf("an idle group kept %v (%d bytes)", got, r.bytes)
	}
}

// A group's store answers the entries it just stored from memory, large
// or small, checked as stored, and not those a delete removed.
func TestCheckedStoreReadsRecentEntriesFromMemory(t *testing.T) {
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), raftDBFile)})
	if err != nil {
		t.Fatal(err)
	}
	s := &checkedStore{LogStore: bolt, damage: &damageReport{}}
	defer func() {
		s.recent.idleCheck()
		s.recent.idleCheck()
	}()
	big := bytes.Repeat([]byte{'b'}, 1<<20)
	if err := s.StoreLogs([]*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: big},
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("two")},
		{Index: 3, Term: 1, Type: raft.LogCommand, Data: []byte("three")},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(3, 3); err != nil {
		t.Fatal(err)
	}
	if err := bolt.Close(); err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]byte{big, []byte("two")} {
		var l raft.Log
		if err := s.getLog(uint64(i+1), &l); err != nil || !bytes.Equal(l.Data, want) || verifyEntry(&l) != nil {
			t.Fatalf("entry %d with the file closed: %v, %d bytes, check %v", i+1, err, len(l.Data), verifyEntry(&l))
		}
	}
	var l raft.Log
	if err := s.getLog(3, &l); err == nil {
		t.Fatal("a deleted entry was read from memory")
	}
}

package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// flipInRaftDB flips one bit in every copy of needle that dir's raft.db
// holds (bolt writes pages anew, so stale copies may sit in free pages),
// as a disk that damaged the file at rest would, and reports how many.
func flipInRaftDB(t *testing.T, dir, needle string) int {
	t.Helper()
	path := filepath.Join(dir, raftDBFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte(needle))
		if j < 0 {
			break
		}
		b[i+j+len(needle)-1] ^= 0x01
		i += j + len(needle)
		n++
	}
	if n == 0 {
		t.Fatalf("%q not found in %s", needle, path)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// A Raft log damaged on disk is never applied: a member whose raft.db
// holds an entry it would replay with a flipped bit refuses to open with
// ErrDamaged, and its FSM never sees the damaged entry. Without entry
// checksums it opened and applied "payload-013" as "payload-012".
func TestDamagedRaftLogRefusedAtOpen(t *testing.T) {
	nodes := newTestNodes(t, 1)
	n := nodes[0]
	fsm := newTestFSM(filepath.Join(n.dir, "g-stage"), true)
	cfg := GroupConfig{ID: "g", NodeID: n.id, Dir: filepath.Join(n.dir, "g"), FSM: fsm, Mux: n.mux, Expand: expandDir, Logger: testLogger()}
	fastTimings(&cfg)
	g, err := OpenGroup(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gs := []*testGroup{{Group: g, node: n, fsm: fsm}}
	if err := g.Bootstrap(ctxTimeout(t, 5e9), []Server{{ID: n.id, Address: n.addr(), Voter: true}}); err != nil {
		t.Fatal(err)
	}
	want := cmds("payload", 20)
	applyAll(t, gs, want...)
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("flipped a bit in %d copies of the entry in raft.db", flipInRaftDB(t, cfg.Dir, "payload-013"))

	cfg.FSM = newTestFSM(filepath.Join(n.dir, "g-stage"), true)
	g, err = OpenGroup(cfg)
	if err == nil {
		// Let it apply what it replays, to show what it would serve.
		g.Bootstrap(ctxTimeout(t, 5e9), nil)
		waitLeader(t, []*testGroup{{Group: g, node: n, fsm: cfg.FSM.(*testFSM)}})
		g.Barrier(ctxTimeout(t, 5e9))
		got := cfg.FSM.(*testFSM).entries()
		g.Close()
		t.Fatalf("a group whose raft.db holds a damaged entry opened; its FSM applied %q", got)
	}
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("open with a damaged entry: %v, want ErrDamaged", err)
	}
	if got := cfg.FSM.(*testFSM).entries(); len(got) > 0 && !slices.Equal(got, want[:len(got)]) {
		t.Fatalf("the FSM applied %q while the group failed to open", got)
	}
	t.Logf("open refused: %v", err)
}

// A leader whose raft.db holds a damaged entry older than its newest
// snapshot (one it no longer replays, but still sends to a follower that
// lags) never sends it: the read fails its check, the group reports the
// damage once (OnDamage), and the follower catches up from the snapshot
// instead, holding exactly what was applied. Without entry checksums the
// new follower applied the damaged entry.
func TestDamagedEntryNeverSentToFollower(t *testing.T) {
	nodes := newTestNodes(t, 2)
	damage := make(chan error, 4)
	onDamage := func(c *GroupConfig) {
		c.OnDamage = func(err error) { damage <- err }
	}
	n := nodes[0]
	fsm := newTestFSM(filepath.Join(n.dir, "g-stage"), true)
	cfg := GroupConfig{ID: "g", NodeID: n.id, Dir: filepath.Join(n.dir, "g"), FSM: fsm, Mux: n.mux, Expand: expandDir, Logger: testLogger()}
	fastTimings(&cfg)
	onDamage(&cfg)
	g, err := OpenGroup(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bootstrap(ctxTimeout(t, 5e9), []Server{{ID: n.id, Address: n.addr(), Voter: true}}); err != nil {
		t.Fatal(err)
	}
	want := cmds("payload", 20)
	applyAll(t, []*testGroup{{Group: g, node: n, fsm: fsm}}, want...)
	if err := g.Snapshot(ctxTimeout(t, 5e9)); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	flipInRaftDB(t, cfg.Dir, "payload-013")

	// Reopened: the damaged entry is behind the snapshot, so it opens.
	leader := openTestGroup(t, n, "g", newTestFSM(filepath.Join(n.dir, "g-stage"), true), onDamage)
	waitLeader(t, []*testGroup{leader})
	follower := openTestGroup(t, nodes[1], "g", newTestFSM(filepath.Join(nodes[1].dir, "g-stage"), true), onDamage)
	if err := leader.AddVoter(ctxTimeout(t, 10e9), nodes[1].id, nodes[1].addr()); err != nil {
		t.Fatal(err)
	}
	more := cmds("after", 5)
	applyAll(t, []*testGroup{leader}, more...)
	waitEntries(t, []*testGroup{leader, follower}, append(slices.Clone(want), more...))
	select {
	case err := <-damage:
		if !errors.Is(err, ErrDamaged) {
			t.Fatalf("OnDamage got %v, want ErrDamaged", err)
		}
		t.Logf("reported: %v", err)
	default:
		t.Fatal("the leader read a damaged entry and did not report it")
	}
	if len(damage) > 0 {
		t.Fatalf("damage reported %d more times, want once", len(damage))
	}
}

// The entry check covers index, term, type and data; an entry without one
// (an older version's) passes.
func TestEntryCheck(t *testing.T) {
	base := raft.Log{Index: 7, Term: 3, Type: raft.LogCommand, Data: []byte("hello")}
	checked := base
	checked.Extensions = entryCheck(&base)
	if err := verifyEntry(&checked); err != nil {
		t.Fatal(err)
	}
	if err := verifyEntry(&base); err != nil {
		t.Fatalf("an entry without a check: %v", err)
	}
	for name, mod := range map[string]func(*raft.Log){
		"index": func(l *raft.Log) { l.Index++ },
		"term":  func(l *raft.Log) { l.Term++ },
		"type":  func(l *raft.Log) { l.Type = raft.LogNoop },
		"data":  func(l *raft.Log) { l.Data = []byte("hellp") },
		"check": func(l *raft.Log) { l.Extensions = append([]byte(nil), l.Extensions[:entryCheckLen-1]...) },
		"mark":  func(l *raft.Log) { l.Extensions = damagedEntry },
	} {
		t.Run(name, func(t *testing.T) {
			l := checked
			l.Data = slices.Clone(checked.Data)
			mod(&l)
			if err := verifyEntry(&l); err == nil {
				t.Fatalf("changed %s: %s passes", name, fmt.Sprintf("%+v", l))
			}
		})
	}
}

// fullLogStore fails every write as bbolt does when it cannot grow its
// file: the cause as text.
type fullLogStore struct{ raft.LogStore }

func (fullLogStore) StoreLogs([]*raft.Log) error {
	return fmt.Errorf("file resize error: %s", &os.PathError{Op: "truncate", Path: "raft.db", Err: syscall.ENOSPC})
}

// A write the disk had no room for matches ENOSPC, though bbolt reports
// it as text: the broker tells clients to try again only for that.
func TestStoreLogsOnAFullDiskMatchesENOSPC(t *testing.T) {
	s := &checkedStore{LogStore: fullLogStore{}, damage: &damageReport{}}
	err := s.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("x")}})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("StoreLogs on a full disk: %v, does not match ENOSPC", err)
	}
	if other := errors.New("file resize error: truncate: input/output error"); noSpace(other) != other {
		t.Fatal("an error that is not a full disk was changed")
	}
}

// The newest entry stored, when small, is read back from memory once the
// group is idle and its recent entries forgotten: with the bolt file
// closed it still reads, the entries before it and a large newest entry
// do not, and an entry deleted (a follower's conflicting tail) is not
// read from memory either.
func TestNewestSmallEntryReadFromMemory(t *testing.T) {
	// idle forgets the recent entries, as recentIdle without a store
	// does.
	idle := func(s *checkedStore) {
		s.recent.idleCheck()
		s.recent.idleCheck()
	}
	for _, tc := range []struct {
		name   string
		size   int
		delete bool
		kept   bool
	}{
		{"small", 100, false, true},
		{"at the limit", lastEntryMax, false, true},
		{"large", lastEntryMax + 1, false, false},
		{"deleted", 100, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), raftDBFile)})
			if err != nil {
				t.Fatal(err)
			}
			s := &checkedStore{LogStore: bolt, damage: &damageReport{}}
			data := bytes.Repeat([]byte{'d'}, tc.size)
			if err := s.StoreLogs([]*raft.Log{
				{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("first")},
				{Index: 2, Term: 1, Type: raft.LogCommand, Data: data},
			}); err != nil {
				t.Fatal(err)
			}
			if tc.delete {
				if err := s.DeleteRange(2, 2); err != nil {
					t.Fatal(err)
				}
			}
			idle(s)
			if err := bolt.Close(); err != nil {
				t.Fatal(err)
			}
			var l raft.Log
			err = s.getLog(2, &l)
			if kept := err == nil; kept != tc.kept {
				t.Fatalf("entry 2 read with the file closed: %v, want kept %v", err, tc.kept)
			}
			if tc.kept {
				if l.Index != 2 || l.Term != 1 || !bytes.Equal(l.Data, data) || verifyEntry(&l) != nil {
					t.Fatalf("entry 2 from memory: index %d term %d, %d bytes, check %v", l.Index, l.Term, len(l.Data), verifyEntry(&l))
				}
				l.Data[0] = 'x' // the reader's own copy
				var again raft.Log
				if err := s.getLog(2, &again); err != nil || again.Data[0] != 'd' {
					t.Fatalf("a reader's change reached the kept entry: %v", err)
				}
			}
			if err := s.getLog(1, &l); err == nil {
				t.Fatal("entry 1 read with the file closed")
			}
		})
	}
}

// The first index and its entry, which a leader's Raft reads every few
// seconds, come from memory once read, and follow the log's compactions:
// after a delete from the front, neither names an entry the log no longer
// holds.
func TestOldestEntryFollowsCompaction(t *testing.T) {
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), raftDBFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	s := &checkedStore{LogStore: bolt, damage: &damageReport{}}
	store := func(from, to uint64) {
		t.Helper()
		var ls []*raft.Log
		for i := from; i <= to; i++ {
			ls = append(ls, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: fmt.Appendf(nil, "e%d", i)})
		}
		if err := s.StoreLogs(ls); err != nil {
			t.Fatal(err)
		}
	}
	oldest := func(want uint64) {
		t.Helper()
		first, err := s.FirstIndex()
		if err != nil || first != want {
			t.Fatalf("first index %d (%v), want %d", first, err, want)
		}
		if want == 0 {
			return
		}
		var l raft.Log
		if err := s.GetLog(first, &l); err != nil || l.Index != want || string(l.Data) != fmt.Sprintf("e%d", want) {
			t.Fatalf("oldest entry: index %d %q (%v), want %d", l.Index, l.Data, err, want)
		}
	}
	store(1, 5)
	oldest(1)
	oldest(1) // from memory
	if err := s.DeleteRange(1, 3); err != nil {
		t.Fatal(err)
	}
	oldest(4)
	var l raft.Log
	if err := s.GetLog(1, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("entry 1 after its compaction: %v, want not found", err)
	}
	if err := s.DeleteRange(4, 5); err != nil {
		t.Fatal(err)
	}
	oldest(0)
	store(6, 7)
	oldest(6)
}

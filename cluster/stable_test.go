package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/fabriq-io/fabriq/tests/tmpfs"
)

func openTestStable(t *testing.T, dir string) (*stableStore, *raftboltdb.BoltStore) {
	t.Helper()
	bolt, err := raftboltdb.NewBoltStore(filepath.Join(dir, raftDBFile))
	if err != nil {
		t.Fatal(err)
	}
	s, err := openStableStore(dir, bolt, testLogger())
	if err != nil {
		bolt.Close()
		t.Fatal(err)
	}
	return s, bolt
}

// The stable store keeps what hashicorp/raft stores across reopenings,
// answers a missing key as raft-boltdb does, takes the values of raft.db
// when it is made (a node upgraded from a version without it) and mirrors
// every write there.
func TestStableStore(t *testing.T) {
	dir := t.TempDir()
	bolt, err := raftboltdb.NewBoltStore(filepath.Join(dir, raftDBFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := bolt.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := bolt.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatal(err)
	}
	bolt.Close()

	s, bolt := openTestStable(t, dir)
	if term, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term != 7 {
		t.Fatalf("the term raft.db held: %d, %v", term, err)
	}
	if _, err := s.Get([]byte("LastVoteTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("a missing key: %v, want raft-boltdb's \"not found\"", err)
	}
	for term := uint64(8); term < 12; term++ {
		if err := s.SetUint64([]byte("CurrentTerm"), term); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("n3")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*mirrorAfter, "raft.db's copy of the term", func() bool {
		term, err := bolt.GetUint64([]byte("CurrentTerm"))
		return err == nil && term == 11
	})
	// What Close leaves in raft.db is the last of each value.
	if err := s.SetUint64([]byte("CurrentTerm"), 12); err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("n1")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	term, terr := bolt.GetUint64([]byte("CurrentTerm"))
	cand, cerr := bolt.Get([]byte("LastVoteCand"))
	if terr != nil || cerr != nil || term != 12 || string(cand) != "n1" {
		t.Fatalf("raft.db after Close: term %d (%v), candidate %q (%v); want 12, n1", term, terr, cand, cerr)
	}
	bolt.Close()
	if fi, err := os.Stat(filepath.Join(dir, stableFile)); err != nil || fi.Size() != 2*stableSlotSize {
		t.Fatalf("the stable file: %v, %v; want %d bytes", fi, err, 2*stableSlotSize)
	}

	s, bolt = openTestStable(t, dir)
	defer bolt.Close()
	defer s.Close()
	term, err = s.GetUint64([]byte("CurrentTerm"))
	cand, _ = s.Get([]byte("LastVoteCand"))
	if err != nil || term != 12 || string(cand) != "n1" {
		t.Fatalf("after reopening: term %d (%v), candidate %q", term, err, cand)
	}
}

// A write torn in the middle of a slot leaves the other slot, which holds
// the value before it.
func TestStableStoreTornWrite(t *testing.T) {
	dir := t.TempDir()
	s, bolt := openTestStable(t, dir)
	for term := uint64(1); term <= 5; term++ {
		if err := s.SetUint64([]byte("CurrentTerm"), term); err != nil {
			t.Fatal(err)
		}
	}
	newest := int64((s.seq % 2) * stableSlotSize)
	s.Close()
	bolt.Close()
	f, err := os.OpenFile(filepath.Join(dir, stableFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, 10), newest+14); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s, bolt = openTestStable(t, dir)
	defer bolt.Close()
	defer s.Close()
	if term, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term != 4 {
		t.Fatalf("after a torn write of term 5: %d, %v; want 4", term, err)
	}
}

// On a full disk the stable store still takes every write: it overwrites
// the blocks it was given when it was made.
func TestStableStoreOnFullDisk(t *testing.T) {
	dir := tmpfs.New(t, 4<<20)
	s, bolt := openTestStable(t, dir)
	tmpfs.Fill(t, dir, 0)
	if err := os.WriteFile(filepath.Join(dir, "more"), []byte("x"), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a new file on the full disk: %v, want ENOSPC", err)
	}
	for term := uint64(1); term <= 100; term++ {
		if err := s.SetUint64([]byte("CurrentTerm"), term); err != nil {
			t.Fatalf("term %d on a full disk: %v", term, err)
		}
		if err := s.Set([]byte("LastVoteCand"), []byte(fmt.Sprint("n", term))); err != nil {
			t.Fatalf("vote %d on a full disk: %v", term, err)
		}
	}
	s.Close()
	bolt.Close()
	s, bolt = openTestStable(t, dir)
	defer bolt.Close()
	defer s.Close()
	if term, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term != 100 {
		t.Fatalf("after reopening: %d, %v", term, err)
	}
}

// A member whose disk is full goes through new terms without dying:
// hashicorp/raft panics when it cannot save its term, and raft.db must
// grow to save it, the stable store need not. The others go on committing
// without the full member's log, and it catches up once space is freed.
func TestGroupSurvivesFullDisk(t *testing.T) {
	nodes := newTestNodes(t, 3)
	nodes[0].dir = filepath.Join(tmpfs.New(t, 16<<20), "node-0")
	gs := startGroup(t, nodes, "full", nil)
	applyAll(t, gs, cmds("a", 5)...)
	waitEntries(t, gs, cmds("a", 5))
	if leader := waitLeader(t, gs); leader == gs[0] {
		if err := leader.TransferLeadership(ctxTimeout(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	leader := waitLeader(t, gs)
	filler := tmpfs.Fill(t, nodes[0].dir, 0)
	if _, err := raftboltdb.NewBoltStore(filepath.Join(nodes[0].dir, "probe.db")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a new bolt file on the full disk: %v, want ENOSPC", err)
	}

	// New terms: the leader hands its leadership to the other member with
	// space, twice, and every member, the full one too, stores each new
	// term.
	for range 2 {
		was := gs[0].Term()
		to := gs[1]
		if leader == gs[1] {
			to = gs[2]
		}
		if err := leader.TransferLeadershipTo(ctxTimeout(t, 5*time.Second), to.node.id, to.node.addr()); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "the member on the full disk to take a new term", func() bool { return gs[0].Term() > was })
		leader = waitLeader(t, gs[1:])
	}
	applyAll(t, gs[1:], cmds("b", 5)...)
	want := append(cmds("a", 5), cmds("b", 5)...)
	waitEntries(t, gs[1:], want)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	applyAll(t, gs, cmds("c", 5)...)
	waitEntries(t, gs, append(want, cmds("c", 5)...))
}

// gatedStable is a raft.StableStore whose writes wait for the gate: it
// holds the mirroring of a stableStore in the middle of a copy.
type gatedStable struct {
	raft.StableStore
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedStable) Set(k, v []byte) error {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.gate
	return g.StableStore.Set(k, v)
}

// Close gives raft.db the values the mirroring had not copied yet: a
// downgraded node that was stopped reads its last term and vote.
func TestStableStoreCloseMirrorsTheRest(t *testing.T) {
	dir := t.TempDir()
	bolt, err := raftboltdb.NewBoltStore(filepath.Join(dir, raftDBFile))
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	gated := &gatedStable{StableStore: bolt, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	s, err := openStableStore(dir, gated, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 5); err != nil {
		t.Fatal(err)
	}
	<-gated.entered // the copy of term 5 is under way, held
	if err := s.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	close(gated.gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	term, terr := bolt.GetUint64([]byte("CurrentTerm"))
	cand, cerr := bolt.Get([]byte("LastVoteCand"))
	if terr != nil || cerr != nil || term != 5 || string(cand) != "n2" {
		t.Fatalf("raft.db after Close: term %d (%v), candidate %q (%v); want 5, n2", term, terr, cand, cerr)
	}
}

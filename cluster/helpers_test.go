package cluster

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLogger logs to stderr at debug level when FABRIQ_TEST_LOG is set, and
// discards otherwise.
func testLogger() *slog.Logger {
	if os.Getenv("FABRIQ_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// eventually waits up to d for cond, checking it every few milliseconds.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// testFSM is a tiny state machine: it appends each entry's data to a list,
// once: an entry it holds already is not appended again, so that the tests
// can retry an apply whose outcome is unknown. An entry "fail" is refused
// with errRefused. Its snapshot stream is
//
//	"TFSM" u32 count, then count × (u32 length, bytes)
//
// where the header is written to the sink and the entries either follow it
// (plain) or are written to a file in a directory that the sink adopts
// (adopt = true). Restore reads the stream the same way in both cases.
type testFSM struct {
	stage string // where snapshots stage their directories; same file system as the store
	adopt bool

	mu       sync.Mutex
	cmds     []string
	seen     map[string]bool
	restores int
	seq      atomic.Int64
}

var errRefused = errors.New("test fsm: refused")

func newTestFSM(stage string, adopt bool) *testFSM {
	return &testFSM{stage: stage, adopt: adopt}
}

func (f *testFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if string(l.Data) == "fail" {
		return errRefused
	}
	if f.seen == nil {
		f.seen = make(map[string]bool)
	}
	if !f.seen[string(l.Data)] {
		f.seen[string(l.Data)] = true
		f.cmds = append(f.cmds, string(l.Data))
	}
	return len(f.cmds)
}

func (f *testFSM) entries() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.cmds)
}

func (f *testFSM) restoreCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restores
}

func encodeEntries(cmds []string) []byte {
	var b []byte
	for _, c := range cmds {
		b = binary.BigEndian.AppendUint32(b, uint32(len(c)))
		b = append(b, c...)
	}
	return b
}

// Snapshot runs on the FSM goroutine, so the entries it captures are those
// at the snapshot's index; with adopt it writes them to a fresh directory
// at once, as the broker's FSM takes a storage.Snapshot of its log.
func (f *testFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	cmds := slices.Clone(f.cmds)
	f.mu.Unlock()
	s := &testSnapshot{n: len(cmds)}
	if !f.adopt {
		s.body = encodeEntries(cmds)
		return s, nil
	}
	s.dir = filepath.Join(f.stage, fmt.Sprintf("snap-%d", f.seq.Add(1)))
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(s.dir, "entries"), encodeEntries(cmds), 0o644); err != nil {
		return nil, err
	}
	return s, nil
}

func (f *testFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	r := bufio.NewReader(rc)
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	if string(hdr[:4]) != "TFSM" {
		return fmt.Errorf("test fsm: bad snapshot header %q", hdr[:4])
	}
	n := int(binary.BigEndian.Uint32(hdr[4:]))
	cmds := make([]string, 0, n)
	for range n {
		var l [4]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return err
		}
		b := make([]byte, binary.BigEndian.Uint32(l[:]))
		if _, err := io.ReadFull(r, b); err != nil {
			return err
		}
		cmds = append(cmds, string(b))
	}
	if _, err := r.ReadByte(); err != io.EOF {
		return fmt.Errorf("test fsm: trailing bytes in snapshot (%v)", err)
	}
	f.mu.Lock()
	f.cmds = cmds
	f.seen = make(map[string]bool)
	for _, c := range cmds {
		f.seen[c] = true
	}
	f.restores++
	f.mu.Unlock()
	return nil
}

type testSnapshot struct {
	n    int
	body []byte // plain
	dir  string // adopted
}

func (s *testSnapshot) Persist(sink raft.SnapshotSink) error {
	hdr := binary.BigEndian.AppendUint32([]byte("TFSM"), uint32(s.n))
	if _, err := sink.Write(hdr); err != nil {
		sink.Cancel()
		return err
	}
	if s.dir != "" {
		ds, ok := sink.(DirSink)
		if !ok {
			sink.Cancel()
			return errors.New("test fsm: sink cannot adopt a directory")
		}
		if err := ds.AdoptDir(s.dir); err != nil {
			sink.Cancel()
			return err
		}
	} else if _, err := sink.Write(s.body); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release removes the staged directory if no sink adopted it.
func (s *testSnapshot) Release() {
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// expandDir is the ExpandFunc of the tests: the directory's regular files
// in name order, each through an io.SectionReader.
func expandDir(dir string, w io.Writer) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		fi, err := f.Stat()
		if err == nil {
			_, err = io.Copy(w, io.NewSectionReader(f, 0, fi.Size()))
		}
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// testNode is one simulated node: a mux on its own listener and a data
// directory.
type testNode struct {
	id  string
	dir string
	mux *Mux
}

func (n *testNode) addr() string { return n.mux.Addr().String() }

// newTestNodes starts n muxes on 127.0.0.1:0. Cleanup closes them after
// the groups (registered later, so cleaned up first).
func newTestNodes(t *testing.T, n int) []*testNode {
	t.Helper()
	return newTestNodesWith(t, n, nil)
}

// newTestNodesWith is newTestNodes, with before run on each node's mux
// before it starts (nil: nothing).
func newTestNodesWith(t *testing.T, n int, before func(*Mux)) []*testNode {
	t.Helper()
	root := t.TempDir()
	nodes := make([]*testNode, n)
	for i := range nodes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		m := NewMux(ln, testLogger().With("node", i))
		if before != nil {
			before(m)
		}
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		nodes[i] = &testNode{id: fmt.Sprintf("node-%d", i), dir: filepath.Join(root, fmt.Sprintf("node-%d", i)), mux: m}
	}
	return nodes
}

// fastTimings are the tightened Raft timings of the tests. The lease is as
// long as the heartbeat timeout: with the race detector on two busy cores,
// a shorter one makes leaders step down spuriously.
func fastTimings(c *GroupConfig) {
	c.HeartbeatTimeout = 150 * time.Millisecond
	c.ElectionTimeout = 150 * time.Millisecond
	c.LeaderLeaseTimeout = 150 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.OpTimeout = 5 * time.Second
	c.ShutdownTimeout = 30 * time.Second // a bound, generous for slow disks
}

// testGroup is a group member with its FSM.
type testGroup struct {
	*Group
	node *testNode
	fsm  *testFSM
}

// openTestGroup opens group on node with fast timings; mod adjusts the
// config. Cleanup closes it.
func openTestGroup(t *testing.T, node *testNode, group string, fsm *testFSM, mod func(*GroupConfig)) *testGroup {
	t.Helper()
	cfg := GroupConfig{
		ID:     group,
		NodeID: node.id,
		Dir:    filepath.Join(node.dir, group),
		FSM:    fsm,
		Mux:    node.mux,
		Expand: expandDir,
		Logger: testLogger().With("node", node.id),
	}
	fastTimings(&cfg)
	if mod != nil {
		mod(&cfg)
	}
	g, err := OpenGroup(cfg)
	if err != nil {
		t.Fatalf("open group %s on %s: %v", group, node.id, err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("close group %s on %s: %v", group, node.id, err)
		}
	})
	return &testGroup{Group: g, node: node, fsm: fsm}
}

// startGroup opens group on every node, each with a new test FSM that
// stages snapshots beside the group's directory, and bootstraps it with
// all nodes as voters.
func startGroup(t *testing.T, nodes []*testNode, group string, mod func(*GroupConfig)) []*testGroup {
	t.Helper()
	var gs []*testGroup
	var servers []Server
	for _, n := range nodes {
		fsm := newTestFSM(filepath.Join(n.dir, group+"-stage"), true)
		gs = append(gs, openTestGroup(t, n, group, fsm, mod))
		servers = append(servers, Server{ID: n.id, Address: n.addr(), Voter: true})
	}
	for _, g := range gs {
		if err := g.Bootstrap(ctxTimeout(t, 5*time.Second), servers); err != nil {
			t.Fatalf("bootstrap %s on %s: %v", group, g.node.id, err)
		}
	}
	return gs
}

// waitLeader waits until one of gs leads and every other knows it, and
// returns the leader.
func waitLeader(t *testing.T, gs []*testGroup) *testGroup {
	t.Helper()
	var leader *testGroup
	eventually(t, 10*time.Second, "a leader known to all", func() bool {
		leader = nil
		for _, g := range gs {
			if g.IsLeader() {
				if leader != nil {
					return false
				}
				leader = g
			}
		}
		if leader == nil {
			return false
		}
		for _, g := range gs {
			if id, _ := g.Leader(); id != leader.node.id {
				return false
			}
		}
		return true
	})
	return leader
}

// waitEntries waits until every FSM of gs holds want.
func waitEntries(t *testing.T, gs []*testGroup, want []string) {
	t.Helper()
	for _, g := range gs {
		eventually(t, 10*time.Second, fmt.Sprintf("%s's fsm to hold %d entries", g.node.id, len(want)), func() bool {
			return slices.Equal(g.fsm.entries(), want)
		})
	}
}

// apply applies cmd on the leader of gs, which must all be open. As a
// client does, it retries elsewhere when leadership moves (on a slow disk
// it can), and when the outcome is unknown: the test FSM ignores an entry
// it holds already. Any other error is returned.
func apply(t *testing.T, gs []*testGroup, cmd string) (any, error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		leader := waitLeader(t, gs)
		resp, err := leader.Apply(ctxTimeout(t, 5*time.Second), []byte(cmd))
		retry := errors.Is(err, ErrNotLeader) || errors.Is(err, ErrLeadershipLost) || errors.Is(err, ErrTimeout)
		if !retry || time.Now().After(deadline) {
			return resp, err
		}
		t.Logf("apply %q on %s: %v; retrying", cmd, leader.node.id, err)
	}
}

// applyAll applies cmds in order through apply.
func applyAll(t *testing.T, gs []*testGroup, cmds ...string) {
	t.Helper()
	for _, c := range cmds {
		if _, err := apply(t, gs, c); err != nil {
			t.Fatalf("apply %q: %v", c, err)
		}
	}
}

func cmds(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

func others(gs []*testGroup, not *testGroup) []*testGroup {
	var out []*testGroup
	for _, g := range gs {
		if g != not {
			out = append(out, g)
		}
	}
	return out
}

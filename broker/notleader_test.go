package broker

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fabriq-io/fabriq/cluster"
	"github.com/fabriq-io/fabriq/cluster/meta"
	"github.com/fabriq-io/fabriq/transport"
)

// nopFSM applies nothing; its snapshots are empty.
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                    { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error)    { return nopSnapshot{}, nil }
func (nopFSM) Restore(rc io.ReadCloser) error         { return rc.Close() }
func (nopSnapshot) Persist(s raft.SnapshotSink) error { return s.Close() }
func (nopSnapshot) Release()                          {}

type nopSnapshot struct{}

// A leader that refuses a request (a hand-over under way) does not answer
// NotLeader naming itself, which sends the client straight back to it:
// it answers ServiceNotReady, and the client waits before it retries.
func TestRefusingLeaderDoesNotNameItself(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	mux := cluster.NewMux(ln, logger)
	if err := mux.Start(); err != nil {
		t.Fatal(err)
	}
	defer mux.Close()
	g, err := cluster.OpenGroup(cluster.GroupConfig{ID: "p", NodeID: "n1", Dir: filepath.Join(t.TempDir(), "p"), FSM: nopFSM{}, Mux: mux, Logger: logger,
		HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Bootstrap(ctx, []cluster.Server{{ID: "n1", Address: mux.Addr().String(), Voter: true}}); err != nil {
		t.Fatal(err)
	}
	if id, err := g.WaitForLeader(ctx); err != nil || id != "n1" {
		t.Fatalf("leader %q, %v; want n1", id, err)
	}
	n := &Node{cfg: Config{NodeID: "n1"}, catalog: meta.NewCatalog(nil, logger)}
	err = n.notLeaderError("persistent://t/f/s-partition-0", g)
	if transport.CodeOf(err) != transport.CodeServiceNotReady {
		t.Fatalf("the leader's refusal: %v, want ServiceNotReady", err)
	}
}

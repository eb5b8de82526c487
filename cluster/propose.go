package cluster

import (
	"time"

	"github.com/hashicorp/raft"
)

// Propose hands an entry to Raft without waiting for it to commit, for
// callers that pipeline: the futures of one caller's proposals complete in
// the order it proposed them. timeout bounds only the hand-over to Raft.
// Wait for the future with Wait, not with its own Error: a leader that
// loses its majority steps down within its lease and fails what is
// pending (raft.ErrLeadershipLost), but an entry that had committed and
// was waiting for the state machine when Raft shut down is dropped by
// hashicorp/raft (1.8) without an answer, and its Error would block for
// ever. Errors are Raft's own; Apply is the waiting, error-mapping form.
// A proposal wakes a quiet group, as Apply does.
func (g *Group) Propose(cmd []byte, timeout time.Duration) raft.ApplyFuture {
	g.gate.proposed()
	return g.raft.Apply(cmd, timeout)
}

// Wait waits for a future of Propose and returns its error, or
// raft.ErrRaftShutdown once the group has closed and the future is still
// pending: its entry may or may not be applied (on this node it was not),
// as after a timeout. The outcome is the caller's to treat as unknown.
//
// A future that Raft dropped at shutdown never completes; the goroutine
// that watches it for Wait stays blocked on it, one per such entry (at
// most the state machine's queue, per shutdown).
func (g *Group) Wait(f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-g.down:
		select {
		case err := <-done:
			return err
		default:
			return raft.ErrRaftShutdown
		}
	}
}

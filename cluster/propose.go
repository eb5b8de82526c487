package cluster

import (
	"time"

	"github.com/hashicorp/raft"
)

// Propose hands an entry to Raft without waiting for it to commit, for
// callers that pipeline: the futures of one caller's proposals complete in
// the order it proposed them. timeout bounds only the hand-over to Raft.
// The future's Error blocks until the entry is applied or fails; a leader
// that loses its majority steps down within its lease and fails what is
// pending (raft.ErrLeadershipLost), and Close fails everything with
// raft.ErrRaftShutdown, so no wait outlives the group. Errors are Raft's
// own; Apply is the waiting, error-mapping form.
func (g *Group) Propose(cmd []byte, timeout time.Duration) raft.ApplyFuture {
	return g.raft.Apply(cmd, timeout)
}

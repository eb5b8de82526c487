package cluster

import (
	"errors"
	"fmt"
)

// Errors returned by the cluster package. Test for them with errors.Is. The
// Group methods that wait for Raft map hashicorp/raft's errors to these
// (DESIGN.md has the table). The Membership and Routes return ErrClosed after
// Close and ErrTimeout when a deadline passed, as a Group does.
var (
	// ErrClosed is returned by every method of a Group, Mux or Layer after
	// Close, and by a Group whose Raft instance has shut down (for example
	// after this node was removed from the group).
	ErrClosed = errors.New("cluster: closed")
	// ErrNotLeader is matched by every *NotLeaderError: the operation must
	// run on the group's leader and this node is not it.
	ErrNotLeader = errors.New("cluster: not the leader")
	// ErrLeadershipLost is returned by Apply and Barrier when this node lost
	// leadership while the entry was in flight. The entry may or may not be
	// committed: the caller cannot tell, as with ErrTimeout.
	ErrLeadershipLost = errors.New("cluster: leadership lost while committing")
	// ErrTimeout is returned when an operation's deadline passed before Raft
	// answered. For Apply the entry may still commit later. The error also
	// matches context.DeadlineExceeded when the deadline came from a context.
	ErrTimeout = errors.New("cluster: timed out")
	// ErrNothingToSnapshot is returned by Group.Snapshot when the FSM has
	// applied nothing yet.
	ErrNothingToSnapshot = errors.New("cluster: nothing new to snapshot")
	// ErrGroupExists is returned by Mux.Layer for a group that already has a
	// layer on that mux.
	ErrGroupExists = errors.New("cluster: group already registered")
	// ErrBadGroupID is returned for a group id that is empty or longer than
	// MaxGroupIDLen bytes.
	ErrBadGroupID = errors.New("cluster: bad group id")
	// ErrBadHeader is the reason logged when an incoming connection does not
	// open with a valid header; the connection is closed.
	ErrBadHeader = errors.New("cluster: bad connection header")
	// ErrNoExpand is returned by DirSink.AdoptDir when the snapshot store has
	// no Expand function, so it could not turn the directory back into bytes.
	ErrNoExpand = errors.New("cluster: snapshot store cannot adopt directories: no Expand function")
	// ErrBadSnapshot is returned by SnapshotStore.Open for a snapshot whose
	// metadata or state file is damaged, or whose expanded content does not
	// have the size recorded when it was taken.
	ErrBadSnapshot = errors.New("cluster: bad snapshot")
	// ErrDamaged is matched by the error of OpenGroup when the group's
	// Raft log (raft.db) is damaged on disk (an entry fails its checksum, is
	// missing or cannot be read), or when none of its snapshots can be
	// restored; and by the error given to GroupConfig.OnDamage when a
	// running group finds such damage. The group's copy must not serve: it
	// is to be renewed from the other members.
	ErrDamaged = errors.New("cluster: raft state damaged on disk")
	// ErrNotStarted is returned by Membership.Leave before Start.
	ErrNotStarted = errors.New("cluster: membership not started")
	// ErrStarted is returned by Membership.Start when it has started
	// already.
	ErrStarted = errors.New("cluster: membership already started")
	// ErrLeft is returned by Membership.UpdateMeta after Leave: a node that
	// left advertises nothing more.
	ErrLeft = errors.New("cluster: left the cluster")
	// ErrMetaTooLarge is matched by the error of MembershipConfig.Validate,
	// NewMembership and Membership.UpdateMeta when the node metadata does
	// not fit in memberlist's limit (memberlist.MetaMaxSize bytes encoded).
	ErrMetaTooLarge = errors.New("cluster: node metadata too large")
	// ErrBadRoute is returned by Routes.Announce and Routes.Forget for an
	// empty or oversized partition name or leader id.
	ErrBadRoute = errors.New("cluster: bad route")
	// ErrStaleRoute is returned by Routes.Announce and Routes.Forget when
	// the routing table already holds something newer for the partition
	// (see Route for the order); the table is unchanged.
	ErrStaleRoute = errors.New("cluster: stale route")
	// ErrUnreachable is returned by Group.TransferLeadershipTo for a voter
	// whose node this node found gone, or whose heartbeat rounds failed and
	// none was answered lately, and by Group.TransferLeadership when no
	// other voter could be tried and at least one is such a one: a
	// transfer to it could not finish, and hashicorp/raft refuses every
	// proposal while one runs (up to its election timeout).
	ErrUnreachable = errors.New("cluster: the voter's node is gone or silent")
)

// NotLeaderError is returned when an operation that needs the leader runs on
// another node. Leader names the leader this node knows of; both fields are
// empty when it knows none (an election is under way, or leadership is being
// transferred). errors.Is(err, ErrNotLeader) is true for it.
type NotLeaderError struct {
	Group      string // group id
	LeaderID   string // node id of the known leader, or ""
	LeaderAddr string // Raft address of the known leader, or ""
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return fmt.Sprintf("cluster: group %s: not the leader, leader unknown", e.Group)
	}
	return fmt.Sprintf("cluster: group %s: not the leader, leader is %s at %s", e.Group, e.LeaderID, e.LeaderAddr)
}

// Is makes errors.Is(err, ErrNotLeader) true for every *NotLeaderError.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

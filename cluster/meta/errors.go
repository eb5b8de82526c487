package meta

import (
	"errors"
	"fmt"
)

// Errors of the control plane. Test for them with errors.Is; the broker
// maps them to its wire codes.
var (
	// ErrInvalid: a request's arguments are out of range (a replication
	// factor the cluster cannot hold, a partition count, a name).
	ErrInvalid = errors.New("meta: invalid argument")
	// ErrNotLeader is matched by every *NotLeaderError: the request must
	// go to the metadata group's leader.
	ErrNotLeader = errors.New("meta: not the metadata leader")
	// ErrStreamExists: a stream of that name exists.
	ErrStreamExists = errors.New("meta: stream exists")
	// ErrStreamNotFound: the catalog has no stream of that name.
	ErrStreamNotFound = errors.New("meta: stream not found")
	// ErrTenantExists, ErrTenantNotFound, ErrFabricExists and
	// ErrFabricNotFound: a tenant or fabric of that name does or does not
	// exist.
	ErrTenantExists   = errors.New("meta: tenant exists")
	ErrTenantNotFound = errors.New("meta: tenant not found")
	ErrFabricExists   = errors.New("meta: fabric exists")
	ErrFabricNotFound = errors.New("meta: fabric not found")
	// ErrNotEmpty: a tenant that still has fabrics, or a fabric that
	// still has streams, is not deleted.
	ErrNotEmpty = errors.New("meta: not empty")
	// ErrNotMember: a renewal names a member the partition does not
	// have (renewed already, or moved).
	ErrNotMember = errors.New("meta: not a member of the partition")
	// ErrNotAllowed: a node asked for what only another node may ask (a
	// renewal of a member that is not its own).
	ErrNotAllowed = errors.New("meta: not allowed")
	// ErrNotReady: the request cannot be served yet and may be asked
	// again: the metadata group has no leader or could not commit in time
	// (the outcome of a change is then unknown), or a partition has not
	// finished its last membership change.
	ErrNotReady = errors.New("meta: not ready")
	// ErrClosed: the control plane is closed.
	ErrClosed = errors.New("meta: closed")
)

// NotLeaderError names the metadata leader this node knows of, if any.
type NotLeaderError struct {
	LeaderID string // node id, or "" while there is none
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return "meta: the metadata group has no leader yet"
	}
	return fmt.Sprintf("meta: node %s leads the metadata group", e.LeaderID)
}

// Is makes errors.Is(err, ErrNotLeader) true for every *NotLeaderError.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

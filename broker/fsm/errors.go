package fsm

import (
	"errors"
	"fmt"
)

// Errors of the partition state machine. Domain errors are answers, never
// failures of Apply: an entry refused (a batch, a join, an ack of a
// subscription that does not exist) is still applied, alike on every
// replica.
var (
	// ErrHalted answers every entry once the state machine has stopped
	// because its log could not take a committed entry. The entry is
	// committed, and stored by the other replicas.
	ErrHalted = errors.New("partition state machine stopped: its log cannot append")
	// ErrSubscriptionNotFound answers an ack or a seek of a subscription
	// that does not exist.
	ErrSubscriptionNotFound = errors.New("subscription not found")
	// ErrAnswer: the state machine answered something else than the
	// command's answer. Never expected.
	ErrAnswer = errors.New("the state machine's answer is not of the command's type")

	// Why a batch is refused whole. An id at or below the producer's last
	// stored one is answered only when the state machine can prove it
	// stored and knows where (MSG-4); acknowledging one it cannot prove
	// would answer for a message the log may not hold.

	// ErrSequenceGap: an id below the last stored one, inside the window
	// of remembered sends, and not stored: an earlier send failed and a
	// later one succeeded. Acknowledging it as a duplicate would lose it.
	ErrSequenceGap = errors.New("sequence gap")
	// ErrSequenceForgotten: an id older than the window of remembered
	// sends. It may have been stored long ago or never: the two cannot be
	// told apart, so it is refused rather than acknowledged.
	ErrSequenceForgotten = errors.New("sequence older than the deduplication window")
	// ErrSequenceOrder: ids that do not increase within the batch. The
	// leader refuses such a send before proposing it.
	ErrSequenceOrder = errors.New("sequence ids do not increase within the batch")
)

// errAppend marks a log that failed to take a committed batch, as opposed
// to an entry that does not decode: the first stops this state machine,
// the second the node.
var errAppend = errors.New("append to the log")

// ModeMismatchError refuses a join whose mode or key_shared policy differs
// from the subscription's while it has members (SUB-2).
type ModeMismatchError struct {
	Active, Requested Policy
}

func (e *ModeMismatchError) Error() string {
	return fmt.Sprintf("subscription has policy %+v, the join asks %+v", e.Active, e.Requested)
}

// TooManySubscriptionsError refuses a join that would create a
// subscription on a partition that has as many as the join's limit.
type TooManySubscriptionsError struct {
	Max int
}

func (e *TooManySubscriptionsError) Error() string {
	return fmt.Sprintf("the partition has %d subscriptions, the limit", e.Max)
}

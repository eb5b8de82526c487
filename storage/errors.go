package storage

import (
	"errors"
	"fmt"
)

// Errors returned by the storage package. Test for them with errors.Is.
var (
	// ErrClosed is returned by every method of a Log after Close.
	ErrClosed = errors.New("storage: log is closed")
	// ErrCorrupt is matched by every *CorruptError.
	ErrCorrupt = errors.New("storage: corrupt data")
	// ErrAlreadyApplied is returned by Append for a Raft index at or below
	// the last one the log holds: the entry was applied before a restart.
	ErrAlreadyApplied = errors.New("storage: raft index already applied")
	// ErrEmptyBatch is returned by Append for a batch without messages.
	ErrEmptyBatch = errors.New("storage: empty batch")
	// ErrTooLarge is returned by Append for a batch whose encoded size is
	// above Config.MaxBatchBytes.
	ErrTooLarge = errors.New("storage: batch too large")
	// ErrTrimmed is returned for an offset below the log's start offset:
	// retention has deleted it.
	ErrTrimmed = errors.New("storage: offset trimmed by retention")
	// ErrOutOfRange is returned for an offset beyond the log's next offset.
	ErrOutOfRange = errors.New("storage: offset out of range")
	// ErrLocked is returned by Open when another Log of this process holds
	// the directory.
	ErrLocked = errors.New("storage: directory is in use by another log")
	// ErrFailed is returned by Append after a write to disk failed part way:
	// the log refuses further appends until it is reopened, which recovers
	// the last whole batch.
	ErrFailed = errors.New("storage: log failed after a write error")
	// ErrBadSnapshot is returned by Restore and OpenSnapshot for a snapshot
	// stream or directory that is not well formed.
	ErrBadSnapshot = errors.New("storage: bad snapshot")
)

// CorruptError reports damaged data on disk: a batch whose checksum or
// structure is wrong, or a segment that does not follow its predecessor.
type CorruptError struct {
	File     string // path of the damaged file
	Position int64  // byte position in the file
	Offset   uint64 // first message offset expected at Position
	Reason   string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("storage: corrupt data in %s at byte %d (offset %d): %s",
		e.File, e.Position, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true for every *CorruptError.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

package broker

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/transport"
)

// diskCheckEvery is how often the node reads the free space of its data
// directory's file system.
const diskCheckEvery = time.Second

// writeAmplification is how many bytes a send of one byte costs the
// leader's disk: its Raft log entry and its log segment.
const writeAmplification = 2

// diskReserve keeps the free-space reserve of the node's data directory
// (Config.MinFreeDisk). The node reads the file system's free space
// (statfs) every diskCheckEvery; between two readings each admitted send
// takes its cost off the last one, so a burst cannot dig into the reserve
// before the next reading notices. Below the reserve, sends are refused
// with DiskFull; acks, subscriptions and metadata changes are small and
// go on: that is what the reserve is for. Its methods are safe on a nil
// *diskReserve, which admits everything (the reserve turned off).
type diskReserve struct {
	dir    string
	min    int64
	logger *slog.Logger
	// avail is the free space last read, less what was admitted since.
	avail atomic.Int64
	// read is the free space last read.
	read atomic.Int64
	// low is whether the last reading was below the reserve.
	low atomic.Bool
	// failing is whether the last reading failed (logged once).
	failing atomic.Bool
}

func newDiskReserve(dir string, min int64, logger *slog.Logger) *diskReserve {
	if min < 0 {
		return nil
	}
	return &diskReserve{dir: dir, min: min, logger: logger}
}

// refresh reads the free space of the file system. A failed reading keeps
// the last value.
func (r *diskReserve) refresh() error {
	if r == nil {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(r.dir, &st); err != nil {
		if !r.failing.Swap(true) {
			r.logger.Warn("cannot read the free space of the data directory; keeping the last reading", "dir", r.dir, "err", err)
		}
		return fmt.Errorf("broker: free space of %s: %w", r.dir, err)
	}
	r.failing.Store(false)
	// Bavail, not Bfree: the blocks a file system keeps for root are not
	// ours to count on.
	free := int64(st.Bavail) * int64(st.Bsize)
	r.avail.Store(free)
	r.read.Store(free)
	low := free < r.min
	if r.low.Swap(low) != low {
		if low {
			r.logger.Warn("free disk space is below the reserve; sends are refused (DiskFull) until space is freed; reads and acks go on",
				"dir", r.dir, "free_bytes", free, "min_free_bytes", r.min)
		} else {
			r.logger.Info("free disk space is back above the reserve; sends are accepted",
				"dir", r.dir, "free_bytes", free, "min_free_bytes", r.min)
		}
	}
	return nil
}

// reading returns the free space last read and the reserve; zeros with
// the reserve off.
func (r *diskReserve) reading() (free, min int64) {
	if r == nil {
		return 0, 0
	}
	return r.read.Load(), r.min
}

// roomy reports whether the last reading found at least the reserve free
// (always true with the reserve off).
func (r *diskReserve) roomy() bool {
	return r == nil || !r.low.Load()
}

// Admit takes room for a send of about size bytes, or refuses it with a
// DiskFull error when it would leave less free space than the reserve. It
// implements partition.Reserve.
func (r *diskReserve) Admit(size int) error {
	if r == nil {
		return nil
	}
	cost := int64(size) * writeAmplification
	if left := r.avail.Add(-cost); left < r.min {
		r.avail.Add(cost) // not admitted: nothing will be written
		return wire.Errorf(transport.CodeDiskFull,
			"the partition leader's data directory has about %s free, below its reserve of %s (--min-free-disk): sends are refused until space is freed; try again later",
			byteSize(left+cost), byteSize(r.min))
	}
	return nil
}

// byteSize writes a size in bytes the way --min-free-disk takes it.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 3; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGT"[exp])
}

package storage

import (
	"fmt"
	"log/slog"
	"time"
)

// Limits that no Config may exceed: positions and relative offsets in the
// index are 32-bit.
const (
	// MaxSegmentBytes is the largest allowed Config.SegmentMaxBytes.
	MaxSegmentBytes = 1 << 30
	// MaxBatchBytesLimit is the largest allowed Config.MaxBatchBytes; the
	// decoder refuses any batch length above it before allocating.
	MaxBatchBytesLimit = 256 << 20
)

// Config tunes a Log. The zero value of every field means its default.
type Config struct {
	// SegmentMaxBytes rolls the active segment when the next batch would
	// take it past this size. Default 64 MiB, at most MaxSegmentBytes.
	SegmentMaxBytes int64
	// SegmentMaxAge rolls the active segment when a batch's publish time is
	// this much later than the segment's first batch. Default 24h.
	SegmentMaxAge time.Duration
	// IndexIntervalBytes is the spacing of sparse index entries. Default
	// 4 KiB.
	IndexIntervalBytes int64
	// MaxBatchBytes refuses batches whose encoded size is larger. Default
	// 16 MiB, at most MaxBatchBytesLimit.
	MaxBatchBytes int
	// RetentionMaxAge lets Retain delete segments whose newest message is
	// older than this. Zero keeps messages forever.
	RetentionMaxAge time.Duration
	// RetentionMaxBytes lets Retain delete the oldest segments while the log
	// is larger than this. Zero means no size limit.
	RetentionMaxBytes int64
	// Logger receives recovery events (a torn tail cut, an index rebuilt).
	// Nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the configuration used where a field is zero.
func DefaultConfig() Config {
	return Config{
		SegmentMaxBytes:    64 << 20,
		SegmentMaxAge:      24 * time.Hour,
		IndexIntervalBytes: 4 << 10,
		MaxBatchBytes:      16 << 20,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.SegmentMaxBytes == 0 {
		c.SegmentMaxBytes = d.SegmentMaxBytes
	}
	if c.SegmentMaxAge == 0 {
		c.SegmentMaxAge = d.SegmentMaxAge
	}
	if c.IndexIntervalBytes == 0 {
		c.IndexIntervalBytes = d.IndexIntervalBytes
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = d.MaxBatchBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.SegmentMaxBytes < 0 || c.SegmentMaxBytes > MaxSegmentBytes:
		return fmt.Errorf("storage: SegmentMaxBytes %d not in 1..%d", c.SegmentMaxBytes, MaxSegmentBytes)
	case c.SegmentMaxAge < 0:
		return fmt.Errorf("storage: SegmentMaxAge %v is negative", c.SegmentMaxAge)
	case c.IndexIntervalBytes < 0:
		return fmt.Errorf("storage: IndexIntervalBytes %d is negative", c.IndexIntervalBytes)
	case c.MaxBatchBytes < 0 || c.MaxBatchBytes > MaxBatchBytesLimit:
		return fmt.Errorf("storage: MaxBatchBytes %d not in 1..%d", c.MaxBatchBytes, MaxBatchBytesLimit)
	case c.RetentionMaxAge < 0:
		return fmt.Errorf("storage: RetentionMaxAge %v is negative", c.RetentionMaxAge)
	case c.RetentionMaxBytes < 0:
		return fmt.Errorf("storage: RetentionMaxBytes %d is negative", c.RetentionMaxBytes)
	}
	return nil
}

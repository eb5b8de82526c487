package fsm

import (
	"math"

	"github.com/fabriq-io/fabriq/storage"
)

// RetentionPolicy is a stream's retention policy as DecideRetention reads
// it: Pulsar's retention time and size, backlog quota and message TTL.
type RetentionPolicy struct {
	// RetentionTimeMs and RetentionBytes keep acknowledged segments:
	// -1 is no limit; both zero delete them at once.
	RetentionTimeMs int64
	RetentionBytes  int64
	// BacklogQuotaBytes bounds the slowest subscription's backlog; zero is
	// none. QuotaPolicy says what a backlog over it does.
	BacklogQuotaBytes int64
	QuotaPolicy       QuotaPolicy
	// MessageTTLMs acknowledges, on every subscription, what was
	// published longer ago; zero is none.
	MessageTTLMs int64
}

// QuotaPolicy is what a partition does when its backlog is over the
// quota. Its values are the wire's.
type QuotaPolicy uint8

// Backlog quota policies.
const (
	// ProducerException refuses sends until the backlog is back under the
	// quota.
	ProducerException QuotaPolicy = iota
	// ConsumerBacklogEviction acknowledges the oldest backlog on behalf of
	// the slowest subscriptions until the backlog fits the quota.
	ConsumerBacklogEviction
)

// RetentionInput is what the leader knows when it decides retention.
type RetentionInput struct {
	Policy RetentionPolicy
	// Now is the leader's clock, in ms since the epoch.
	Now int64
	// Segments are the leader's log segments, oldest first.
	Segments []storage.SegmentInfo
	// Start and Next are the replicated start and next offsets.
	Start, Next uint64
	// Floors are the subscriptions' first unacknowledged offsets.
	Floors []uint64
	// TTLFloor is the first offset published within the message TTL
	// (Log.OffsetForTime of Now minus the TTL); read when the TTL is set.
	TTLFloor uint64
}

// RetentionDecision is what the leader proposes (a Retain entry) and
// enforces.
type RetentionDecision struct {
	// Start is the partition's new start offset, at least Start.
	Start uint64
	// AckBelow, when above the slowest subscription's floor, moves every
	// cursor up to it (TTL, backlog eviction); 0 moves none.
	AckBelow uint64
	// Backlog is the slowest subscription's backlog in bytes afterwards,
	// and Slowest its first unacknowledged offset.
	Backlog int64
	Slowest uint64
	// QuotaExceeded refuses sends (ProducerException).
	QuotaExceeded bool
}

// DecideRetention is the leader's retention policy, a pure function of
// what it is given (Pulsar's rules):
//
//   - the message TTL acknowledges, on every subscription, what was
//     published before it;
//   - a backlog over the quota either refuses producers (ProducerException)
//     or is evicted, oldest whole segments first, by moving the slowest
//     cursors past them, then inside the active segment as far as its
//     share of the bytes says (ConsumerBacklogEviction);
//   - sealed segments acknowledged by every subscription (every segment,
//     when there is none) are deleted, oldest first, unless the retention
//     limits keep them: a segment goes once its newest message is older
//     than the retention time or the partition is larger than the
//     retention size. With both limits zero, acknowledged segments go at
//     once; -1 (or zero beside a set limit) is no limit on that dimension.
//
// The start it returns is always a segment boundary of the leader's log at
// or below every subscription's first unacknowledged offset.
func DecideRetention(in RetentionInput) RetentionDecision {
	var segs []storage.SegmentInfo
	for _, s := range in.Segments {
		if s.NextOffset > in.Start || s.Active {
			segs = append(segs, s)
		}
	}
	d := RetentionDecision{Start: in.Start}
	// slowest: every offset below it is acknowledged by every
	// subscription.
	slowest := in.Next
	if len(in.Floors) > 0 {
		slowest = uint64(math.MaxUint64)
		for _, f := range in.Floors {
			slowest = min(slowest, f)
		}
		slowest = max(slowest, in.Start)
		low := slowest
		if in.Policy.MessageTTLMs > 0 {
			slowest = max(slowest, min(max(in.TTLFloor, in.Start), in.Next))
		}
		if q := in.Policy.BacklogQuotaBytes; q > 0 && in.Policy.QuotaPolicy == ConsumerBacklogEviction {
			slowest = evict(segs, slowest, q)
		}
		if slowest > low {
			d.AckBelow = slowest
		}
		d.Backlog = backlogBytes(segs, slowest)
		d.QuotaExceeded = in.Policy.BacklogQuotaBytes > 0 && in.Policy.QuotaPolicy == ProducerException &&
			d.Backlog > in.Policy.BacklogQuotaBytes
	}
	d.Slowest = slowest
	d.Start = deletable(segs, in.Policy, in.Now, slowest, d.Start)
	return d
}

// evict returns how far the slowest subscriptions must move from slowest
// for the backlog to fit the quota: past whole sealed segments, oldest
// first, then inside the active segment as far as its share of the bytes
// says.
func evict(segs []storage.SegmentInfo, slowest uint64, quota int64) uint64 {
	for backlogBytes(segs, slowest) > quota {
		i := segmentOf(segs, slowest)
		if i < 0 {
			break
		}
		if s := segs[i]; s.Active {
			keep := uint64(float64(quota) / float64(s.Bytes) * float64(s.NextOffset-s.BaseOffset))
			return max(slowest, s.NextOffset-min(keep, s.NextOffset-s.BaseOffset))
		}
		slowest = segs[i].NextOffset
	}
	return slowest
}

// deletable returns the start offset after deleting the sealed segments
// below slowest that the retention time and size do not keep, oldest
// first, from start.
func deletable(segs []storage.SegmentInfo, pol RetentionPolicy, now int64, slowest, start uint64) uint64 {
	rt, rb := pol.RetentionTimeMs, pol.RetentionBytes
	if rt != 0 || rb != 0 {
		if rt == 0 {
			rt = -1
		}
		if rb == 0 {
			rb = -1
		}
	}
	var total int64
	for _, s := range segs {
		total += s.Bytes
	}
	for _, s := range segs {
		if s.Active || s.NextOffset > slowest {
			break
		}
		expired := rt >= 0 && s.MaxPublishTime < now-rt
		oversize := rb >= 0 && total > rb
		if rt == 0 && rb == 0 {
			expired = true
		}
		if !expired && !oversize {
			break
		}
		start = s.NextOffset
		total -= s.Bytes
	}
	return start
}

// segmentOf returns the index of the segment holding offset o, -1 if none.
func segmentOf(segs []storage.SegmentInfo, o uint64) int {
	for i, s := range segs {
		if o >= s.BaseOffset && o < s.NextOffset {
			return i
		}
	}
	return -1
}

// backlogBytes estimates the bytes of the log from offset from on: whole
// segments after it, and the share of the segment holding it that its
// offsets from there on take.
func backlogBytes(segs []storage.SegmentInfo, from uint64) int64 {
	var n int64
	for _, s := range segs {
		switch {
		case s.NextOffset <= from:
		case s.BaseOffset >= from:
			n += s.Bytes
		default:
			n += int64(float64(s.Bytes) * float64(s.NextOffset-from) / float64(s.NextOffset-s.BaseOffset))
		}
	}
	return n
}

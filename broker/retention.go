package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fabriq-io/fabriq/storage"
	"github.com/fabriq-io/fabriq/transport"
)

// retainEntry moves a partition's start offset and, with AckBelow, every
// subscription's cursor. The leader decides it (decideRetention); every
// replica applies the same entry, so every replica and every snapshot
// agree on where the partition starts.
type retainEntry struct {
	// Start is the partition's new start offset: a segment boundary of
	// the leader's log. A replica deletes its segments wholly below it.
	Start uint64 `msgpack:"s"`
	// AckBelow acknowledges, on every subscription, every offset below it:
	// messages past their TTL, or backlog evicted by the quota.
	AckBelow uint64 `msgpack:"a,omitempty"`
}

// applyRetain applies a retainEntry. Cursors below the new start or
// AckBelow move up to it; the start never moves back.
func (f *fsm) applyRetain(body []byte) error {
	var e retainEntry
	if err := msgpack.Unmarshal(body, &e); err != nil {
		return err
	}
	start := max(min(e.Start, f.state.Next), f.state.Start)
	floor := min(max(e.AckBelow, start), f.state.Next)
	// Subscriptions are independent of each other: the order they are
	// visited in changes nothing.
	for _, s := range f.state.Subs {
		if floor > 0 && s.Cursor.Floor < floor {
			s.Cursor.AckCumulative(floor - 1)
			s.forgetAcked()
		}
	}
	f.state.Start = start
	f.trimLocked()
	return nil
}

// trimLocked deletes the log's segments wholly below the replicated start.
// A failure (a file that cannot be removed) leaves disk space in use but
// changes nothing that is served: reads below Start are refused whatever
// the log holds. The partition's retention loop tries again and logs it.
func (f *fsm) trimLocked() {
	if f.log.Info().StartOffset < f.state.Start {
		_, _ = f.log.TrimBefore(f.state.Start)
	}
}

// startOffset returns the first offset the partition serves.
func (f *fsm) startOffset() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Start
}

// floors returns the replicated start offset, the next offset and every
// subscription's first unacknowledged offset.
func (f *fsm) floors() (start, next uint64, floors map[string]uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	floors = make(map[string]uint64, len(f.state.Subs))
	for name, s := range f.state.Subs {
		floors[name] = s.Cursor.Floor
	}
	return f.state.Start, f.state.Next, floors
}

// retentionInput is what the leader knows when it decides retention.
type retentionInput struct {
	Policy transport.RetentionPolicy
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

// retentionDecision is what the leader proposes and enforces.
type retentionDecision struct {
	// Start is the partition's new start offset, at least Start.
	Start uint64
	// AckBelow, when above the slowest subscription's floor, moves every
	// cursor up to it (TTL, backlog eviction); 0 moves none.
	AckBelow uint64
	// Backlog is the slowest subscription's backlog in bytes afterwards,
	// and Slowest its first unacknowledged offset.
	Backlog int64
	Slowest uint64
	// QuotaExceeded refuses sends (producer_exception).
	QuotaExceeded bool
}

// decideRetention is the leader's retention policy, a pure function of what
// it is given (Pulsar's rules):
//
//   - the message TTL acknowledges, on every subscription, what was
//     published before it;
//   - a backlog over the quota either refuses producers (producer_exception)
//     or is evicted, oldest whole segments first, by moving the slowest
//     cursors past them, then inside the active segment as far as its
//     share of the bytes says (consumer_backlog_eviction);
//   - sealed segments acknowledged by every subscription (every segment,
//     when there is none) are deleted, oldest first, unless the retention
//     limits keep them: a segment goes once its newest message is older
//     than the retention time or the partition is larger than the
//     retention size. With both limits zero, acknowledged segments go at
//     once; -1 (or zero beside a set limit) is no limit on that dimension.
//
// The start it returns is always a segment boundary of the leader's log at
// or below every subscription's first unacknowledged offset.
func decideRetention(in retentionInput) retentionDecision {
	var segs []storage.SegmentInfo
	for _, s := range in.Segments {
		if s.NextOffset > in.Start || s.Active {
			segs = append(segs, s)
		}
	}
	d := retentionDecision{Start: in.Start}
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
		if q := in.Policy.BacklogQuotaBytes; q > 0 && in.Policy.BacklogQuotaPolicy == transport.ConsumerBacklogEviction {
			for backlogBytes(segs, slowest) > q {
				i := segmentOf(segs, slowest)
				if i < 0 {
					break
				}
				if s := segs[i]; s.Active {
					// Inside the active segment: as far as its share
					// of the bytes says.
					keep := uint64(float64(q) / float64(s.Bytes) * float64(s.NextOffset-s.BaseOffset))
					slowest = max(slowest, s.NextOffset-min(keep, s.NextOffset-s.BaseOffset))
					break
				}
				slowest = segs[i].NextOffset
			}
		}
		if slowest > low {
			d.AckBelow = slowest
		}
		d.Backlog = backlogBytes(segs, slowest)
		d.QuotaExceeded = in.Policy.BacklogQuotaBytes > 0 && in.Policy.BacklogQuotaPolicy == transport.ProducerException &&
			d.Backlog > in.Policy.BacklogQuotaBytes
	}
	d.Slowest = slowest
	rt, rb := in.Policy.RetentionTimeMs, in.Policy.RetentionBytes
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
		expired := rt >= 0 && s.MaxPublishTime < in.Now-rt
		oversize := rb >= 0 && total > rb
		if rt == 0 && rb == 0 {
			expired = true
		}
		if !expired && !oversize {
			break
		}
		d.Start = s.NextOffset
		total -= s.Bytes
	}
	return d
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

// quotaState is what the leader's last retention pass found of the
// backlog quota; a send is refused while exceeded.
type quotaState struct {
	exceeded bool
	backlog  int64
	quota    int64
}

// retentionLoop applies the stream's retention policy. On every replica it
// deletes what a failed trim left below the replicated start; on the
// leader it decides retention and proposes the new start (a retainEntry)
// and enforces the backlog quota. Like the sweep, it runs for the life of
// the partition and acts on the leader's part only while this node leads.
func (p *partition) retentionLoop() {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.RetentionInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.retainOnce(now)
		}
	}
}

// retainOnce is one pass of the retention loop.
func (p *partition) retainOnce(now time.Time) {
	if start := p.fsm.startOffset(); p.log.Info().StartOffset < start {
		if _, err := p.log.TrimBefore(start); err != nil {
			p.logger.Warn("cannot delete segments below the partition's start", "start", start, "err", err)
		}
	}
	p.mu.Lock()
	leading := p.leading
	p.mu.Unlock()
	if !leading || !p.group.IsLeader() || p.policy == nil {
		p.quota.Store(nil)
		return
	}
	pol, ok := p.policy()
	if !ok {
		return // the stream is being deleted
	}
	start, next, floors := p.fsm.floors()
	in := retentionInput{Policy: pol, Now: now.UnixMilli(), Segments: p.log.Segments(), Start: start, Next: next}
	for _, f := range floors {
		in.Floors = append(in.Floors, f)
	}
	if pol.MessageTTLMs > 0 && len(floors) > 0 {
		o, err := p.log.OffsetForTime(in.Now - pol.MessageTTLMs)
		if err != nil {
			p.logger.Warn("message TTL: cannot find the first live message", "err", err)
		} else {
			in.TTLFloor = o
		}
	}
	d := decideRetention(in)
	p.quota.Store(&quotaState{exceeded: d.QuotaExceeded, backlog: d.Backlog, quota: pol.BacklogQuotaBytes})
	if d.Start <= start && d.AckBelow == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.ApplyTimeout)
	defer cancel()
	if _, err := p.apply(ctx, entryRetain, retainEntry{Start: d.Start, AckBelow: d.AckBelow}); err != nil {
		p.logger.Warn("could not commit a retention step", "start", d.Start, "ack_below", d.AckBelow, "err", err)
		return
	}
	if d.Start > start {
		p.logger.Debug("partition trimmed", "start", d.Start, "previous", start)
	}
	if d.AckBelow > 0 {
		// What the dispatchers hold below it is acknowledged now.
		p.mu.Lock()
		ds := make([]*dispatcher, 0, len(p.dispatchers))
		for _, dp := range p.dispatchers {
			ds = append(ds, dp)
		}
		p.mu.Unlock()
		for _, dp := range ds {
			dp.acked([]uint64{d.AckBelow - 1}, true)
		}
	}
}

// checkQuota refuses a send while the backlog is over the stream's quota
// and its policy is producer_exception.
func (p *partition) checkQuota() error {
	q := p.quota.Load()
	if q == nil || !q.exceeded {
		return nil
	}
	return wireError(transport.CodeBacklogQuotaExceeded,
		"partition %s: backlog quota exceeded: the slowest subscription's backlog is about %d bytes, the quota %d (policy producer_exception); sends are refused until consumers acknowledge",
		p.name, q.backlog, q.quota)
}

// read reads the log from offset, refusing offsets below the replicated
// start with storage.ErrTrimmed even where this replica's log still holds
// them: every replica serves the same offsets.
func (p *partition) read(offset uint64, maxMessages, maxBytes int) ([]storage.Message, error) {
	if start := p.fsm.startOffset(); offset < start {
		return nil, fmt.Errorf("%w: offset %d, partition starts at %d", storage.ErrTrimmed, offset, start)
	}
	msgs, err := p.log.Read(offset, maxMessages, maxBytes)
	if errors.Is(err, storage.ErrCorrupt) {
		p.damaged(err)
	}
	return msgs, err
}

// validRetention checks a stream's policy.
func validRetention(r transport.RetentionPolicy) error {
	switch {
	case r.RetentionTimeMs < -1:
		return fmt.Errorf("retention time %dms: must be -1 (no limit), 0 or positive", r.RetentionTimeMs)
	case r.RetentionBytes < -1:
		return fmt.Errorf("retention size %d bytes: must be -1 (no limit), 0 or positive", r.RetentionBytes)
	case r.BacklogQuotaBytes < 0:
		return fmt.Errorf("backlog quota %d bytes: must be 0 (none) or positive", r.BacklogQuotaBytes)
	case r.BacklogQuotaPolicy > transport.ConsumerBacklogEviction:
		return fmt.Errorf("backlog quota policy %d: must be producer_exception or consumer_backlog_eviction", r.BacklogQuotaPolicy)
	case r.MessageTTLMs < 0:
		return fmt.Errorf("message TTL %dms: must be 0 (none) or positive", r.MessageTTLMs)
	}
	return nil
}

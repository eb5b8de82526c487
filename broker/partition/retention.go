package partition

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fabriq-io/fabriq/broker/fsm"
	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/storage"
	"github.com/fabriq-io/fabriq/transport"
)

// quotaState is what the leader's last retention pass found of the
// backlog quota; a send is refused while exceeded.
type quotaState struct {
	exceeded bool
	backlog  int64
	quota    int64
}

// retainOnce is a run of retention, every RetentionInterval on a timer
// for the life of the partition. On every replica it deletes what a failed
// trim left below the replicated start; on the leader it decides
// retention and proposes the new start (a retainEntry) and enforces the
// backlog quota.
func (p *Partition) retainOnce(now time.Time) bool {
	if closed(p.stop) {
		return false
	}
	p.retain(now)
	return true
}

// retain is one pass of retention.
func (p *Partition) retain(now time.Time) {
	if start := p.fsm.StartOffset(); p.log.Info().StartOffset < start {
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
	start, next, floors := p.fsm.Floors()
	in := fsm.RetentionInput{Policy: fsmRetention(pol), Now: now.UnixMilli(), Segments: p.log.Segments(), Start: start, Next: next}
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
	d := fsm.DecideRetention(in)
	p.quota.Store(&quotaState{exceeded: d.QuotaExceeded, backlog: d.Backlog, quota: pol.BacklogQuotaBytes})
	if d.Start <= start && d.AckBelow == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.ApplyTimeout)
	defer cancel()
	if _, err := apply(ctx, p, fsm.Retain{Start: d.Start, AckBelow: d.AckBelow}); err != nil {
		p.logger.Warn("could not commit a retention step", "start", d.Start, "ack_below", d.AckBelow, "err", err)
		return
	}
	if d.Start > start {
		p.logger.Debug("partition trimmed", "start", d.Start, "previous", start)
	}
	if d.AckBelow > 0 {
		// What the dispatchers hold below it is acknowledged now.
		p.mu.Lock()
		ds := slices.Collect(maps.Values(p.dispatchers))
		p.mu.Unlock()
		for _, dp := range ds {
			dp.acked([]uint64{d.AckBelow - 1}, true)
		}
	}
}

// checkQuota refuses a send while the backlog is over the stream's quota
// and its policy is producer_exception.
func (p *Partition) checkQuota() error {
	q := p.quota.Load()
	if q == nil || !q.exceeded {
		return nil
	}
	return wire.Errorf(transport.CodeBacklogQuotaExceeded,
		"partition %s: backlog quota exceeded: the slowest subscription's backlog is about %d bytes, the quota %d (policy producer_exception); sends are refused until consumers acknowledge",
		p.name, q.backlog, q.quota)
}

// read reads the log from offset, refusing offsets below the replicated
// start with storage.ErrTrimmed even where this replica's log still holds
// them: every replica serves the same offsets.
func (p *Partition) read(offset uint64, maxMessages, maxBytes int) ([]storage.Message, error) {
	if start := p.fsm.StartOffset(); offset < start {
		return nil, fmt.Errorf("%w: offset %d, partition starts at %d", storage.ErrTrimmed, offset, start)
	}
	msgs, err := p.log.Read(offset, maxMessages, maxBytes)
	if errors.Is(err, storage.ErrCorrupt) {
		p.Damaged(err)
	}
	return msgs, err
}

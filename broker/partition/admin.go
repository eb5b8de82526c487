package partition

import (
	"context"

	"github.com/fabriq-io/fabriq/broker/fsm"
	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/transport"
)

// An operator's changes to a subscription, with no consumer of theirs
// attached: the leader proposes them as a consumer's Seek and Unsubscribe
// do, and tells the subscription's consumers.

// ResetCursor moves a durable subscription's cursor to offset, held
// within the partition's start and end (so 0 is the earliest message kept
// and the end skips the whole backlog), through Raft. Every consumer
// attached restarts from the cursor (CUR-4).
func (p *Partition) ResetCursor(ctx context.Context, sub string, offset uint64) error {
	if _, _, _, _, ok := p.members(sub); !ok {
		return subscriptionNotFound(sub)
	}
	offset = min(offset, p.fsm.NextOffset())
	// A subscription deleted meanwhile is SubscriptionNotFound (raftError).
	if _, err := apply(ctx, p, fsm.Seek{Name: sub, Offset: offset}); err != nil {
		return err
	}
	if d := p.dispatcherOf(sub); d != nil && d.durable {
		d.reset()
	}
	return nil
}

// OffsetForTime returns the offset of the first message published at or
// after t (Unix milliseconds), the partition's end if none was.
func (p *Partition) OffsetForTime(t int64) (uint64, error) {
	return p.log.OffsetForTime(t)
}

// DeleteSubscription deletes a durable subscription and its cursor.
// Without force it is refused while consumers are attached; with force
// they are disconnected after the delete commits, as when the partition's
// leader changes: a client that subscribes again starts a new
// subscription at its initial position.
func (p *Partition) DeleteSubscription(ctx context.Context, sub string, force bool) error {
	if _, _, _, _, ok := p.members(sub); !ok {
		return subscriptionNotFound(sub)
	}
	d := p.dispatcherOf(sub)
	if d != nil && d.consumerCount() > 0 && !force {
		return wire.Errorf(transport.CodeNotAllowed, "subscription %s has consumers attached: disconnect them or force the delete", sub)
	}
	if _, err := apply(ctx, p, fsm.DeleteSubscription{Name: sub}); err != nil {
		return err
	}
	if d == nil {
		return nil
	}
	p.mu.Lock()
	if p.dispatchers[sub] == d {
		delete(p.dispatchers, sub)
	} else {
		d = nil // stopped meanwhile, or a new subscription's
	}
	p.mu.Unlock()
	if d == nil {
		return nil
	}
	d.signal()
	for _, c := range d.detachAll() {
		c.out.EvictConsumer(c.id)
	}
	d.close()
	return nil
}

func subscriptionNotFound(sub string) error {
	return wire.Errorf(transport.CodeSubscriptionNotFound, "subscription %s does not exist", sub)
}

package partition

import (
	"context"
	"sync/atomic"

	"github.com/fabriq-io/fabriq/broker/fsm"
	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/subscription"
	"github.com/fabriq-io/fabriq/transport"
)

// maxPermits bounds one Flow grant.
const maxPermits = 1 << 20

// Consumer is a consumer of a subscription on the partition's leader:
// what the dispatcher knows of it, and the handle its session drives
// (flow, acks, redeliveries, seek, unsubscribe, close). Subscribe returns
// it.
type Consumer struct {
	id       uint64 // the session's id for it
	name     string
	priority int32
	ranges   []transport.HashRange // sticky key_shared (KS-4)
	out      Outbox
	conn     uint64 // names the session: one connection, one conn
	// gen is the generation of the consumer's membership (its join's Raft
	// index); a leave names it.
	gen uint64
	// key is the dispatcher's id for it, set when it attaches.
	key subscription.ConsumerID

	// p, sub and d are where it is attached: set by Subscribe.
	p   *Partition
	sub string
	d   *dispatcher
}

// consumerKeys gives consumers their dispatcher ids, unique in the node.
var consumerKeys atomic.Uint64

// engine is c as the subscription engine sees it.
func (c *Consumer) engine() subscription.Consumer {
	return subscription.Consumer{ID: c.key, Name: c.name, Priority: c.priority, Ranges: toRanges(c.ranges), Conn: c.conn}
}

// Name returns the consumer's name.
func (c *Consumer) Name() string { return c.name }

// Subscription returns the name of the consumer's subscription.
func (c *Consumer) Subscription() string { return c.sub }

// Partition returns the partition the consumer is attached to.
func (c *Consumer) Partition() *Partition { return c.p }

// Attached reports whether the consumer is still attached to its
// dispatcher: false once the partition dropped it (leadership lost), and
// told its session so.
func (c *Consumer) Attached() bool { return c.d.attached(c) }

// Flow grants the consumer permits (SH-2).
func (c *Consumer) Flow(permits int64) error {
	if permits <= 0 || permits > maxPermits {
		return wire.Errorf(transport.CodeInvalidArgument, "permits must be in 1..%d, not %d", maxPermits, permits)
	}
	c.d.flow(c, permits)
	return nil
}

// Ack queues acks of the consumer's messages, after checking them: a
// cumulative ack is refused in shared and key_shared modes, and names one
// offset; every offset must be one the partition holds. done (if not nil)
// is called after commit.
func (c *Consumer) Ack(offsets []uint64, cumulative bool, done func(error)) error {
	if cumulative && !subscription.Mode(c.d.mode).CumulativeAck() {
		return wire.Errorf(transport.CodeNotAllowed, wire.CumulativeShared)
	}
	if cumulative && len(offsets) != 1 {
		return wire.Errorf(transport.CodeInvalidArgument, "a cumulative ack names one offset")
	}
	next := c.p.fsm.NextOffset()
	for _, o := range offsets {
		if o >= next {
			return wire.Errorf(transport.CodeInvalidArgument, "ack for unknown message: offset %d, partition ends at %d", o, next)
		}
	}
	c.p.ack(&ackReq{sub: c.sub, offsets: offsets, cumulative: cumulative, done: done})
	return nil
}

// Redeliver sends the given unacknowledged messages of the consumer
// again, or all of them when offsets is empty.
func (c *Consumer) Redeliver(offsets []uint64) { c.d.redeliver(c, offsets) }

// SeekTime moves the subscription to the first message published at or
// after publishTime (Unix milliseconds), as Seek does.
func (c *Consumer) SeekTime(ctx context.Context, publishTime int64) error {
	offset, err := c.p.log.OffsetForTime(publishTime)
	if err != nil {
		return err
	}
	return c.Seek(ctx, offset)
}

// FlushAcks waits until the acks the consumer sent before the call are
// committed: a seek after acks must not be undone by them.
func (c *Consumer) FlushAcks(ctx context.Context) error {
	done := make(chan error, 1)
	c.p.ack(&ackReq{sub: c.sub, done: func(err error) { done <- err }})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Seek moves the subscription to offset (at most the partition's end):
// through Raft for a durable subscription, whose consumers all restart
// from its cursor (CUR-4); a reader just moves (no lower than the start).
func (c *Consumer) Seek(ctx context.Context, offset uint64) error {
	if next := c.p.fsm.NextOffset(); offset > next {
		offset = next
	}
	if !c.d.durable {
		c.d.seekReader(max(offset, c.p.fsm.StartOffset()))
		return nil
	}
	if _, err := apply(ctx, c.p, fsm.Seek{Name: c.sub, Offset: offset}); err != nil {
		return err
	}
	c.d.reset()
	return nil
}

// Unsubscribe deletes the consumer's subscription, which must have no
// other consumer attached unless force. The caller then detaches it.
func (c *Consumer) Unsubscribe(ctx context.Context, force bool) error {
	if c.d.consumerCount() > 1 && !force {
		return wire.Errorf(transport.CodeNotAllowed, wire.UnsubscribeNotAlone)
	}
	_, err := apply(ctx, c.p, fsm.DeleteSubscription{Name: c.sub})
	return err
}

// Detach detaches the consumer: it leaves the
// subscription's members, and what it held unacknowledged goes to the
// others.
func (c *Consumer) Detach() { c.p.detach(c.sub, c) }

// Close detaches the consumer, then passes an empty ack through the ack
// path: done (if not nil) is called once the acks it sent before are
// committed, so a client that closes and exits leaves no ack behind.
func (c *Consumer) Close(done func(error)) {
	c.Detach()
	c.p.ack(&ackReq{sub: c.sub, done: done})
}

package broker

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

// consumer is a consumer of a subscription on the partition's leader:
// what the dispatcher knows of it, and the handle its session drives
// (flow, acks, redeliveries, seek, unsubscribe, close).
type consumer struct {
	id       uint64 // the session's id for it
	name     string
	priority int32
	ranges   []transport.HashRange // sticky key_shared (KS-4)
	out      outbox
	conn     uint64 // names the session: one connection, one conn
	// gen is the generation of the consumer's membership (its join's Raft
	// index); a leave names it.
	gen uint64
	// key is the dispatcher's id for it, set when it attaches.
	key subscription.ConsumerID

	// p, sub and d are where it is attached: set by subscribe.
	p   *partition
	sub string
	d   *dispatcher
}

// consumerKeys gives consumers their dispatcher ids, unique in the node.
var consumerKeys atomic.Uint64

// engineConsumer is c as the subscription engine sees it.
func (c *consumer) engine() subscription.Consumer {
	return subscription.Consumer{ID: c.key, Name: c.name, Priority: c.priority, Ranges: toRanges(c.ranges), Conn: c.conn}
}

// attached reports whether the consumer is still attached to its
// dispatcher: false once the partition dropped it (leadership lost), and
// told its session so.
func (c *consumer) attached() bool { return c.d.attached(c) }

// flow grants the consumer permits (SH-2).
func (c *consumer) flow(permits int64) error {
	if permits <= 0 || permits > maxPermits {
		return wire.Errorf(transport.CodeInvalidArgument, "permits must be in 1..%d, not %d", maxPermits, permits)
	}
	c.d.flow(c, permits)
	return nil
}

// ack queues acks of the consumer's messages, after checking them: a
// cumulative ack is refused in shared and key_shared modes, and names one
// offset; every offset must be one the partition holds. done (if not nil)
// is called after commit.
func (c *consumer) ack(offsets []uint64, cumulative bool, done func(error)) error {
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

// redeliver sends the given unacknowledged messages of the consumer
// again, or all of them when offsets is empty.
func (c *consumer) redeliver(offsets []uint64) { c.d.redeliver(c, offsets) }

// seekTime moves the subscription to the first message published at or
// after publishTime (Unix milliseconds), as seek does.
func (c *consumer) seekTime(ctx context.Context, publishTime int64) error {
	offset, err := c.p.log.OffsetForTime(publishTime)
	if err != nil {
		return err
	}
	return c.seek(ctx, offset)
}

// seek moves the subscription to offset (at most the partition's end):
// through Raft for a durable subscription, whose consumers all restart
// from its cursor (CUR-4); a reader just moves (no lower than the start).
func (c *consumer) seek(ctx context.Context, offset uint64) error {
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

// unsubscribe deletes the consumer's subscription, which must have no
// other consumer attached unless force. The caller then detaches it.
func (c *consumer) unsubscribe(ctx context.Context, force bool) error {
	if c.d.consumerCount() > 1 && !force {
		return wire.Errorf(transport.CodeNotAllowed, wire.UnsubscribeNotAlone)
	}
	_, err := apply(ctx, c.p, fsm.DeleteSubscription{Name: c.sub})
	return err
}

// detach detaches the consumer (partition.detach): it leaves the
// subscription's members, and what it held unacknowledged goes to the
// others.
func (c *consumer) detach() { c.p.detach(c.sub, c) }

// close detaches the consumer, then passes an empty ack through the ack
// path: done (if not nil) is called once the acks it sent before are
// committed, so a client that closes and exits leaves no ack behind.
func (c *consumer) close(done func(error)) {
	c.detach()
	c.p.ack(&ackReq{sub: c.sub, done: done})
}

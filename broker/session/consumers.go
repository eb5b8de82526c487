package session

import (
	"context"
	"fmt"

	"github.com/fabriq-io/fabriq/broker/partition"
	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

func (s *Session) subscribe(c *transport.Subscribe) {
	defer s.forgetSubscribe(c)
	if err := geofabric.CheckClientName("subscription", c.Subscription); err != nil {
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidName, "%v", err))
		return
	}
	if c.ConsumerName != "" {
		if err := geofabric.CheckClientName("consumer", c.ConsumerName); err != nil {
			s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidName, "%v", err))
			return
		}
	}
	lp, err := s.node.LocalLeader(c.Stream)
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	if err := checkMode(c); err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	name := c.ConsumerName
	if name == "" {
		name = fmt.Sprintf("consumer-%d", producerSeq.Add(1))
	}
	if c.PriorityLevel < 0 {
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidArgument, "priority level must not be negative, not %d", c.PriorityLevel))
		return
	}
	if !s.startSubscribe(c, lp) {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, requestTimeout)
	defer cancel()
	cons, err := lp.Subscribe(ctx, partition.SubscribeRequest{
		Subscription: c.Subscription, Mode: c.Mode, Initial: c.InitialPosition, KeyShared: c.KeyShared,
		NonDurable: c.NonDurable, Start: c.StartOffset,
		ID: c.ConsumerID, Name: name, Priority: c.PriorityLevel, Out: s, Conn: s.seq,
	})
	// The mark goes before the answer: a client that sends its next
	// subscribe on this answer finds the count it expects.
	abandoned := s.endSubscribe(c, cons)
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	if abandoned {
		// The client closed this consumer id while it waited (it gave up
		// on the answer): the consumer must not stay attached, holding
		// its name and, with no permits, its keys.
		cons.Detach()
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeConsumerNotFound, "consumer %d was closed before its subscribe was answered", c.ConsumerID))
		return
	}
	s.reply(&transport.SubscribeReady{RequestID: c.RequestID, ConsumerName: name})
	if !cons.Attached() {
		// Evicted (leadership lost) before the session knew it: tell the
		// client, which attaches again.
		s.EvictConsumer(c.ConsumerID)
	}
}

// endSubscribe clears the in-progress mark of a consumer id and, when
// the subscribe succeeded and was not abandoned, holds its consumer, in
// one step. It reports whether a CloseConsumer for the id was read after
// the subscribe.
func (s *Session) endSubscribe(c *transport.Subscribe, cons *partition.Consumer) (abandoned bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.subscribing, c.ConsumerID)
	abandoned = s.endRead(c)
	if cons != nil && !abandoned {
		s.consumers[c.ConsumerID] = cons
	}
	return abandoned
}

// subRead counts, for one consumer id, the subscribes read and not yet
// ended, and the CloseConsumers read while any was.
type subRead struct {
	pending int
	closes  uint64
}

// readSubscribe notes, on the reader, a subscribe read: it runs later on
// a control worker, and a CloseConsumer of its id read meanwhile — a
// client that gave up waiting for the answer — must not be overtaken by
// it (see readClose).
func (s *Session) readSubscribe(c *transport.Subscribe) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.subReads[c.ConsumerID]
	if r == nil {
		r = &subRead{}
		s.subReads[c.ConsumerID] = r
	}
	r.pending++
	s.subSeen[c] = r.closes
}

// readClose notes, on the reader, a CloseConsumer read: the subscribes of
// its id read before it and not ended yet are abandoned. Closes run in
// order with the connection's other requests, subscribes off that order,
// so a close may be served while its subscribe waits; the subscribe then
// detaches the consumer it made instead of holding it.
func (s *Session) readClose(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.subReads[id]; r != nil {
		r.closes++
	}
}

// endRead forgets a subscribe noted by readSubscribe and reports whether a
// close of its id was read after it; s.mu is held.
func (s *Session) endRead(c *transport.Subscribe) (abandoned bool) {
	seen, ok := s.subSeen[c]
	if !ok {
		return false
	}
	delete(s.subSeen, c)
	r := s.subReads[c.ConsumerID]
	abandoned = r.closes > seen
	if r.pending--; r.pending == 0 {
		delete(s.subReads, c.ConsumerID)
	}
	return abandoned
}

// forgetSubscribe forgets a subscribe that ended before endSubscribe (a
// refusal); it does nothing after endSubscribe.
func (s *Session) forgetSubscribe(c *transport.Subscribe) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endRead(c)
}

// checkMode refuses an unknown subscription mode or key_shared policy,
// and hash ranges asked of auto_split.
func checkMode(c *transport.Subscribe) error {
	if c.Mode > transport.KeyShared {
		return wire.Errorf(transport.CodeInvalidArgument, "unknown subscription mode %d", c.Mode)
	}
	if ks := c.KeyShared; ks != nil && c.Mode == transport.KeyShared {
		if ks.Mode > transport.Sticky {
			return wire.Errorf(transport.CodeInvalidArgument, "unknown key_shared mode %d", ks.Mode)
		}
		if ks.Mode == transport.AutoSplit && len(ks.Ranges) > 0 {
			return wire.Errorf(transport.CodeInvalidArgument, "hash ranges are for sticky key_shared consumers; auto_split assigns hashes itself")
		}
	}
	return nil
}

// startSubscribe marks the subscribe's consumer id in progress, unless
// the id is in use or being subscribed on this connection, or the
// connection holds its limit of consumers; then it answers and reports
// false. A repeated subscribe of the same consumer is answered as the
// first was (SUB-6). The caller clears the mark with endSubscribe.
func (s *Session) startSubscribe(c *transport.Subscribe, lp *partition.Partition) bool {
	s.mu.Lock()
	if old, ok := s.consumers[c.ConsumerID]; ok {
		s.mu.Unlock()
		if old.Subscription() == c.Subscription && old.Partition() == lp {
			// SUB-6: idempotent on one connection for one consumer id.
			s.reply(&transport.SubscribeReady{RequestID: c.RequestID, ConsumerName: old.Name()})
			return false
		}
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidArgument, "consumer id %d is in use on this connection", c.ConsumerID))
		return false
	}
	// Subscribes run concurrently: one id has one in flight at most.
	if s.subscribing[c.ConsumerID] {
		s.mu.Unlock()
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidArgument, "a subscribe for consumer id %d is in progress on this connection", c.ConsumerID))
		return false
	}
	// Subscribes in flight count: they may all succeed.
	if limit := s.cfg.MaxConsumers; len(s.consumers)+len(s.subscribing) >= limit {
		s.mu.Unlock()
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeLimitExceeded, "this connection holds %d consumers, the limit of node %s (--max-consumers-per-connection)", limit, s.cfg.NodeID))
		return false
	}
	s.subscribing[c.ConsumerID] = true
	s.mu.Unlock()
	return true
}

func (s *Session) consumer(id uint64) *partition.Consumer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.consumers[id]
}

// known returns the consumer a request names, or answers ConsumerNotFound
// and returns nil.
func (s *Session) known(what string, id, requestID uint64) *partition.Consumer {
	sc := s.consumer(id)
	if sc == nil {
		s.replyErr(requestID, wire.Errorf(transport.CodeConsumerNotFound, "%s for unknown consumer %d", what, id))
	}
	return sc
}

func (s *Session) flow(c *transport.Flow) {
	sc := s.known("flow", c.ConsumerID, 0)
	if sc == nil {
		return
	}
	if err := sc.Flow(c.Permits); err != nil {
		s.replyErr(0, err)
	}
}

func (s *Session) ack(c *transport.Ack) {
	sc := s.known("ack", c.ConsumerID, c.RequestID)
	if sc == nil {
		return
	}
	if len(c.Offsets) == 0 || len(c.Offsets) > maxAckOffsets {
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidArgument, "an ack carries 1..%d offsets, not %d", maxAckOffsets, len(c.Offsets)))
		return
	}
	var done func(error)
	if c.RequestID != 0 {
		rid := c.RequestID
		done = func(err error) {
			if err != nil {
				s.replyErr(rid, err)
				return
			}
			s.reply(&transport.Success{RequestID: rid})
		}
	}
	if err := sc.Ack(c.Offsets, c.Cumulative, done); err != nil {
		s.replyErr(c.RequestID, err)
	}
}

func (s *Session) redeliver(id uint64, offsets []uint64) {
	if sc := s.consumer(id); sc != nil {
		sc.Redeliver(offsets)
	}
}

func (s *Session) seek(c *transport.Seek) {
	sc := s.known("seek", c.ConsumerID, c.RequestID)
	if sc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, requestTimeout)
	defer cancel()
	// Acks read before the seek are committed before it, or they would
	// acknowledge what the seek meant to deliver again.
	err := sc.FlushAcks(ctx)
	if err == nil && c.ByTime {
		err = sc.SeekTime(ctx, c.PublishTime)
	} else if err == nil {
		err = sc.Seek(ctx, c.Offset)
	}
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	if c.Evict {
		s.mu.Lock()
		_, held := s.consumers[c.ConsumerID]
		delete(s.consumers, c.ConsumerID)
		s.mu.Unlock()
		if held {
			sc.Detach()
		}
		s.reply(&transport.Success{RequestID: c.RequestID})
		s.reply(&transport.CloseConsumer{ConsumerID: c.ConsumerID})
		return
	}
	s.reply(&transport.Success{RequestID: c.RequestID})
}

func (s *Session) unsubscribe(c *transport.Unsubscribe) {
	sc := s.known("unsubscribe", c.ConsumerID, c.RequestID)
	if sc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, requestTimeout)
	defer cancel()
	if err := sc.Unsubscribe(ctx, c.Force); err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	s.mu.Lock()
	delete(s.consumers, c.ConsumerID)
	s.mu.Unlock()
	sc.Detach()
	s.reply(&transport.Success{RequestID: c.RequestID})
}

// closeConsumer detaches a consumer and answers once the acks it sent
// before are committed, so a client that closes and exits leaves no ack
// behind.
func (s *Session) closeConsumer(c *transport.CloseConsumer) {
	s.mu.Lock()
	sc := s.consumers[c.ConsumerID]
	delete(s.consumers, c.ConsumerID)
	s.mu.Unlock()
	if sc == nil {
		if c.RequestID != 0 {
			s.reply(&transport.Success{RequestID: c.RequestID})
		}
		return
	}
	// The consumer is gone from the session, in order with its acks;
	// leaving the subscription waits on Raft, off the ordered path. Its
	// acks were queued on the ack path before: the empty ack after them
	// commits with theirs.
	rid := c.RequestID
	s.release(func() {
		sc.Close(func(err error) {
			if rid == 0 {
				return
			}
			if err != nil {
				s.replyErr(rid, err)
				return
			}
			s.reply(&transport.Success{RequestID: rid})
		})
	})
}

package session

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/fabriq-io/fabriq/broker/partition"
	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// sessProducer is a producer the session holds on a partition.
type sessProducer struct {
	name string
	p    *partition.Partition
	// tenant is the tenant of p's stream, whose publish rate limit its
	// sends take from.
	tenant string
	// refusedAll is set, to the code, once a send was refused with
	// DiskFull or RateLimited: the later sends of this producer id are
	// refused too, so that none is stored ahead of the refused one. The
	// client creates the producer again and resends them in order.
	refusedAll atomic.Uint32
}

// refusesLater reports whether a refusal of one send must refuse the
// producer's later sends (see sessProducer.refusedAll).
func refusesLater(code transport.ErrorCode) bool {
	return code == transport.CodeDiskFull || code == transport.CodeRateLimited
}

func (s *Session) createProducer(c *transport.CreateProducer) {
	name := c.ProducerName
	if name == "" {
		name = fmt.Sprintf("%s-%d", s.cfg.NodeID, producerSeq.Add(1))
	} else if err := geofabric.CheckClientName("producer", name); err != nil {
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidName, "%v", err))
		return
	}
	lp, err := s.node.LocalLeader(c.Stream)
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	if err := s.checkProducerRoom(c.ProducerID, lp, name); err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	if !lp.ClaimProducer(name, s) {
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeProducerBusy, wire.ProducerBusy, name))
		return
	}
	// Creates may run concurrently: the room is checked again in the
	// step that takes it.
	if err := s.holdProducer(c.ProducerID, lp, name); err != nil {
		lp.ReleaseProducer(name, s)
		s.replyErr(c.RequestID, err)
		return
	}
	// The last stored sequence id comes through the write path, after
	// every send proposed before (openProducer).
	rid := c.RequestID
	ctx, cancel := context.WithTimeout(s.ctx, requestTimeout)
	defer cancel()
	lp.OpenProducer(ctx, name, func(lastSeq int64, err error) {
		if err != nil {
			s.mu.Lock()
			delete(s.producers, c.ProducerID)
			s.mu.Unlock()
			lp.ReleaseProducer(name, s)
			s.replyErr(rid, err)
			return
		}
		s.reply(&transport.ProducerReady{RequestID: rid, ProducerName: name, LastSequenceID: lastSeq})
	})
}

// checkProducerRoom refuses a producer id in use on this connection, or
// one producer more than the connection's limit (a re-attach of a
// producer it holds replaces that one).
func (s *Session) checkProducerRoom(id uint64, lp *partition.Partition, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.producerRoomLocked(id, lp, name)
}

func (s *Session) producerRoomLocked(id uint64, lp *partition.Partition, name string) error {
	if _, dup := s.producers[id]; dup {
		return wire.Errorf(transport.CodeInvalidArgument, "producer id %d is in use on this connection", id)
	}
	held := 0
	for _, sp := range s.producers {
		if sp.p != lp || sp.name != name {
			held++
		}
	}
	if limit := s.cfg.MaxProducers; held >= limit {
		return wire.Errorf(transport.CodeLimitExceeded, "this connection holds %d producers, the limit of node %s (--max-producers-per-connection)", limit, s.cfg.NodeID)
	}
	return nil
}

// holdProducer takes the producer id for name on lp if there is still
// room, replacing this session's earlier ids of the same producer.
func (s *Session) holdProducer(id uint64, lp *partition.Partition, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.producerRoomLocked(id, lp, name); err != nil {
		return err
	}
	for old, sp := range s.producers {
		if sp.p == lp && sp.name == name {
			delete(s.producers, old)
		}
	}
	tenant := ""
	if pn, err := geofabric.ParsePartition(lp.Name()); err == nil {
		tenant = pn.Stream.Tenant
	}
	s.producers[id] = &sessProducer{name: name, p: lp, tenant: tenant}
	return nil
}

func (s *Session) send(c *transport.Send) {
	s.mu.Lock()
	p := s.producers[c.ProducerID]
	s.mu.Unlock()
	first := uint64(0)
	if len(c.Messages) > 0 {
		first = c.Messages[0].SequenceID
	}
	fail := func(err error) {
		e := wire.From(err)
		s.refused(e)
		s.reply(&transport.SendError{ProducerID: c.ProducerID, SequenceID: first, Code: e.Code, Message: e.Message, LeaderHint: e.LeaderHint})
	}
	if p == nil {
		fail(wire.Errorf(transport.CodeProducerNotFound, "no producer %d on this connection", c.ProducerID))
		return
	}
	if len(c.Messages) == 0 {
		fail(wire.Errorf(transport.CodeInvalidArgument, "a send needs at least one message"))
		return
	}
	size := 0
	for i, m := range c.Messages {
		size += len(m.Payload)
		if len(m.Payload) > s.cfg.MaxMessageBytes {
			fail(wire.Errorf(transport.CodeTooLarge, "message of %d bytes is above the limit of %d", len(m.Payload), s.cfg.MaxMessageBytes))
			return
		}
		if i > 0 && m.SequenceID <= c.Messages[i-1].SequenceID {
			fail(wire.Errorf(transport.CodeInvalidArgument, "sequence ids must increase within a send"))
			return
		}
	}
	switch transport.ErrorCode(p.refusedAll.Load()) {
	case transport.CodeDiskFull:
		fail(wire.Errorf(transport.CodeDiskFull, "an earlier send of this producer was refused for lack of disk space; create the producer again to resend in order"))
		return
	case transport.CodeRateLimited:
		fail(wire.Errorf(transport.CodeRateLimited, "an earlier send of this producer was refused by its tenant's publish rate limit; create the producer again to resend in order"))
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, requestTimeout)
	defer cancel()
	if s.cfg.Throttle != nil {
		// Held here, in order: the connection's later requests wait too,
		// as TCP makes its client wait.
		if err := s.cfg.Throttle(ctx, p.tenant, len(c.Messages), size); err != nil {
			if refusesLater(transport.CodeOf(err)) {
				p.refusedAll.Store(uint32(transport.CodeOf(err)))
			}
			fail(err)
			return
		}
	}
	p.p.Send(ctx, p.name, c.Messages, func(offsets []uint64, err error) {
		if err != nil {
			if code := transport.CodeOf(err); refusesLater(code) {
				p.refusedAll.Store(uint32(code))
			}
			fail(err)
			return
		}
		s.reply(&transport.SendReceipt{ProducerID: c.ProducerID, SequenceID: first, Offsets: offsets})
	})
}

func (s *Session) closeProducer(c *transport.CloseProducer) {
	s.mu.Lock()
	p := s.producers[c.ProducerID]
	delete(s.producers, c.ProducerID)
	s.mu.Unlock()
	if p != nil {
		p.p.ReleaseProducer(p.name, s)
	}
	if c.RequestID != 0 {
		s.reply(&transport.Success{RequestID: c.RequestID})
	}
}

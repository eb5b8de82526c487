package partition

import (
	"context"
	"time"

	"github.com/fabriq-io/fabriq/broker/fsm"
)

// ackReq is one consumer's acks waiting for commit.
type ackReq struct {
	sub         string
	offsets     []uint64
	cumulative  bool
	redelivered []uint64        // redelivery counts to add (SH-7)
	done        func(err error) // may be nil
}

// ack queues acks; done (if not nil) is called after commit.
func (p *Partition) ack(r *ackReq) {
	if !p.acker.put(r, p.stop, nil) && r.done != nil {
		r.done(ErrStopping)
	}
}

// maxAckEntryOffsets bounds the offsets of one ack entry.
const maxAckEntryOffsets = 256 << 10

// ackLoop gathers acks for AckInterval and commits them as one entry, in
// the acker's worker.
func (p *Partition) ackLoop() {
	idle := time.NewTimer(workerLinger)
	defer idle.Stop()
	for {
		first, ok := p.acker.next(idle)
		if !ok {
			return
		}
		reqs := []*ackReq{first}
		offsets := len(first.offsets) + len(first.redelivered)
		timer := time.NewTimer(p.cfg.AckInterval)
	gather:
		// An entry stays well under the log's limits: about 8 bytes per
		// offset.
		for len(reqs) < 10000 && offsets < maxAckEntryOffsets {
			select {
			case r := <-p.acker.queue:
				reqs = append(reqs, r)
				offsets += len(r.offsets) + len(r.redelivered)
			case <-timer.C:
				break gather
			case <-p.stop:
				timer.Stop()
				break gather
			}
		}
		timer.Stop()
		e := fsm.Acks{Acks: make([]fsm.SubAcks, len(reqs))}
		for i, r := range reqs {
			e.Acks[i] = fsm.SubAcks{Sub: r.sub, Offsets: r.offsets, Cumulative: r.cumulative, Redelivered: r.redelivered}
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.ApplyTimeout)
		errs, err := apply(ctx, p, e)
		cancel()
		for i, r := range reqs {
			rerr := err
			if rerr == nil && i < len(errs) && errs[i] != nil && len(r.offsets) > 0 {
				rerr = subscriptionNotFound(r.sub)
			}
			if rerr == nil {
				if d := p.dispatcherOf(r.sub); d != nil {
					d.acked(r.offsets, r.cumulative)
				}
			}
			if r.done != nil {
				r.done(rerr)
			}
		}
	}
}

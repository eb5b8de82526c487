package partition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fabriq-io/fabriq/broker/fsm"
	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/transport"
)

// sendReq is one producer's batch waiting for commit; with no messages it
// opens the producer (done gets no offsets; lastSeq is set).
type sendReq struct {
	producer string
	msgs     []transport.MessageData
	size     int
	lastSeq  int64
	done     func(offsets []uint64, err error)
}

// inflight is a proposed send entry and the requests it carries.
type inflight struct {
	future   raft.ApplyFuture
	reqs     []*sendReq
	proposed time.Time
}

// OpenProducer passes an empty batch for the producer through the write
// path, behind every send proposed before, and tells done the producer's
// last stored sequence id: read from the state machine directly it could
// miss sends still in flight (an earlier incarnation's, or a log tail a
// new leader has not applied yet), and the producer would reuse their ids.
func (p *Partition) OpenProducer(ctx context.Context, producer string, done func(lastSeq int64, err error)) {
	r := &sendReq{producer: producer}
	r.done = func(_ []uint64, err error) { done(r.lastSeq, err) }
	p.enqueue(ctx, r)
}

// Send queues a producer's batch; done is called once, with the offsets
// of its messages after commit, or with the error. It blocks while the
// queue is full (backpressure on the producer's connection) and fails if
// ctx ends first.
func (p *Partition) Send(ctx context.Context, producer string, msgs []transport.MessageData, done func(offsets []uint64, err error)) {
	p.enqueue(ctx, &sendReq{producer: producer, msgs: msgs, done: done})
}

// enqueue queues a send request; r.done is called once, after commit or
// on failure.
func (p *Partition) enqueue(ctx context.Context, r *sendReq) {
	if !p.group.IsLeader() {
		r.done(nil, p.notLeader())
		return
	}
	if len(r.msgs) > 0 {
		if err := p.checkQuota(); err != nil {
			r.done(nil, err)
			return
		}
	}
	r.size = entrySize(r.producer, r.msgs)
	if r.size > p.cfg.MaxEntryBytes {
		r.done(nil, wire.Errorf(transport.CodeTooLarge, "a send of about %d bytes, stored, is above the limit of %d", r.size, p.cfg.MaxEntryBytes))
		return
	}
	// Refused before it is proposed: once committed, every replica must
	// store it. A producer opening stores nothing and goes on.
	if len(r.msgs) > 0 {
		if err := p.admit(r.size); err != nil {
			r.done(nil, err)
			return
		}
	}
	if !p.proposer.put(r, p.stop, ctx.Done()) {
		if closed(p.stop) {
			r.done(nil, ErrStopping)
		} else {
			r.done(nil, wire.Errorf(transport.CodeTimeout, "send queue full: %v", ctx.Err()))
		}
	}
}

// recordOverhead bounds what the log adds to each message besides its
// fields (varints and length prefixes).
const recordOverhead = 64

// entrySize bounds the bytes a producer's batch takes in a Raft entry and
// in the log, where every record repeats the producer's name.
func entrySize(producer string, msgs []transport.MessageData) int {
	size := 64 + len(producer)
	for _, m := range msgs {
		size += recordOverhead + len(producer) + len(m.Payload) + len(m.Key) + len(m.OrderingKey)
		for k, v := range m.Properties {
			size += len(k) + len(v) + 16
		}
	}
	return size
}

// admit checks the node's free-space reserve for a send of size bytes.
func (p *Partition) admit(size int) error {
	if p.reserve == nil {
		return nil
	}
	return p.reserve.Admit(size)
}

// publishTime returns a leader publish time that never goes back.
func (p *Partition) publishTime() int64 {
	now := time.Now().UnixMilli()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastPublish = max(p.lastPublish, now)
	return p.lastPublish
}

// proposeLoop groups queued sends into entries and proposes them in order,
// in the proposer's worker. Order matters: a producer's sequence ids must
// reach the state machine in the order it sent them, or deduplication
// would drop the later-proposed lower ones; the worker runs one loop at a
// time.
func (p *Partition) proposeLoop() {
	var carry *sendReq // taken from the queue but too big for the last entry
	idle := time.NewTimer(workerLinger)
	defer idle.Stop()
	for {
		first := carry
		carry = nil
		if first == nil {
			var ok bool
			if first, ok = p.proposer.next(idle); !ok {
				return
			}
		}
		reqs := []*sendReq{first}
		size := first.size
	gather:
		for {
			select {
			case r := <-p.proposer.queue:
				if size+r.size > p.cfg.MaxEntryBytes {
					carry = r
					break gather
				}
				reqs = append(reqs, r)
				size += r.size
			default:
				break gather
			}
		}
		e := fsm.Send{PublishTime: p.publishTime(), Batches: make([]fsm.Batch, len(reqs))}
		for i, r := range reqs {
			e.Batches[i] = fsm.Batch{Producer: r.producer, Messages: fsmMessages(r.msgs)}
		}
		data, err := fsm.Encode(e)
		if err != nil {
			for _, r := range reqs {
				r.done(nil, err)
			}
			continue
		}
		proposed := time.Now()
		f := p.group.Propose(data, p.cfg.ApplyTimeout)
		if !p.committer.put(inflight{future: f, reqs: reqs, proposed: proposed}, p.stop, nil) {
			// The entry may still commit; its senders learn nothing
			// and retry with the same sequence ids, which dedup drops.
			for _, r := range reqs {
				r.done(nil, ErrStopping)
			}
			if carry != nil {
				carry.done(nil, ErrStopping)
			}
			p.proposer.halted()
			return
		}
	}
}

// commitLoop waits for proposed entries in order and answers their
// senders, in the committer's worker. Once the partition stops, what is in
// flight is answered all the same (commit: the group's closing fails what
// did not commit).
func (p *Partition) commitLoop() {
	idle := time.NewTimer(workerLinger)
	defer idle.Stop()
	for {
		in, ok := p.committer.next(idle)
		if !ok {
			return
		}
		p.commit(in)
	}
}

// commit waits for a proposed entry and answers its senders.
func (p *Partition) commit(in inflight) {
	err := p.group.Wait(in.future)
	if err == nil && p.cfg.OnCommit != nil {
		p.cfg.OnCommit(time.Since(in.proposed))
	}
	var results []fsm.SendResult
	if err == nil {
		results, err = fsm.Answer(fsm.Send{}, in.future.Response())
	}
	if err == nil {
		if len(results) != len(in.reqs) {
			err = fmt.Errorf("state machine answered %d results for %d batches", len(results), len(in.reqs))
		}
	}
	if err != nil {
		werr := p.raftError(err)
		for _, r := range in.reqs {
			r.done(nil, werr)
		}
		return
	}
	next := p.fsm.NextOffset()
	for i, r := range in.reqs {
		r.lastSeq = results[i].LastSeq
		if results[i].Err != nil {
			r.done(nil, sendRefusal(results[i].Err, r.msgs, results[i].LastSeq))
			continue
		}
		if len(r.msgs) > 0 && !heldOffsets(results[i].Offsets, len(r.msgs), next) {
			// Never expected: the state machine answers only for
			// what the log holds. Refused rather than acknowledged.
			p.logger.Error("state machine answered a send with offsets the log does not hold",
				"producer", r.producer, "offsets", results[i].Offsets, "messages", len(r.msgs), "next", next)
			r.done(nil, wire.Errorf(transport.CodeUnknown, "the send's offsets could not be confirmed; nothing is acknowledged"))
			continue
		}
		p.traffic.BytesIn.Add(uint64(payloadBytes(r.msgs)))
		r.done(results[i].Offsets, nil)
	}
}

// sendRefusal maps the state machine's refusal of a producer's batch to
// what the producer is told. Nothing of the batch was stored.
func sendRefusal(err error, msgs []transport.MessageData, lastSeq int64) error {
	ids := fmt.Sprintf("sequence id %d is", msgs[0].SequenceID)
	if n := len(msgs); n > 1 {
		ids = fmt.Sprintf("sequence ids %d..%d include one", msgs[0].SequenceID, msgs[n-1].SequenceID)
	}
	switch {
	case errors.Is(err, fsm.ErrSequenceGap):
		return wire.Errorf(transport.CodeOutOfOrderSequence,
			"%s below the producer's last stored id %d and never stored (an earlier send failed while a later one succeeded); nothing of the send is stored: send its messages again as new ones",
			ids, lastSeq)
	case errors.Is(err, fsm.ErrSequenceForgotten):
		return wire.Errorf(transport.CodeOutOfOrderSequence,
			"%s below the producer's last stored id %d and older than the last %d sends kept for deduplication: whether it was stored cannot be told, so nothing of the send is stored or acknowledged",
			ids, lastSeq, fsm.RecentSends)
	case errors.Is(err, fsm.ErrSequenceOrder):
		return wire.Errorf(transport.CodeInvalidArgument, "sequence ids must increase within a send")
	}
	return wire.Errorf(transport.CodeUnknown, "%v", err)
}

// heldOffsets reports whether offsets give each of n messages an offset the
// log holds (below next).
func heldOffsets(offsets []uint64, n int, next uint64) bool {
	if len(offsets) != n {
		return false
	}
	for _, o := range offsets {
		if o >= next {
			return false
		}
	}
	return true
}

// ClaimProducer reserves a producer name on the partition for a session
// (MSG-4: a second producer with the same name is refused). The session
// that holds the name may claim it again: a client re-attaching after a
// refused send.
func (p *Partition) ClaimProducer(name string, owner Holder) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.owners[name]; ok && s != owner {
		return false
	}
	p.owners[name] = owner
	return true
}

// ReleaseProducer frees a producer name its session held.
func (p *Partition) ReleaseProducer(name string, owner Holder) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.owners[name] == owner {
		delete(p.owners, name)
	}
}

func payloadBytes(msgs []transport.MessageData) int {
	n := 0
	for i := range msgs {
		n += len(msgs[i].Payload)
	}
	return n
}

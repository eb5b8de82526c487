package fsm

import (
	"errors"
	"fmt"
	"slices"

	"github.com/fabriq-io/fabriq/storage"
)

// Log is what applying entries does to the partition's log: append a
// committed batch, unless the log already holds the entry's messages (a
// replay after a restart: NextOffset is past them), and delete segments
// wholly below the replicated start. *storage.Log satisfies it. Nothing
// else of the log is read while applying, and what is read decides what
// is written, never the state.
type Log interface {
	NextOffset() uint64
	Append(raftIndex uint64, msgs []storage.Message) (uint64, error)
	TrimBefore(start uint64) (storage.RetainResult, error)
}

// handler applies the entries of one type: it decodes the body and
// applies it to the state.
type handler struct {
	name  string
	apply func(s *state, log Log, index uint64, body []byte) (any, error)
}

// handle returns the handler of the entries of command type C, which
// answer R.
func handle[R any, C Command[R]](name string, apply func(*state, Log, uint64, C) (R, error)) handler {
	return handler{name: name, apply: func(s *state, log Log, index uint64, body []byte) (any, error) {
		var c C
		if err := decodeBody(body, &c); err != nil {
			return nil, fmt.Errorf("decode %s entry: %w", name, err)
		}
		return apply(s, log, index, c)
	}}
}

// handlers is the dispatch table: every entry type the state machine
// knows, by number.
var handlers = map[entryType]handler{
	entrySend:               handle("send", applySend),
	entryCreateSubscription: handle("create subscription", applyCreateSubscription),
	entryAcks:               handle("acks", applyAcks),
	entryDeleteSubscription: handle("delete subscription", applyDeleteSubscription),
	entrySeek:               handle("seek", applySeek),
	entryJoin:               handle("join", applyJoin),
	entryLeave:              handle("leave", applyLeave),
	entryRetain:             handle("retain", applyRetain),
}

// The apply functions below are the processor: each is a deterministic
// function of the state, the log and the entry (and its Raft index) — no
// clock, no randomness, no map order in what they answer. A domain error
// is an answer; an error they return stops the state machine (errAppend)
// or the node.

// applySend stores the new messages of every batch in the log and answers
// each batch (MSG-4). When the log cannot take them, the state is left as
// it was and the error wraps errAppend: nothing of the entry is applied.
func applySend(s *state, log Log, index uint64, e Send) ([]SendResult, error) {
	results := make([]SendResult, len(e.Batches))
	total := 0
	for _, b := range e.Batches {
		total += len(b.Messages)
	}
	// Sized once: appended to one by one, the entry's messages cost
	// twice their size in allocations.
	msgs := make([]storage.Message, 0, total)
	next := s.Next
	// The producers' states as they were, to put back if the log cannot
	// take the batch (nil: the producer was not known).
	before := map[string]*producer{}
	for i, b := range e.Batches {
		p := s.Producers[b.Producer]
		if len(b.Messages) == 0 {
			// A producer opening: it learns its last stored sequence
			// id after every send proposed before it.
			results[i] = SendResult{LastSeq: lastSeqOf(p)}
			continue
		}
		if _, ok := before[b.Producer]; !ok {
			before[b.Producer] = p.clone()
		}
		if err := p.refusal(b.Messages); err != nil {
			if errors.Is(err, ErrSequenceForgotten) {
				// Older versions acknowledged such a batch, and the
				// producer's publish time moved on; it still does, so
				// that replicas replaying their entries agree on when
				// the producer expires.
				p.LastTime = e.PublishTime
			}
			results[i] = SendResult{LastSeq: lastSeqOf(p), Err: err}
			continue
		}
		if p == nil {
			p = &producer{}
			s.Producers[b.Producer] = p
		}
		var offsets []uint64
		offsets, msgs, next = p.take(b, e.PublishTime, msgs, next)
		results[i] = SendResult{Offsets: offsets, LastSeq: int64(p.LastSeq)}
	}
	if err := appendOnce(s, log, index, msgs, before); err != nil {
		return nil, err
	}
	s.Next = next
	s.expireProducers(index, e.PublishTime)
	return results, nil
}

// appendOnce appends an entry's messages to the log, unless the log holds
// them already: a replay after a restart, whose offsets come out the
// same. Whether it does is told by offsets, not Raft indexes: the log only
// ever holds committed messages, in order, so it holds (or has trimmed)
// every message below its next offset. A log trimmed down to an active
// segment that then lost its unsynced batches (a power loss) knows no
// Raft index of its own, and still knows where it ends. When the log
// cannot take the messages, the producers' states are put back as they
// were (before) and the error wraps errAppend.
func appendOnce(s *state, log Log, index uint64, msgs []storage.Message, before map[string]*producer) error {
	if len(msgs) == 0 {
		return nil
	}
	if held := log.NextOffset(); s.Next < held {
		if end := s.Next + uint64(len(msgs)); end > held {
			return fmt.Errorf("the log ends at offset %d, inside the entry's messages %d..%d", held, s.Next, end-1)
		}
		return nil
	}
	off, err := log.Append(index, msgs)
	if err != nil {
		for name, p := range before {
			if p == nil {
				delete(s.Producers, name)
			} else {
				s.Producers[name] = p
			}
		}
		return fmt.Errorf("%w: %w", errAppend, err)
	}
	if off != s.Next {
		return fmt.Errorf("log gave offset %d, state machine expected %d", off, s.Next)
	}
	return nil
}

// applyCreateSubscription applies an entry only older versions wrote
// (entryCreateSubscription).
func applyCreateSubscription(s *state, _ Log, _ uint64, e createSubscription) (createResult, error) {
	if sub, ok := s.Subs[e.Name]; ok {
		return createResult{Mode: sub.Mode}, nil
	}
	s.Subs[e.Name] = s.newSubscription(e.Mode, e.Initial)
	return createResult{Created: true, Mode: e.Mode}, nil
}

// applyJoin creates the subscription if needed and adds or renews the
// member, with the entry's index as its generation. A join that another
// mode or key policy refuses (SUB-2), or that the entry's limit of
// subscriptions refuses, changes nothing.
func applyJoin(s *state, _ Log, index uint64, e Join) (JoinResult, error) {
	sub, ok := s.Subs[e.Sub]
	if !ok && e.MaxSubs > 0 && len(s.Subs) >= e.MaxSubs {
		return JoinResult{Err: &TooManySubscriptionsError{Max: e.MaxSubs}}, nil
	}
	if !ok {
		sub = s.newSubscription(e.Mode, e.Initial)
		s.Subs[e.Sub] = sub
	}
	active := Policy{Mode: sub.Mode, KeyMode: sub.KeyMode, OutOfOrder: sub.OutOfOrder}
	requested := Policy{Mode: e.Mode, KeyMode: e.KeyMode, OutOfOrder: e.OutOfOrder}
	switch {
	case len(sub.Members) == 0:
		sub.Mode, sub.KeyMode, sub.OutOfOrder = e.Mode, e.KeyMode, e.OutOfOrder
	case active.Mode != requested.Mode,
		requested.Mode == KeyShared && (active.KeyMode != requested.KeyMode || active.OutOfOrder != requested.OutOfOrder):
		return JoinResult{Err: &ModeMismatchError{Active: active, Requested: requested}}, nil
	}
	m := e.Member
	m.Gen = index
	if i := slices.IndexFunc(sub.Members, func(o Member) bool { return o.Name == m.Name }); i >= 0 {
		sub.Members[i] = m // a rejoin keeps its place in the join order
	} else {
		sub.Members = append(sub.Members, m)
	}
	return JoinResult{Gen: index}, nil
}

// applyLeave removes the members the entry names, of the same generation
// (any, for Gen 0).
func applyLeave(s *state, _ Log, _ uint64, e Leave) (struct{}, error) {
	if sub := s.Subs[e.Sub]; sub != nil {
		sub.Members = slices.DeleteFunc(sub.Members, func(m Member) bool {
			return slices.ContainsFunc(e.Members, func(l Member) bool { return l.Name == m.Name && (l.Gen == 0 || l.Gen == m.Gen) })
		})
	}
	return struct{}{}, nil
}

// applyDeleteSubscription deletes a subscription, if it exists.
func applyDeleteSubscription(s *state, _ Log, _ uint64, e DeleteSubscription) (struct{}, error) {
	delete(s.Subs, e.Name)
	return struct{}{}, nil
}

// applySeek resets a subscription's cursor at the offset, or at the
// partition's start if it is below, and forgets its redelivery counts.
func applySeek(s *state, _ Log, _ uint64, e Seek) (error, error) {
	sub := s.Subs[e.Name]
	if sub == nil {
		return ErrSubscriptionNotFound, nil
	}
	sub.Cursor.Reset(max(e.Offset, s.Start))
	sub.Redeliveries = nil
	return nil, nil
}

// applyAcks acknowledges offsets below Next on their subscriptions, and
// counts the redeliveries the leader reports (SH-7).
func applyAcks(s *state, _ Log, _ uint64, e Acks) ([]error, error) {
	errs := make([]error, len(e.Acks))
	for i, a := range e.Acks {
		sub := s.Subs[a.Sub]
		if sub == nil {
			errs[i] = ErrSubscriptionNotFound
			continue
		}
		for _, o := range a.Redelivered {
			if o < s.Next && !sub.Cursor.IsAcked(o) {
				if sub.Redeliveries == nil {
					sub.Redeliveries = map[uint64]uint32{}
				}
				sub.Redeliveries[o]++
			}
		}
		for _, o := range a.Offsets {
			if o >= s.Next {
				continue // the leader checks; an entry is applied as it is
			}
			if a.Cumulative {
				sub.Cursor.AckCumulative(o)
			} else {
				sub.Cursor.Ack(o)
			}
		}
		if len(a.Offsets) > 0 && len(sub.Redeliveries) > 0 {
			if a.Cumulative {
				sub.forgetAcked()
			} else {
				for _, o := range a.Offsets {
					delete(sub.Redeliveries, o)
				}
			}
		}
	}
	return errs, nil
}

// applyRetain moves the start offset up to the entry's (never back, never
// past Next) and the cursors below it or below AckBelow up to it, then
// trims the log below the new start.
func applyRetain(s *state, log Log, _ uint64, e Retain) (struct{}, error) {
	start := max(min(e.Start, s.Next), s.Start)
	floor := min(max(e.AckBelow, start), s.Next)
	// Subscriptions are independent of each other: the order they are
	// visited in changes nothing.
	for _, sub := range s.Subs {
		if floor > 0 && sub.Cursor.Floor < floor {
			sub.Cursor.AckCumulative(floor - 1)
			sub.forgetAcked()
		}
	}
	s.Start = start
	trim(log, s.Start)
	return struct{}{}, nil
}

// trim deletes the log's sealed segments wholly below the replicated
// start; the log finds which, so nothing here reads where the local log
// starts. A failure (a file that cannot be removed) leaves disk space in
// use but changes nothing that is served: reads below Start are refused
// whatever the log holds. The partition's retention loop tries again and
// logs it.
func trim(log Log, start uint64) {
	if start > 0 {
		_, _ = log.TrimBefore(start)
	}
}

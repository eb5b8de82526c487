package fsm

import (
	"slices"
	"time"

	"github.com/fabriq-io/fabriq/storage"
)

// producerTTL is how long a producer's dedup state outlives its last send,
// in publish time. Expiry is checked every expiryEvery Raft indexes, so
// every replica drops the same producers at the same entry.
const (
	producerTTL = 24 * time.Hour
	expiryEvery = 1024
)

// RecentSends is how many runs of consecutive sequence ids, with their
// offsets, a producer's state remembers, so that a retried duplicate is
// answered with its first offsets (MSG-4). A producer numbering its
// messages consecutively, as the Go client does, stores one run per send:
// its last 64 sends.
const RecentSends = 64

// noOffset marks an offset that is not known.
const noOffset = ^uint64(0)

// producer is a producer's deduplication state.
type producer struct {
	LastSeq  uint64     `msgpack:"l"`
	Recent   []seqRange `msgpack:"r"`
	LastTime int64      `msgpack:"t"` // publish time of its last send
}

// seqRange maps a run of sequence ids to consecutive offsets.
type seqRange struct {
	First  uint64 `msgpack:"f"`
	Last   uint64 `msgpack:"l"`
	Offset uint64 `msgpack:"o"`
}

// lastSeqOf returns a producer's last stored sequence id, -1 if none.
func lastSeqOf(p *producer) int64 {
	if !p.known() {
		return -1
	}
	return int64(p.LastSeq)
}

// known reports whether the producer has stored anything, so that LastSeq
// means something.
func (p *producer) known() bool {
	return p != nil && (p.LastSeq > 0 || len(p.Recent) > 0)
}

// clone returns a deep copy; nil for nil.
func (p *producer) clone() *producer {
	if p == nil {
		return nil
	}
	c := *p
	c.Recent = slices.Clone(p.Recent)
	return &c
}

func (p *producer) offsetOf(seq uint64) uint64 {
	for _, r := range p.Recent {
		if seq >= r.First && seq <= r.Last {
			return r.Offset + (seq - r.First)
		}
	}
	return noOffset
}

// refusal returns why a batch of the producer (nil for one never seen)
// cannot be taken as it is, or nil when each of its ids is either above
// the last stored one or a duplicate whose offset is remembered. Every
// stored id from the window's oldest up is remembered (ids are stored in
// increasing order), so an id inside the window and not found was never
// stored.
func (p *producer) refusal(msgs []Message) error {
	for j := 1; j < len(msgs); j++ {
		if msgs[j].SequenceID <= msgs[j-1].SequenceID {
			return ErrSequenceOrder
		}
	}
	if !p.known() {
		return nil
	}
	var gap, forgotten bool
	for _, m := range msgs {
		if m.SequenceID > p.LastSeq {
			break // the rest are new
		}
		switch {
		case p.offsetOf(m.SequenceID) != noOffset:
		case len(p.Recent) > 0 && m.SequenceID >= p.Recent[0].First:
			gap = true
		default:
			forgotten = true
		}
	}
	switch {
	case gap:
		return ErrSequenceGap
	case forgotten:
		return ErrSequenceForgotten
	}
	return nil
}

// take stores a batch of the producer that refusal found nothing against:
// its new ids get offsets from next on, and their messages are added to
// msgs for the log; its duplicates are answered with the offsets they were
// stored at. It returns the batch's offsets, msgs and the next offset.
func (p *producer) take(b Batch, publishTime int64, msgs []storage.Message, next uint64) ([]uint64, []storage.Message, uint64) {
	p.LastTime = publishTime
	offsets := make([]uint64, len(b.Messages))
	var runs []seqRange
	for j, m := range b.Messages {
		if p.known() && m.SequenceID <= p.LastSeq {
			offsets[j] = p.offsetOf(m.SequenceID) // refusal found it
			continue
		}
		p.LastSeq = m.SequenceID
		// A run maps consecutive ids to consecutive offsets: an id that
		// skips one starts a new run, so the skipped id is never taken
		// for stored.
		if n := len(runs); n > 0 && runs[n-1].Last+1 == m.SequenceID {
			runs[n-1].Last = m.SequenceID
		} else {
			runs = append(runs, seqRange{First: m.SequenceID, Last: m.SequenceID, Offset: next})
		}
		offsets[j] = next
		next++
		msgs = append(msgs, stored(b.Producer, m, publishTime))
	}
	// Remembered at once, so that a resend later in this entry is
	// answered with these offsets.
	p.Recent = append(p.Recent, runs...)
	if len(p.Recent) > RecentSends {
		p.Recent = p.Recent[len(p.Recent)-RecentSends:]
	}
	return offsets, msgs, next
}

// stored returns a message as the log stores it: with its producer's name,
// and the entry's publish time if it has none of its own.
func stored(producer string, m Message, publishTime int64) storage.Message {
	pt := m.PublishTime
	if pt == 0 {
		pt = publishTime
	}
	return storage.Message{
		PublishTime:  pt,
		EventTime:    m.EventTime,
		ProducerName: producer,
		SequenceID:   m.SequenceID,
		Key:          m.Key,
		OrderingKey:  m.OrderingKey,
		Properties:   m.Properties,
		Payload:      m.Payload,
	}
}

// expireProducers drops the state of the producers silent for longer than
// producerTTL in publish time; only entries whose index is a multiple of
// expiryEvery do it.
func (s *state) expireProducers(index uint64, publishTime int64) {
	if index%expiryEvery != 0 {
		return
	}
	for name, p := range s.Producers {
		if publishTime-p.LastTime > producerTTL.Milliseconds() {
			delete(s.Producers, name)
		}
	}
}

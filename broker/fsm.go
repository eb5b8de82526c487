package broker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fabriq-io/fabriq/cluster"
	"github.com/fabriq-io/fabriq/storage"
	"github.com/fabriq-io/fabriq/subscription"
	"github.com/fabriq-io/fabriq/transport"
)

// entryType is the first byte of every partition Raft entry; the rest is
// the msgpack body of the matching entry struct.
type entryType uint8

// Entry types. Never renumber: they are in every replica's Raft log.
const (
	entrySend entryType = iota + 1
	entryCreateSubscription
	entryAcks
	entryDeleteSubscription
	entrySeek
	entryJoin
	entryLeave
	entryRetain
)

// sendEntry is a group of producers' batches committed as one Raft entry.
type sendEntry struct {
	// PublishTime stamps messages that carry none; the leader sets it.
	PublishTime int64        `msgpack:"pt"`
	Batches     []batchEntry `msgpack:"b"`
}

type batchEntry struct {
	Producer string                  `msgpack:"p"`
	Messages []transport.MessageData `msgpack:"m"`
}

// sendResult is what applying one batchEntry gives: the offset of each of
// its messages (a duplicate's is the offset it was first stored at), the
// producer's last stored sequence id afterwards (-1 for none), and Err for
// a batch refused whole, which stores nothing and has no offsets.
type sendResult struct {
	Offsets []uint64
	LastSeq int64
	Err     error
}

// Why a batch is refused whole. An id at or below the producer's last
// stored one is answered only when the state machine can prove it stored
// and knows where (MSG-4); acknowledging one it cannot prove would answer
// for a message the log may not hold.
var (
	// errSequenceGap: an id below the last stored one, inside the window
	// of remembered sends, and not stored: an earlier send failed and a
	// later one succeeded. Acknowledging it as a duplicate would lose it.
	errSequenceGap = errors.New("sequence gap")
	// errSequenceForgotten: an id older than the window of remembered
	// sends. It may have been stored long ago or never: the two cannot be
	// told apart, so it is refused rather than acknowledged.
	errSequenceForgotten = errors.New("sequence older than the deduplication window")
	// errSequenceOrder: ids that do not increase within the batch. The
	// leader refuses such a send before proposing it.
	errSequenceOrder = errors.New("sequence ids do not increase within the batch")
)

// lastSeqOf returns a producer's last stored sequence id, -1 if none.
func lastSeqOf(p *producerState) int64 {
	if !p.known() {
		return -1
	}
	return int64(p.LastSeq)
}

// known reports whether the producer has stored anything, so that LastSeq
// means something.
func (p *producerState) known() bool {
	return p != nil && (p.LastSeq > 0 || len(p.Recent) > 0)
}

// refusal returns why a batch of the producer (nil for one never seen)
// cannot be taken as it is, or nil when each of its ids is either above
// the last stored one or a duplicate whose offset is remembered. Every
// stored id from the window's oldest up is remembered (ids are stored in
// increasing order), so an id inside the window and not found was never
// stored.
func (p *producerState) refusal(msgs []transport.MessageData) error {
	for j := 1; j < len(msgs); j++ {
		if msgs[j].SequenceID <= msgs[j-1].SequenceID {
			return errSequenceOrder
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
		return errSequenceGap
	case forgotten:
		return errSequenceForgotten
	}
	return nil
}

// noOffset marks an offset that is not known.
const noOffset = ^uint64(0)

type createSubscriptionEntry struct {
	Name    string                     `msgpack:"n"`
	Mode    transport.SubscriptionMode `msgpack:"m"`
	Initial transport.InitialPosition  `msgpack:"i"`
}

type ackEntry struct {
	Acks []subAcks `msgpack:"a"`
}

type subAcks struct {
	Sub        string   `msgpack:"s"`
	Offsets    []uint64 `msgpack:"o"`
	Cumulative bool     `msgpack:"c,omitempty"`
	// Redelivered are offsets the leader delivered again: each adds one
	// to the message's redelivery count (SH-7).
	Redelivered []uint64 `msgpack:"rd,omitempty"`
}

// memberState is a consumer of a subscription as the replicated state
// knows it: enough for a new leader to give it back its role (SUB-7).
type memberState struct {
	Name     string                `msgpack:"n"`
	Priority int32                 `msgpack:"p,omitempty"`
	Ranges   []transport.HashRange `msgpack:"r,omitempty"` // sticky key_shared
	// Gen is the Raft index of the member's last join; a leave names it,
	// so that a leave overtaken by the consumer's rejoin removes nothing.
	Gen uint64 `msgpack:"g"`
}

// joinEntry creates a subscription if needed and adds (or renews) one of
// its members. The leader checks the join first; the state machine checks
// the mode again, so that an entry of a deposed leader cannot mix modes.
type joinEntry struct {
	Sub        string                     `msgpack:"s"`
	Mode       transport.SubscriptionMode `msgpack:"m"`
	Initial    transport.InitialPosition  `msgpack:"i"`
	KeyMode    transport.KeySharedMode    `msgpack:"km,omitempty"`
	OutOfOrder bool                       `msgpack:"oo,omitempty"`
	Member     memberState                `msgpack:"c"`
	// MaxSubs, when not zero, refuses to create the subscription if the
	// partition has that many: the leader's limit, carried in the entry
	// so that every replica decides alike.
	MaxSubs int `msgpack:"ms,omitempty"`
}

// leaveEntry removes members of a subscription.
type leaveEntry struct {
	Sub     string        `msgpack:"s"`
	Members []memberState `msgpack:"c"` // Name and Gen
}

// joinResult answers a joinEntry: the member's generation, or Err.
type joinResult struct {
	Gen uint64
	Err error
}

type deleteSubscriptionEntry struct {
	Name string `msgpack:"n"`
}

type seekEntry struct {
	Name   string `msgpack:"n"`
	Offset uint64 `msgpack:"o"`
}

// encodeEntry returns the Raft bytes of an entry.
func encodeEntry(t entryType, body any) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(byte(t))
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(body); err != nil {
		return nil, fmt.Errorf("broker: encode entry: %w", err)
	}
	return buf.Bytes(), nil
}

// producerTTL is how long a producer's dedup state outlives its last send,
// in publish time. Expiry is checked every expiryEvery Raft indexes, so
// every replica drops the same producers at the same entry.
const (
	producerTTL = 24 * time.Hour
	expiryEvery = 1024
)

// recentSends is how many runs of consecutive sequence ids, with their
// offsets, a producer's state remembers, so that a retried duplicate is
// answered with its first offsets (MSG-4). A producer numbering its
// messages consecutively, as the Go client does, stores one run per send:
// its last 64 sends.
const recentSends = 64

// producerState is a producer's deduplication state.
type producerState struct {
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

// clone returns a deep copy; nil for nil.
func (p *producerState) clone() *producerState {
	if p == nil {
		return nil
	}
	c := *p
	c.Recent = slices.Clone(p.Recent)
	return &c
}

func (p *producerState) offsetOf(seq uint64) uint64 {
	for _, r := range p.Recent {
		if seq >= r.First && seq <= r.Last {
			return r.Offset + (seq - r.First)
		}
	}
	return noOffset
}

// subState is a subscription's replicated state.
type subState struct {
	Mode   transport.SubscriptionMode `msgpack:"m"`
	Cursor *subscription.Cursor       `msgpack:"c"`
	// KeyMode and OutOfOrder are a key_shared subscription's policy.
	KeyMode    transport.KeySharedMode `msgpack:"km,omitempty"`
	OutOfOrder bool                    `msgpack:"oo,omitempty"`
	// Members are the consumers in join order (SUB-7).
	Members []memberState `msgpack:"ms,omitempty"`
	// Redeliveries counts the deliveries after the first of unacked
	// messages (SH-7).
	Redeliveries map[uint64]uint32 `msgpack:"rd,omitempty"`
}

// clone returns a deep copy.
func (s *subState) clone() *subState {
	c := *s
	c.Cursor = s.Cursor.Clone()
	c.Members = slices.Clone(s.Members)
	for i := range c.Members {
		c.Members[i].Ranges = slices.Clone(c.Members[i].Ranges)
	}
	if s.Redeliveries != nil {
		c.Redeliveries = maps.Clone(s.Redeliveries)
	}
	return &c
}

// forgetAcked drops the redelivery counts of acknowledged messages.
func (s *subState) forgetAcked() {
	for o := range s.Redeliveries {
		if s.Cursor.IsAcked(o) {
			delete(s.Redeliveries, o)
		}
	}
}

// fsmState is everything the partition state machine holds besides the
// log itself. It is what a snapshot writes before the log's stream.
type fsmState struct {
	// Next is the offset the next message gets; after every apply it
	// equals the log's NextOffset.
	Next      uint64                    `msgpack:"n"`
	Producers map[string]*producerState `msgpack:"p"`
	Subs      map[string]*subState      `msgpack:"s"`
	// Start is the first offset the partition serves, as retention
	// entries set it: every replica serves from here, whatever its own
	// log still holds below it.
	Start uint64 `msgpack:"st,omitempty"`
}

// fsm is a partition's Raft state machine: it appends committed batches to
// the log, keeps producer deduplication state and the subscriptions'
// cursors. Apply runs on Raft's goroutine; readers (the dispatcher, stats)
// take mu.
type fsm struct {
	log     *storage.Log
	snapDir string // where log snapshots are made, on the log's file system
	// applied is called after each entry is applied, with the log's next
	// offset and whether the entry only added messages, so the leader's
	// dispatchers can wake up. It must not block.
	applied func(next uint64, data bool)
	// halted is told, once and from Raft's goroutine, that the log could
	// not take a committed entry (a full disk, an I/O error): the state
	// machine has stopped, and the group must be closed on this node. It
	// must not block. May be nil.
	halted func(error)

	mu    sync.RWMutex
	state fsmState
	// failed is why the state machine stopped, nil while it runs. Once
	// set it applies nothing and takes no snapshot: the entry that failed
	// and every later one are replayed from Raft when the partition opens
	// again, so none of them counts as applied.
	failed error
}

// errHalted answers every entry once the state machine has stopped
// because its log could not take a committed entry.
var errHalted = errors.New("partition state machine stopped: its log cannot append")

// errAppend marks a log that failed to take a committed batch, as opposed
// to an entry that does not decode.
var errAppend = errors.New("append to the log")

func newFSM(log *storage.Log, snapDir string, applied func(uint64, bool)) *fsm {
	return &fsm{
		log:     log,
		snapDir: snapDir,
		applied: applied,
		state: fsmState{
			// Without a snapshot Raft replays its log from the first
			// entry, whose messages went to offset 0.
			Next:      0,
			Producers: map[string]*producerState{},
			Subs:      map[string]*subState{},
		},
	}
}

// Apply applies one committed entry. Domain errors are returned as values
// (error); an entry that cannot be decoded stops the node: continuing
// would let replicas diverge. A log that cannot take a committed batch
// stops this state machine (errHalted, and the halted callback), not the
// node: hashicorp/raft cannot be told that an entry failed, so every later
// entry is answered errHalted, unapplied, until the group is closed.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	if len(l.Data) == 0 {
		panic(fmt.Sprintf("broker: empty partition entry at raft index %d", l.Index))
	}
	res, next, failed := f.apply(l)
	if failed != nil {
		if f.halted != nil {
			f.halted(failed)
		}
		return res
	}
	if haltedError(res) != nil {
		return res
	}
	// Told after the lock is released: the callback takes the
	// partition's lock, which is taken before this one elsewhere.
	if f.applied != nil {
		f.applied(next, entryType(l.Data[0]) == entrySend)
	}
	return res
}

// apply applies one entry under the lock and returns its result and the
// next offset; failed is set when this entry stopped the state machine.
func (f *fsm) apply(l *raft.Log) (res any, next uint64, failed error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed != nil {
		return fmt.Errorf("%w: %v", errHalted, f.failed), f.state.Next, nil
	}
	var err error
	body := l.Data[1:]
	switch entryType(l.Data[0]) {
	case entrySend:
		res, err = f.applySend(l.Index, body)
	case entryCreateSubscription:
		res, err = f.applyCreateSubscription(body)
	case entryAcks:
		res, err = f.applyAcks(body)
	case entryDeleteSubscription:
		var e deleteSubscriptionEntry
		if err = msgpack.Unmarshal(body, &e); err == nil {
			delete(f.state.Subs, e.Name)
		}
	case entrySeek:
		var e seekEntry
		if err = msgpack.Unmarshal(body, &e); err == nil {
			if s := f.state.Subs[e.Name]; s != nil {
				s.Cursor.Reset(max(e.Offset, f.state.Start))
				s.Redeliveries = nil
			} else {
				res = errSubscriptionNotFound
			}
		}
	case entryJoin:
		res, err = f.applyJoin(l.Index, body)
	case entryRetain:
		err = f.applyRetain(body)
	case entryLeave:
		var e leaveEntry
		if err = msgpack.Unmarshal(body, &e); err == nil {
			if s := f.state.Subs[e.Sub]; s != nil {
				s.Members = slices.DeleteFunc(s.Members, func(m memberState) bool {
					return slices.ContainsFunc(e.Members, func(l memberState) bool { return l.Name == m.Name && (l.Gen == 0 || l.Gen == m.Gen) })
				})
			}
		}
	default:
		panic(fmt.Sprintf("broker: unknown partition entry type %d at raft index %d", l.Data[0], l.Index))
	}
	if errors.Is(err, errAppend) {
		f.failed = fmt.Errorf("raft index %d: %w", l.Index, err)
		return fmt.Errorf("%w: %v", errHalted, f.failed), f.state.Next, f.failed
	}
	if err != nil {
		panic(fmt.Sprintf("broker: partition entry at raft index %d: %v", l.Index, err))
	}
	return res, f.state.Next, nil
}

// errSubscriptionNotFound is returned by entries naming a subscription that
// does not exist.
var errSubscriptionNotFound = errors.New("subscription not found")

func (f *fsm) applySend(index uint64, body []byte) ([]sendResult, error) {
	var e sendEntry
	if err := msgpack.Unmarshal(body, &e); err != nil {
		return nil, err
	}
	results := make([]sendResult, len(e.Batches))
	var msgs []storage.Message
	next := f.state.Next
	// The producers' states as they were, to put back if the log cannot
	// take the batch (nil: the producer was not known).
	before := map[string]*producerState{}
	for i, b := range e.Batches {
		p := f.state.Producers[b.Producer]
		if len(b.Messages) == 0 {
			// A producer opening: it learns its last stored sequence
			// id after every send proposed before it.
			results[i] = sendResult{LastSeq: lastSeqOf(p)}
			continue
		}
		if _, ok := before[b.Producer]; !ok {
			before[b.Producer] = p.clone()
		}
		if err := p.refusal(b.Messages); err != nil {
			if errors.Is(err, errSequenceForgotten) {
				// Older versions acknowledged such a batch, and the
				// producer's publish time moved on; it still does, so
				// that replicas replaying their entries agree on when
				// the producer expires.
				p.LastTime = e.PublishTime
			}
			results[i] = sendResult{LastSeq: lastSeqOf(p), Err: err}
			continue
		}
		if p == nil {
			p = &producerState{}
			f.state.Producers[b.Producer] = p
		}
		p.LastTime = e.PublishTime
		offsets := make([]uint64, len(b.Messages))
		var runs []seqRange
		for j, m := range b.Messages {
			if p.known() && m.SequenceID <= p.LastSeq {
				offsets[j] = p.offsetOf(m.SequenceID) // refusal found it
				continue
			}
			p.LastSeq = m.SequenceID
			// A run maps consecutive ids to consecutive offsets: an id
			// that skips one starts a new run, so the skipped id is
			// never taken for stored.
			if n := len(runs); n > 0 && runs[n-1].Last+1 == m.SequenceID {
				runs[n-1].Last = m.SequenceID
			} else {
				runs = append(runs, seqRange{First: m.SequenceID, Last: m.SequenceID, Offset: next})
			}
			offsets[j] = next
			next++
			pt := m.PublishTime
			if pt == 0 {
				pt = e.PublishTime
			}
			msgs = append(msgs, storage.Message{
				PublishTime:  pt,
				EventTime:    m.EventTime,
				ProducerName: b.Producer,
				SequenceID:   m.SequenceID,
				Key:          m.Key,
				OrderingKey:  m.OrderingKey,
				Properties:   m.Properties,
				Payload:      m.Payload,
			})
		}
		// Remembered at once, so that a resend later in this entry is
		// answered with these offsets.
		p.Recent = append(p.Recent, runs...)
		if len(p.Recent) > recentSends {
			p.Recent = p.Recent[len(p.Recent)-recentSends:]
		}
		results[i] = sendResult{Offsets: offsets, LastSeq: int64(p.LastSeq)}
	}
	if len(msgs) > 0 {
		if index > f.log.LastRaftIndex() {
			off, err := f.log.Append(index, msgs)
			if err != nil {
				// Nothing of this entry counts as applied.
				for name, p := range before {
					if p == nil {
						delete(f.state.Producers, name)
					} else {
						f.state.Producers[name] = p
					}
				}
				return nil, fmt.Errorf("%w: %w", errAppend, err)
			}
			if off != f.state.Next {
				return nil, fmt.Errorf("log gave offset %d, state machine expected %d", off, f.state.Next)
			}
		}
		// Otherwise the batch is already in the log: a replay after a
		// restart. The offsets are the same either way.
	}
	f.state.Next = next
	if index%expiryEvery == 0 {
		for name, p := range f.state.Producers {
			if e.PublishTime-p.LastTime > producerTTL.Milliseconds() {
				delete(f.state.Producers, name)
			}
		}
	}
	return results, nil
}

// createResult says whether a subscription was created or existed.
type createResult struct {
	Created bool
	Mode    transport.SubscriptionMode
}

func (f *fsm) applyCreateSubscription(body []byte) (createResult, error) {
	var e createSubscriptionEntry
	if err := msgpack.Unmarshal(body, &e); err != nil {
		return createResult{}, err
	}
	if s, ok := f.state.Subs[e.Name]; ok {
		return createResult{Mode: s.Mode}, nil
	}
	floor := f.state.Next // latest (SUB-3): nothing before now
	if e.Initial == transport.Earliest {
		floor = f.state.Start
	}
	f.state.Subs[e.Name] = &subState{Mode: e.Mode, Cursor: subscription.NewCursor(floor)}
	return createResult{Created: true, Mode: e.Mode}, nil
}

// errModeMismatch refuses a join whose mode or key_shared policy differs
// from the subscription's while it has members (SUB-2).
type errModeMismatch struct {
	active, requested string
}

func (e *errModeMismatch) Error() string {
	return fmt.Sprintf(msgSubscriptionType, e.active, e.requested)
}

// errTooManySubscriptions refuses a join that would create a
// subscription on a partition that has as many as the limit.
type errTooManySubscriptions struct{ max int }

func (e *errTooManySubscriptions) Error() string {
	return fmt.Sprintf("the partition has %d subscriptions, the limit (--max-subscriptions-per-partition)", e.max)
}

func (f *fsm) applyJoin(index uint64, body []byte) (joinResult, error) {
	var e joinEntry
	if err := msgpack.Unmarshal(body, &e); err != nil {
		return joinResult{}, err
	}
	s, ok := f.state.Subs[e.Sub]
	if !ok && e.MaxSubs > 0 && len(f.state.Subs) >= e.MaxSubs {
		return joinResult{Err: &errTooManySubscriptions{max: e.MaxSubs}}, nil
	}
	if !ok {
		floor := f.state.Next // latest (SUB-3): nothing before now
		if e.Initial == transport.Earliest {
			floor = f.state.Start
		}
		s = &subState{Mode: e.Mode, Cursor: subscription.NewCursor(floor)}
		f.state.Subs[e.Sub] = s
	}
	if len(s.Members) == 0 {
		s.Mode, s.KeyMode, s.OutOfOrder = e.Mode, e.KeyMode, e.OutOfOrder
	} else if s.Mode != e.Mode {
		return joinResult{Err: &errModeMismatch{modeName(s.Mode), modeName(e.Mode)}}, nil
	} else if e.Mode == transport.KeyShared && (s.KeyMode != e.KeyMode || s.OutOfOrder != e.OutOfOrder) {
		return joinResult{Err: &errModeMismatch{keyPolicyName(s.KeyMode, s.OutOfOrder), keyPolicyName(e.KeyMode, e.OutOfOrder)}}, nil
	}
	m := e.Member
	m.Gen = index
	if i := slices.IndexFunc(s.Members, func(o memberState) bool { return o.Name == m.Name }); i >= 0 {
		s.Members[i] = m // a rejoin keeps its place in the join order
	} else {
		s.Members = append(s.Members, m)
	}
	return joinResult{Gen: index}, nil
}

func (f *fsm) applyAcks(body []byte) ([]error, error) {
	var e ackEntry
	if err := msgpack.Unmarshal(body, &e); err != nil {
		return nil, err
	}
	errs := make([]error, len(e.Acks))
	for i, a := range e.Acks {
		s := f.state.Subs[a.Sub]
		if s == nil {
			errs[i] = errSubscriptionNotFound
			continue
		}
		for _, o := range a.Redelivered {
			if o < f.state.Next && !s.Cursor.IsAcked(o) {
				if s.Redeliveries == nil {
					s.Redeliveries = map[uint64]uint32{}
				}
				s.Redeliveries[o]++
			}
		}
		for _, o := range a.Offsets {
			if o >= f.state.Next {
				continue // the leader checks; an entry is applied as it is
			}
			if a.Cumulative {
				s.Cursor.AckCumulative(o)
			} else {
				s.Cursor.Ack(o)
			}
		}
		if len(a.Offsets) > 0 && len(s.Redeliveries) > 0 {
			if a.Cumulative {
				s.forgetAcked()
			} else {
				for _, o := range a.Offsets {
					delete(s.Redeliveries, o)
				}
			}
		}
	}
	return errs, nil
}

// cursor returns a copy of a subscription's cursor and its mode.
func (f *fsm) cursor(sub string) (*subscription.Cursor, transport.SubscriptionMode, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.state.Subs[sub]
	if s == nil {
		return nil, 0, false
	}
	return s.Cursor.Clone(), s.Mode, true
}

// nextOffset returns the offset the next message will get.
func (f *fsm) nextOffset() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Next
}

// isAcked reports whether an offset is acknowledged on a subscription.
func (f *fsm) isAcked(sub string, offset uint64) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.state.Subs[sub]
	return s == nil || s.Cursor.IsAcked(offset)
}

// lastSequence returns a producer's highest stored sequence id, -1 if none.
func (f *fsm) lastSequence(producer string) int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return lastSeqOf(f.state.Producers[producer])
}

// subscriptions returns the names and modes of the subscriptions, with
// their cursors copied.
func (f *fsm) subscriptions() map[string]*subState {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]*subState, len(f.state.Subs))
	for name, s := range f.state.Subs {
		out[name] = s.clone()
	}
	return out
}

// subscription returns a copy of one subscription's state, nil if none.
func (f *fsm) subscription(sub string) *subState {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if s := f.state.Subs[sub]; s != nil {
		return s.clone()
	}
	return nil
}

// allMembers returns the members of every subscription that has some.
func (f *fsm) allMembers() map[string][]memberState {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := map[string][]memberState{}
	for name, s := range f.state.Subs {
		if len(s.Members) > 0 {
			out[name] = slices.Clone(s.Members)
		}
	}
	return out
}

// members returns a subscription's members and its mode and key policy
// (SUB-7); ok is false when it does not exist.
func (f *fsm) members(sub string) (ms []memberState, mode transport.SubscriptionMode, keyMode transport.KeySharedMode, outOfOrder, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.state.Subs[sub]
	if s == nil {
		return nil, 0, 0, false, false
	}
	return slices.Clone(s.Members), s.Mode, s.KeyMode, s.OutOfOrder, true
}

// Snapshot captures the state and a hard-linked snapshot of the log. It
// runs on Raft's goroutine, between applies.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	if f.failed != nil {
		f.mu.RUnlock()
		// A snapshot would count the entry that failed as applied.
		return nil, fmt.Errorf("broker: %w: %v", errHalted, f.failed)
	}
	state, err := msgpack.Marshal(&f.state)
	f.mu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("broker: encode partition state: %w", err)
	}
	if err := os.MkdirAll(f.snapDir, 0o755); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	dir, err := os.MkdirTemp(f.snapDir, "log-")
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	if err := os.Remove(dir); err != nil { // Log.Snapshot makes it
		return nil, fmt.Errorf("broker: %w", err)
	}
	snap, err := f.log.Snapshot(dir)
	if err != nil {
		return nil, err
	}
	return &fsmSnapshot{state: state, log: snap}, nil
}

// dirSink is the sink of a snapshot store that can take a directory of
// hard links instead of its bytes.
type dirSink interface {
	AdoptDir(path string) error
}

// fsmSnapshot is a partition snapshot: the state bytes, length-prefixed,
// then the log's snapshot stream.
type fsmSnapshot struct {
	state   []byte
	log     *storage.Snapshot
	adopted bool
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(s.state)))
	if _, err := sink.Write(n[:]); err != nil {
		sink.Cancel()
		return err
	}
	if _, err := sink.Write(s.state); err != nil {
		sink.Cancel()
		return err
	}
	if ds, ok := sink.(dirSink); ok {
		if err := ds.AdoptDir(s.log.Dir()); err != nil {
			sink.Cancel()
			return err
		}
		s.adopted = true
	} else if _, err := s.log.WriteTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {
	if !s.adopted {
		s.log.Remove()
	}
}

// expandLogSnapshot streams a log snapshot directory that a snapshot store
// adopted: the store's Expand function.
func expandLogSnapshot(dir string, w io.Writer) error {
	snap, err := storage.OpenSnapshot(dir)
	if err == nil {
		_, err = snap.WriteTo(w)
	}
	if errors.Is(err, storage.ErrCorrupt) || errors.Is(err, storage.ErrBadSnapshot) {
		// Damaged on disk (a batch, the manifest, a segment cut short):
		// the snapshot store sets it aside and the copy is renewed.
		return fmt.Errorf("%w: %w", cluster.ErrDamaged, err)
	}
	return err
}

// maxStateBytes bounds the state part of a snapshot stream.
const maxStateBytes = 1 << 30

// Restore replaces the state with a snapshot's. The log is rewritten only
// when it does not already hold the snapshot's messages (storage.Install).
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.mu.RLock()
	failed := f.failed
	f.mu.RUnlock()
	if failed != nil {
		return fmt.Errorf("broker: %w: %v", errHalted, failed)
	}
	var n [4]byte
	if _, err := io.ReadFull(rc, n[:]); err != nil {
		return fmt.Errorf("broker: snapshot state: %w", err)
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxStateBytes {
		return fmt.Errorf("broker: snapshot state of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(rc, b); err != nil {
		return fmt.Errorf("broker: snapshot state: %w", err)
	}
	var st fsmState
	if err := msgpack.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("broker: snapshot state: %w", err)
	}
	if st.Producers == nil {
		st.Producers = map[string]*producerState{}
	}
	if st.Subs == nil {
		st.Subs = map[string]*subState{}
	}
	if _, err := f.log.Install(rc); err != nil {
		return err
	}
	f.mu.Lock()
	f.state = st
	f.trimLocked()
	f.mu.Unlock()
	if f.applied != nil {
		f.applied(st.Next, false)
	}
	return nil
}

// cleanSnapshotDir removes log snapshots that no snapshot store adopted:
// what a crash between Snapshot and Persist leaves behind.
func cleanSnapshotDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("broker: %w", err)
		}
	}
	return nil
}

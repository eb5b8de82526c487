package fsm

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// entryType is the first byte of every partition Raft entry: the type's
// number in the low seven bits, ignoreUnknown in the high bit. The rest of
// the entry is the msgpack body of the type's struct.
type entryType uint8

// Entry types. Never renumber: they are in every replica's Raft log. A
// type's number is never given to another type, even once the type is no
// longer written.
const (
	entrySend entryType = 1
	// entryCreateSubscription created a subscription without a member.
	// Versions before replicated consumer sets proposed it; none does now,
	// and its number stays taken. It is still applied: the Raft logs of
	// clusters that ran those versions may hold it (snapshots do not, they
	// hold state).
	entryCreateSubscription entryType = 2
	entryAcks               entryType = 3
	entryDeleteSubscription entryType = 4
	entrySeek               entryType = 5
	entryJoin               entryType = 6
	entryLeave              entryType = 7
	entryRetain             entryType = 8
)

// ignoreUnknown, set in an entry's type byte, lets a replica that does not
// know the type skip the entry (Consul's IgnoreUnknownTypeFlag): write it
// on a new type only when a replica that skips the entry still serves
// what the others serve. An unknown type without it stops the node. A
// known type is applied whether the flag is set or not.
const ignoreUnknown entryType = 0x80

// number returns the type without the ignoreUnknown flag.
func (t entryType) number() entryType { return t &^ ignoreUnknown }

// Command is an entry body the broker proposes: Send, Acks, Join, Leave,
// Seek, DeleteSubscription and Retain. R is what the state machine answers
// for it (see Answer).
type Command[R any] interface {
	entryType() entryType
	// answers ties the command to its answer's type; it does nothing.
	answers(R)
}

// Encode returns the Raft entry of a command: its type byte, then its
// msgpack body, map keys sorted so that equal commands encode alike.
func Encode[R any](c Command[R]) ([]byte, error) {
	var buf bytes.Buffer
	if s, ok := any(c).(sized); ok {
		// Grown by doubling, a send's entry cost two and a half times
		// its size in allocations, on the write path of every message.
		buf.Grow(s.encodedSize())
	}
	buf.WriteByte(byte(c.entryType()))
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("fsm: encode entry: %w", err)
	}
	return buf.Bytes(), nil
}

// Answer returns what the state machine answered a command c: res is the
// Response of c's Raft future, or what Machine.Apply returned. It fails
// with an error wrapping ErrHalted when the state machine had stopped, and
// with ErrAnswer when res is not an answer of c's type (never expected).
func Answer[R any](c Command[R], res any) (R, error) {
	var zero R
	if err, ok := res.(error); ok && errors.Is(err, ErrHalted) {
		return zero, err
	}
	if r, ok := res.(R); ok {
		return r, nil
	}
	if res == nil && any(zero) == nil {
		return zero, nil // a nil error
	}
	return zero, fmt.Errorf("%w: %T to a %T entry", ErrAnswer, res, c)
}

// Send is a group of producers' batches committed as one Raft entry. It
// answers a SendResult per batch.
type Send struct {
	// PublishTime stamps messages that carry none; the leader sets it.
	PublishTime int64   `msgpack:"pt"`
	Batches     []Batch `msgpack:"b"`
}

// sized is a command that knows about how large it encodes.
type sized interface {
	encodedSize() int
}

// messageOverhead bounds what msgpack adds to a message's bytes: its
// field names, lengths and numbers.
const messageOverhead = 48

// encodedSize returns about what the send encodes to, a little more
// rather than less.
func (s Send) encodedSize() int {
	n := 16
	for _, b := range s.Batches {
		n += 16 + len(b.Producer)
		for _, m := range b.Messages {
			n += messageOverhead + len(m.Key) + len(m.OrderingKey) + len(m.Payload)
			for k, v := range m.Properties {
				n += 8 + len(k) + len(v)
			}
		}
	}
	return n
}

// Batch is one producer's messages in a Send, in increasing sequence ids.
// A batch without messages opens the producer: it stores nothing and
// answers the producer's last stored sequence id.
type Batch struct {
	Producer string    `msgpack:"p"`
	Messages []Message `msgpack:"m"`
}

// Message is a message as a Send carries it. Its fields and tags are the
// log's format, not the wire's: older entries may also carry a producer
// name ("pn"), which decoding skips; the log takes the batch's.
type Message struct {
	Key         string            `msgpack:"k,omitempty"`
	OrderingKey []byte            `msgpack:"ok,omitempty"`
	Properties  map[string]string `msgpack:"p,omitempty"`
	EventTime   int64             `msgpack:"et,omitempty"`
	PublishTime int64             `msgpack:"pt,omitempty"`
	SequenceID  uint64            `msgpack:"sq"`
	Payload     []byte            `msgpack:"d"`
}

// SendResult is what applying one Batch gives: the offset of each of its
// messages (a duplicate's is the offset it was first stored at), the
// producer's last stored sequence id afterwards (-1 for none), and Err
// (ErrSequenceGap, ErrSequenceForgotten, ErrSequenceOrder) for a batch
// refused whole, which stores nothing and has no offsets.
type SendResult struct {
	Offsets []uint64
	LastSeq int64
	Err     error
}

// Acks commits consumers' acknowledgements. It answers, per SubAcks, nil
// or ErrSubscriptionNotFound.
type Acks struct {
	Acks []SubAcks `msgpack:"a"`
}

// SubAcks are one subscription's acknowledgements in an Acks entry.
type SubAcks struct {
	Sub        string   `msgpack:"s"`
	Offsets    []uint64 `msgpack:"o"`
	Cumulative bool     `msgpack:"c,omitempty"`
	// Redelivered are offsets the leader delivered again: each adds one
	// to the message's redelivery count (SH-7).
	Redelivered []uint64 `msgpack:"rd,omitempty"`
}

// Join creates a subscription if needed and adds (or renews) one of its
// members. The leader checks the join first; the state machine checks the
// mode again, so that an entry of a deposed leader cannot mix modes. It
// answers a JoinResult.
type Join struct {
	Sub        string          `msgpack:"s"`
	Mode       Mode            `msgpack:"m"`
	Initial    InitialPosition `msgpack:"i"`
	KeyMode    KeySharedMode   `msgpack:"km,omitempty"`
	OutOfOrder bool            `msgpack:"oo,omitempty"`
	// Member's Gen is set by the state machine: the entry's Raft index.
	Member Member `msgpack:"c"`
	// MaxSubs, when not zero, refuses to create the subscription if the
	// partition has that many: the leader's limit, carried in the entry
	// so that every replica decides alike.
	MaxSubs int `msgpack:"ms,omitempty"`
}

// JoinResult answers a Join: the member's generation, or Err
// (*ModeMismatchError, *TooManySubscriptionsError), which changes nothing.
type JoinResult struct {
	Gen uint64
	Err error
}

// Leave removes members of a subscription: those of the same name and
// generation (any generation when Gen is 0), so that a leave overtaken by
// the consumer's rejoin removes nothing.
type Leave struct {
	Sub     string   `msgpack:"s"`
	Members []Member `msgpack:"c"` // Name and Gen
}

// DeleteSubscription deletes a subscription and its members.
type DeleteSubscription struct {
	Name string `msgpack:"n"`
}

// Seek moves a subscription's cursor: every offset from Offset on is
// unacknowledged, every one below acknowledged, and redelivery counts are
// forgotten. It answers nil or ErrSubscriptionNotFound.
type Seek struct {
	Name   string `msgpack:"n"`
	Offset uint64 `msgpack:"o"`
}

// Retain moves a partition's start offset and, with AckBelow, every
// subscription's cursor. The leader decides it (DecideRetention); every
// replica applies the same entry, so every replica and every snapshot
// agree on where the partition starts.
type Retain struct {
	// Start is the partition's new start offset: a segment boundary of
	// the leader's log. A replica deletes its segments wholly below it.
	Start uint64 `msgpack:"s"`
	// AckBelow acknowledges, on every subscription, every offset below it:
	// messages past their TTL, or backlog evicted by the quota.
	AckBelow uint64 `msgpack:"a,omitempty"`
}

// createSubscription is entryCreateSubscription's body: it is applied,
// never proposed.
type createSubscription struct {
	Name    string          `msgpack:"n"`
	Mode    Mode            `msgpack:"m"`
	Initial InitialPosition `msgpack:"i"`
}

// createResult says whether a subscription was created or existed.
type createResult struct {
	Created bool
	Mode    Mode
}

func (Send) entryType() entryType               { return entrySend }
func (Acks) entryType() entryType               { return entryAcks }
func (DeleteSubscription) entryType() entryType { return entryDeleteSubscription }
func (Seek) entryType() entryType               { return entrySeek }
func (Join) entryType() entryType               { return entryJoin }
func (Leave) entryType() entryType              { return entryLeave }
func (Retain) entryType() entryType             { return entryRetain }
func (createSubscription) entryType() entryType { return entryCreateSubscription }

func (Send) answers([]SendResult)               {}
func (Acks) answers([]error)                    {}
func (DeleteSubscription) answers(struct{})     {}
func (Seek) answers(error)                      {}
func (Join) answers(JoinResult)                 {}
func (Leave) answers(struct{})                  {}
func (Retain) answers(struct{})                 {}
func (createSubscription) answers(createResult) {}

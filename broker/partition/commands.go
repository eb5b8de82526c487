package partition

import (
	"context"
	"errors"

	"github.com/fabriq-io/fabriq/broker/fsm"
	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/transport"
)

// The partition state machine (package fsm) has types of its own, so that
// no change of the wire changes a Raft log or a snapshot. This file maps
// transport's types to them and back, in one place; their values are the
// same (TestFSMTypesMatchTheWire).

func fsmMode(m transport.SubscriptionMode) fsm.Mode              { return fsm.Mode(m) }
func wireMode(m fsm.Mode) transport.SubscriptionMode             { return transport.SubscriptionMode(m) }
func fsmInitial(p transport.InitialPosition) fsm.InitialPosition { return fsm.InitialPosition(p) }
func fsmKeyMode(m transport.KeySharedMode) fsm.KeySharedMode     { return fsm.KeySharedMode(m) }
func wireKeyMode(m fsm.KeySharedMode) transport.KeySharedMode    { return transport.KeySharedMode(m) }

func fsmRanges(rs []transport.HashRange) []fsm.HashRange {
	if rs == nil {
		return nil
	}
	out := make([]fsm.HashRange, len(rs))
	for i, r := range rs {
		out[i] = fsm.HashRange{Start: r.Start, End: r.End}
	}
	return out
}

func wireRanges(rs []fsm.HashRange) []transport.HashRange {
	if rs == nil {
		return nil
	}
	out := make([]transport.HashRange, len(rs))
	for i, r := range rs {
		out[i] = transport.HashRange{Start: r.Start, End: r.End}
	}
	return out
}

// fsmMessages returns a producer's messages as a send entry carries them.
func fsmMessages(msgs []transport.MessageData) []fsm.Message {
	out := make([]fsm.Message, len(msgs))
	for i, m := range msgs {
		out[i] = fsm.Message{
			Key:         m.Key,
			OrderingKey: m.OrderingKey,
			Properties:  m.Properties,
			EventTime:   m.EventTime,
			PublishTime: m.PublishTime,
			SequenceID:  m.SequenceID,
			Payload:     m.Payload,
		}
	}
	return out
}

// fsmRetention returns a stream's retention policy as the leader's
// retention decision reads it.
func fsmRetention(p transport.RetentionPolicy) fsm.RetentionPolicy {
	return fsm.RetentionPolicy{
		RetentionTimeMs:   p.RetentionTimeMs,
		RetentionBytes:    p.RetentionBytes,
		BacklogQuotaBytes: p.BacklogQuotaBytes,
		QuotaPolicy:       fsm.QuotaPolicy(p.BacklogQuotaPolicy),
		MessageTTLMs:      p.MessageTTLMs,
	}
}

// memberState is a member of a subscription (fsm.Member) in transport's
// types, as the dispatchers and joins use it.
type memberState struct {
	Name     string
	Priority int32
	Ranges   []transport.HashRange // sticky key_shared
	Gen      uint64
}

func fsmMember(m memberState) fsm.Member {
	return fsm.Member{Name: m.Name, Priority: m.Priority, Ranges: fsmRanges(m.Ranges), Gen: m.Gen}
}

func wireMember(m fsm.Member) memberState {
	return memberState{Name: m.Name, Priority: m.Priority, Ranges: wireRanges(m.Ranges), Gen: m.Gen}
}

// members returns a subscription's members and its mode and key policy
// (SUB-7); ok is false when it does not exist.
func (p *Partition) members(sub string) (ms []memberState, mode transport.SubscriptionMode, keyMode transport.KeySharedMode, outOfOrder, ok bool) {
	fms, fmode, fkeyMode, outOfOrder, ok := p.fsm.Members(sub)
	for _, m := range fms {
		ms = append(ms, wireMember(m))
	}
	return ms, wireMode(fmode), wireKeyMode(fkeyMode), outOfOrder, ok
}

// joinRefusal maps the state machine's refusal of a join to what the
// consumer is told.
func joinRefusal(sub string, err error) error {
	var tooMany *fsm.TooManySubscriptionsError
	var mismatch *fsm.ModeMismatchError
	switch {
	case errors.As(err, &tooMany):
		return wire.Errorf(transport.CodeLimitExceeded, "subscription %s cannot be created: the partition has %d subscriptions, the limit (--max-subscriptions-per-partition)", sub, tooMany.Max)
	case errors.As(err, &mismatch):
		a, r := mismatch.Active, mismatch.Requested
		if a.Mode != r.Mode {
			return wire.Errorf(transport.CodeSubscriptionBusy, wire.SubscriptionType, modeName(wireMode(a.Mode)), modeName(wireMode(r.Mode)))
		}
		return wire.Errorf(transport.CodeSubscriptionBusy, wire.SubscriptionType,
			keyPolicyName(wireKeyMode(a.KeyMode), a.OutOfOrder), keyPolicyName(wireKeyMode(r.KeyMode), r.OutOfOrder))
	}
	return wire.Errorf(transport.CodeSubscriptionBusy, "%v", err)
}

// apply proposes a command to the partition's group and waits for the
// state machine's answer, mapping failures for clients.
func apply[R any](ctx context.Context, p *Partition, c fsm.Command[R]) (R, error) {
	var zero R
	data, err := fsm.Encode(c)
	if err != nil {
		return zero, err
	}
	res, err := p.group.Apply(ctx, data)
	if err != nil {
		return zero, p.raftError(err)
	}
	r, err := fsm.Answer(c, res)
	if err != nil {
		return zero, p.raftError(err)
	}
	return r, nil
}

package partition

import (
	"testing"

	"github.com/fabriq-io/fabriq/broker/fsm"
	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/transport"
)

// The state machine's enums have the wire's values, so that mapping one
// to the other keeps its meaning; a renumbering on either side fails here.
func TestFSMTypesMatchTheWire(t *testing.T) {
	for w, f := range map[transport.SubscriptionMode]fsm.Mode{
		transport.Exclusive: fsm.Exclusive, transport.Shared: fsm.Shared, transport.Failover: fsm.Failover, transport.KeyShared: fsm.KeyShared,
	} {
		if fsmMode(w) != f || wireMode(f) != w {
			t.Errorf("mode %s maps to %d and back to %d", modeName(w), fsmMode(w), wireMode(f))
		}
	}
	if fsmInitial(transport.Latest) != fsm.Latest || fsmInitial(transport.Earliest) != fsm.Earliest {
		t.Error("initial positions differ")
	}
	for w, f := range map[transport.KeySharedMode]fsm.KeySharedMode{transport.AutoSplit: fsm.AutoSplit, transport.Sticky: fsm.Sticky} {
		if fsmKeyMode(w) != f || wireKeyMode(f) != w {
			t.Errorf("key_shared mode %d maps to %d and back to %d", w, fsmKeyMode(w), wireKeyMode(f))
		}
	}
	for w, f := range map[transport.BacklogQuotaPolicy]fsm.QuotaPolicy{
		transport.ProducerException: fsm.ProducerException, transport.ConsumerBacklogEviction: fsm.ConsumerBacklogEviction,
	} {
		if got := fsmRetention(transport.RetentionPolicy{BacklogQuotaPolicy: w}).QuotaPolicy; got != f {
			t.Errorf("backlog quota policy %s maps to %d, want %d", w, got, f)
		}
	}
	rs := []transport.HashRange{{Start: 0, End: 9}, {Start: 10, End: 65535}}
	if got := wireRanges(fsmRanges(rs)); len(got) != 2 || got[0] != rs[0] || got[1] != rs[1] {
		t.Errorf("ranges %v map back to %v", rs, got)
	}
}

// A join the state machine refuses is told with the contract's texts.
func TestJoinRefusal(t *testing.T) {
	tests := []struct {
		err  error
		code transport.ErrorCode
		msg  string
	}{
		{&fsm.TooManySubscriptionsError{Max: 3}, transport.CodeLimitExceeded,
			"subscription s cannot be created: the partition has 3 subscriptions, the limit (--max-subscriptions-per-partition)"},
		{&fsm.ModeMismatchError{Active: fsm.Policy{Mode: fsm.Failover}, Requested: fsm.Policy{Mode: fsm.Shared}}, transport.CodeSubscriptionBusy,
			"Subscription is of different type: active 'failover', requested 'shared'"},
		{&fsm.ModeMismatchError{Active: fsm.Policy{Mode: fsm.KeyShared, KeyMode: fsm.Sticky}, Requested: fsm.Policy{Mode: fsm.KeyShared, OutOfOrder: true}},
			transport.CodeSubscriptionBusy, "Subscription is of different type: active 'sticky', requested 'auto_split, allow_out_of_order'"},
	}
	for _, tt := range tests {
		err := wire.From(joinRefusal("s", tt.err))
		if err.Code != tt.code || err.Message != tt.msg {
			t.Errorf("%v: told %v %q, want %v %q", tt.err, err.Code, err.Message, tt.code, tt.msg)
		}
	}
}

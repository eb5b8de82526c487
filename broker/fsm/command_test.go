package fsm

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// entryCreateSubscription is no longer proposed, but logs written by
// older versions hold it: it still creates a subscription, once, at its
// initial position.
func TestFSMAppliesCreateSubscription(t *testing.T) {
	f := newFSM(testLog(t, t.TempDir()), t.TempDir(), nil)
	apply(f, 1, mustEntry(t, sendOf("a", 0, 1, 2)))
	if res := apply(f, 2, mustEntry(t, createSubscription{Name: "late"})).(createResult); !res.Created {
		t.Fatal("not created")
	}
	apply(f, 3, mustEntry(t, createSubscription{Name: "early", Mode: Shared, Initial: Earliest}))
	// CUR-3: the initial position applies only at creation.
	if res := apply(f, 4, mustEntry(t, createSubscription{Name: "late", Initial: Earliest})).(createResult); res.Created {
		t.Fatal("created twice")
	}
	late, _, _ := f.Cursor("late")
	early, mode, _ := f.Cursor("early")
	if late.Floor != 3 || early.Floor != 0 || mode != Shared {
		t.Fatalf("floors late %d early %d, mode %d", late.Floor, early.Floor, mode)
	}
}

// Answer types what the state machine answered, and reports a stopped
// state machine or an answer of another type as errors.
func TestAnswer(t *testing.T) {
	if r, err := Answer(Join{}, JoinResult{Gen: 7}); err != nil || r.Gen != 7 {
		t.Fatalf("join: %+v %v", r, err)
	}
	if r, err := Answer(Seek{}, nil); err != nil || r != nil {
		t.Fatalf("seek answered nil: %v %v", r, err)
	}
	if r, err := Answer(Seek{}, ErrSubscriptionNotFound); err != nil || r != ErrSubscriptionNotFound {
		t.Fatalf("seek answered not found: %v %v", r, err)
	}
	if _, err := Answer(Leave{}, struct{}{}); err != nil {
		t.Fatalf("leave: %v", err)
	}
	halted := errors.Join(ErrHalted, errors.New("disk full"))
	if _, err := Answer(Seek{}, halted); !errors.Is(err, ErrHalted) {
		t.Fatalf("a stopped state machine's answer to a seek: %v", err)
	}
	if _, err := Answer(Send{}, halted); !errors.Is(err, ErrHalted) {
		t.Fatalf("a stopped state machine's answer to a send: %v", err)
	}
	if _, err := Answer(Send{}, nil); !errors.Is(err, ErrAnswer) {
		t.Fatalf("a send answered nil: %v", err)
	}
	if _, err := Answer(Acks{}, JoinResult{}); !errors.Is(err, ErrAnswer) {
		t.Fatalf("acks answered a join result: %v", err)
	}
}

var _ raft.FSM = (*Machine)(nil)

package chaos

import (
	"fmt"
	"testing"
	"time"
)

func send(v string, kind Kind) []Op {
	return []Op{{F: "send", Kind: Invoke, Value: v}, {F: "send", Kind: kind, Value: v}}
}

func recv(v, key, consumer string, offset int64) Op {
	return Op{F: "receive", Kind: OK, Value: v, Key: key, Consumer: consumer, Offset: offset}
}

func TestQueueCheckerPasses(t *testing.T) {
	var ops []Op
	ops = append(ops, send("a", OK)...)
	ops = append(ops, send("b", Info)...)
	ops = append(ops, send("c", Info)...)
	ops = append(ops, recv("a", "", "x", 0), recv("a", "", "y", 0), recv("b", "", "x", 1))
	r := CheckQueue(ops)
	if !r.Valid || r.Acked != 1 || r.Duplicated != 1 || r.Recovered != 1 || r.Lost != 0 {
		t.Fatalf("%+v", r)
	}
}

// Histories that break the queue's promises: the checker must say so.
func TestQueueCheckerCatches(t *testing.T) {
	lost := append(send("a", OK), send("b", OK)...)
	lost = append(lost, recv("a", "", "x", 0))
	if r := CheckQueue(lost); r.Valid || r.Lost != 1 {
		t.Fatalf("a lost message: %+v", r)
	}
	unexpected := append(send("a", OK), recv("a", "", "x", 0), recv("zzz", "", "x", 1))
	if r := CheckQueue(unexpected); r.Valid || r.Unexpected != 1 {
		t.Fatalf("an unexpected message: %+v", r)
	}
}

func TestKeyOrderCheckerPasses(t *testing.T) {
	ops := []Op{
		recv("1", "k", "a", 0),
		{F: "ack", Kind: Invoke, Value: "1", Consumer: "a"},
		recv("2", "k", "b", 1), // moved after a acked
		recv("3", "j", "a", 2),
		{F: "disconnect", Consumer: "a"},
		recv("3", "j", "b", 2), // redelivered after a went away
		recv("2", "k", "b", 1), // a redelivery repeats
	}
	if r := CheckKeyOrder(ops); !r.Valid || r.Keys != 2 || r.Moves != 1 {
		t.Fatalf("%+v", r)
	}
}

// A reordered key and a key on two consumers: the checker must say so.
func TestKeyOrderCheckerCatches(t *testing.T) {
	reordered := []Op{recv("2", "k", "a", 5), recv("1", "k", "a", 4)}
	if r := CheckKeyOrder(reordered); r.Valid || r.Reordered != 1 {
		t.Fatalf("a reordered key: %+v", r)
	}
	overlap := []Op{recv("1", "k", "a", 0), recv("2", "k", "b", 1)}
	if r := CheckKeyOrder(overlap); r.Valid || r.Overlaps != 1 {
		t.Fatalf("a key on two consumers: %+v", r)
	}
}

// sendOp is a completed send at [call, ret] stored at offset.
func sendOp(v string, call, ret int64, offset int64) []Op {
	return []Op{
		{F: "send", Kind: Invoke, Value: v, Time: call},
		{F: "send", Kind: OK, Value: v, Offset: offset, Time: ret},
		{F: "receive", Kind: OK, Value: v, Offset: offset, Time: ret + 1},
	}
}

func TestAppendsCheckerPasses(t *testing.T) {
	var ops []Op
	ops = append(ops, sendOp("a", 0, 10, 0)...)
	ops = append(ops, sendOp("b", 5, 20, 2)...) // concurrent with c
	ops = append(ops, sendOp("c", 6, 21, 1)...)
	// Unknown outcome, delivered: it happened, at some point after its call.
	ops = append(ops, Op{F: "send", Kind: Invoke, Value: "d", Time: 1}, Op{F: "send", Kind: Info, Value: "d", Time: 30},
		Op{F: "receive", Kind: OK, Value: "d", Offset: 3, Time: 40})
	if r := CheckAppends(ops, 10*time.Second); !r.Valid || r.Linearizable != "Ok" || r.Checked != 4 {
		t.Fatalf("%+v", r)
	}
}

// An append that finished before another started yet got a higher
// offset, and a message stored twice: the checker must say so.
func TestAppendsCheckerCatches(t *testing.T) {
	var ops []Op
	ops = append(ops, sendOp("a", 0, 10, 5)...)
	ops = append(ops, sendOp("b", 20, 30, 4)...)
	if r := CheckAppends(ops, 10*time.Second); r.Valid || r.Linearizable != "Illegal" {
		t.Fatalf("a stale offset: %+v", r)
	}
	if r := CheckAppends(ops, 0); r.Valid || r.Linearizable != "skipped" || r.StaleOffsets != 1 {
		t.Fatalf("a stale offset, porcupine skipped: %+v", r)
	}
	dup := append(sendOp("a", 0, 10, 0), Op{F: "receive", Kind: OK, Value: "a", Offset: 1, Time: 50})
	if r := CheckAppends(dup, 10*time.Second); r.Valid || r.DuplicateAppends != 1 {
		t.Fatalf("a message stored twice: %+v", r)
	}
}

// A send called after another returned yet stored below it, the two more
// than a porcupine window apart: the sweep over the whole history must
// catch what no single window holds.
func TestAppendsCheckerCatchesAcrossWindows(t *testing.T) {
	n := linearizableWindow + linearizableWindow/4
	var ops []Op
	// The first send runs until just before the last is called, and is
	// stored above every other: alone it breaks nothing.
	ops = append(ops, Op{F: "send", Kind: Invoke, Value: "first", Time: 0})
	for i := 1; i < n; i++ {
		ops = append(ops, sendOp(fmt.Sprint("m", i), int64(10*i), int64(10*i+5), int64(i))...)
		if i == n-2 {
			ops = append(ops, Op{F: "send", Kind: OK, Value: "first", Offset: int64(n + 100), Time: int64(10*i + 7)},
				Op{F: "receive", Kind: OK, Value: "first", Offset: int64(n + 100), Time: int64(10*i + 8)})
		}
	}
	r := CheckAppends(ops, time.Minute)
	if r.Valid || r.StaleOffsets != 1 || r.Windows != 2 {
		t.Fatalf("%+v", r)
	}
	if r.Linearizable != "Ok" {
		t.Fatalf("no window holds both sends, yet porcupine says %s", r.Linearizable)
	}
}

// take is a consumer taking a message at a time.
func take(v, consumer string, at int64) Op {
	return Op{F: "receive", Kind: OK, Value: v, Consumer: consumer, Time: at}
}

func ackOK(v, consumer string, at int64) Op {
	return Op{F: "ack", Kind: OK, Value: v, Consumer: consumer, Time: at}
}

func TestCursorCheckerPasses(t *testing.T) {
	// b is y's third take: with a queue of 2 the broker may have sent it
	// as soon as y took p (at 4), before x's ack of b returned (at 6).
	ops := []Op{
		take("a", "x", 1), take("b", "x", 2), ackOK("a", "x", 3),
		take("p", "y", 4), take("q", "y", 5), ackOK("b", "x", 6),
		take("b", "y", 7),
	}
	if r := CheckCursors(ops, 2); !r.Valid || r.Committed != 2 {
		t.Fatalf("%+v", r)
	}
}

// A message delivered again long after its ack committed: the checker
// must say so.
func TestCursorCheckerCatches(t *testing.T) {
	ops := []Op{take("a", "x", 1), ackOK("a", "x", 2)}
	for i := range 5 {
		ops = append(ops, take(fmt.Sprint("m", i), "y", int64(10+i)))
	}
	ops = append(ops, take("a", "y", 20))
	if r := CheckCursors(ops, 2); r.Valid || r.Undone != 1 {
		t.Fatalf("an undone ack: %+v", r)
	}
}

// The drain's count follows the history as it grows.
func TestUndeliveredFollowsHistory(t *testing.T) {
	h := NewHistory()
	var u Undelivered
	h.Add(Op{F: "send", Kind: OK, Value: "a"})
	h.Add(Op{F: "send", Kind: Info, Value: "b"})
	h.Add(Op{F: "receive", Kind: OK, Value: "c"}) // received before its ack is recorded
	if missing, n := u.Update(h); missing != 1 || n != 3 {
		t.Fatalf("missing %d after %d records", missing, n)
	}
	h.Add(Op{F: "send", Kind: OK, Value: "c"})
	h.Add(Op{F: "receive", Kind: OK, Value: "a"})
	h.Add(Op{F: "receive", Kind: OK, Value: "a"})
	if missing, n := u.Update(h); missing != 0 || n != 6 {
		t.Fatalf("missing %d after %d records", missing, n)
	}
}

package chaos

import (
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
	if r := CheckKeyOrder(ops); !r.Valid || r.Keys != 2 {
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
	dup := append(sendOp("a", 0, 10, 0), Op{F: "receive", Kind: OK, Value: "a", Offset: 1, Time: 50})
	if r := CheckAppends(dup, 10*time.Second); r.Valid || r.DuplicateAppends != 1 {
		t.Fatalf("a message stored twice: %+v", r)
	}
}

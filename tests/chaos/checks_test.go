package chaos

import "testing"

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

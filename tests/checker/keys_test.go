package checker

import (
	"strings"
	"testing"
)

func TestKeyOrderHolds(t *testing.T) {
	h := NewKeyHistory()
	for _, d := range []Delivery{
		{Consumer: "a", Key: "k", Seq: 0}, {Consumer: "a", Key: "k", Seq: 1},
		{Consumer: "b", Key: "j", Seq: 0},
		{Consumer: "a", Key: "k", Seq: 1}, // a redelivery repeats
		{Consumer: "a", Key: "k", Seq: 2},
	} {
		h.Received(d)
		h.Released(d.Consumer, d.Key)
	}
	if err := h.CheckOrder(map[string]int{"k": 3, "j": 1}); err != nil {
		t.Fatal(err)
	}
	if err := h.CheckSticky(); err != nil {
		t.Fatal(err)
	}
}

// Each of these histories breaks a promise; the checker must say so.
func TestKeyCheckerCatches(t *testing.T) {
	cases := []struct {
		name    string
		history []Delivery
		release bool
		sent    map[string]int
		want    string
	}{
		{"reordered key", []Delivery{{Consumer: "a", Key: "k", Seq: 1}, {Consumer: "a", Key: "k", Seq: 0}}, true, map[string]int{"k": 2}, "before message 0"},
		{"skipped message", []Delivery{{Consumer: "a", Key: "k", Seq: 0}, {Consumer: "a", Key: "k", Seq: 2}}, true, map[string]int{"k": 3}, "before message 1"},
		{"lost message", []Delivery{{Consumer: "a", Key: "k", Seq: 0}}, true, map[string]int{"k": 2}, "1 of 2 messages"},
		{"key on two consumers", []Delivery{{Consumer: "a", Key: "k", Seq: 0}, {Consumer: "b", Key: "k", Seq: 1}}, false, map[string]int{"k": 2}, "while a held 1 unacked"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := NewKeyHistory()
			for _, d := range c.history {
				h.Received(d)
				if c.release {
					h.Released(d.Consumer, d.Key)
				}
			}
			err := h.CheckOrder(c.sent)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	h := NewKeyHistory()
	h.Received(Delivery{Consumer: "a", Key: "k", Seq: 0})
	h.Gone("a")
	h.Received(Delivery{Consumer: "b", Key: "k", Seq: 1})
	if err := h.CheckOrder(map[string]int{"k": 2}); err != nil {
		t.Fatalf("a consumer that is gone holds nothing: %v", err)
	}
	if err := h.CheckSticky(); err == nil || !strings.Contains(err.Error(), "key k went to [a b]") {
		t.Fatalf("a moved key: %v", err)
	}
}

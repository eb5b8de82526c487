package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
)

func TestValidate(t *testing.T) {
	ok := Workload{Producers: 1, Consumers: 1, Size: 1024, InFlight: 1000, Duration: time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a good workload: %v", err)
	}
	for _, c := range []struct {
		change func(*Workload)
		says   string
	}{
		{func(w *Workload) { w.Size = 15 }, "--size must be at least 16"},
		{func(w *Workload) { w.Producers, w.Consumers = 0, 0 }, "nothing to run"},
		{func(w *Workload) { w.Producers = -1 }, "must not be negative"},
		{func(w *Workload) { w.Rate = -1 }, "--rate"},
		{func(w *Workload) { w.InFlight = 0 }, "--in-flight"},
		{func(w *Workload) { w.Keys = -1 }, "--keys"},
		{func(w *Workload) { w.Duration = 0 }, "--messages or --duration"},
		{func(w *Workload) { w.Consumers = 2 }, "exclusive subscription takes one consumer"},
		{func(w *Workload) { w.Partitions = -1 }, "--partitions"},
	} {
		w := ok
		c.change(&w)
		if err := w.Validate(); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("want an error saying %q, got %v", c.says, err)
		}
	}
	shared := ok
	shared.Consumers, shared.Type = 4, client.Shared
	if err := shared.Validate(); err != nil {
		t.Fatalf("4 shared consumers: %v", err)
	}
	if err := (FailoverConfig{Kills: 1}).Validate(); err == nil || !strings.Contains(err.Error(), "--kill is required") {
		t.Fatalf("failover without --kill: %v", err)
	}
}

// The histogram's percentiles come from what was recorded: 1..1000 ms
// once each.
func TestHistogramSummary(t *testing.T) {
	h := newHistogram()
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Millisecond)
	}
	s := h.summary()
	near := func(got Millis, want time.Duration) bool {
		d := time.Duration(got) - want
		return d >= -want/100 && d <= want/100 // 3 significant digits
	}
	if s.Count != 1000 || !near(s.P50, 500*time.Millisecond) || !near(s.P99, 990*time.Millisecond) ||
		!near(s.P999, 999*time.Millisecond) || !near(s.Max, time.Second) {
		t.Fatalf("summary %+v", s)
	}
	if p99, n := h.tick(); n != 1000 || !near(Millis(p99), 990*time.Millisecond) {
		t.Fatalf("the second's p99 %v of %d", p99, n)
	}
	if _, n := h.tick(); n != 0 {
		t.Fatalf("a new second starts empty, has %d", n)
	}
	if h.summary().Count != 1000 {
		t.Fatal("the run's histogram lost what a second's tick reset")
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}

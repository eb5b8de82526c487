package chaos

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"sync"
	"time"
)

// Kind is what an operation record says.
type Kind string

// Operation record kinds, as in Jepsen: an invoke, then one completion.
const (
	Invoke Kind = "invoke"
	OK     Kind = "ok"
	Fail   Kind = "fail" // definitely did not happen
	Info   Kind = "info" // the outcome is unknown
)

// Op is one record of the history.
type Op struct {
	// Process is the client (worker) that did the operation.
	Process int  `json:"process"`
	Kind    Kind `json:"type"`
	// F is the operation: "send", "receive", "ack".
	F string `json:"f"`
	// Value is the message's unique payload.
	Value string `json:"value"`
	// Key, Partition and Offset place a message; Offset is -1 when unknown.
	Key       string `json:"key,omitempty"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
	// Consumer names the consumer of a receive or ack.
	Consumer string `json:"consumer,omitempty"`
	// Time is nanoseconds since the history started (monotonic).
	Time  int64  `json:"time"`
	Error string `json:"error,omitempty"`
}

// History is a concurrent-safe, append-only record of operations, in the
// order they were recorded.
type History struct {
	mu    sync.Mutex
	start time.Time
	ops   []Op
}

// NewHistory starts a history now.
func NewHistory() *History { return &History{start: time.Now()} }

// Add records an operation, stamping its time.
func (h *History) Add(op Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.Time = time.Since(h.start).Nanoseconds()
	h.ops = append(h.ops, op)
}

// Ops returns a copy of the records.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// OpsFrom returns a copy of the records from the i-th on.
func (h *History) OpsFrom(i int) []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i >= len(h.ops) {
		return nil
	}
	return slices.Clone(h.ops[i:])
}

// Since returns how long the history has run.
func (h *History) Since() time.Duration { return time.Since(h.start) }

// WriteFile writes the history as JSON lines.
func (h *History) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, op := range h.Ops() {
		if err := enc.Encode(op); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

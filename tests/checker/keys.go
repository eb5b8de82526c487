package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Delivery is one message as a consumer received it.
type Delivery struct {
	Consumer string
	Key      string
	// Seq is the message's place in its key's send order, from 0.
	Seq        int
	Offset     uint64
	Redelivery uint32
}

// KeyHistory records key_shared deliveries as they happen. It is safe
// for concurrent use.
type KeyHistory struct {
	mu         sync.Mutex
	deliveries []Delivery
	holding    map[string]map[string]int // key → consumer → messages held
	overlaps   []string
}

// maxReported bounds the violations a check lists.
const maxReported = 10

// NewKeyHistory returns an empty history.
func NewKeyHistory() *KeyHistory {
	return &KeyHistory{holding: map[string]map[string]int{}}
}

// Received records a delivery. Call it before the consumer acts on the
// message; a delivery of a key that another consumer holds is an overlap.
func (h *KeyHistory) Received(d Delivery) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deliveries = append(h.deliveries, d)
	held := h.holding[d.Key]
	if held == nil {
		held = map[string]int{}
		h.holding[d.Key] = held
	}
	for other, n := range held {
		if other != d.Consumer && n > 0 && len(h.overlaps) < maxReported {
			h.overlaps = append(h.overlaps, fmt.Sprintf("key %s delivered to %s (message %d) while %s held %d unacked", d.Key, d.Consumer, d.Seq, other, n))
		}
	}
	held[d.Consumer]++
}

// Released records that a consumer let go of one message of a key: it is
// about to ack it, or the message will be delivered again.
func (h *KeyHistory) Released(consumer, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if held := h.holding[key]; held[consumer] > 0 {
		held[consumer]--
	}
}

// Gone records that a consumer lost everything it held (it disconnected).
func (h *KeyHistory) Gone(consumer string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, held := range h.holding {
		delete(held, consumer)
	}
}

// Len returns how many deliveries were recorded.
func (h *KeyHistory) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.deliveries)
}

// Deliveries returns a copy of the recorded deliveries, in order.
func (h *KeyHistory) Deliveries() []Delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.deliveries)
}

// Owners returns, per key, the consumers that received it, in order of
// their first delivery.
func (h *KeyHistory) Owners() map[string][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]string{}
	for _, d := range h.deliveries {
		if !slices.Contains(out[d.Key], d.Consumer) {
			out[d.Key] = append(out[d.Key], d.Consumer)
		}
	}
	return out
}

// Missing returns how many of the sent messages (sent[key] per key) were
// never delivered.
func (h *KeyHistory) Missing(sent map[string]int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	got := map[string]map[int]bool{}
	for _, d := range h.deliveries {
		if got[d.Key] == nil {
			got[d.Key] = map[int]bool{}
		}
		got[d.Key][d.Seq] = true
	}
	n := 0
	for k, count := range sent {
		for seq := range count {
			if !got[k][seq] {
				n++
			}
		}
	}
	return n
}

// CheckOrder checks that per key the first delivery of each message
// follows the send order with nothing skipped (a redelivery may repeat a
// message, never jump ahead), that every key of sent got sent[key]
// messages, and that no key was held by two consumers at once.
func (h *KeyHistory) CheckOrder(sent map[string]int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []string
	next := map[string]int{}
	for _, d := range h.deliveries {
		switch {
		case d.Seq == next[d.Key]:
			next[d.Key]++
		case d.Seq > next[d.Key] && len(errs) < maxReported:
			errs = append(errs, fmt.Sprintf("key %s: message %d delivered (to %s) before message %d", d.Key, d.Seq, d.Consumer, next[d.Key]))
		}
	}
	keys := make([]string, 0, len(sent))
	for k := range sent {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if next[k] < sent[k] && len(errs) < maxReported {
			errs = append(errs, fmt.Sprintf("key %s: %d of %d messages delivered", k, next[k], sent[k]))
		}
	}
	errs = append(errs, h.overlaps...)
	if len(errs) > 0 {
		return fmt.Errorf("key order: %s", strings.Join(errs, "; "))
	}
	return nil
}

// CheckSticky checks that each key went to one consumer only.
func (h *KeyHistory) CheckSticky() error {
	var errs []string
	for k, who := range h.Owners() {
		if len(who) > 1 && len(errs) < maxReported {
			errs = append(errs, fmt.Sprintf("key %s went to %v", k, who))
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("keys moved: %s", strings.Join(errs, "; "))
	}
	return nil
}

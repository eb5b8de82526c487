package chaos

import (
	"fmt"
	"sort"
)

// maxListed bounds the examples a result lists.
const maxListed = 10

// QueueResult is what the queue checker found.
type QueueResult struct {
	Valid bool `json:"valid"`
	// Acked counts sends the cluster acknowledged; Attempted every send.
	Acked     int `json:"acked"`
	Attempted int `json:"attempted"`
	// Delivered counts distinct messages received.
	Delivered int `json:"delivered"`
	// Lost: acknowledged, never delivered. Unexpected: delivered, never
	// sent. Duplicated: delivered more than once (allowed: delivery is at
	// least once). Recovered: a send of unknown outcome, later delivered.
	Lost       int      `json:"lost"`
	Unexpected int      `json:"unexpected"`
	Duplicated int      `json:"duplicated"`
	Recovered  int      `json:"recovered"`
	Examples   []string `json:"examples,omitempty"`
}

// CheckQueue checks that every acknowledged send was delivered and that
// nothing was delivered that no one sent. Valid: lost = 0, unexpected = 0.
func CheckQueue(ops []Op) QueueResult {
	var r QueueResult
	attempted := map[string]bool{}
	acked := map[string]bool{}
	unknown := map[string]bool{}
	delivered := map[string]int{}
	for _, op := range ops {
		switch {
		case op.F == "send" && op.Kind == Invoke:
			attempted[op.Value] = true
		case op.F == "send" && op.Kind == OK:
			acked[op.Value] = true
		case op.F == "send" && op.Kind == Info:
			unknown[op.Value] = true
		case op.F == "receive" && op.Kind == OK:
			delivered[op.Value]++
		}
	}
	r.Attempted, r.Acked, r.Delivered = len(attempted), len(acked), len(delivered)
	var examples []string
	for _, v := range sorted(acked) {
		if delivered[v] == 0 {
			r.Lost++
			examples = append(examples, "lost "+v)
		}
	}
	for _, v := range sortedCounts(delivered) {
		n := delivered[v]
		if !attempted[v] {
			r.Unexpected++
			examples = append(examples, "unexpected "+v)
		}
		if n > 1 {
			r.Duplicated++
		}
		if unknown[v] && !acked[v] {
			r.Recovered++
		}
	}
	if len(examples) > maxListed {
		examples = examples[:maxListed]
	}
	r.Examples = examples
	r.Valid = r.Lost == 0 && r.Unexpected == 0
	return r
}

// KeyOrderResult is what the key order checker found.
type KeyOrderResult struct {
	Valid bool `json:"valid"`
	Keys  int  `json:"keys"`
	// Reordered counts first deliveries of a key at a lower offset than
	// an earlier first delivery of the same key (per partition).
	Reordered int `json:"reordered"`
	// Overlaps counts deliveries of a key to a consumer while another
	// consumer held unacked messages of it and was still connected.
	Overlaps int `json:"overlaps"`
	// Moves counts first deliveries of a key to another consumer than
	// the key's previous one: keys move when consumers come and go (a
	// consumer away past the reconnect grace loses its keys). Reported,
	// not judged: the history does not record when a consumer's
	// connection was up.
	Moves    int      `json:"moves"`
	Examples []string `json:"examples,omitempty"`
}

// CheckKeyOrder checks a key_shared history: per key (and partition), the
// first deliveries of its messages come in offset order, and a key is
// never delivered to one consumer while another holds it unacked. A
// consumer holds a message from its receive until its ack is invoked, or
// until it records a "disconnect" (its unacked messages are then the
// broker's to give away).
func CheckKeyOrder(ops []Op) KeyOrderResult {
	var r KeyOrderResult
	type pk struct {
		partition int
		key       string
	}
	seen := map[pk]map[int64]bool{}
	last := map[pk]int64{}
	holding := map[pk]map[string]int{}
	held := map[string]map[string]bool{} // consumer → values held
	valueKey := map[string]pk{}
	owner := map[pk]string{}
	var examples []string
	note := func(s string) {
		if len(examples) < maxListed {
			examples = append(examples, s)
		}
	}
	for _, op := range ops {
		switch {
		case op.F == "receive" && op.Kind == OK:
			k := pk{op.Partition, op.Key}
			valueKey[op.Value] = k
			if seen[k] == nil {
				seen[k] = map[int64]bool{}
				last[k] = -1
			}
			if !seen[k][op.Offset] {
				seen[k][op.Offset] = true
				if prev, ok := owner[k]; ok && prev != op.Consumer {
					r.Moves++
				}
				owner[k] = op.Consumer
				if op.Offset < last[k] {
					r.Reordered++
					note(fmt.Sprintf("key %s: offset %d first delivered after %d", op.Key, op.Offset, last[k]))
				}
				last[k] = max(last[k], op.Offset)
			}
			for other, n := range holding[k] {
				if other != op.Consumer && n > 0 {
					r.Overlaps++
					note(fmt.Sprintf("key %s delivered to %s while %s held %d unacked", op.Key, op.Consumer, other, n))
				}
			}
			if holding[k] == nil {
				holding[k] = map[string]int{}
			}
			if held[op.Consumer] == nil {
				held[op.Consumer] = map[string]bool{}
			}
			if !held[op.Consumer][op.Value] {
				held[op.Consumer][op.Value] = true
				holding[k][op.Consumer]++
			}
		case op.F == "ack" && op.Kind == Invoke:
			if held[op.Consumer][op.Value] {
				delete(held[op.Consumer], op.Value)
				holding[valueKey[op.Value]][op.Consumer]--
			}
		case op.F == "disconnect":
			for v := range held[op.Consumer] {
				holding[valueKey[v]][op.Consumer]--
			}
			delete(held, op.Consumer)
		}
	}
	r.Keys = len(seen)
	r.Examples = examples
	r.Valid = r.Reordered == 0 && r.Overlaps == 0
	return r
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedCounts(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

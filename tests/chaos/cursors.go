package chaos

import "fmt"

// CursorResult is what the cursor checker found.
type CursorResult struct {
	Valid bool `json:"valid"`
	// Committed counts acks that returned ok (acks with receipt: the ack
	// is in the partition's Raft log).
	Committed int `json:"committed_acks"`
	// Undone counts deliveries of a message that the broker must have
	// sent after an ack of it had committed: the ack was undone.
	Undone   int      `json:"undone_acks"`
	Examples []string `json:"examples,omitempty"`
}

// CheckCursors checks that a committed ack is never undone: once an ack
// of a message returned ok, no consumer of the subscription is sent the
// message again (after a leader change too, redelivery covers only
// unacked messages).
//
// The history records when a consumer takes a message, not when the
// broker sent it, and a consumer prefetches up to queue messages per
// partition. The broker sends a consumer a message only against a permit,
// and the client grants permits as the application takes messages (on a
// reconnect it drops what was queued and grants queue afresh), so the
// k-th message a consumer takes from a partition was sent after it took
// the (k-queue)-th. A delivery is counted as undoing an ack only when the
// ack had returned before that earlier take: nothing in flight can
// explain it.
func CheckCursors(ops []Op, queue int) CursorResult {
	var r CursorResult
	type cp struct {
		consumer  string
		partition int
	}
	taken := map[cp][]int64{} // times a consumer took messages of a partition
	committed := map[string]int64{}
	for _, op := range ops {
		switch {
		case op.F == "ack" && op.Kind == OK:
			if _, ok := committed[op.Value]; !ok {
				committed[op.Value] = op.Time
				r.Committed++
			}
		case op.F == "receive" && op.Kind == OK:
			k := cp{op.Consumer, op.Partition}
			times := append(taken[k], op.Time)
			taken[k] = times
			at, ok := committed[op.Value]
			if !ok || len(times) <= queue {
				continue
			}
			if sentAfter := times[len(times)-1-queue]; at < sentAfter {
				r.Undone++
				if len(r.Examples) < maxListed {
					r.Examples = append(r.Examples, fmt.Sprintf("%s (partition %d offset %d) delivered to %s at %d ns: its ack returned at %d ns, before the consumer took the message whose permit let this one come (%d ns)",
						op.Value, op.Partition, op.Offset, op.Consumer, op.Time, at, sentAfter))
				}
			}
		}
	}
	r.Valid = r.Undone == 0
	return r
}

package chaos

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// AppendsResult is what the append checkers found.
type AppendsResult struct {
	Valid bool `json:"valid"`
	// Checked counts the sends given to the linearizability checker.
	Checked int `json:"checked"`
	// Windows counts the overlapping windows porcupine checked.
	Windows int `json:"windows"`
	// Linearizable is porcupine's verdict over every window: Ok, Illegal
	// (some window is not linearizable) or Unknown (a window ran out of
	// time, which is not counted as invalid); "skipped" when it did not
	// run.
	Linearizable string `json:"linearizable"`
	// StaleOffsets counts sends that got an offset below one acknowledged
	// before they were called, over the whole history (the same property
	// checked pairwise, so no window bounds it).
	StaleOffsets int `json:"stale_offsets"`
	// DuplicateAppends counts messages stored at two offsets: a producer
	// retry that the broker failed to deduplicate.
	DuplicateAppends int      `json:"duplicate_appends"`
	Examples         []string `json:"examples,omitempty"`
}

// appendOp is one send for the checker: its partition and the offset the
// message was stored at.
type appendOp struct {
	partition int
	value     string
	offset    int64
}

// linearizableWindow is how many sends of a partition porcupine checks at
// once; windows overlap by half, so every pair of sends less than half a
// window apart (in call order) is in one window together.
const linearizableWindow = 20_000

// CheckAppends checks that appends are linearizable against a log: an
// acknowledged send that finished before another started has the lower
// offset (per partition), and that no message was stored twice. A send
// of unknown outcome that was delivered takes the offset it was delivered
// at and may have happened any time after its call; one never delivered
// did not happen.
//
// porcupine checks each partition's sends in overlapping windows of
// linearizableWindow (a window of a linearizable history is linearizable
// under this model, so an Illegal window is a real violation), and a
// sweep checks the same property over the whole history at once: under
// this model a history is linearizable exactly when no send finished
// before another started with a higher offset. A timeout of zero or less
// skips porcupine (Linearizable says "skipped"): the sweep alone decides.
func CheckAppends(ops []Op, timeout time.Duration) AppendsResult {
	var r AppendsResult
	offsets := map[string]map[int64]bool{} // value → offsets delivered at
	where := map[string]appendOp{}
	for _, op := range ops {
		if op.F == "receive" && op.Kind == OK {
			if offsets[op.Value] == nil {
				offsets[op.Value] = map[int64]bool{}
			}
			offsets[op.Value][op.Offset] = true
			where[op.Value] = appendOp{partition: op.Partition, value: op.Value, offset: op.Offset}
		}
	}
	for _, v := range sortedKeys(offsets) {
		if len(offsets[v]) > 1 {
			r.DuplicateAppends++
			if len(r.Examples) < maxListed {
				r.Examples = append(r.Examples, fmt.Sprintf("%s stored at offsets %v", v, sortedOffsets(offsets[v])))
			}
		}
	}
	calls := map[string]int64{}
	byPartition := map[int][]porcupine.Operation{}
	add := func(process int, a appendOp, call, ret int64) {
		byPartition[a.partition] = append(byPartition[a.partition], porcupine.Operation{ClientId: process, Input: a, Call: call, Output: a.offset, Return: ret})
	}
	pending := map[string]int{} // value → process, for sends without an ok
	for _, op := range ops {
		if op.F != "send" {
			continue
		}
		switch op.Kind {
		case Invoke:
			calls[op.Value] = op.Time
			pending[op.Value] = op.Process
		case OK:
			delete(pending, op.Value)
			add(op.Process, appendOp{partition: op.Partition, value: op.Value, offset: op.Offset}, calls[op.Value], op.Time)
		}
	}
	for _, v := range sortedInts(pending) {
		if a, ok := where[v]; ok {
			add(pending[v], a, calls[v], math.MaxInt64) // unknown: any time after its call
		}
	}
	model := porcupine.Model{
		// The state is the highest offset linearized so far: each append
		// must land above it.
		Init: func() any { return int64(-1) },
		Step: func(state, _, output any) (bool, any) {
			o := output.(int64)
			return o > state.(int64), o
		},
		DescribeOperation: func(input, output any) string {
			return fmt.Sprintf("append(%s) -> %d", input.(appendOp).value, output.(int64))
		},
	}
	verdict := porcupine.Ok
	for _, p := range sortedPartitions(byPartition) {
		h := byPartition[p]
		sort.SliceStable(h, func(i, j int) bool { return h[i].Call < h[j].Call })
		r.Checked += len(h)
		for lo := 0; timeout > 0; lo += linearizableWindow / 2 {
			hi := min(lo+linearizableWindow, len(h))
			r.Windows++
			switch porcupine.CheckOperationsTimeout(model, h[lo:hi], timeout) {
			case porcupine.Illegal:
				verdict = porcupine.Illegal
				if len(r.Examples) < maxListed {
					r.Examples = append(r.Examples, fmt.Sprintf("partition %d: sends %d..%d (in call order) are not linearizable", p, lo, hi-1))
				}
			case porcupine.Unknown:
				if verdict == porcupine.Ok {
					verdict = porcupine.Unknown
				}
			}
			if hi == len(h) {
				break
			}
		}
		r.StaleOffsets += staleOffsets(p, h, &r.Examples)
	}
	r.Linearizable = string(verdict)
	if timeout <= 0 {
		r.Linearizable = "skipped"
	}
	r.Valid = r.DuplicateAppends == 0 && r.StaleOffsets == 0 && verdict != porcupine.Illegal
	return r
}

// staleOffsets counts the sends of h (one partition, sorted by call) that
// got an offset at or below that of a send which returned before they
// were called, and lists a few.
func staleOffsets(partition int, h []porcupine.Operation, examples *[]string) int {
	byReturn := slices.Clone(h)
	sort.SliceStable(byReturn, func(i, j int) bool { return byReturn[i].Return < byReturn[j].Return })
	stale := 0
	var top *porcupine.Operation // highest offset among the sends returned so far
	j := 0
	for i := range h {
		for j < len(byReturn) && byReturn[j].Return < h[i].Call {
			if top == nil || byReturn[j].Output.(int64) > top.Output.(int64) {
				top = &byReturn[j]
			}
			j++
		}
		if top != nil && h[i].Output.(int64) <= top.Output.(int64) {
			stale++
			if len(*examples) < maxListed {
				*examples = append(*examples, fmt.Sprintf("partition %d: %s called after %s returned",
					partition, describeAppend(h[i]), describeAppend(*top)))
			}
		}
	}
	return stale
}

func describeAppend(op porcupine.Operation) string {
	return fmt.Sprintf("%s at offset %d", op.Input.(appendOp).value, op.Output.(int64))
}

func sortedKeys(m map[string]map[int64]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedOffsets(m map[int64]bool) []int64 {
	out := make([]int64, 0, len(m))
	for o := range m {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func sortedInts(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedPartitions(m map[int][]porcupine.Operation) []int {
	out := make([]int, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

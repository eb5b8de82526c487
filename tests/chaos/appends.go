package chaos

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// AppendsResult is what the append checkers found.
type AppendsResult struct {
	Valid bool `json:"valid"`
	// Checked counts the sends given to the linearizability checker.
	Checked int `json:"checked"`
	// Linearizable is porcupine's verdict: Ok, Illegal or Unknown (the
	// check ran out of time, which is not counted as invalid).
	Linearizable string `json:"linearizable"`
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

// maxLinearizableOps bounds the sends checked per partition, so that the
// checker finishes.
const maxLinearizableOps = 20_000

// CheckAppends checks that appends are linearizable against a log: an
// acknowledged send that finished before another started has the lower
// offset (per partition), and that no message was stored twice. A send
// of unknown outcome that was delivered takes the offset it was delivered
// at and may have happened any time after its call; one never delivered
// did not happen.
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
	var end int64
	var history []porcupine.Operation
	perPartition := map[int]int{}
	add := func(process int, a appendOp, call, ret int64) {
		if perPartition[a.partition] >= maxLinearizableOps {
			return
		}
		perPartition[a.partition]++
		history = append(history, porcupine.Operation{ClientId: process, Input: a, Call: call, Output: a.offset, Return: ret})
	}
	pending := map[string]int{} // value → process, for sends without an ok
	for _, op := range ops {
		end = max(end, op.Time)
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
	r.Checked = len(history)
	model := porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[int][]porcupine.Operation{}
			for _, op := range h {
				p := op.Input.(appendOp).partition
				by[p] = append(by[p], op)
			}
			var out [][]porcupine.Operation
			for _, p := range sortedPartitions(by) {
				out = append(out, by[p])
			}
			return out
		},
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
	r.Linearizable = string(porcupine.CheckOperationsTimeout(model, history, timeout))
	r.Valid = r.DuplicateAppends == 0 && r.Linearizable != string(porcupine.Illegal)
	return r
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

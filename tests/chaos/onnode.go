package chaos

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"

	"github.com/fabriq-io/fabriq/broker"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/storage"
)

// OnNodesResult says whether every current replica of every partition
// holds every acknowledged message at the offset its receipt gave.
type OnNodesResult struct {
	Valid bool `json:"valid"`
	// Copies is how many replica copies were read; Checked how many
	// (acknowledged message, copy) pairs were compared.
	Copies  int `json:"copies"`
	Checked int `json:"checked"`
	// Missing counts acknowledged messages absent from a copy, or held
	// there with another payload; Trimmed those below a copy's start,
	// deleted by retention.
	Missing  int      `json:"missing"`
	Trimmed  int      `json:"trimmed"`
	Examples []string `json:"examples,omitempty"`
}

// CheckOnNodes reads each current replica copy (placement, by partition
// directory name) of the workloads' partitions from its start, the nodes
// being stopped, and looks up every acknowledged send of the history at
// its receipt's offset on every copy: a message a majority acknowledged
// must be on every replica once they caught up, not only on the one a
// consumer read.
func CheckOnNodes(c *Cluster, workloads []Workload, ops []Op, placement map[string][]string) OnNodesResult {
	r := OnNodesResult{Valid: true}
	for _, w := range workloads {
		acked := map[int][]Op{}
		for _, op := range w.own(ops) {
			if op.F == "send" && op.Kind == OK && op.Offset >= 0 {
				acked[op.Partition] = append(acked[op.Partition], op)
			}
		}
		st, err := geofabric.ParseStream(w.Stream)
		if err != nil {
			r.Valid = false
			r.note(err.Error())
			continue
		}
		parts := make([]int, 0, len(acked))
		for p := range acked {
			parts = append(parts, p)
		}
		sort.Ints(parts)
		for _, p := range parts {
			pn := st.Partition(p, w.Partitions).String()
			for _, n := range c.Nodes {
				dir, err := broker.PartitionDir(n.Dir, pn)
				if err != nil {
					r.Valid = false
					r.note(err.Error())
					continue
				}
				name := filepath.Base(dir)
				if !slices.Contains(placement[name], n.ID) {
					continue
				}
				held, start, err := readCopy(filepath.Join(dir, "log"))
				if err != nil {
					r.Valid = false
					r.note(fmt.Sprintf("%s on %s: %v", name, n.ID, err))
					continue
				}
				r.Copies++
				for _, op := range acked[p] {
					r.Checked++
					off := uint64(op.Offset)
					if off < start {
						r.Trimmed++
						continue
					}
					if v, ok := held[off]; !ok || v != op.Value {
						r.Missing++
						r.Valid = false
						r.note(fmt.Sprintf("%s on %s: offset %d holds %q, acknowledged %q", name, n.ID, off, v, op.Value))
					}
				}
			}
		}
	}
	return r
}

func (r *OnNodesResult) note(s string) {
	if len(r.Examples) < maxListed {
		r.Examples = append(r.Examples, s)
	}
}

// readCopy opens a stopped node's copy of a partition log and returns its
// payloads by offset, and its start offset.
func readCopy(dir string) (map[uint64]string, uint64, error) {
	l, err := storage.Open(dir, storage.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, 0, err
	}
	defer l.Close()
	info := l.Info()
	held := make(map[uint64]string, info.NextOffset-info.StartOffset)
	for next := info.StartOffset; next < info.NextOffset; {
		msgs, err := l.Read(next, 1000, 4<<20)
		if err != nil {
			return nil, 0, fmt.Errorf("read at %d: %w", next, err)
		}
		if len(msgs) == 0 {
			return nil, 0, fmt.Errorf("read at %d: nothing, the log ends at %d", next, info.NextOffset)
		}
		for _, m := range msgs {
			held[m.Offset] = string(m.Payload)
		}
		next = msgs[len(msgs)-1].Offset + 1
	}
	return held, info.StartOffset, nil
}

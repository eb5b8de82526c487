package meta

import (
	"errors"
	"fmt"
	"slices"
)

// errUnknownType is apply's answer to an entry of a type this version does
// not know and may not skip.
var errUnknownType = errors.New("unknown metadata entry type")

// apply applies the entry data committed at index to s: the deterministic
// processor under the catalog's raft.FSM. It reads nothing but s and the
// entry. An error (an empty entry, an unknown type without
// IgnoreUnknownTypeFlag, a body that does not decode) leaves s unchanged.
func (s *state) apply(index uint64, data []byte) (Result, error) {
	if len(data) == 0 {
		return Result{}, errors.New("empty metadata entry")
	}
	t := Type(data[0])
	h, ok := handlers[t]
	if !ok {
		if t&IgnoreUnknownTypeFlag != 0 {
			s.Applied = index
			return Result{Skipped: true}, nil
		}
		return Result{}, fmt.Errorf("%w %d", errUnknownType, uint8(t))
	}
	res, err := h.apply(s, index, data[1:])
	if err != nil {
		return Result{}, err
	}
	s.Applied = index
	return res, nil
}

func (s *state) registerNode(_ uint64, e RegisterNode) bool {
	s.Nodes[e.ID] = Node(e)
	return true
}

func (s *state) createStream(index uint64, e CreateStream) bool {
	if _, ok := s.Streams[e.Name]; ok {
		return false
	}
	s.Streams[e.Name] = &Stream{
		Epoch:        index,
		Name:         e.Name,
		Partitions:   e.Partitions,
		Replicas:     e.Replicas,
		Placement:    e.Placement,
		Initial:      e.Placement,
		Retention:    e.Retention,
		Local:        e.Local,
		LeaderRegion: e.LeaderRegion,
	}
	s.adopt(e.Name)
	return true
}

func (s *state) deleteStream(_ uint64, e DeleteStream) bool {
	_, ok := s.Streams[e.Name]
	delete(s.Streams, e.Name)
	return ok
}

// replaceReplica moves a replica; it reports whether it changed anything
// (the stream may be gone, or the move already done). Streams are copied
// on write: readers hold copies that share their slices.
func (s *state) replaceReplica(index uint64, e ReplaceReplica) bool {
	st := s.Streams[e.Stream]
	if st == nil || e.Partition < 0 || e.Partition >= len(st.Placement) {
		return false
	}
	p := st.Placement[e.Partition]
	i := slices.Index(p, e.Old)
	if i < 0 || slices.Contains(p, e.New) {
		return false
	}
	p = slices.Clone(p)
	p[i] = e.New
	placement := slices.Clone(st.Placement)
	placement[e.Partition] = p
	st.Placement = placement
	st.setSince(e.Partition, i, index)
	// The partition's group exists now: no replica may bootstrap it
	// again. A node that was an initial replica, lost its copy when moved
	// away and is given the partition back later would otherwise start a
	// new, empty group with the others that have no copy yet, and elect
	// a leader of an empty log: every acknowledged message lost.
	st.endBootstrap(e.Partition)
	return true
}

// renewReplica renews a member; it reports whether it changed anything
// (the member may be gone already, or renewed).
func (s *state) renewReplica(index uint64, e RenewReplica) bool {
	st := s.Streams[e.Stream]
	if st == nil || e.Partition < 0 || e.Partition >= len(st.Placement) {
		return false
	}
	j := slices.Index(st.Members(e.Partition), e.Member)
	if j < 0 {
		return false
	}
	st.setSince(e.Partition, j, index)
	st.endBootstrap(e.Partition) // see replaceReplica
	return true
}

func (s *state) setRetention(_ uint64, e SetRetention) bool {
	st := s.Streams[e.Stream]
	if st == nil {
		return false
	}
	st.Retention = e.Retention
	return true
}

// setSince records that replica j of partition i was placed at index,
// copying Since (a copy of the stream may share it).
func (s *Stream) setSince(i, j int, index uint64) {
	since := make([][]uint64, len(s.Placement))
	for k := range since {
		since[k] = make([]uint64, len(s.Placement[k]))
		for m := range since[k] {
			since[k][m] = s.SinceOf(k, m)
		}
	}
	since[i][j] = index
	s.Since = since
}

// endBootstrap clears partition i's initial placement, copying Initial.
func (s *Stream) endBootstrap(i int) {
	if i < len(s.Initial) {
		initial := slices.Clone(s.Initial)
		initial[i] = nil
		s.Initial = initial
	}
}

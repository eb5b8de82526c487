package fsm

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/fabriq-io/fabriq/storage"
	"github.com/fabriq-io/fabriq/subscription"
)

// Config is what a Machine is made of: its log and the directory of its
// log snapshots, and what it tells its partition. They are dependencies,
// not tunables: there is nothing to default but the logger.
type Config struct {
	// Log is the partition's log. Required.
	Log *storage.Log
	// SnapshotDir is where log snapshots are made, on the log's file
	// system (they are hard links). Required.
	SnapshotDir string
	// Applied is called after each entry is applied, and after a
	// restore, with the next offset and whether the entry only added
	// messages, so the leader's dispatchers can wake up. It must not
	// block. May be nil.
	Applied func(next uint64, data bool)
	// Halted is told, once and from Raft's goroutine, that the log could
	// not take a committed entry (a full disk, an I/O error): the state
	// machine has stopped, and the group must be closed on this node. It
	// must not block. May be nil.
	Halted func(error)
	// Logger logs entries skipped by their ignorable type; nil discards.
	Logger *slog.Logger
}

// Machine is a partition's Raft state machine (raft.FSM): a thin adapter
// that decodes each committed entry, dispatches it to the processor under
// its lock, and stops when the log cannot take an entry. Apply runs on
// Raft's goroutine; the queries (the dispatchers, stats) take the lock
// too, and answer copies.
type Machine struct {
	log     *storage.Log
	snapDir string
	applied func(next uint64, data bool)
	halted  func(error)
	logger  *slog.Logger

	mu    sync.RWMutex
	state state
	// failed is why the state machine stopped, nil while it runs. Once
	// set it applies nothing and takes no snapshot: the entry that failed
	// and every later one are replayed from Raft when the partition opens
	// again, so none of them counts as applied.
	failed error
	// skipped are the unknown ignorable types met, logged once each.
	skipped map[entryType]bool
}

// New returns the state machine of a partition whose log and snapshot
// directory are in cfg, with the state before the first entry.
func New(cfg Config) *Machine {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Machine{
		log:     cfg.Log,
		snapDir: cfg.SnapshotDir,
		applied: cfg.Applied,
		halted:  cfg.Halted,
		logger:  logger,
		state:   newState(),
		skipped: map[entryType]bool{},
	}
}

// Apply applies one committed entry and returns its answer (see Answer).
// Domain errors are answers; an entry that cannot be decoded, or of an
// unknown type without the ignorable flag, stops the node: continuing
// would let replicas diverge. A log that cannot take a committed batch
// stops this state machine (ErrHalted, and the Halted callback), not the
// node: hashicorp/raft cannot be told that an entry failed, so every later
// entry is answered ErrHalted, unapplied, until the group is closed.
func (m *Machine) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	if len(l.Data) == 0 {
		panic(fmt.Sprintf("fsm: empty partition entry at raft index %d", l.Index))
	}
	res, next, failed := m.apply(l)
	if failed != nil {
		if m.halted != nil {
			m.halted(failed)
		}
		return res
	}
	if err, ok := res.(error); ok && errors.Is(err, ErrHalted) {
		return res
	}
	// Told after the lock is released: the callback takes the
	// partition's lock, which is taken before this one elsewhere.
	if m.applied != nil {
		m.applied(next, entryType(l.Data[0]).number() == entrySend)
	}
	return res
}

// apply dispatches one entry under the lock and returns its answer and the
// next offset; failed is set when this entry stopped the state machine.
func (m *Machine) apply(l *raft.Log) (res any, next uint64, failed error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed != nil {
		return fmt.Errorf("%w: %v", ErrHalted, m.failed), m.state.Next, nil
	}
	t := entryType(l.Data[0])
	h, ok := handlers[t.number()]
	if !ok {
		if t&ignoreUnknown == 0 {
			panic(fmt.Sprintf("fsm: unknown partition entry type %d at raft index %d", t, l.Index))
		}
		m.skipLocked(t, l.Index)
		return nil, m.state.Next, nil
	}
	res, err := h.apply(&m.state, m.log, l.Index, l.Data[1:])
	if errors.Is(err, errAppend) {
		m.failed = fmt.Errorf("raft index %d: %w", l.Index, err)
		return fmt.Errorf("%w: %v", ErrHalted, m.failed), m.state.Next, m.failed
	}
	if err != nil {
		panic(fmt.Sprintf("fsm: partition entry at raft index %d: %v", l.Index, err))
	}
	return res, m.state.Next, nil
}

// skipLocked passes over an entry of an unknown type flagged ignorable,
// and logs the first of each type.
func (m *Machine) skipLocked(t entryType, index uint64) {
	if m.skipped[t] {
		return
	}
	m.skipped[t] = true
	m.logger.Warn("skipping partition entries of a type this version does not know (flagged ignorable); upgrade this node",
		"type", int(t.number()), "raft_index", index)
}

// Cursor returns a copy of a subscription's cursor and its mode.
func (m *Machine) Cursor(sub string) (*subscription.Cursor, Mode, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.state.Subs[sub]
	if s == nil {
		return nil, 0, false
	}
	return s.Cursor.Clone(), s.Mode, true
}

// NextOffset returns the offset the next message will get.
func (m *Machine) NextOffset() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.state.Next
}

// StartOffset returns the first offset the partition serves.
func (m *Machine) StartOffset() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.state.Start
}

// IsAcked reports whether an offset is acknowledged on a subscription;
// every offset is, on a subscription that does not exist.
func (m *Machine) IsAcked(sub string, offset uint64) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.state.Subs[sub]
	return s == nil || s.Cursor.IsAcked(offset)
}

// lastSequence returns a producer's highest stored sequence id, -1 if none.
func (m *Machine) lastSequence(producer string) int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return lastSeqOf(m.state.Producers[producer])
}

// Subscriptions returns a copy of every subscription's state, by name.
func (m *Machine) Subscriptions() map[string]*Subscription {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[string]*Subscription, len(m.state.Subs))
	for name, s := range m.state.Subs {
		out[name] = s.clone()
	}
	return out
}

// Subscription returns a copy of one subscription's state, nil if none.
func (m *Machine) Subscription(sub string) *Subscription {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if s := m.state.Subs[sub]; s != nil {
		return s.clone()
	}
	return nil
}

// AllMembers returns the members of every subscription that has some.
func (m *Machine) AllMembers() map[string][]Member {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := map[string][]Member{}
	for name, s := range m.state.Subs {
		if len(s.Members) > 0 {
			out[name] = slices.Clone(s.Members)
		}
	}
	return out
}

// Members returns a subscription's members, in join order, and its mode
// and key policy (SUB-7); ok is false when it does not exist.
func (m *Machine) Members(sub string) (ms []Member, mode Mode, keyMode KeySharedMode, outOfOrder, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.state.Subs[sub]
	if s == nil {
		return nil, 0, 0, false, false
	}
	return slices.Clone(s.Members), s.Mode, s.KeyMode, s.OutOfOrder, true
}

// Floors returns the start offset, the next offset and every
// subscription's first unacknowledged offset.
func (m *Machine) Floors() (start, next uint64, floors map[string]uint64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	floors = make(map[string]uint64, len(m.state.Subs))
	for name, s := range m.state.Subs {
		floors[name] = s.Cursor.Floor
	}
	return m.state.Start, m.state.Next, floors
}

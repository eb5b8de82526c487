package cluster

import (
	"fmt"
	"io"
	"slices"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// Configuration is a group's membership as set by the Raft entry at Index.
type Configuration struct {
	Index   uint64
	Servers []Server
}

// IDs returns the ids of the configuration's members, in its order.
func (c Configuration) IDs() []string {
	ids := make([]string, 0, len(c.Servers))
	for _, s := range c.Servers {
		ids = append(ids, s.ID)
	}
	return ids
}

// ConfigStatus is what one member knows of its group's configuration at one
// instant, read atomically.
type ConfigStatus struct {
	// Committed is the newest configuration this member knows to be
	// committed: the last one it applied, or the one of the newest
	// snapshot it holds. Valid only when Known.
	Committed Configuration
	// Known is false until this member has seen a committed
	// configuration (a new member before its leader reaches it).
	Known bool
	// Pending is true while the member's log holds a newer configuration
	// than Committed that it does not know to be committed: a change in
	// flight, which may still fail.
	Pending bool
}

// ConfigStatus returns what this member knows of the group's
// configuration. It never waits on Raft.
func (g *Group) ConfigStatus() ConfigStatus {
	c := g.fsm.committed.Load()
	if c == nil {
		return ConfigStatus{Pending: len(g.raft.GetConfiguration().Configuration().Servers) > 0}
	}
	// The latest configuration is set when its entry is stored, before it
	// commits, so it is never older than the committed one: it differs
	// only while a change is in flight.
	latest := toServers(g.raft.GetConfiguration().Configuration())
	return ConfigStatus{Committed: *c, Known: true, Pending: !slices.Equal(latest, c.Servers)}
}

// toServers maps a hashicorp/raft configuration to ours.
func toServers(c raft.Configuration) []Server {
	out := make([]Server, 0, len(c.Servers))
	for _, s := range c.Servers {
		out = append(out, Server{ID: string(s.ID), Address: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out
}

// configFSM wraps the caller's FSM to learn each committed configuration:
// hashicorp/raft hands an FSM that implements raft.ConfigurationStore every
// configuration entry once it is committed, in log order, and a snapshot
// (restored at start or installed from the leader) holds only a committed
// configuration, which the snapshot store's metadata records.
type configFSM struct {
	raft.FSM
	snaps     *SnapshotStore
	committed atomic.Pointer[Configuration]
}

var _ raft.ConfigurationStore = (*configFSM)(nil)

// Apply hands the entry to the caller's FSM, unless it stands for an entry
// the log could not read (damagedEntry): the group is about to stop, and
// its FSM must never see it.
func (f *configFSM) Apply(l *raft.Log) any {
	if isDamagedEntry(l) {
		return fmt.Errorf("%w: entry %d could not be read", ErrDamaged, l.Index)
	}
	return f.FSM.Apply(l)
}

// StoreConfiguration is called by Raft once a configuration entry is
// committed.
func (f *configFSM) StoreConfiguration(index uint64, c raft.Configuration) {
	f.advance(Configuration{Index: index, Servers: toServers(c)})
}

// Restore restores the caller's FSM, then takes the configuration of the
// newest snapshot held, which is the one restored (an installed snapshot
// is newer than any taken here; at start Raft restores the newest).
func (f *configFSM) Restore(rc io.ReadCloser) error {
	if err := f.FSM.Restore(rc); err != nil {
		return err
	}
	f.fromSnapshots()
	return nil
}

// fromSnapshots advances to the configuration of the newest snapshot.
func (f *configFSM) fromSnapshots() {
	metas, err := f.snaps.List()
	if err != nil || len(metas) == 0 {
		return
	}
	m := metas[0]
	f.advance(Configuration{Index: m.ConfigurationIndex, Servers: toServers(m.Configuration)})
}

// advance keeps c if it is newer than the configuration known. Only Raft's
// FSM goroutine (and OpenGroup, before Raft starts) calls it.
func (f *configFSM) advance(c Configuration) {
	if cur := f.committed.Load(); cur != nil && cur.Index >= c.Index {
		return
	}
	f.committed.Store(&c)
}

package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Sleeping groups (cluster/DESIGN.md, "Sleeping groups"). A quiet group
// whose followers have every entry its leader has can close on every
// member: its leader puts it to sleep (Group.Sleep), which leaves a mark
// in the group's directory, closes the leader's member and tells each
// follower's node in its next heartbeat round; each follower that holds
// the same term, leader and last entry is offered sleep (GroupConfig.
// OnSleep), and its owner closes it the same way. Nothing of an asleep
// member runs: no Raft, no goroutine, no open file.
//
// Any member can be woken: its owner opens it again (OpenGroup removes the
// mark before Raft starts) and asks the other members' nodes to open
// theirs (Group.Rouse); the first election then goes as after a restart
// (elect.go). A node also offers its owner to wake a group it does not run
// whenever another node asks anything of it: a connection, a heartbeat, a
// first election's notice (Mux.SetAsleep). A member that missed the sleep
// campaigns once its timeout runs out, and wakes the others so.
//
// Raft's safety does not depend on any of it: a closed member is a member
// that is down, and a mark only keeps a member closed until it is asked
// for. What the mark saves is a restart's open of every asleep group.

// sleepMarkFile, in a group's directory, marks a member put to sleep and
// not opened since.
const sleepMarkFile = "SLEEP"

// ErrCannotSleep is returned by Group.Sleep when the member may not sleep
// now: a leader that is not quiet, a follower that is not caught up, a
// member whose leader has not put the group to sleep.
var ErrCannotSleep = errors.New("cluster: group cannot sleep now")

// Asleep reports whether the group whose directory is dir was put to sleep
// and has not been opened since: its owner may keep it closed until it is
// asked for.
func Asleep(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, sleepMarkFile))
	return err == nil
}

// wakeMark removes dir's sleep mark, durably, before the group opens: a
// member that opened may hold entries, or a term, the mark does not know.
func wakeMark(dir string) error {
	err := os.Remove(filepath.Join(dir, sleepMarkFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return syncDir(dir)
}

// writeSleepMark writes dir's sleep mark durably, naming the term, last
// entry and leader the member slept at (for people reading the directory).
func writeSleepMark(dir string, term, index uint64, leader raft.ServerID) error {
	mark := fmt.Sprintf("asleep since %s: term %d, last entry %d, leader %s\n", time.Now().UTC().Format(time.RFC3339), term, index, leader)
	if err := writeFileSync(filepath.Join(dir, sleepMarkFile), []byte(mark)); err != nil {
		return err
	}
	return syncDir(dir)
}

// hbSleep tells a follower's node that the follower's leader put the group
// to sleep at term and last entry index (hbFrame.Sleep).
type hbSleep struct {
	Group  string `msgpack:"g"`
	Member string `msgpack:"m"`
	Leader string `msgpack:"l"`
	Term   uint64 `msgpack:"t"`
	Index  uint64 `msgpack:"i"`
}

// sleepState is a group's side of sleeping groups, kept by its gate.
type sleepState struct {
	mu sync.Mutex
	// seen, on a leader: each follower's last answer to a real
	// heartbeat that it took.
	seen map[raft.ServerID]followerSeen
	// asked, on a follower: the sleep its leader asked for; nil when
	// none.
	asked *hbSleep
	// sleeping: the member closes asleep; it tells no follower to wake.
	sleeping bool
}

type followerSeen struct {
	term    uint64
	lastLog uint64
	behind  bool
	at      time.Time
}

// sawFollower records a follower's answer to a real heartbeat of term.
func (g *voteGate) sawFollower(id raft.ServerID, term, lastLog uint64, behind bool) {
	g.sleep.mu.Lock()
	defer g.sleep.mu.Unlock()
	if g.sleep.seen == nil {
		g.sleep.seen = make(map[raft.ServerID]followerSeen)
	}
	g.sleep.seen[id] = followerSeen{term: term, lastLog: lastLog, behind: behind, at: time.Now()}
}

// sleeping reports whether the member closes asleep.
func (g *voteGate) sleeping() bool {
	g.sleep.mu.Lock()
	defer g.sleep.mu.Unlock()
	return g.sleep.sleeping
}

// Idle returns how long the group has had no proposal (an apply, a
// barrier, a membership change, a transfer) on this member, counted from
// when it began to lead if later; zero when it never did either.
func (g *Group) Idle() time.Duration {
	at := g.gate.quiet.lastActive.Load()
	if at == 0 {
		return 0
	}
	return time.Since(time.Unix(0, at))
}

// Sleep puts this member to sleep and closes it, leaving the mark Asleep
// reports. A leader may sleep when it leads quietly (no proposal for a
// while) and every other member of its configuration follows it quietly,
// runs on a node that speaks ProtocolSleep, and answered a real heartbeat
// lately with this leader's last entry, all of it applied. Its followers
// are then told, and each is offered sleep (GroupConfig.OnSleep). A
// follower may sleep once its leader asked, while it still holds the same
// term, leader and last entry. Otherwise Sleep returns ErrCannotSleep and
// the member goes on. The caller closes what else it runs for the group,
// as after Close.
func (g *Group) Sleep(ctx context.Context) error {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return ErrClosed
	}
	var notes []hbSleep
	var addrs []string
	term, index := g.raft.CurrentTerm(), g.raft.LastIndex()
	_, leader := g.raft.LeaderWithID()
	if g.raft.State() == raft.Leader {
		servers, err := g.Servers(ctx)
		if err != nil {
			return err
		}
		if why := g.gate.mayLeadToSleep(servers, term, index); why != "" {
			return fmt.Errorf("%w: %s", ErrCannotSleep, why)
		}
		for _, s := range servers {
			if s.ID == g.nodeID {
				continue
			}
			notes = append(notes, hbSleep{Group: g.id, Member: s.ID, Leader: g.nodeID, Term: term, Index: index})
			addrs = append(addrs, s.Address)
		}
	} else if why := g.gate.mayFollowToSleep(term, index, leader); why != "" {
		return fmt.Errorf("%w: %s", ErrCannotSleep, why)
	}
	if err := writeSleepMark(g.cfg.Dir, term, index, leader); err != nil {
		return fmt.Errorf("cluster: group %s: sleep: %w", g.id, err)
	}
	g.gate.sleep.mu.Lock()
	g.gate.sleep.sleeping = true
	g.gate.sleep.mu.Unlock()
	err := g.Close()
	// After the close: no heartbeat of this leader reaches a follower
	// after the note does.
	for i, n := range notes {
		if p := g.cfg.Mux.hb.peer(addrs[i]); p != nil {
			p.sleepLater(n)
		}
	}
	if err == nil {
		g.logger.Debug("asleep", "term", term, "last", index)
	}
	return err
}

// mayLeadToSleep says why a leader at term, whose last entry is index,
// may not put its group to sleep; "" when it may.
func (g *voteGate) mayLeadToSleep(servers []Server, term, index uint64) string {
	if g.retired.Load() {
		return "retired"
	}
	if !g.quiet.leading.Load() {
		return "not leading quietly"
	}
	if r := g.raft.Load(); r == nil || r.AppliedIndex() < index {
		return "entries not applied"
	}
	g.quiet.mu.Lock()
	acked := make(map[raft.ServerID]quietAck, len(g.quiet.acked))
	for id, a := range g.quiet.acked {
		acked[id] = a
	}
	g.quiet.mu.Unlock()
	g.sleep.mu.Lock()
	defer g.sleep.mu.Unlock()
	for _, s := range servers {
		id := raft.ServerID(s.ID)
		if id == g.local {
			continue
		}
		if g.mux.Protocol(s.Address) < ProtocolSleep {
			return "member " + s.ID + " is on a node that cannot sleep"
		}
		if a, ok := acked[id]; !ok || a.term != term {
			return "member " + s.ID + " does not follow quietly"
		}
		// Within two real heartbeats of a quiet leader.
		seen, ok := g.sleep.seen[id]
		switch {
		case !ok || seen.term != term || time.Since(seen.at) > 2*g.mux.hb.realEvery:
			return "member " + s.ID + " not heard lately"
		case seen.lastLog != index || seen.behind:
			return "member " + s.ID + " not caught up"
		}
	}
	return ""
}

// mayFollowToSleep says why a follower at term, whose last entry is index
// and whose leader is leader, may not sleep; "" when it may.
func (g *voteGate) mayFollowToSleep(term, index uint64, leader raft.ServerID) string {
	g.sleep.mu.Lock()
	a := g.sleep.asked
	g.sleep.mu.Unlock()
	switch {
	case a == nil:
		return "its leader has not put the group to sleep"
	case a.Term != term || a.Index != index || raft.ServerID(a.Leader) != leader:
		return "the group moved on since its leader put it to sleep"
	}
	if r := g.raft.Load(); r == nil || r.State() != raft.Follower {
		return "not following"
	}
	return ""
}

// sleepNoted takes a leader's word that it put a group to sleep: the
// member here is offered sleep if it holds the same term, leader and last
// entry.
func (h *heartbeats) sleepNoted(n hbSleep) {
	g := h.gate(n.Group)
	if g == nil || raft.ServerID(n.Member) != g.local {
		return
	}
	r := g.raft.Load()
	if r == nil {
		return
	}
	_, leader := r.LeaderWithID()
	if r.State() != raft.Follower || r.CurrentTerm() != n.Term || r.LastIndex() != n.Index || leader != raft.ServerID(n.Leader) {
		return
	}
	g.sleep.mu.Lock()
	g.sleep.asked = &n
	g.sleep.mu.Unlock()
	if f := g.onSleep.Load(); f != nil {
		(*f)()
	}
}

// sleepLater tells the node, with the next round, that its member of a
// group was put to sleep by its leader here.
func (p *hbPeer) sleepLater(n hbSleep) {
	p.note(func(ns *hbNotes) { ns.sleep = append(ns.sleep, n) }, false)
}

// rouseLater asks the node, with a round within the heartbeat window, to
// wake its member of group.
func (p *hbPeer) rouseLater(group string) {
	p.note(func(n *hbNotes) { n.rouse = append(n.rouse, group) }, true)
}

// SetAsleep gives the mux the function that wakes a group this node holds
// asleep: it is called, and must not block, whenever another node asks
// something of a group the node does not run (a connection, a heartbeat, a
// first election's notice, a Rouse), and reports whether the node holds
// the group asleep and wakes it. What was asked is refused meanwhile, as
// for any group not running; its sender tries again.
func (m *Mux) SetAsleep(wake func(group string) bool) { m.asleep.Store(&wake) }

// askedOf offers the owner to wake group, which another node asked
// something of and this node does not run.
func (m *Mux) askedOf(group string) bool {
	if f := m.asleep.Load(); f != nil {
		return (*f)(group)
	}
	return false
}

// Rouse asks the nodes at addrs (Raft addresses) to wake their member of
// group, with the next heartbeat round to each; nodes that do not speak
// ProtocolSleep are skipped.
func (m *Mux) Rouse(group string, addrs ...string) {
	for _, a := range addrs {
		if m.Protocol(a) < ProtocolSleep {
			continue
		}
		if p := m.hb.peer(a); p != nil {
			p.rouseLater(group)
		}
	}
}

// Rouse asks the other members of the group's configuration to wake: its
// owner calls it when it woke the group for a client, so that the group
// can elect.
func (g *Group) Rouse(ctx context.Context) error {
	servers, err := g.Servers(ctx)
	if err != nil {
		return err
	}
	var addrs []string
	for _, s := range servers {
		if s.ID != g.nodeID {
			addrs = append(addrs, s.Address)
		}
	}
	g.cfg.Mux.Rouse(g.id, addrs...)
	return nil
}

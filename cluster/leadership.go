package cluster

import (
	"sync"

	"github.com/hashicorp/raft"
)

// Leadership is a group's leadership as this node sees it.
type Leadership struct {
	IsLeader   bool   // this node leads the group
	LeaderID   string // node id of the leader; "" when none is known
	LeaderAddr string // Raft address of the leader; "" when none is known
	Term       uint64 // this node's term when the change was seen
}

// LeaderWatch delivers a group's leadership changes on C. C holds at most
// one value, the latest: a reader that falls behind skips intermediate
// states but always ends on the current one, and Raft never waits for it.
// Because of that, two values in a row with IsLeader true mean leadership
// was lost and won again in between (their Terms differ): leader-only work
// tied to the first must be restarted.
type LeaderWatch struct {
	// C receives the leadership when the watch starts and after every
	// change. It is closed by Stop and when the group closes.
	C <-chan Leadership

	ch   chan Leadership
	g    *Group
	once sync.Once
}

// Stop ends the watch and closes C. It is idempotent.
func (w *LeaderWatch) Stop() {
	w.once.Do(func() {
		w.g.mu.Lock()
		defer w.g.mu.Unlock()
		if _, ok := w.g.watchers[w]; ok {
			delete(w.g.watchers, w)
			close(w.ch)
		}
	})
}

// WatchLeader starts a LeaderWatch; C receives the current leadership at
// once. Leader-only work (the broker's dispatchers, the metadata leader's
// repair loop) starts when a value with IsLeader arrives and stops on the
// next value. On a closed group C is closed.
func (g *Group) WatchLeader() *LeaderWatch {
	ch := make(chan Leadership, 1)
	w := &LeaderWatch{C: ch, ch: ch, g: g}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		close(ch)
		return w
	}
	ch <- g.current
	g.watchers[w] = struct{}{}
	return w
}

// leadershipLoop turns Raft's observations into Leadership values. Raft
// sends observations without blocking and drops them when the buffer is
// full; the loop never trusts an observation's content but reads Raft's
// current state after each one. Raft updates its state before it observes,
// so a dropped observation's change is seen by the read that follows the
// observations still buffered when it was dropped.
func (g *Group) leadershipLoop() {
	defer close(g.stopped)
	g.publish(g.readLeadership()) // what changed before the observer was registered
	for {
		select {
		case <-g.stop:
			return
		case o := <-g.obsCh:
			if st, ok := o.Data.(raft.RaftState); ok && st == raft.Candidate && g.cfg.Events != nil {
				g.cfg.Events.Elections.Add(1)
			}
			if len(g.obsCh) > 0 {
				continue // read the state once, after the last of a burst
			}
			g.publish(g.readLeadership())
		}
	}
}

// readLeadership reads Raft's current leadership.
func (g *Group) readLeadership() Leadership {
	if g.raft.State() == raft.Leader {
		return Leadership{IsLeader: true, LeaderID: g.nodeID, LeaderAddr: g.addr, Term: g.raft.CurrentTerm()}
	}
	addr, id := g.raft.LeaderWithID()
	if string(id) == g.nodeID { // stepping down: the state moved first
		addr, id = "", ""
	}
	return Leadership{LeaderID: string(id), LeaderAddr: string(addr), Term: g.raft.CurrentTerm()}
}

// publish records l and hands it to every watcher if it differs from the
// last one: in leader, or in term while this node leads (leadership lost
// and won again between two reads).
func (g *Group) publish(l Leadership) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.current
	if c.IsLeader == l.IsLeader && c.LeaderID == l.LeaderID && c.LeaderAddr == l.LeaderAddr &&
		(!l.IsLeader || c.Term == l.Term) {
		return
	}
	g.current = l
	if l.LeaderID != "" && (l.LeaderID != c.LeaderID || l.Term != c.Term) && g.cfg.Events != nil {
		g.cfg.Events.LeaderChanges.Add(1)
	}
	if l.IsLeader {
		g.logger.Info("leadership gained", "term", l.Term)
	} else if c.IsLeader {
		g.logger.Info("leadership lost", "term", l.Term, "leader", l.LeaderID)
	}
	for w := range g.watchers {
		select {
		case w.ch <- l:
		default:
			// Replace the value the reader has not taken yet. Only this
			// goroutine sends, under g.mu, so the second send cannot block.
			select {
			case <-w.ch:
			default:
			}
			w.ch <- l
		}
	}
}

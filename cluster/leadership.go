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
	fn   func(Leadership) // instead of ch: WatchLeaderFunc
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
			w.close()
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

// WatchLeaderFunc starts a LeaderWatch that calls fn, in place of sending
// on C (which is nil): with the current leadership at once, in the
// caller's goroutine, then with every change, in the goroutine that
// observed it. Calls never overlap and come in the order of the changes;
// fn runs under the group's lock, so it must not block or call the group:
// it hands the value to work of its own. A watcher that needs no goroutine
// while nothing changes (a thousand idle partitions) uses it. After Stop,
// or once the group closes, fn is not called again.
func (g *Group) WatchLeaderFunc(fn func(Leadership)) *LeaderWatch {
	w := &LeaderWatch{fn: fn, g: g}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return w
	}
	fn(g.current)
	g.watchers[w] = struct{}{}
	return w
}

// close ends a watch removed from its group's watchers, under the
// group's lock: C is closed.
func (w *LeaderWatch) close() {
	if w.ch != nil {
		close(w.ch)
	}
}

// send hands l to the watcher, under the group's lock.
func (w *LeaderWatch) send(l Leadership) {
	if w.fn != nil {
		w.fn(l)
		return
	}
	select {
	case w.ch <- l:
	default:
		// Replace the value the reader has not taken yet. Values are
		// sent under g.mu only, so the second send cannot block.
		select {
		case <-w.ch:
		default:
		}
		w.ch <- l
	}
}

// observe turns Raft's observations into Leadership values, in the
// goroutine of Raft that observed (its observer's filter: nothing goes to
// a channel, and no goroutine waits for the next change, which an idle
// group may not see for days). It never trusts an observation's content
// but reads Raft's current state under the group's lock, in publish: Raft
// updates its state before it observes, and two of its goroutines may
// observe at once (the main loop, and a heartbeat handled on the
// transport's), so the last to take the lock publishes the state after
// the last change.
func (g *Group) observe(o *raft.Observation) bool {
	switch d := o.Data.(type) {
	case raft.RaftState:
		if d == raft.Candidate && g.cfg.Events != nil {
			g.cfg.Events.Elections.Add(1)
		}
		g.publish()
	case raft.LeaderObservation:
		g.publish()
	}
	return false
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

// publish reads the leadership, records it and hands it to every watcher
// if it differs from the last one: in leader, or in term while this node
// leads (leadership lost and won again between two reads).
func (g *Group) publish() {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.readLeadership()
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
		w.send(l)
	}
}

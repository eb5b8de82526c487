package broker

import (
	"context"
	"sync"

	"github.com/fabriq-io/fabriq/cluster"
)

// clusterGossip adapts cluster.Membership and its Routes to gossip.
type clusterGossip struct {
	m      *cluster.Membership
	notify chan struct{}
	w      *cluster.MemberWatch
	wg     sync.WaitGroup
	// epoch returns a partition's incarnation (see cluster.Route.Epoch).
	epoch func(partition string) uint64
}

// startGossip starts membership with the node's metadata and joins.
func startGossip(cfg cluster.MembershipConfig, epoch func(string) uint64) (*clusterGossip, error) {
	m, err := cluster.NewMembership(cfg)
	if err != nil {
		return nil, err
	}
	if err := m.Start(); err != nil {
		return nil, err
	}
	g := &clusterGossip{m: m, notify: make(chan struct{}, 1), w: m.Watch(), epoch: epoch}
	g.wg.Add(1)
	go func() {
		// Turns member events into a wake-up that never blocks.
		defer g.wg.Done()
		for range g.w.C {
			select {
			case g.notify <- struct{}{}:
			default:
			}
		}
	}()
	return g, nil
}

// Members implements gossip.
func (g *clusterGossip) Members() []cluster.Member { return g.m.Members() }

// Changed implements gossip.
func (g *clusterGossip) Changed() <-chan struct{} { return g.notify }

func (g *clusterGossip) announce(partition, leader string, term uint64) {
	g.m.Routes().Announce(partition, cluster.Route{LeaderID: leader, Epoch: g.epoch(partition), Term: term})
}

func (g *clusterGossip) route(partition string) (string, uint64, bool) {
	r, ok := g.m.Routes().Lookup(partition)
	if !ok || r.LeaderID == "" || r.Epoch != g.epoch(partition) {
		return "", 0, false
	}
	return r.LeaderID, r.Term, true
}

func (g *clusterGossip) forget(partition string) {
	g.m.Routes().Forget(partition, g.epoch(partition))
}

func (g *clusterGossip) leave(ctx context.Context) error { return g.m.Leave(ctx) }

func (g *clusterGossip) close() error {
	err := g.m.Close()
	g.w.Stop()
	g.wg.Wait()
	return err
}

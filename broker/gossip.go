package broker

import (
	"context"

	"github.com/fabriq-io/fabriq/cluster"
)

// gossip is what the node needs of cluster membership and of the leader
// routing table that travels with it (cluster's Membership and routes).
// Its Members and Changed are what the control plane needs
// (meta.Gossip).
type gossip interface {
	// Members returns every node gossip knows, itself included.
	Members() []cluster.Member
	// Changed is signalled (without blocking the sender) whenever
	// membership changes.
	Changed() <-chan struct{}
	// announce tells the cluster that leader leads partition in term.
	announce(partition, leader string, term uint64)
	// route returns a partition's leader as last announced.
	route(partition string) (leader string, term uint64, ok bool)
	// forget drops a deleted partition's route.
	forget(partition string)
	// leave tells the others this node is going, then stops gossiping.
	leave(ctx context.Context) error
	close() error
}

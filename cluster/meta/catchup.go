package meta

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fabriq-io/fabriq/cluster"
)

// catchUpLoop waits until the catalog has applied every metadata entry
// the metadata leader had applied when asked (a read barrier), then tells
// the host. It gives up only when the Service closes.
func (s *Service) catchUpLoop() {
	tick := time.NewTicker(catchUpTick)
	defer tick.Stop()
	for {
		if s.catchUp() {
			s.current.Store(true)
			s.logger.Info("catalog caught up with the metadata group", "index", s.catalog.Applied())
			s.cfg.Host.CatalogChanged()
			return
		}
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// catchUp makes one attempt of Sync.
func (s *Service) catchUp() bool {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
	defer cancel()
	return s.Sync(ctx) == nil
}

// Sync waits until this node's catalog holds everything the metadata
// group had committed when it was called: the leader passes a barrier;
// another node asks the leader how far its catalog is and waits for its
// own to get there. A read after Sync sees every change committed before
// it (a stream created elsewhere a moment ago). The error matches
// ErrNotReady.
func (s *Service) Sync(ctx context.Context) error {
	if s.group.IsLeader() {
		return s.barrier(ctx)
	}
	index, err := s.leaderIndex(ctx)
	if err != nil || index == 0 {
		return fmt.Errorf("%w: the metadata leader's index: %v", ErrNotReady, err)
	}
	for {
		changed := s.catalog.Watch()
		if s.catalog.Applied() >= index {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ErrNotReady, ctx.Err())
		}
	}
}

// leaderIndex asks the metadata leader how far its catalog is, once it
// has applied everything committed: over the Raft port's RPC, or over the
// client port when the leader runs an older version (LegacyIndex).
func (s *Service) leaderIndex(ctx context.Context) (uint64, error) {
	leader := s.Leader()
	info, ok := s.catalog.Node(leader)
	if leader == "" || !ok {
		return 0, errors.New("meta: no metadata leader known")
	}
	if s.cfg.Protocol(info.RaftAddr) == cluster.ProtocolGroups && s.cfg.LegacyIndex != nil {
		return s.cfg.LegacyIndex(ctx, info.ClientAddr)
	}
	var ans indexAnswer
	err := s.call(ctx, leader, methodIndex, &none{}, &ans)
	return ans.Index, err
}

package meta

import (
	"context"
	"errors"
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

// catchUp makes one attempt: the leader passes a barrier (everything
// committed is applied); another node asks the leader how far its catalog
// is and waits for its own to get there.
func (s *Service) catchUp() bool {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
	defer cancel()
	if s.group.IsLeader() {
		return s.group.Barrier(ctx) == nil
	}
	index, err := s.leaderIndex(ctx)
	if err != nil || index == 0 {
		return false
	}
	for {
		changed := s.catalog.Watch()
		if s.catalog.Applied() >= index {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
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

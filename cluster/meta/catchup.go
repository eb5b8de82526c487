package meta

import (
	"context"
	"time"
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
	leader := s.Leader()
	if leader == "" {
		return false
	}
	var ans indexAnswer
	if err := s.call(ctx, leader, methodIndex, &none{}, &ans); err != nil || ans.Index == 0 {
		return false
	}
	for {
		changed := s.catalog.Watch()
		if s.catalog.Applied() >= ans.Index {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

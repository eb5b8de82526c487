package meta

import (
	"context"
	"fmt"
)

// barrierRound is one Raft barrier that every read waiting on it shares.
type barrierRound struct {
	done chan struct{}
	err  error
}

// barrier waits, on the leader, until every metadata entry committed
// before the call is applied (a read barrier). A Raft barrier is an
// entry of the log: reads that arrive together share one, so a burst of
// reads costs a couple of entries, not one each. A read waits for a
// barrier begun after it arrived; those arriving while one runs share
// the next.
func (s *Service) barrier(ctx context.Context) error {
	s.barrierMu.Lock()
	r := s.nextBarrier
	if r == nil {
		if err := s.ctx.Err(); err != nil {
			s.barrierMu.Unlock()
			return fmt.Errorf("%w: closed", ErrNotReady)
		}
		r = &barrierRound{done: make(chan struct{})}
		s.nextBarrier = r
		if !s.barrierRunning {
			s.barrierRunning = true
			s.wg.Add(1)
			go s.barrierLoop()
		}
	}
	s.barrierMu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("%w: %v", ErrNotReady, ctx.Err())
	}
}

// barrierLoop runs the barriers reads wait on, one at a time, until none
// waits.
func (s *Service) barrierLoop() {
	defer s.wg.Done()
	for {
		s.barrierMu.Lock()
		r := s.nextBarrier
		s.nextBarrier = nil
		if r == nil {
			s.barrierRunning = false
			s.barrierMu.Unlock()
			return
		}
		s.barrierMu.Unlock()
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
		if err := s.group.Barrier(ctx); err != nil {
			r.err = fmt.Errorf("%w: %v", ErrNotReady, err)
		}
		cancel()
		close(r.done)
	}
}

package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// Backoff of a failing accept: the first retry after acceptMinDelay, each
// next one twice as late, at most acceptMaxDelay (as net/http's server).
const (
	acceptMinDelay = 5 * time.Millisecond
	acceptMaxDelay = time.Second
	// acceptRemindEvery is how often a burst of failures that goes on is
	// logged again.
	acceptRemindEvery = time.Minute
)

// Acceptor accepts the connections of a listener and rides out the
// failures a loaded node meets there. A failed accept (out of file
// descriptors, EMFILE or ENFILE; a connection aborted before it was taken)
// is retried after a backoff that grows to a second, so the loop neither
// spins nor gives up: a node that ran out of descriptors for a moment
// serves again once some are freed. Only the listener's closing ends it.
//
// A burst of failures is logged once when it starts (with the first
// error), once a minute while it lasts, and once when accepts succeed
// again (with how many failed and for how long), never once per failure.
//
// An Acceptor is for one goroutine, the listener's accept loop.
type Acceptor struct {
	ln     net.Listener
	done   <-chan struct{}
	logger *slog.Logger

	delay    time.Duration
	failures int       // in the current burst
	since    time.Time // the burst's first failure
	reminded time.Time // the burst's last log line
}

// NewAcceptor returns an Acceptor for ln. Closing done (the owner's
// stop signal, closed before it closes ln) ends a backoff wait early. A
// nil logger discards.
func NewAcceptor(ln net.Listener, done <-chan struct{}, logger *slog.Logger) *Acceptor {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Acceptor{ln: ln, done: done, logger: logger.With("addr", ln.Addr().String())}
}

// Accept waits for the next connection, retrying failed accepts. It
// returns an error matching ErrClosed once done is closed or the listener
// is closed; no other error.
func (a *Acceptor) Accept() (net.Conn, error) {
	for {
		c, err := a.ln.Accept()
		if err == nil {
			a.recovered()
			return c, nil
		}
		select {
		case <-a.done:
			return nil, fmt.Errorf("cluster: accept: %w", ErrClosed)
		default:
		}
		if errors.Is(err, net.ErrClosed) {
			return nil, fmt.Errorf("cluster: accept: listener closed: %w", ErrClosed)
		}
		a.failed(err)
		t := time.NewTimer(a.delay)
		select {
		case <-a.done:
			t.Stop()
			return nil, fmt.Errorf("cluster: accept: %w", ErrClosed)
		case <-t.C:
		}
	}
}

// failed counts a failure, logs it if it starts a burst or a reminder is
// due, and sets the next delay.
func (a *Acceptor) failed(err error) {
	now := time.Now()
	a.delay = min(max(2*a.delay, acceptMinDelay), acceptMaxDelay)
	a.failures++
	switch {
	case a.failures == 1:
		a.since, a.reminded = now, now
		a.logger.Warn("accepting connections fails; retrying with backoff until it works again", "err", err)
	case now.Sub(a.reminded) >= acceptRemindEvery:
		a.reminded = now
		a.logger.Warn("accepting connections still fails; retrying", "err", err, "failures", a.failures, "for", now.Sub(a.since).Round(time.Millisecond))
	}
}

// recovered ends a burst of failures.
func (a *Acceptor) recovered() {
	if a.failures == 0 {
		return
	}
	a.logger.Info("accepting connections again", "failures", a.failures, "for", time.Since(a.since).Round(time.Millisecond))
	a.failures, a.delay = 0, 0
}

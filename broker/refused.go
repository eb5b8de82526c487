package broker

import (
	"log/slog"
	"sync"

	"golang.org/x/time/rate"

	"github.com/fabriq-io/fabriq/transport"
)

// refusedLog counts the requests the node refuses for a reason an
// operator watches (session.Refusal: authentication, authorization,
// limits, disk space), by reason, for /metrics, and logs each one once,
// at a bounded rate: a client hammering the node with refused requests
// must not flood its log. What the bound drops is counted and said with
// the next line logged.
type refusedLog struct {
	logger *slog.Logger
	limit  *rate.Limiter

	mu      sync.Mutex
	counts  map[transport.ErrorCode]uint64
	dropped uint64
}

// refusalLogRate and refusalLogBurst bound the refusals logged: 10 a
// second on average, bursts of 20.
const (
	refusalLogRate  = 10
	refusalLogBurst = 20
)

func newRefusedLog(logger *slog.Logger) *refusedLog {
	return &refusedLog{
		logger: logger,
		limit:  rate.NewLimiter(refusalLogRate, refusalLogBurst),
		counts: map[transport.ErrorCode]uint64{},
	}
}

// note records one refusal of client (an address), whose token names
// subject ("" without authentication).
func (r *refusedLog) note(code transport.ErrorCode, client, subject string, err error) {
	r.mu.Lock()
	r.counts[code]++
	if !r.limit.Allow() {
		r.dropped++
		r.mu.Unlock()
		return
	}
	dropped := r.dropped
	r.dropped = 0
	r.mu.Unlock()
	attrs := []any{"reason", code.String(), "client", client}
	if subject != "" {
		attrs = append(attrs, "subject", subject)
	}
	attrs = append(attrs, "err", err)
	if dropped > 0 {
		attrs = append(attrs, "not_logged_before", dropped)
	}
	r.logger.Info("request refused", attrs...)
}

// snapshot returns the refusals counted so far, by reason.
func (r *refusedLog) snapshot() map[transport.ErrorCode]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[transport.ErrorCode]uint64, len(r.counts))
	for k, v := range r.counts {
		out[k] = v
	}
	return out
}

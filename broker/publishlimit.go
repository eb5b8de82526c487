package broker

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/transport"
)

// PublishRate is the publish rate limit of each tenant on a node: the
// messages and payload bytes a second that the node stores for one
// tenant's producers, whatever their connections. Zero fields are no
// limit.
type PublishRate struct {
	Messages float64
	Bytes    int64
}

// maxThrottle is the longest a send waits for its tenant's rate limit:
// one that would wait longer is refused with RateLimited.
const maxThrottle = 5 * time.Second

// publishLimits applies a node's PublishRate, one pair of token buckets
// per tenant (golang.org/x/time/rate), each holding one second's worth.
// A send over the rate waits (throttle) in its session, which stops
// serving that connection meanwhile, as Pulsar stops reading a throttled
// producer's connection; one that would wait more than maxThrottle is
// refused. The tenants it knows are bounded by the catalog's: a producer
// exists only on a stream of a tenant that exists.
type publishLimits struct {
	limit  PublishRate
	nodeID string

	mu        sync.Mutex
	tenants   map[string]*tenantBuckets
	throttled map[string]time.Duration // by tenant, for /metrics
}

type tenantBuckets struct {
	msgs, bytes *rate.Limiter // nil: no limit of that kind
}

func newPublishLimits(limit PublishRate, nodeID string) *publishLimits {
	return &publishLimits{limit: limit, nodeID: nodeID, tenants: map[string]*tenantBuckets{}, throttled: map[string]time.Duration{}}
}

// on reports whether any limit is set.
func (l *publishLimits) on() bool { return l.limit.Messages > 0 || l.limit.Bytes > 0 }

func (l *publishLimits) buckets(tenant string) *tenantBuckets {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.tenants[tenant]
	if b == nil {
		b = &tenantBuckets{}
		if r := l.limit.Messages; r > 0 {
			b.msgs = rate.NewLimiter(rate.Limit(r), int(math.Ceil(r)))
		}
		if r := l.limit.Bytes; r > 0 {
			b.bytes = rate.NewLimiter(rate.Limit(r), int(r))
		}
		l.tenants[tenant] = b
	}
	return b
}

// throttle waits until tenant's limits admit a send of messages and
// bytes, or refuses it: RateLimited when it would wait more than
// maxThrottle, ctx's error when ctx ends first. A send larger than a
// bucket takes it several times over, so any send passes at the rate.
func (l *publishLimits) throttle(ctx context.Context, tenant string, messages, bytes int) error {
	b := l.buckets(tenant)
	now := time.Now()
	var taken []*rate.Reservation
	delay := time.Duration(0)
	take := func(lim *rate.Limiter, n int) {
		for n > 0 {
			k := min(n, lim.Burst())
			r := lim.ReserveN(now, k)
			taken = append(taken, r)
			delay = max(delay, r.DelayFrom(now))
			n -= k
		}
	}
	if b.msgs != nil {
		take(b.msgs, messages)
	}
	if b.bytes != nil {
		take(b.bytes, bytes)
	}
	cancel := func() {
		for i := len(taken) - 1; i >= 0; i-- {
			taken[i].CancelAt(now)
		}
	}
	if delay == 0 {
		return nil
	}
	if delay > maxThrottle {
		cancel()
		return wire.Errorf(transport.CodeRateLimited, "tenant %s publishes above its rate limit on node %s (%s): this send would wait %v, more than %v; resend later, in smaller batches, or raise --tenant-publish-rate",
			tenant, l.nodeID, l.describe(), delay.Round(time.Millisecond), maxThrottle)
	}
	l.mu.Lock()
	l.throttled[tenant] += delay
	l.mu.Unlock()
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		cancel()
		return wire.Errorf(transport.CodeTimeout, "the send waited on tenant %s's publish rate limit until it was given up: %v", tenant, ctx.Err())
	}
}

func (l *publishLimits) describe() string {
	switch {
	case l.limit.Messages > 0 && l.limit.Bytes > 0:
		return fmt.Sprintf("%g messages and %d bytes a second", l.limit.Messages, l.limit.Bytes)
	case l.limit.Messages > 0:
		return fmt.Sprintf("%g messages a second", l.limit.Messages)
	}
	return fmt.Sprintf("%d bytes a second", l.limit.Bytes)
}

// throttledSeconds returns, by tenant, the time sends waited on the limit.
func (l *publishLimits) throttledSeconds() map[string]float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]float64, len(l.throttled))
	for t, d := range l.throttled {
		out[t] = d.Seconds()
	}
	return out
}

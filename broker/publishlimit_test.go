package broker

import (
	"context"
	"testing"

	"github.com/fabriq-io/fabriq/transport"
)

// A tenant's sends pass while within its buckets, wait beyond them (a
// cancelled context shows a send would wait, without waiting), and are
// refused when they would wait more than maxThrottle; a refused or given
// up send takes nothing from the bucket; tenants do not share buckets;
// a send larger than a bucket passes at the rate.
func TestPublishLimits(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	code := func(err error) transport.ErrorCode { return transport.CodeOf(err) }

	l := newPublishLimits(PublishRate{Messages: 1000}, "n1")
	if err := l.throttle(done, "a", 1000, 0); err != nil {
		t.Fatalf("a full bucket's worth: %v", err)
	}
	if err := l.throttle(done, "a", 500, 0); code(err) != transport.CodeTimeout {
		t.Fatalf("half a second over: %v, want to wait (Timeout on a done context)", err)
	}
	if err := l.throttle(done, "b", 1000, 0); err != nil {
		t.Fatalf("tenant b after a's sends: %v", err)
	}
	if err := l.throttle(done, "a", 10_000, 0); code(err) != transport.CodeRateLimited {
		t.Fatalf("ten seconds' worth: %v, want RateLimited", err)
	}
	if s := l.throttledSeconds(); s["b"] != 0 {
		t.Fatalf("b throttled %v", s)
	}

	l = newPublishLimits(PublishRate{Bytes: 1000}, "n1")
	if err := l.throttle(done, "a", 1, 4000); code(err) != transport.CodeTimeout {
		t.Fatalf("4 KB at 1 KB/s: %v, want to wait 3 s, not a refusal", err)
	}
	// The given-up send took nothing: the bucket is still full.
	if err := l.throttle(done, "a", 1, 1000); err != nil {
		t.Fatalf("1 KB after a given-up send: %v", err)
	}
	if err := l.throttle(done, "a", 1, 7000); code(err) != transport.CodeRateLimited {
		t.Fatalf("7 KB at 1 KB/s: %v, want RateLimited", err)
	}
	if l.on() != true || newPublishLimits(PublishRate{}, "n1").on() {
		t.Fatal("on() reports whether a limit is set")
	}
}

package bench

import (
	"strconv"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// maxLatency is the largest latency a histogram tells apart; longer ones
// count as this.
const maxLatency = 10 * time.Minute

// histogram is an HDR histogram of latencies in microseconds, safe for
// concurrent use: one for the whole run and one for the current second.
type histogram struct {
	mu       sync.Mutex
	total    *hdrhistogram.Histogram
	interval *hdrhistogram.Histogram
}

func newHistogram() *histogram {
	return &histogram{
		total:    hdrhistogram.New(1, maxLatency.Microseconds(), 3),
		interval: hdrhistogram.New(1, maxLatency.Microseconds(), 3),
	}
}

// record adds one latency.
func (h *histogram) record(d time.Duration) {
	us := min(max(d.Microseconds(), 1), maxLatency.Microseconds())
	h.mu.Lock()
	h.total.RecordValue(us)
	h.interval.RecordValue(us)
	h.mu.Unlock()
}

// tick returns the current second's p99 and starts the next second.
func (h *histogram) tick() (p99 time.Duration, n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p99, n = time.Duration(h.interval.ValueAtQuantile(99))*time.Microsecond, h.interval.TotalCount()
	h.interval.Reset()
	return p99, n
}

// summary summarises the whole run.
func (h *histogram) summary() Latency {
	h.mu.Lock()
	defer h.mu.Unlock()
	at := func(q float64) Millis { return Millis(time.Duration(h.total.ValueAtQuantile(q)) * time.Microsecond) }
	if h.total.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{
		Count: h.total.TotalCount(),
		Mean:  Millis(time.Duration(h.total.Mean()) * time.Microsecond),
		P50:   at(50), P95: at(95), P99: at(99), P999: at(99.9),
		Max: Millis(time.Duration(h.total.Max()) * time.Microsecond),
	}
}

// Millis is a duration that prints, and encodes in JSON, as milliseconds
// with three decimals.
type Millis time.Duration

// MarshalJSON encodes the duration as a number of milliseconds.
func (m Millis) MarshalJSON() ([]byte, error) {
	return []byte(m.String()), nil
}

// String formats the duration as a number of milliseconds.
func (m Millis) String() string {
	return strconv.FormatFloat(float64(m)/float64(time.Millisecond), 'f', 3, 64)
}

// Latency summarises a latency distribution.
type Latency struct {
	Count int64  `json:"count"`
	Mean  Millis `json:"mean_ms"`
	P50   Millis `json:"p50_ms"`
	P95   Millis `json:"p95_ms"`
	P99   Millis `json:"p99_ms"`
	P999  Millis `json:"p999_ms"`
	Max   Millis `json:"max_ms"`
}

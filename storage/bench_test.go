package storage

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// benchLogBytes is the size of the large log that the read, open and
// snapshot benchmarks build: FABRIQ_BENCH_LOG_BYTES, default 1 GiB.
var benchLogBytes = func() int64 {
	if n, err := strconv.ParseInt(os.Getenv("FABRIQ_BENCH_LOG_BYTES"), 10, 64); err == nil && n > 0 {
		return n
	}
	return 1 << 30
}()

// fixtures are logs built once per test binary and removed by TestMain.
var fixtures struct {
	mu   sync.Mutex
	root string
	dirs map[int64]string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixtures.root != "" {
		os.RemoveAll(fixtures.root)
	}
	os.Exit(code)
}

// benchBatch is 100 messages of 1 KiB of random bytes.
func benchBatch() []Message {
	rng := rand.New(rand.NewPCG(7, 7))
	msgs := make([]Message, 100)
	for i := range msgs {
		p := make([]byte, 1024)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		msgs[i] = Message{PublishTime: 1_700_000_000_000, ProducerName: "bench", SequenceID: uint64(i), Key: fmt.Sprint("k", i%10), Payload: p}
	}
	return msgs
}

// fixture returns the directory of a closed log of about size bytes, built
// to end in a nearly full active segment: the most that Open scans.
func fixture(b *testing.B, size int64) string {
	b.Helper()
	fixtures.mu.Lock()
	defer fixtures.mu.Unlock()
	if dir, ok := fixtures.dirs[size]; ok {
		return dir
	}
	if fixtures.root == "" {
		root, err := os.MkdirTemp("", "fabriq-storage-bench-")
		if err != nil {
			b.Fatal(err)
		}
		fixtures.root, fixtures.dirs = root, map[int64]string{}
	}
	dir := filepath.Join(fixtures.root, fmt.Sprint(size))
	l, err := Open(dir, Config{})
	if err != nil {
		b.Fatal(err)
	}
	msgs := benchBatch()
	batch := int64(len(appendBatch(nil, 0, 1, msgs)))
	segMax := DefaultConfig().SegmentMaxBytes
	more := func() bool {
		if size < segMax {
			return l.Info().Bytes < size
		}
		return l.Info().Bytes < size-segMax || l.active().size+batch <= segMax
	}
	for raft := uint64(1); more(); raft++ {
		if _, err := l.Append(raft, msgs); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	fixtures.dirs[size] = dir
	return dir
}

// BenchmarkAppend appends batches of 100 messages of 1 KiB with the broker's
// fsync policy (a segment is synced when it is sealed, the last one at the
// end), and writes the same bytes to a plain file in writes of the same
// size, synced at the same points. The two take turns a segment at a time so
// that both meet the same disk, and the benchmark reports both throughputs
// and their ratio.
func BenchmarkAppend(b *testing.B) {
	msgs := benchBatch()
	dir := b.TempDir()
	l, err := Open(filepath.Join(dir, "log"), Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	raw, err := os.Create(filepath.Join(dir, "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	chunk := appendBatch(nil, 0, 1, msgs)
	perSegment := int(DefaultConfig().SegmentMaxBytes) / len(chunk)
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	var logTime, rawTime time.Duration
	for done := 0; done < b.N; {
		n := min(perSegment, b.N-done)
		start := time.Now()
		for i := range n {
			if _, err := l.Append(uint64(done+i+1), msgs); err != nil {
				b.Fatal(err)
			}
		}
		if done+n == b.N {
			if err := l.Sync(); err != nil {
				b.Fatal(err)
			}
		}
		logTime += time.Since(start)
		b.StopTimer()
		start = time.Now()
		for range n {
			if _, err := raw.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
		if err := raw.Sync(); err != nil {
			b.Fatal(err)
		}
		rawTime += time.Since(start)
		b.StartTimer()
		done += n
	}
	total := float64(b.N) * float64(len(chunk)) / 1e6
	b.ReportMetric(total/logTime.Seconds(), "log-MB/s")
	b.ReportMetric(total/rawTime.Seconds(), "raw-MB/s")
	b.ReportMetric(rawTime.Seconds()/logTime.Seconds(), "log/raw")
}

// BenchmarkReadSequential reads the whole large log from its start.
func BenchmarkReadSequential(b *testing.B) {
	dir := fixture(b, benchLogBytes)
	l, err := Open(dir, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	info := l.Info()
	b.SetBytes(info.Bytes)
	b.ResetTimer()
	for range b.N {
		var n uint64
		for off := info.StartOffset; off < info.NextOffset; {
			msgs, err := l.Read(off, 1000, 1<<20)
			if err != nil {
				b.Fatal(err)
			}
			off = msgs[len(msgs)-1].Offset + 1
			n += uint64(len(msgs))
		}
		if n != info.NextOffset-info.StartOffset {
			b.Fatalf("read %d messages, log holds %d", n, info.NextOffset-info.StartOffset)
		}
	}
	b.ReportMetric(float64(info.NextOffset-info.StartOffset)*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkOpen opens (and so recovers) the large log: sealed segments are
// trusted through their indexes, the active one is scanned and checked.
func BenchmarkOpen(b *testing.B) {
	dir := fixture(b, benchLogBytes)
	b.ResetTimer()
	for range b.N {
		l, err := Open(dir, Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkSnapshot takes snapshots of a 10 MiB and of the large log; the
// cost must not grow with the log's size.
func BenchmarkSnapshot(b *testing.B) {
	for _, size := range []int64{10 << 20, benchLogBytes} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			l, err := Open(fixture(b, size), Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			root := b.TempDir()
			b.ResetTimer()
			for i := range b.N {
				s, err := l.Snapshot(filepath.Join(root, fmt.Sprint(i)))
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := s.Remove(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

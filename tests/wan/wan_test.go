package wan

import (
	"bytes"
	"context"
	"io"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// listen opens a TCP listener on host i that echoes what it reads.
func listen(t *testing.T, w *WAN, i int) string {
	t.Helper()
	runtime.LockOSThread()
	ln, restored, err := inNamespace(w.ns(i), func() (net.Listener, error) {
		return net.Listen("tcp", w.IP(i)+":7000")
	})
	if !restored {
		t.Fatalf("the test's thread could not leave host %d's namespace: %v", i, err)
	}
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		// Owned by the listener: it ends when the test closes it.
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// Packets between regions arrive a delay later, both ways; within a
// region they do not wait. Large writes cross intact and in order, and
// Close leaves no namespace behind.
func TestWANDelays(t *testing.T) {
	const delay = 50 * time.Millisecond
	w, err := New([]string{"eu", "eu", "us"}, delay)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	near, far := listen(t, w, 1), listen(t, w, 2)
	dial := w.Dialer(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A TCP connect takes one round trip: the fastest of a few shows
	// the link's delay, not the machine's load.
	fastest := func(addr string) time.Duration {
		best := time.Hour
		for range 5 {
			start := time.Now()
			c, err := dial(ctx, addr)
			if err != nil {
				t.Fatal(err)
			}
			best = min(best, time.Since(start))
			c.Close()
		}
		return best
	}
	nearRTT, farRTT := fastest(near), fastest(far)
	t.Logf("connect within a region %v, between regions %v (one-way delay %v)", nearRTT, farRTT, delay)
	if farRTT < 2*delay {
		t.Fatalf("a connect between regions took %v, less than the round trip of %v", farRTT, 2*delay)
	}
	if nearRTT >= delay {
		t.Fatalf("a connect within a region took %v: it was delayed", nearRTT)
	}

	c, err := dial(ctx, far)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	want := make([]byte, 4<<20)
	for i := range want {
		want[i] = byte(i * 7 / 3)
	}
	go c.Write(want)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("echo between regions: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("4 MiB echoed between regions came back different")
	}

	w.Close()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), w.prefix) {
		t.Fatalf("namespaces left after Close:\n%s", out)
	}
}

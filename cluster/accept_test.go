package cluster

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// failingListener fails its first accepts with EMFILE, then accepts from
// a real listener.
type failingListener struct {
	net.Listener
	mu    sync.Mutex
	fails int
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

func TestAcceptorRetriesAndLogsOncePerBurst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	done := make(chan struct{})
	acc := NewAcceptor(&failingListener{Listener: ln, fails: 6}, done, logger)
	dialed := make(chan error, 1)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		dialed <- err
	}()
	c, err := acc.Accept()
	if err != nil {
		t.Fatalf("Accept after six EMFILE: %v", err)
	}
	c.Close()
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if n := strings.Count(out, "level=WARN"); n != 1 {
		t.Errorf("six failures logged %d warnings, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "too many open files") || !strings.Contains(out, "accepting connections again") || !strings.Contains(out, "failures=6") {
		t.Errorf("logs miss the error or the recovery:\n%s", out)
	}

	ln.Close()
	if _, err := acc.Accept(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept on a closed listener: %v, want ErrClosed", err)
	}
	// Closing done ends a backoff wait.
	close(done)
	acc = NewAcceptor(&failingListener{Listener: ln, fails: 1 << 30}, done, nil)
	if _, err := acc.Accept(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept after done: %v, want ErrClosed", err)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

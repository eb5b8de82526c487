package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"
)

// dial returns the two ends of a TCP connection on 127.0.0.1, closed when
// the test ends.
func dial(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type accepted struct {
		nc  net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		nc, err := ln.Accept()
		ch <- accepted{nc, err}
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	a := <-ch
	if err != nil || a.err != nil {
		t.Fatal(err, a.err)
	}
	t.Cleanup(func() {
		client.Close()
		a.nc.Close()
	})
	return client, a.nc
}

func newConn(t testing.TB, nc net.Conn, cfg Config) *Conn {
	t.Helper()
	c, err := NewConn(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// pair returns Conns on both ends of a TCP connection.
func pair(t testing.TB, client, server Config) (*Conn, *Conn) {
	t.Helper()
	cnc, snc := dial(t)
	return newConn(t, cnc, client), newConn(t, snc, server)
}

// async runs fn in a goroutine and returns its result on a channel; the
// test waits for it before it ends.
func async[T any](t *testing.T, fn func() T) <-chan T {
	t.Helper()
	ch := make(chan T, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ch <- fn()
	}()
	t.Cleanup(wg.Wait)
	return ch
}

func TestConcurrentSendsArriveWhole(t *testing.T) {
	client, server := pair(t, Config{}, Config{})
	const senders, each = 8, 50
	payload := func(g, i int) []byte { return bytes.Repeat([]byte{byte(g), byte(i)}, 1+(g*each+i)*97%20000) }
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				cmd := &Send{ProducerID: uint64(g), Messages: []MessageData{{SequenceID: uint64(i), Payload: payload(g, i)}}}
				if err := client.Send(context.Background(), cmd); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	next := make([]uint64, senders)
	for range senders * each {
		cmd, err := server.Receive()
		if err != nil {
			t.Fatal(err)
		}
		s := cmd.(*Send)
		g, m := int(s.ProducerID), s.Messages[0]
		if m.SequenceID != next[g] {
			t.Fatalf("sender %d: got sequence %d, want %d", g, m.SequenceID, next[g])
		}
		if !bytes.Equal(m.Payload, payload(g, int(m.SequenceID))) {
			t.Fatalf("sender %d, sequence %d: payload damaged", g, m.SequenceID)
		}
		next[g]++
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestSendAllWritesInOrder(t *testing.T) {
	client, server := pair(t, Config{}, Config{})
	want := samples()
	if err := client.SendAll(context.Background(), want...); err != nil {
		t.Fatal(err)
	}
	if err := client.SendAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		got, err := server.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, w) {
			t.Fatalf("got %#v, want %#v", got, w)
		}
	}
}

func TestSendRefusesOversizeAndWritesNothing(t *testing.T) {
	client, server := pair(t, Config{MaxFrameSize: 1 << 10}, Config{})
	big := &Send{Messages: []MessageData{{Payload: make([]byte, 2<<10)}}}
	err := client.SendAll(context.Background(), &Ping{}, big)
	var fse *FrameSizeError
	if !errors.As(err, &fse) || fse.Max != 1<<10 {
		t.Fatalf("got %v, want a *FrameSizeError", err)
	}
	if err := client.Send(context.Background(), &Pong{}); err != nil {
		t.Fatal(err)
	}
	if cmd, err := server.Receive(); err != nil || cmd.Type() != TypePong {
		t.Fatalf("got %v, %v; want the Pong alone", cmd, err)
	}
}

func TestFailSendsErrorThenCloses(t *testing.T) {
	tests := []struct {
		name  string
		write []byte // what the peer sends
		body  int    // junk that follows write, still in flight
		want  error
		code  ErrorCode
	}{
		{"oversized frame", []byte{0, 0x60, 0, 0}, 1 << 20, ErrFrameTooLarge, CodeTooLarge},
		{"garbage body", frame(0xc1, 0xc1), 0, ErrMalformed, CodeProtocol},
		{"unknown type", frame(0x92, 0x63, 0x80), 0, ErrMalformed, CodeProtocol},
		{"zero length", []byte{0, 0, 0, 0}, 0, ErrMalformed, CodeProtocol},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			peer, snc := dial(t)
			server := newConn(t, snc, Config{})
			written := async(t, func() error {
				_, err := peer.Write(append(bytes.Clone(tt.write), make([]byte, tt.body)...))
				return err
			})
			failed := async(t, func() error {
				_, err := server.Receive()
				if !errors.Is(err, tt.want) {
					return fmt.Errorf("Receive: got %v, want %v", err, tt.want)
				}
				if code := CodeOf(err); code != tt.code {
					return fmt.Errorf("CodeOf(%v) = %v, want %v", err, code, tt.code)
				}
				return server.Fail(CodeOf(err), err)
			})
			cmd, err := ReadFrame(peer, 0)
			e, ok := cmd.(*Error)
			if err != nil || !ok || e.Code != tt.code || e.Message == "" || e.RequestID != 0 {
				t.Fatalf("peer read %#v, %v; want an Error with code %v", cmd, err, tt.code)
			}
			if _, err := ReadFrame(peer, 0); err != io.EOF {
				t.Fatalf("after the Error frame: %v, want io.EOF", err)
			}
			peer.Close()
			if err := <-failed; err != nil {
				t.Fatal(err)
			}
			<-written
			if err := server.Send(context.Background(), &Ping{}); !errors.Is(err, ErrClosed) {
				t.Fatalf("Send after Fail: %v", err)
			}
		})
	}
}

func TestReadIdleTimeout(t *testing.T) {
	_, server := pair(t, Config{}, Config{ReadIdleTimeout: 50 * time.Millisecond})
	start := time.Now()
	_, err := server.Receive()
	if !errors.Is(err, os.ErrDeadlineExceeded) || CodeOf(err) != CodeTimeout {
		t.Fatalf("got %v, want a timeout", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("timed out after %v", d)
	}
	if _, again := server.Receive(); again != err {
		t.Fatalf("second Receive: %v, want the same error", again)
	}
}

func TestKeepAliveHoldsAQuietConnection(t *testing.T) {
	client, server := pair(t, Config{}, Config{ReadIdleTimeout: 500 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := async(t, func() error { return client.KeepAlive(ctx, 20*time.Millisecond) })
	// Well past the idle timeout in total, each Ping within it.
	deadline := time.Now().Add(time.Second)
	pings := 0
	for time.Now().Before(deadline) || pings < 3 {
		cmd, err := server.Receive()
		if err != nil {
			t.Fatalf("after %d pings: %v", pings, err)
		}
		if cmd.Type() != TypePing {
			t.Fatalf("got %s", cmd.Type())
		}
		pings++
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("KeepAlive returned %v", err)
	}
}

func TestKeepAliveStopsOnClose(t *testing.T) {
	client, _ := pair(t, Config{}, Config{})
	done := async(t, func() error { return client.KeepAlive(context.Background(), time.Hour) })
	client.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("KeepAlive returned %v", err)
	}
}

// blockedWriter returns a client Conn whose peer reads nothing more, with
// socket buffers small enough that a frame of a few MiB blocks, and the
// peer's raw end.
func blockedWriter(t *testing.T, cfg Config) (*Conn, net.Conn) {
	t.Helper()
	cnc, snc := dial(t)
	if err := cnc.(*net.TCPConn).SetWriteBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	if err := snc.(*net.TCPConn).SetReadBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	cfg.MaxFrameSize = 16 << 20
	return newConn(t, cnc, cfg), snc
}

// bigSend is a command of 2 MiB, far more than blockedWriter's buffers.
var bigSend = &Send{Messages: []MessageData{{Payload: make([]byte, 2<<20)}}}

func TestSendContext(t *testing.T) {
	t.Run("cancelled before", func(t *testing.T) {
		client, server := pair(t, Config{}, Config{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := client.Send(ctx, &Ping{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
		if err := client.Send(context.Background(), &Pong{}); err != nil {
			t.Fatalf("connection disturbed: %v", err)
		}
		if cmd, err := server.Receive(); err != nil || cmd.Type() != TypePong {
			t.Fatalf("got %v, %v", cmd, err)
		}
	})
	t.Run("cancelled while waiting for another send, then during a write", func(t *testing.T) {
		client, peer := blockedWriter(t, Config{})
		ctxA, cancelA := context.WithCancel(context.Background())
		defer cancelA()
		a := async(t, func() error { return client.Send(ctxA, bigSend) })
		// Once the peer sees a's header, a holds the connection.
		if _, err := io.ReadFull(peer, make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		ctxB, cancelB := context.WithCancel(context.Background())
		b := async(t, func() error { return client.Send(ctxB, &Ping{}) })
		cancelB()
		if err := <-b; !errors.Is(err, context.Canceled) || errors.Is(err, ErrClosed) {
			t.Fatalf("waiting send: %v", err)
		}
		cancelA()
		err := <-a
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrClosed) {
			t.Fatalf("interrupted send: %v, want Canceled and ErrClosed", err)
		}
		if err := client.Send(context.Background(), &Ping{}); !errors.Is(err, ErrClosed) {
			t.Fatalf("send after a broken write: %v", err)
		}
	})
	t.Run("deadline during a write", func(t *testing.T) {
		client, peer := blockedWriter(t, Config{})
		// Long enough to encode the frame and start writing it first.
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		sent := async(t, func() error { return client.Send(ctx, bigSend) })
		if _, err := io.ReadFull(peer, make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		if err := <-sent; !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrClosed) {
			t.Fatalf("got %v, want DeadlineExceeded and ErrClosed", err)
		}
	})
	t.Run("write timeout", func(t *testing.T) {
		client, _ := blockedWriter(t, Config{WriteTimeout: 50 * time.Millisecond})
		err := client.Send(context.Background(), bigSend)
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.Is(err, ErrClosed) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want a write timeout and ErrClosed", err)
		}
	})
}

func TestClose(t *testing.T) {
	client, server := pair(t, Config{}, Config{})
	received := async(t, func() error { _, err := server.Receive(); return err })
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-received; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Receive returned %v", err)
	}
	if err := server.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := server.Receive(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Receive after Close: %v", err)
	}
	if err := server.Send(context.Background(), &Ping{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
	// The peer sees the end of the stream between frames.
	if _, err := client.Receive(); err != io.EOF {
		t.Fatalf("peer got %v, want io.EOF", err)
	}
	if client.RemoteAddr().String() != server.nc.LocalAddr().String() {
		t.Fatalf("RemoteAddr %v", client.RemoteAddr())
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero", Config{}, true},
		{"default", DefaultConfig(), true},
		{"largest frame", Config{MaxFrameSize: MaxFrameSizeLimit}, true},
		{"frame too large", Config{MaxFrameSize: MaxFrameSizeLimit + 1}, false},
		{"negative frame", Config{MaxFrameSize: -1}, false},
		{"negative write timeout", Config{WriteTimeout: -time.Second}, false},
		{"negative idle timeout", Config{ReadIdleTimeout: -time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate: %v", err)
			}
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			c, err := NewConn(a, tt.cfg)
			if (err == nil) != tt.ok {
				t.Fatalf("NewConn: %v", err)
			}
			if err == nil && c.cfg.MaxFrameSize <= 0 {
				t.Fatalf("defaults not applied: %+v", c.cfg)
			}
		})
	}
}

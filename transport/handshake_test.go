package transport

import (
	"context"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"
)

type connectResult struct {
	hello *Connect
	err   error
}

func TestHandshake(t *testing.T) {
	client, server := pair(t, Config{}, Config{})
	welcome := &Connected{ProtocolVersion: ProtocolVersion, ServerVersion: "0.1.0", NodeID: "node-1", MaxFrameSize: DefaultMaxFrameSize}
	accepted := async(t, func() connectResult {
		hello, err := AwaitConnect(context.Background(), server)
		if err == nil {
			err = server.Send(context.Background(), welcome)
		}
		return connectResult{hello, err}
	})
	got, err := Handshake(context.Background(), client, &Connect{ClientName: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, welcome) {
		t.Fatalf("got %#v", got)
	}
	r := <-accepted
	if r.err != nil {
		t.Fatal(r.err)
	}
	if want := (&Connect{ProtocolVersion: ProtocolVersion, ClientName: "test"}); !reflect.DeepEqual(r.hello, want) {
		t.Fatalf("server got %#v", r.hello)
	}
	// The session goes on.
	if err := client.Send(context.Background(), &Ping{}); err != nil {
		t.Fatal(err)
	}
	if cmd, err := server.Receive(); err != nil || cmd.Type() != TypePing {
		t.Fatalf("got %v, %v", cmd, err)
	}
}

func TestHandshakeVersionMismatch(t *testing.T) {
	client, server := pair(t, Config{}, Config{})
	accepted := async(t, func() connectResult {
		hello, err := AwaitConnect(context.Background(), server)
		return connectResult{hello, err}
	})
	_, err := Handshake(context.Background(), client, &Connect{ProtocolVersion: 9})
	var e *Error
	if !errors.Is(err, &Error{Code: CodeVersionMismatch}) || !errors.As(err, &e) {
		t.Fatalf("client got %v, want a VersionMismatch *Error", err)
	}
	if want := "protocol version 9 not supported, this node speaks 1"; e.Message != want {
		t.Fatalf("message %q, want %q", e.Message, want)
	}
	r := <-accepted
	if !errors.Is(r.err, &Error{Code: CodeVersionMismatch}) || r.hello != nil {
		t.Fatalf("server got %v, %v", r.hello, r.err)
	}
	for name, c := range map[string]*Conn{"client": client, "server": server} {
		if err := c.Send(context.Background(), &Ping{}); !errors.Is(err, ErrClosed) {
			t.Fatalf("%s not closed: %v", name, err)
		}
	}
}

func TestAwaitConnectRefuses(t *testing.T) {
	tests := []struct {
		name  string
		first []byte // the client's first bytes
		code  ErrorCode
		want  error
	}{
		{"not Connect", frame(0x92, byte(TypePing), 0x80), CodeProtocol, ErrUnexpected},
		{"Connected", frame(0x92, byte(TypeConnected), 0x81, 0xa1, 'v', 0x01), CodeProtocol, ErrUnexpected},
		{"malformed", frame(0x92, byte(TypeConnect), 0xa1, 'x'), CodeProtocol, ErrMalformed},
		{"too large", []byte{0x7f, 0, 0, 0}, CodeTooLarge, ErrFrameTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			peer, snc := dial(t)
			server := newConn(t, snc, Config{})
			accepted := async(t, func() connectResult {
				hello, err := AwaitConnect(context.Background(), server)
				return connectResult{hello, err}
			})
			if _, err := peer.Write(tt.first); err != nil {
				t.Fatal(err)
			}
			cmd, err := ReadFrame(peer, 0)
			if e, ok := cmd.(*Error); err != nil || !ok || e.Code != tt.code {
				t.Fatalf("client got %#v, %v; want an Error with code %v", cmd, err, tt.code)
			}
			if _, err := ReadFrame(peer, 0); err != io.EOF {
				t.Fatalf("after the Error: %v, want io.EOF", err)
			}
			peer.Close()
			if r := <-accepted; !errors.Is(r.err, tt.want) || r.hello != nil {
				t.Fatalf("server got %v, %v; want %v", r.hello, r.err, tt.want)
			}
		})
	}
}

func TestHandshakeUnexpectedAnswer(t *testing.T) {
	client, server := pair(t, Config{}, Config{})
	answered := async(t, func() error {
		if _, err := AwaitConnect(context.Background(), server); err != nil {
			return err
		}
		if err := server.Send(context.Background(), &Pong{}); err != nil {
			return err
		}
		// The client fails the connection with a protocol error.
		cmd, err := server.Receive()
		if e, ok := cmd.(*Error); err != nil || !ok || e.Code != CodeProtocol {
			t.Errorf("server got %#v, %v", cmd, err)
		}
		return server.Close()
	})
	if _, err := Handshake(context.Background(), client, nil); !errors.Is(err, ErrUnexpected) {
		t.Fatalf("got %v, want ErrUnexpected", err)
	}
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
}

func TestHandshakeHonoursContext(t *testing.T) {
	t.Run("client", func(t *testing.T) {
		client, server := pair(t, Config{}, Config{})
		// The server reads the Connect and never answers.
		read := async(t, func() error { _, err := server.Receive(); return err })
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if _, err := Handshake(ctx, client, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want DeadlineExceeded", err)
		}
		if err := <-read; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("client cancelled", func(t *testing.T) {
		client, _ := pair(t, Config{}, Config{})
		ctx, cancel := context.WithCancel(context.Background())
		done := async(t, func() error { _, err := Handshake(ctx, client, nil); return err })
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want Canceled", err)
		}
	})
	t.Run("server", func(t *testing.T) {
		_, server := pair(t, Config{}, Config{})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if _, err := AwaitConnect(ctx, server); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want DeadlineExceeded", err)
		}
	})
}

package cluster

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// acceptOne accepts one connection on l in a goroutine; the channel is
// closed if Accept fails.
func acceptOne(t *testing.T, l *Layer) <-chan net.Conn {
	t.Helper()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(ch)
			return
		}
		ch <- c
	}()
	return ch
}

func recvConn(t *testing.T, ch <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c, ok := <-ch:
		if !ok {
			t.Fatal("Accept failed")
		}
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted")
		return nil
	}
}

func TestMuxRoutesByGroup(t *testing.T) {
	nodes := newTestNodes(t, 2)
	a, b := nodes[0].mux, nodes[1].mux
	la1, err := a.Layer("g1")
	if err != nil {
		t.Fatal(err)
	}
	defer la1.Close()
	lb1, _ := b.Layer("g1")
	defer lb1.Close()
	lb2, _ := b.Layer("g2")
	defer lb2.Close()

	acc1, acc2 := acceptOne(t, lb1), acceptOne(t, lb2)
	c, err := la1.Dial("127.0.0.1:0", time.Second)
	if err == nil {
		c.Close()
		t.Fatal("dial to port 0 succeeded")
	}
	c, err = la1.Dial(raft.ServerAddress(nodes[1].addr()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := recvConn(t, acc1)
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if _, err := s.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("read %q, %v", buf, err)
	}
	select {
	case <-acc2:
		t.Fatal("g2 accepted g1's connection")
	default:
	}

	// Closing g1's layer closes its connections, ends its Accept and
	// leaves g2 alone.
	lb1.Close()
	if _, err := lb1.Accept(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	if _, err := io.ReadFull(c, buf); err == nil {
		t.Fatal("connection of a closed layer still open")
	}
	la2, _ := a.Layer("g2")
	defer la2.Close()
	c2, err := la2.Dial(raft.ServerAddress(nodes[1].addr()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	recvConn(t, acc2)

	// The group can register again once its layer is closed.
	again, err := b.Layer("g1")
	if err != nil {
		t.Fatalf("re-register g1: %v", err)
	}
	again.Close()
}

func TestMuxLayerErrors(t *testing.T) {
	nodes := newTestNodes(t, 1)
	m := nodes[0].mux
	l, err := m.Layer("dup")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tests := []struct {
		group string
		want  error
	}{
		{"dup", ErrGroupExists},
		{"", ErrBadGroupID},
		{strings.Repeat("x", MaxGroupIDLen+1), ErrBadGroupID},
	}
	for _, tt := range tests {
		if _, err := m.Layer(tt.group); !errors.Is(err, tt.want) {
			t.Errorf("Layer(%.10q): %v, want %v", tt.group, err, tt.want)
		}
	}
	if l, err := m.Layer(strings.Repeat("x", MaxGroupIDLen)); err != nil {
		t.Errorf("Layer with a %d-byte id: %v", MaxGroupIDLen, err)
	} else {
		l.Close()
	}
	if err := m.Start(); err == nil {
		t.Error("second Start succeeded")
	}
}

// TestMuxDropsBadConnections sends bad headers and unknown groups to every
// node of a running group: each such connection is closed, and the group
// keeps replicating. A silent peer holds no one up.
func TestMuxDropsBadConnections(t *testing.T) {
	nodes := newTestNodes(t, 3)
	gs := startGroup(t, nodes, "steady", nil)
	applyAll(t, gs, "before")

	// A silent connection on every node, open through the test.
	for _, n := range nodes {
		c, err := net.Dial("tcp", n.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}

	header := func(magic string, version byte, group string) []byte {
		b := append([]byte(magic), version, byte(len(group)))
		return append(b, group...)
	}
	tests := []struct {
		name string
		send []byte
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\n\r\n")},
		{"bad magic", header("FQRX", HeaderVersion, "steady")},
		{"bad version", header(headerMagic, HeaderMemberVersion+1, "steady")},
		{"empty group", header(headerMagic, HeaderVersion, "")},
		{"unknown group", header(headerMagic, HeaderVersion, "nope")},
		{"short group", header(headerMagic, HeaderVersion, "steady")[:8]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, n := range nodes {
				c, err := net.Dial("tcp", n.addr())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := c.Write(tt.send); err != nil {
					t.Fatal(err)
				}
				if tt.name == "short group" {
					c.(*net.TCPConn).CloseWrite()
				}
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, net.ErrClosed) && !isReset(err) {
					t.Fatalf("read on a dropped connection: %v, want EOF", err)
				}
			}
		})
	}
	applyAll(t, gs, "after")
	waitEntries(t, gs, []string{"before", "after"})
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// TestMuxCloseEndsPendingHandshakes: Close does not wait for silent peers
// to time out.
func TestMuxCloseEndsPendingHandshakes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMux(ln, nil)
	m.headerTimeout = time.Hour
	l, err := m.Layer("g")
	if err != nil {
		t.Fatal(err)
	}
	acc := acceptOne(t, l)
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eventually(t, 5*time.Second, "the handshake to start", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.pending) == 1
	})
	// The handshake would wait an hour for the header: Close ends it.
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited for a pending handshake")
	}
	if _, ok := <-acc; ok {
		t.Fatal("Accept returned a connection after Close")
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := m.Layer("h"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Layer after Close: %v", err)
	}
	if _, err := l.Dial(raft.ServerAddress(ln.Addr().String()), time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("Dial on a closed layer: %v", err)
	}
}

// A header naming a member reaches the layer of that member, or of a
// group that takes any member; a layer whose member is another refuses
// it and counts it. A plain address names no member and is taken.
func TestMuxMemberHeader(t *testing.T) {
	nodes := newTestNodes(t, 2)
	a, b := nodes[0].mux, nodes[1].mux
	dialer, err := a.Layer("g")
	if err != nil {
		t.Fatal(err)
	}
	defer dialer.Close()
	dial := func(member string) net.Conn {
		t.Helper()
		addr := nodes[1].addr()
		if member != "" {
			addr = MemberAddress(addr, member)
		}
		c, err := dialer.Dial(raft.ServerAddress(addr), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	l, err := b.MemberLayer("g", "n1@7")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, member := range []string{"n1@7", ""} {
		acc := acceptOne(t, l)
		dial(member)
		recvConn(t, acc)
	}
	c := dial("n1") // the member that was at this address before
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF && !isReset(err) {
		t.Fatalf("a connection for another member: %v, want it closed", err)
	}
	if n := l.refused.Load(); n != 1 {
		t.Fatalf("%d connections refused, want 1", n)
	}
	l.Close()
	taker, err := b.Layer("g")
	if err != nil {
		t.Fatal(err)
	}
	defer taker.Close()
	acc := acceptOne(t, taker)
	dial("n1")
	recvConn(t, acc)

	if got, want := appendHeader(nil, "g", "m"), []byte("FQRG\x02\x01g\x01m"); !bytes.Equal(got, want) {
		t.Fatalf("header %q, want %q", got, want)
	}
	if got, want := appendHeader(nil, "g"), []byte("FQRG\x01\x01g"); !bytes.Equal(got, want) {
		t.Fatalf("header %q, want %q", got, want)
	}
}

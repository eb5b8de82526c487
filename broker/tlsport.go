package broker

import (
	"bufio"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
)

// tlsRecordHandshake is the first byte of a TLS connection: a handshake
// record (the ClientHello).
const tlsRecordHandshake = 0x16

// tlsOnlyListener serves TLS on the client port, and tells a client that
// speaks the protocol in the clear why it is refused, where a TLS
// listener would only drop it: a plain fabriq client retries a dropped
// connection, and would wait out its timeout without knowing why.
type tlsOnlyListener struct {
	net.Listener
	cfg *tls.Config
}

// Accept returns a connection that decides on its first read: TLS when
// its first byte opens a TLS handshake, else plaintext (Plaintext true).
func (l tlsOnlyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, cfg: l.cfg}, nil
}

// sniffConn is a client connection of a TLS port before its first byte is
// read: then it becomes a TLS server connection, or a plaintext one that
// the session refuses.
type sniffConn struct {
	net.Conn // the TCP connection, until decided
	cfg      *tls.Config

	once  sync.Once
	err   error
	tls   *tls.Conn
	plain *bufio.Reader // the plaintext bytes, the first one included
	// tlsSet is tls, published for Close and CloseWrite, which must not
	// wait for the first byte.
	tlsSet atomic.Pointer[tls.Conn]
}

// decide reads the first byte, under the deadline the caller set.
func (c *sniffConn) decide() {
	c.once.Do(func() {
		r := bufio.NewReaderSize(c.Conn, 16)
		b, err := r.Peek(1)
		if err != nil {
			c.err = err
			return
		}
		if b[0] == tlsRecordHandshake {
			c.tls = tls.Server(&readerConn{Conn: c.Conn, r: r}, c.cfg)
			c.tlsSet.Store(c.tls)
			return
		}
		c.plain = r
	})
}

// Plaintext reports whether the client spoke in the clear; it reads the
// connection's first byte if nothing has yet.
func (c *sniffConn) Plaintext() bool {
	c.decide()
	return c.plain != nil
}

func (c *sniffConn) Read(p []byte) (int, error) {
	c.decide()
	switch {
	case c.err != nil:
		return 0, c.err
	case c.tls != nil:
		return c.tls.Read(p)
	}
	return c.plain.Read(p)
}

func (c *sniffConn) Write(p []byte) (int, error) {
	c.decide()
	if c.tls != nil {
		return c.tls.Write(p)
	}
	return c.Conn.Write(p)
}

// Close closes the TCP connection (without a TLS close_notify: Close
// must not wait on a first byte or on a handshake under way).
func (c *sniffConn) Close() error { return c.Conn.Close() }

// CloseWrite ends the writing half: a TLS close_notify, or a TCP FIN.
func (c *sniffConn) CloseWrite() error {
	if tc := c.tlsSet.Load(); tc != nil {
		return tc.CloseWrite()
	}
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// readerConn is a net.Conn whose reads come through r (which holds bytes
// peeked from it).
type readerConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

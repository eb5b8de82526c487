package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// RPCClient calls other nodes' RPCServers over their Raft ports. It keeps
// a few idle connections per peer (rpcMaxIdle, each for at most
// rpcClientIdle) and runs one call at a time on a connection; concurrent
// calls to one peer open more. Every call has a deadline: its context's,
// or RPCTimeout. It is safe for concurrent use.
type RPCClient struct {
	// tls, when set, is the TLS config of its connections (SetTLS).
	tls atomic.Pointer[tls.Config]

	mu     sync.Mutex
	idle   map[string][]*rpcConn
	closed bool
}

// rpcConn is a pooled connection.
type rpcConn struct {
	net.Conn
	r    *bufio.Reader
	used time.Time // when it was last given back
}

// NewRPCClient returns a client with an empty pool.
func NewRPCClient() *RPCClient {
	return &RPCClient{idle: map[string][]*rpcConn{}}
}

// SetTLS makes the client's connections TLS with cfg: the node's
// certificate, peers checked against the cluster's CA.
func (c *RPCClient) SetTLS(cfg *tls.Config) { c.tls.Store(cfg) }

// Call calls method on the node whose Raft port is addr: req is encoded
// in msgpack, and the answer decoded into resp (a pointer, or nil to
// ignore it). The error is an *RPCError when the node answered one,
// ErrClosed after Close, otherwise the connection's or the context's.
func (c *RPCClient) Call(ctx context.Context, addr, method string, req, resp any) error {
	if len(method) == 0 || len(method) > 255 {
		return fmt.Errorf("cluster: rpc method name %q", method)
	}
	body, err := msgpack.Marshal(req)
	if err != nil {
		return fmt.Errorf("cluster: rpc %s: %w", method, err)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(RPCTimeout)
	}
	for attempt := 0; ; attempt++ {
		conn, reused, err := c.conn(ctx, addr, deadline, attempt == 0)
		if err != nil {
			return fmt.Errorf("cluster: rpc %s to %s: %w", method, addr, err)
		}
		answer, sent, err := roundTrip(ctx, conn, method, deadline, body)
		if err != nil {
			conn.Close()
			// A pooled connection the peer closed while it was idle
			// fails before any answer: so will the others of the pool,
			// if the peer restarted. Try once on a new one.
			if reused && !sent && attempt == 0 && staleConn(err) {
				c.drop(addr)
				continue
			}
			return fmt.Errorf("cluster: rpc %s to %s: %w", method, addr, err)
		}
		c.put(addr, conn)
		return decodeAnswer(answer, resp)
	}
}

// roundTrip sends one request on conn and reads its answer. sent reports
// whether any byte of the answer was read.
func roundTrip(ctx context.Context, conn *rpcConn, method string, deadline time.Time, body []byte) (answer []byte, sent bool, err error) {
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, false, err
	}
	// A context cancelled before its deadline (the node closing) ends
	// the call at once.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := writeFrame(conn, appendRequestHead(method, time.Until(deadline)), body); err != nil {
		return nil, false, err
	}
	if _, err := conn.r.Peek(1); err != nil {
		return nil, false, err
	}
	answer, err = readFrame(conn.r)
	if err != nil {
		return nil, true, err
	}
	if err := ctx.Err(); err != nil {
		return nil, true, err
	}
	return answer, true, nil
}

// staleConn reports whether err is what a write to, or a read from, a
// connection the peer has closed gives.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// decodeAnswer decodes an answer frame into resp, or returns its error.
func decodeAnswer(answer []byte, resp any) error {
	if len(answer) == 0 {
		return errors.New("cluster: rpc: empty answer")
	}
	switch answer[0] {
	case rpcStatusOK:
		if resp == nil {
			return nil
		}
		if err := msgpack.Unmarshal(answer[1:], resp); err != nil {
			return fmt.Errorf("cluster: rpc answer: %w", err)
		}
		return nil
	case rpcStatusError:
		re := &RPCError{}
		if err := msgpack.Unmarshal(answer[1:], re); err != nil {
			return fmt.Errorf("cluster: rpc error answer: %w", err)
		}
		return re
	}
	return fmt.Errorf("cluster: rpc answer status %d", answer[0])
}

// conn takes an idle connection to addr (if pooled) or dials one; reused
// says which.
func (c *RPCClient) conn(ctx context.Context, addr string, deadline time.Time, pooled bool) (*rpcConn, bool, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, false, ErrClosed
	}
	for pool := c.idle[addr]; pooled && len(pool) > 0; pool = c.idle[addr] {
		conn := pool[len(pool)-1]
		c.idle[addr] = pool[:len(pool)-1]
		if time.Since(conn.used) < rpcClientIdle {
			c.mu.Unlock()
			return conn, true, nil
		}
		conn.Close()
	}
	c.mu.Unlock()
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nc, err := dialPeer(ctx, addr, c.tls.Load())
	if err != nil {
		return nil, false, err
	}
	if err := nc.SetWriteDeadline(deadline); err != nil {
		nc.Close()
		return nil, false, err
	}
	if _, err := nc.Write(appendHeader(nil, RPCGroup)); err != nil {
		nc.Close()
		return nil, false, err
	}
	return &rpcConn{Conn: nc, r: bufio.NewReader(nc)}, false, nil
}

// put gives a connection back to the pool, or closes it.
func (c *RPCClient) put(addr string, conn *rpcConn) {
	conn.used = time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.idle[addr]) >= rpcMaxIdle {
		conn.Close()
		return
	}
	c.idle[addr] = append(c.idle[addr], conn)
}

// drop closes the idle connections to addr.
func (c *RPCClient) drop(addr string) {
	c.mu.Lock()
	pool := c.idle[addr]
	delete(c.idle, addr)
	c.mu.Unlock()
	for _, conn := range pool {
		conn.Close()
	}
}

// Close closes the idle connections; calls in progress close theirs when
// they end, and later calls fail with ErrClosed. It is idempotent.
func (c *RPCClient) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for addr, pool := range c.idle {
		for _, conn := range pool {
			conn.Close()
		}
		delete(c.idle, addr)
	}
	return nil
}

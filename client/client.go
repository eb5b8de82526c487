package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/tlsconfig"
	"github.com/fabriq-io/fabriq/transport"
)

// Errors of the client. Broker errors come as *transport.Error; test their
// code with transport.CodeOf or errors.Is(err, &transport.Error{Code: …}).
var (
	// ErrClosed is returned by the methods of a closed client, producer
	// or consumer.
	ErrClosed = errors.New("client: closed")
	// ErrBadURL is returned by New for a URL it cannot use.
	ErrBadURL = errors.New("client: bad URL")
	// ErrNotAllowed is returned, without a round trip, for an operation
	// the subscription's mode refuses.
	ErrNotAllowed = errors.New("client: not allowed")
	// ErrSendTimeout is given to sends not acknowledged within
	// ProducerOptions.SendTimeout.
	ErrSendTimeout = errors.New("client: send timed out")
	// ErrNoOffset is given to a send whose receipt names no offset for
	// it: the broker did not confirm where, or whether, it stored the
	// message, so the send is not reported as a success. (Brokers of
	// older versions answered that way for a resent duplicate they no
	// longer remembered; brokers now refuse it with OutOfOrderSequence.)
	ErrNoOffset = errors.New("client: the broker confirmed no offset for the message")
	// ErrDiskFull is matched, with ErrSendTimeout, by a send that timed
	// out while the partition's leader refused sends for lack of disk
	// space (DiskFull). Until the timeout such sends are resent with a
	// growing backoff, in order, so they go through once space is freed.
	ErrDiskFull = errors.New("client: the partition leader is out of disk space")
	// ErrRateLimited is matched, with ErrSendTimeout, by a send that timed
	// out while the partition's leader refused sends over the tenant's
	// publish rate limit (RateLimited); they are resent as for DiskFull.
	ErrRateLimited = errors.New("client: the tenant's publish rate limit refused the send")
)

// Options configures a Client; zero fields take their defaults.
type Options struct {
	// URL lists the nodes to bootstrap from:
	// fabriq://HOST:PORT[,HOST:PORT...], or fabriq+tls://… for a cluster
	// with TLS on. Default fabriq://127.0.0.1:6650.
	URL string
	// TLSCAFile names the PEM file of the CA that signed the nodes'
	// certificates, for a fabriq+tls:// URL; empty: the system's roots.
	TLSCAFile string
	// TLSConfig, when set, is the TLS configuration of a fabriq+tls:// URL,
	// in place of TLSCAFile's. The server name is set, per node, to the
	// host dialled when it is empty.
	TLSConfig *tls.Config
	// Name identifies the client to the broker and prefixes generated
	// producer names.
	Name string
	// ConnectTimeout bounds dialling and the handshake. Default 10s.
	ConnectTimeout time.Duration
	// OperationTimeout bounds each request when the caller's context has
	// no deadline. Default 30s.
	OperationTimeout time.Duration
	// MaxFrameSize bounds frames read from the broker. Default the
	// transport's.
	MaxFrameSize int
	// Logger receives the client's logs. Nil discards them.
	Logger *slog.Logger
	// Dial opens the TCP connections to nodes (a proxy, a VPN dialer);
	// default a plain net.Dialer.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Token is presented to the nodes of a cluster with authentication on
	// (a JWT; see `fabriq token create`).
	Token string
	// TokenSupplier, when set, is asked for the token at each new
	// connection, in place of Token: a node ends a connection when its
	// token expires, and the client reconnects with the one the supplier
	// gives then.
	TokenSupplier func(ctx context.Context) (string, error)
}

// Client is a connection to a fabriq cluster. It is safe for concurrent
// use; Close it when done.
type Client struct {
	opts   Options
	tls    *tls.Config // nil: plain TCP
	addrs  []string
	logger *slog.Logger
	reqID  atomic.Uint64
	next   atomic.Uint64 // rotates bootstrap addresses
	// wg owns the goroutines of every connection the client opened.
	wg sync.WaitGroup

	mu      sync.Mutex
	conns   map[string]*cnx
	dialing map[string]chan struct{}
	handles map[handle]struct{}
	closed  bool
}

// handle is a producer or consumer the client closes on Close.
type handle interface{ Close() error }

// ParseURL returns the HOST:PORT addresses of a fabriq:// or
// fabriq+tls:// URL.
func ParseURL(url string) ([]string, error) {
	addrs, _, err := parseURL(url)
	return addrs, err
}

// parseURL is ParseURL, and whether the URL asks for TLS.
func parseURL(url string) (addrs []string, secure bool, err error) {
	rest, ok := strings.CutPrefix(url, "fabriq://")
	if !ok {
		if rest, ok = strings.CutPrefix(url, "fabriq+tls://"); !ok {
			return nil, false, fmt.Errorf("%w %q: it starts with fabriq:// or fabriq+tls://", ErrBadURL, url)
		}
		secure = true
	}
	for _, a := range strings.Split(strings.TrimSuffix(rest, "/"), ",") {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			return nil, false, fmt.Errorf("%w %q: %q is not HOST:PORT", ErrBadURL, url, a)
		}
		addrs = append(addrs, a)
	}
	return addrs, secure, nil
}

// New returns a client; it connects lazily, on first use.
func New(opts Options) (*Client, error) {
	if opts.URL == "" {
		opts.URL = "fabriq://127.0.0.1:6650"
	}
	addrs, secure, err := parseURL(opts.URL)
	if err != nil {
		return nil, err
	}
	var tlsConfig *tls.Config
	switch {
	case !secure && (opts.TLSConfig != nil || opts.TLSCAFile != ""):
		return nil, fmt.Errorf("%w %q: TLS options with a plain URL; use fabriq+tls://", ErrBadURL, opts.URL)
	case secure && opts.TLSConfig != nil:
		tlsConfig = opts.TLSConfig.Clone()
	case secure:
		if tlsConfig, err = tlsconfig.Client(opts.TLSCAFile); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 10 * time.Second
	}
	if opts.OperationTimeout <= 0 {
		opts.OperationTimeout = 30 * time.Second
	}
	if opts.Name == "" {
		opts.Name = "fabriq-go"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Client{
		opts:    opts,
		tls:     tlsConfig,
		addrs:   addrs,
		logger:  opts.Logger,
		conns:   map[string]*cnx{},
		dialing: map[string]chan struct{}{},
		handles: map[handle]struct{}{},
	}, nil
}

// Close closes every producer and consumer of the client, then its
// connections.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	hs := make([]handle, 0, len(c.handles))
	for h := range c.handles {
		hs = append(hs, h)
	}
	c.mu.Unlock()
	for _, h := range hs {
		h.Close()
	}
	c.mu.Lock()
	conns := c.conns
	c.conns = map[string]*cnx{}
	c.mu.Unlock()
	for _, x := range conns {
		x.close(ErrClosed)
	}
	c.wg.Wait()
	return nil
}

func (c *Client) register(h handle) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.handles[h] = struct{}{}
	return nil
}

func (c *Client) unregister(h handle) {
	c.mu.Lock()
	delete(c.handles, h)
	c.mu.Unlock()
}

func (c *Client) requestID() uint64 { return c.reqID.Add(1) }

// withTimeout gives ctx the operation timeout if it has no deadline.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.opts.OperationTimeout)
}

// conn returns a live connection to addr, dialling it if needed; callers
// dialling one address at once share one dial.
func (c *Client) conn(ctx context.Context, addr string) (*cnx, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if x, ok := c.conns[addr]; ok && !x.isClosed() {
			c.mu.Unlock()
			return x, nil
		}
		if wait, ok := c.dialing[addr]; ok {
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		wait := make(chan struct{})
		c.dialing[addr] = wait
		c.mu.Unlock()
		x, err := dial(ctx, c, addr)
		c.mu.Lock()
		delete(c.dialing, addr)
		close(wait)
		if err == nil {
			if c.closed {
				c.mu.Unlock()
				x.conn.Close()
				return nil, ErrClosed
			}
			x.start()
			c.conns[addr] = x
		}
		c.mu.Unlock()
		return x, err
	}
}

// anyConn returns a connection to one of the bootstrap nodes, trying them
// in turn.
func (c *Client) anyConn(ctx context.Context) (*cnx, error) {
	var last error
	start := int(c.next.Add(1))
	for i := range c.addrs {
		addr := c.addrs[(start+i)%len(c.addrs)]
		x, err := c.conn(ctx, addr)
		if err == nil {
			return x, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("client: no node of %s answers: %w", c.opts.URL, last)
}

// retryable reports whether an error may clear up by looking up again.
func retryable(err error) bool {
	if tlsRefused(err) {
		return false
	}
	switch transport.CodeOf(err) {
	case transport.CodeNotLeader, transport.CodeServiceNotReady, transport.CodeTimeout, transport.CodeClosed,
		transport.CodeProducerNotFound, transport.CodeConsumerNotFound:
		// The last two: the broker dropped the producer or consumer
		// (its partition moved) before the client heard.
		return true
	}
	var ne net.Error
	return errors.Is(err, errConnLost) || errors.Is(err, errUnreachable) || errors.As(err, &ne)
}

// tlsRefused reports a TLS handshake that failed on certificates or
// protocol, not on the network: the node's certificate not trusted, or
// this client's refused. Trying again does not help.
func tlsRefused(err error) bool {
	var cve *tls.CertificateVerificationError
	var alert tls.AlertError
	var rhe tls.RecordHeaderError
	var uae x509.UnknownAuthorityError
	var hne x509.HostnameError
	return errors.As(err, &cve) || errors.As(err, &alert) || errors.As(err, &rhe) || errors.As(err, &uae) || errors.As(err, &hne)
}

// errUnreachable marks a failed dial, whatever the dialer returned: the
// node may come back.
var errUnreachable = errors.New("node unreachable")

// diskFullBackoff waits before resending after the n-th DiskFull refusal
// in a row (from 0), or returns ctx's error: 100ms doubling up to 2s. Space
// comes back when retention or an operator acts, in seconds or more: a
// producer need not ask often, and each attempt opens the producer again.
func diskFullBackoff(ctx context.Context, n int) error {
	t := time.NewTimer(min(100*time.Millisecond<<min(n, 5), 2*time.Second))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// backoff waits before retry attempt n (from 0), or returns ctx's error:
// 25ms doubling up to 250ms, so that a client finds a new leader within a
// quarter of a second of its election without hammering the cluster.
func backoff(ctx context.Context, n int) error {
	d := min(25*time.Millisecond<<min(n, 5), 250*time.Millisecond)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retry runs op until it succeeds, fails for good, or ctx ends. A
// NotLeader answer that names the leader is retried at once (op follows
// the hint), and so is a lookup whose leader refused the connection (op
// tells the node it asks again); anything else after a backoff.
func (c *Client) retry(ctx context.Context, op func(context.Context) error) error {
	hinted := 0
	for n := 0; ; n++ {
		err := op(ctx)
		if err == nil || !retryable(err) {
			return err
		}
		if (leaderHint(err) != "" || errors.Is(err, errLeaderUnreachable)) && hinted < 3 {
			hinted++
			n--
			continue
		}
		c.logger.Debug("retrying", "attempt", n+1, "err", err)
		if berr := backoff(ctx, n); berr != nil {
			return fmt.Errorf("%w (last error: %v)", berr, err)
		}
	}
}

// pick returns a connection to *hint when it is set, and clears it, or
// else to any bootstrap node.
func (c *Client) pick(ctx context.Context, hint *string) (*cnx, error) {
	if h := *hint; h != "" {
		*hint = ""
		return c.conn(ctx, h)
	}
	return c.anyConn(ctx)
}

// lookupMaxWait is how long, in milliseconds, a node asked where a
// partition's leader is may wait until it can name one (an election under
// way) before it answers that it cannot: the client hears of a new leader
// as soon as that node does, rather than at its next retry, and asks
// another node after this long.
const lookupMaxWait = 500

// lookup returns a connection to the leader of a partition: it asks any
// node, then follows the answer (and NotLeader hints) to the leader.
//
// A leader named that the client cannot connect to (its process was just
// killed, and the node asked has not found out yet) is told to the next
// node asked, at once: that node probes it, and names the next leader
// instead once it finds it gone.
func (c *Client) lookup(ctx context.Context, partition string) (*cnx, error) {
	var leader *cnx
	hint, unreachable := "", ""
	err := c.retry(ctx, func(ctx context.Context) error {
		x, err := c.pick(ctx, &hint)
		if err != nil {
			return err
		}
		res, err := x.request(ctx, &transport.Lookup{RequestID: c.requestID(), Stream: partition, Wait: true, Hints: true, MaxWaitMillis: lookupMaxWait, Unreachable: unreachable})
		if err != nil {
			hint = leaderHint(err)
			return err
		}
		lr, ok := res.(*transport.LookupResult)
		if !ok {
			return fmt.Errorf("client: unexpected answer %T to a lookup", res)
		}
		if lr.Here {
			leader = x
			return nil
		}
		leader, err = c.conn(ctx, lr.Address)
		if errors.Is(err, errUnreachable) && unreachable != lr.Address {
			unreachable = lr.Address
			return fmt.Errorf("%w: %w", errLeaderUnreachable, err)
		}
		return err
	})
	return leader, err
}

// errLeaderUnreachable is a lookup's answer naming a leader the client
// could not connect to: asked again at once, with its address.
var errLeaderUnreachable = errors.New("client: the leader named cannot be reached")

// maxLeaderHints bounds the NotLeader hints atLeader follows.
const maxLeaderHints = 3

// atLeader runs attach on a connection to a partition's leader: it looks
// the leader up, then follows the NotLeader hints attach's answer gives,
// maxLeaderHints at most. After a failover the node asked may still route
// to the old leader for a few seconds (gossip has not told it yet), while
// the old leader already names the new one: without the hint, a producer
// asked the same stale route again after each backoff.
func (c *Client) atLeader(ctx context.Context, partition string, attach func(*cnx) error) error {
	x, err := c.lookup(ctx, partition)
	for hints := 0; err == nil; hints++ {
		err = attach(x)
		hint := leaderHint(err)
		if hint == "" || hints == maxLeaderHints {
			return err
		}
		c.logger.Debug("following a leader hint", "partition", partition, "to", hint)
		x, err = c.conn(ctx, hint)
	}
	return err
}

// partitions returns a stream's partition count.
func (c *Client) partitions(ctx context.Context, stream geofabric.Stream) (int, error) {
	var n int
	err := c.retry(ctx, func(ctx context.Context) error {
		x, err := c.anyConn(ctx)
		if err != nil {
			return err
		}
		res, err := x.request(ctx, &transport.PartitionedMetadata{RequestID: c.requestID(), Stream: stream.String()})
		if err != nil {
			return err
		}
		pm, ok := res.(*transport.PartitionedMetadataResult)
		if !ok {
			return fmt.Errorf("client: unexpected answer %T to partitioned metadata", res)
		}
		n = int(pm.Partitions)
		return nil
	})
	return n, err
}

// part is a producer or consumer on one partition.
type part interface {
	start()
	close()
}

// attachParts makes and attaches one part per partition of a stream with n
// partitions, at most atOnce at a time (1: in order), retrying while a
// partition has no leader; on the first failure it cancels the others and
// closes every part made. A consumer's parts attach in order: each attach is a join of the
// subscription, which the others' roles depend on. A producer's attach
// nothing else, and in order a producer of a hundred partitions created
// just after a node died waited for each of that node's partitions to
// elect, one after the other.
func attachParts[T part](ctx context.Context, c *Client, st geofabric.Stream, n, atOnce int, newPart func(name string, i int) T, connect func(context.Context, T) error) ([]T, error) {
	names := st.Partitions(n)
	parts := make([]T, len(names))
	for i, p := range names {
		parts[i] = newPart(p.String(), i)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(atOnce, 1))
	for _, pt := range parts {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err // an earlier part failed: attach no more
			}
			if err := c.retry(gctx, func(ctx context.Context) error { return connect(ctx, pt) }); err != nil {
				return err
			}
			pt.start()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		for _, pt := range parts {
			pt.close()
		}
		return nil, err
	}
	return parts, nil
}

// randomName returns prefix-XXXXXXXX.
func randomName(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

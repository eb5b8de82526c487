package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/fabriq-io/fabriq/transport"
)

// errConnLost is given to what waited on a connection that closed.
var errConnLost = errors.New("client: connection lost")

// pingInterval keeps an idle connection alive and lets the transport's
// read timeout notice a dead peer.
const pingInterval = 20 * time.Second

// cnx is one connection to a node, shared by every producer and consumer
// of the client that talks to that node.
type cnx struct {
	c      *Client
	addr   string
	conn   *transport.Conn
	logger *slog.Logger

	done chan struct{}

	mu        sync.Mutex
	pending   map[uint64]chan transport.Command
	producers map[uint64]*partitionProducer
	consumers map[uint64]*partitionConsumer
	// watches are the stream watches open on the connection, by id.
	watches map[uint64]func(*transport.StreamsChanged)
	err     error
}

// dial connects to a node and says hello; start runs it.
func dial(ctx context.Context, c *Client, addr string) (*cnx, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	var nc net.Conn
	var err error
	if c.opts.Dial != nil {
		nc, err = c.opts.Dial(ctx, addr)
	} else {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w: %w", addr, errUnreachable, err)
	}
	if c.tls != nil {
		cfg := c.tls
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("client: TLS with %s: %w", addr, err)
		}
		nc = tc
	}
	token := c.opts.Token
	if c.opts.TokenSupplier != nil {
		if token, err = c.opts.TokenSupplier(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("client: token for %s: %w", addr, err)
		}
	}
	conn, err := transport.NewConn(nc, transport.Config{MaxFrameSize: c.opts.MaxFrameSize, Logger: c.logger})
	if err != nil {
		nc.Close()
		return nil, err
	}
	if _, err := transport.Handshake(ctx, conn, &transport.Connect{
		ProtocolVersion: transport.ProtocolVersion,
		ClientName:      c.opts.Name,
		ClientVersion:   "go",
		AuthToken:       token,
	}); err != nil {
		conn.Close()
		if c.tls == nil && transport.CodeOf(err) == transport.CodeClosed {
			// What a node with TLS on does to a plain connection.
			return nil, fmt.Errorf("client: connect to %s: %w (if the cluster has TLS on, use a fabriq+tls:// URL)", addr, err)
		}
		return nil, fmt.Errorf("client: connect to %s: %w", addr, err)
	}
	x := &cnx{
		c:         c,
		addr:      addr,
		conn:      conn,
		logger:    c.logger.With("node", addr),
		done:      make(chan struct{}),
		pending:   map[uint64]chan transport.Command{},
		producers: map[uint64]*partitionProducer{},
		consumers: map[uint64]*partitionConsumer{},
	}
	return x, nil
}

// start runs the connection's loops; the caller holds c.mu and has checked
// that the client is open, so Close waits for them.
func (x *cnx) start() {
	x.c.wg.Add(2)
	go x.readLoop()
	go x.pingLoop()
}

func (x *cnx) isClosed() bool {
	select {
	case <-x.done:
		return true
	default:
		return false
	}
}

// close ends the connection and tells everything that used it.
func (x *cnx) close(cause error) {
	x.mu.Lock()
	if x.err != nil {
		x.mu.Unlock()
		return
	}
	x.err = cause
	close(x.done)
	pending := x.pending
	x.pending = map[uint64]chan transport.Command{}
	producers := x.producers
	consumers := x.consumers
	x.producers = map[uint64]*partitionProducer{}
	x.consumers = map[uint64]*partitionConsumer{}
	x.mu.Unlock()
	x.conn.Close()
	for _, ch := range pending {
		close(ch)
	}
	for _, p := range producers {
		p.connectionLost(x)
	}
	for _, c := range consumers {
		c.connectionLost(x)
	}
}

func (x *cnx) pingLoop() {
	defer x.c.wg.Done()
	t := time.NewTicker(pingInterval)
	defer t.Stop()
	for {
		select {
		case <-x.done:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), pingInterval)
			err := x.conn.Send(ctx, &transport.Ping{})
			cancel()
			if err != nil {
				x.close(fmt.Errorf("%w: %v", errConnLost, err))
				return
			}
		}
	}
}

func (x *cnx) readLoop() {
	defer x.c.wg.Done()
	for {
		cmd, err := x.conn.Receive()
		if err != nil {
			x.close(fmt.Errorf("%w: %v", errConnLost, err))
			return
		}
		x.dispatch(cmd)
	}
}

// requestIDOf returns the request id a command carries, requests and
// their answers alike; 0 for commands without one.
func requestIDOf(cmd transport.Command) uint64 {
	switch c := cmd.(type) {
	case *transport.Lookup:
		return c.RequestID
	case *transport.PartitionedMetadata:
		return c.RequestID
	case *transport.CreateProducer:
		return c.RequestID
	case *transport.Subscribe:
		return c.RequestID
	case *transport.Ack:
		return c.RequestID
	case *transport.Seek:
		return c.RequestID
	case *transport.Unsubscribe:
		return c.RequestID
	case *transport.CloseProducer:
		return c.RequestID
	case *transport.CloseConsumer:
		return c.RequestID
	case *transport.CreateStream:
		return c.RequestID
	case *transport.DeleteStream:
		return c.RequestID
	case *transport.SetRetention:
		return c.RequestID
	case *transport.ListStreams:
		return c.RequestID
	case *transport.DescribeStream:
		return c.RequestID
	case *transport.ClusterStatus:
		return c.RequestID
	case *transport.LookupResult:
		return c.RequestID
	case *transport.PartitionedMetadataResult:
		return c.RequestID
	case *transport.ProducerReady:
		return c.RequestID
	case *transport.SubscribeReady:
		return c.RequestID
	case *transport.Success:
		return c.RequestID
	case *transport.Error:
		return c.RequestID
	case *transport.ListStreamsResult:
		return c.RequestID
	case *transport.WatchStreams:
		return c.RequestID
	case *transport.WatchStreamsResult:
		return c.RequestID
	case *transport.CloseWatch:
		return c.RequestID
	case *transport.DescribeStreamResult:
		return c.RequestID
	case *transport.ClusterStatusResult:
		return c.RequestID
	}
	return tenancyRequestID(cmd)
}

// tenancyRequestID is requestIDOf for the commands about tenants and
// fabrics.
func tenancyRequestID(cmd transport.Command) uint64 {
	switch c := cmd.(type) {
	case *transport.CreateTenant:
		return c.RequestID
	case *transport.DeleteTenant:
		return c.RequestID
	case *transport.ListTenants:
		return c.RequestID
	case *transport.ListTenantsResult:
		return c.RequestID
	case *transport.CreateFabric:
		return c.RequestID
	case *transport.DeleteFabric:
		return c.RequestID
	case *transport.ListFabrics:
		return c.RequestID
	case *transport.ListFabricsResult:
		return c.RequestID
	case *transport.DescribeFabric:
		return c.RequestID
	case *transport.DescribeFabricResult:
		return c.RequestID
	case *transport.SetFabricRegions:
		return c.RequestID
	case *transport.ResetCursor:
		return c.RequestID
	case *transport.DeleteSubscription:
		return c.RequestID
	case *transport.RenewReplica:
		return c.RequestID
	}
	return 0
}

func (x *cnx) dispatch(cmd transport.Command) {
	if id := requestIDOf(cmd); id != 0 {
		x.mu.Lock()
		ch := x.pending[id]
		delete(x.pending, id)
		x.mu.Unlock()
		if ch != nil {
			ch <- cmd
		}
		return
	}
	switch c := cmd.(type) {
	case *transport.SendReceipt:
		if p := x.producer(c.ProducerID); p != nil {
			p.receipt(x, c)
		}
	case *transport.SendError:
		if p := x.producer(c.ProducerID); p != nil {
			p.sendError(x, c)
		}
	case *transport.Message:
		if pc := x.consumer(c.ConsumerID); pc != nil {
			pc.messages(x, c)
		}
	case *transport.CloseProducer:
		if p := x.producer(c.ProducerID); p != nil {
			x.removeProducer(c.ProducerID)
			p.connectionLost(x)
		}
	case *transport.CloseConsumer:
		if pc := x.consumer(c.ConsumerID); pc != nil {
			x.removeConsumer(c.ConsumerID)
			pc.connectionLost(x)
		}
	case *transport.StreamsChanged:
		x.mu.Lock()
		fn := x.watches[c.WatchID]
		x.mu.Unlock()
		if fn != nil {
			fn(c)
		}
	case *transport.ActiveConsumerChange:
		if pc := x.consumer(c.ConsumerID); pc != nil {
			pc.activeChange(c.Active)
		}
	case *transport.Ping:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		x.conn.Send(ctx, &transport.Pong{})
		cancel()
	case *transport.Pong:
	case *transport.Error:
		x.logger.Warn("broker error", "err", c)
	default:
		x.logger.Debug("unexpected command", "type", fmt.Sprintf("%T", cmd))
	}
}

// request sends a command with a request id and waits for its answer; an
// Error answer is returned as the error.
func (x *cnx) request(ctx context.Context, cmd transport.Command) (transport.Command, error) {
	id := requestIDOf(cmd)
	ch := make(chan transport.Command, 1)
	x.mu.Lock()
	if x.err != nil {
		err := x.err
		x.mu.Unlock()
		return nil, fmt.Errorf("%w: %v", errConnLost, err)
	}
	x.pending[id] = ch
	x.mu.Unlock()
	forget := func() {
		x.mu.Lock()
		delete(x.pending, id)
		x.mu.Unlock()
	}
	if err := x.conn.Send(ctx, cmd); err != nil {
		forget()
		x.close(fmt.Errorf("%w: %v", errConnLost, err))
		return nil, fmt.Errorf("%w: %v", errConnLost, err)
	}
	select {
	case res, ok := <-ch:
		if !ok {
			return nil, errConnLost
		}
		if e, isErr := res.(*transport.Error); isErr {
			return nil, e
		}
		return res, nil
	case <-ctx.Done():
		forget()
		return nil, ctx.Err()
	}
}

// abandonConsumer closes on the broker a consumer id whose subscribe the
// client gave up on, without waiting: a subscribe answered after its
// caller stopped waiting would otherwise leave a consumer attached that
// nobody reads, holding its name (failover, key_shared) and, with no
// permits, its keys. The broker detaches it even when the close overtakes
// the subscribe. If the close cannot be sent the connection closes, which
// detaches it too.
func (x *cnx) abandonConsumer(id uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
	defer cancel()
	x.send(ctx, &transport.CloseConsumer{ConsumerID: id})
}

// abandonTimeout bounds the send of an abandoned consumer's close.
const abandonTimeout = 5 * time.Second

// send sends a command that has no answer.
func (x *cnx) send(ctx context.Context, cmd transport.Command) error {
	if err := x.conn.Send(ctx, cmd); err != nil {
		x.close(fmt.Errorf("%w: %v", errConnLost, err))
		return fmt.Errorf("%w: %v", errConnLost, err)
	}
	return nil
}

func (x *cnx) addProducer(id uint64, p *partitionProducer) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return false
	}
	x.producers[id] = p
	return true
}

func (x *cnx) removeProducer(id uint64) {
	x.mu.Lock()
	delete(x.producers, id)
	x.mu.Unlock()
}

func (x *cnx) producer(id uint64) *partitionProducer {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.producers[id]
}

func (x *cnx) addConsumer(id uint64, c *partitionConsumer) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return false
	}
	x.consumers[id] = c
	return true
}

func (x *cnx) removeConsumer(id uint64) {
	x.mu.Lock()
	delete(x.consumers, id)
	x.mu.Unlock()
}

func (x *cnx) consumer(id uint64) *partitionConsumer {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.consumers[id]
}

// addWatch routes a stream watch's pushes to fn; false if the connection
// is closed.
func (x *cnx) addWatch(id uint64, fn func(*transport.StreamsChanged)) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return false
	}
	if x.watches == nil {
		x.watches = map[uint64]func(*transport.StreamsChanged){}
	}
	x.watches[id] = fn
	return true
}

func (x *cnx) removeWatch(id uint64) {
	x.mu.Lock()
	delete(x.watches, id)
	x.mu.Unlock()
}

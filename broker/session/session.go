package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabriq-io/fabriq/auth"
	"github.com/fabriq-io/fabriq/broker/partition"
	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/transport"
)

const (
	// outboxSize bounds the replies queued for one connection.
	outboxSize = 4096
	// msgBoxSize bounds the Message frames queued for one connection.
	msgBoxSize = 64
	// maxAckOffsets bounds the offsets of one Ack.
	maxAckOffsets = 1 << 16
	// requestTimeout bounds a request that goes through Raft.
	requestTimeout = 10 * time.Second
	// writeTimeout bounds the write of one frame to the client.
	writeTimeout = 10 * time.Second
)

// Node is what a session needs of the node it serves on: its
// partitions, lookups and admin operations. Errors are transport errors
// to answer with.
type Node interface {
	// LocalLeader returns the partition of that name this node leads, or
	// the error to answer (InvalidName, NotLeader with a hint,
	// StreamNotFound, ServiceNotReady).
	LocalLeader(name string) (*partition.Partition, error)
	// Lookup answers where a partition's leader is.
	Lookup(name string) (*transport.LookupResult, error)
	// LookupWait is Lookup that waits, until ctx ends, while the
	// partition has no leader to name (NotLeader, ServiceNotReady), and
	// then returns the last answer; with hints, a NotLeader that names a
	// node holding the partition is answered at once. unreachable is the
	// client address of a leader the client could not connect to: named
	// again only once the node found its process alive.
	LookupWait(ctx context.Context, name string, hints bool, unreachable string) (*transport.LookupResult, error)
	// Partitions returns how many partitions a stream has, creating the
	// stream first where the node auto-creates streams on first use.
	Partitions(ctx context.Context, stream string) (int, error)
	// CreateStream creates a stream and waits until its partitions on
	// this node have leaders.
	CreateStream(ctx context.Context, c *transport.CreateStream) error
	// DeleteStream deletes a stream; without force, not while producers
	// or consumers are attached to its partitions on this node.
	DeleteStream(ctx context.Context, stream string, force bool) error
	// SetRetention changes a stream's retention policy.
	SetRetention(ctx context.Context, stream string, retention transport.RetentionPolicy) error
	// Streams returns the name of every stream.
	Streams() []string
	// StreamsChanged returns a channel closed at the catalog's next
	// change.
	StreamsChanged() <-chan struct{}
	// DescribeStream describes a stream's partitions as this node knows
	// them; with partition, that one alone, which this node must lead.
	DescribeStream(stream string, partition *int32) (transport.StreamInfo, error)
	// ClusterStatus reports the cluster as this node sees it.
	ClusterStatus() transport.ClusterInfo
	// SyncCatalog waits until this node's catalog holds every change
	// committed before the call, so that a listing after it shows a
	// stream, tenant or fabric created or deleted through another node a
	// moment ago. It costs a round to the metadata leader and, there, a
	// Raft barrier: for admin reads, not for what clients poll.
	SyncCatalog(ctx context.Context) error
	// CreateTenant, DeleteTenant, CreateFabric and DeleteFabric change
	// the tenants and fabrics; Tenants, Fabrics and DescribeFabric read
	// them.
	CreateTenant(ctx context.Context, name string) error
	DeleteTenant(ctx context.Context, name string) error
	Tenants() []string
	CreateFabric(ctx context.Context, c *transport.CreateFabric) error
	DeleteFabric(ctx context.Context, name string) error
	SetFabricRegions(ctx context.Context, name string, regions []string) error
	Fabrics(tenant string) ([]transport.FabricInfo, error)
	DescribeFabric(name string) (transport.FabricInfo, error)
	// RenewReplica places a new member in place of a damaged copy, for a
	// node of an older version that asks over the client port; from is
	// the connection's address.
	RenewReplica(partition, member string, from net.Addr) error
}

// Config is what a session needs to know of the node's configuration.
// Zero fields take DefaultConfig's values.
type Config struct {
	// NodeID and Version are told to clients; NodeID names the
	// producers a session names itself.
	NodeID  string
	Version string
	// MaxMessageBytes refuses larger messages (MSG-6). Default 5 MiB.
	MaxMessageBytes int
	// MaxProducers and MaxConsumers bound the producers and consumers one
	// connection holds. Default 1,000 each.
	MaxProducers int
	MaxConsumers int
	// MaxQueuedBytes bounds, each way, the bytes a connection holds: the
	// frames read and not yet handled, and the Message frames queued and
	// not yet written (plus one frame each way). Default 16 MiB.
	MaxQueuedBytes int
	// Auth turns authentication on: a Connect must carry a token it
	// verifies, and every request is checked against the token's grants.
	// Nil: every client may do everything.
	Auth *auth.Verifier
	// Refused is told of each request refused for a reason an operator
	// watches (see Refusal), with the client's address and subject; the
	// node counts and logs them. Nil: nobody is told.
	Refused func(code transport.ErrorCode, client, subject string, err error)
	// Throttle, when set, is asked before each send to a partition of
	// tenant, with its messages and payload bytes: it waits while the
	// tenant's publish rate limit holds the send back, or returns the
	// error to refuse it with (RateLimited). Nil: no limit.
	Throttle func(ctx context.Context, tenant string, messages, bytes int) error
	// Codec, when set, makes each connection's wire protocol (one codec a
	// connection): the node serves Pulsar clients through it. Nil:
	// fabriq's own frames.
	Codec func() transport.Codec
	// Logger receives the session's logs. Nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults used for zero fields.
func DefaultConfig() Config {
	return Config{MaxMessageBytes: 5 << 20, MaxProducers: 1_000, MaxConsumers: 1_000, MaxQueuedBytes: 16 << 20}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, d.MaxMessageBytes)
	c.MaxProducers = cmp.Or(c.MaxProducers, d.MaxProducers)
	c.MaxConsumers = cmp.Or(c.MaxConsumers, d.MaxConsumers)
	c.MaxQueuedBytes = cmp.Or(c.MaxQueuedBytes, d.MaxQueuedBytes)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.MaxMessageBytes < 0 || c.MaxProducers < 0 || c.MaxConsumers < 0 || c.MaxQueuedBytes < 0 {
		return errors.New("session: config: negative limits")
	}
	return nil
}

// Session is one client connection of fabriq's protocol: its producers,
// its consumers, the goroutine that reads its frames, the workers that
// serve its slow requests, and the one that writes what the node queues
// for the client. It is the Outbox of its consumers and the Holder of its
// producers (package partition).
//
// Lifecycle: New starts nothing; Serve runs the session until the
// connection ends, then detaches everything it held; Close ends it from
// outside (Serve returns), and may be called more than once.
type Session struct {
	node   Node
	cfg    Config
	seq    uint64 // names the connection to the dispatch engine
	conn   *transport.Conn
	nc     net.Conn // what conn wraps
	logger *slog.Logger
	// claims are the session's token's, when the node has authentication
	// on; set by the handshake, before any request is read.
	claims *auth.Claims

	// out carries replies and events; msgs carries Message frames, which
	// wait for room (the dispatcher's backpressure) where replies never do,
	// so a consumer's backlog cannot crowd out a producer's receipts.
	out  chan transport.Command
	msgs chan transport.Command
	done chan struct{}
	// pong is signalled when the client answers a Ping.
	pong    chan struct{}
	probeMu sync.Mutex
	// in holds the frames read and not yet handled.
	in *inbox
	// outBytes bounds the bytes of the Message frames in msgs and being
	// written.
	outBytes *gate
	// ctl runs the slow requests (at most maxControl at once), lookups
	// the lookups (at most maxLookups): see control.
	ctl     lane
	lookups lane
	// ctx ends when the session closes.
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	wg     sync.WaitGroup

	mu        sync.Mutex
	producers map[uint64]*sessProducer
	consumers map[uint64]*partition.Consumer
	// subscribing holds the consumer ids whose subscribe is in progress.
	subscribing map[uint64]bool
	// subReads counts, by consumer id, the subscribes read and not ended
	// and the CloseConsumers read since the first of them; subSeen holds
	// each such subscribe's count of closes when it was read. A close
	// read after a subscribe abandons it (see readClose).
	subReads map[uint64]*subRead
	subSeen  map[*transport.Subscribe]uint64
	// watches holds the open stream watches, by id.
	watches map[uint64]*streamWatch
}

// producerSeq numbers the producers and consumers sessions name.
var producerSeq atomic.Uint64

// sessionSeq numbers the node's sessions.
var sessionSeq atomic.Uint64

var (
	_ partition.Outbox = (*Session)(nil)
	_ partition.Holder = (*Session)(nil)
)

// New returns a session for a connection a client opened, on node; it
// starts nothing. A connection with a Plaintext method that reports true
// (a client in the clear on a TLS port) is refused with NotAllowed once
// its Connect is read.
func New(nc net.Conn, node Node, cfg Config) (*Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	tcfg := transport.Config{MaxFrameSize: cfg.MaxMessageBytes + 64<<10, Logger: cfg.Logger}
	if cfg.Codec != nil {
		tcfg.Codec = cfg.Codec()
	}
	conn, err := transport.NewConn(nc, tcfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Session{
		seq:         sessionSeq.Add(1),
		ctx:         ctx,
		cancel:      cancel,
		node:        node,
		cfg:         cfg,
		conn:        conn,
		nc:          nc,
		logger:      cfg.Logger.With("client", nc.RemoteAddr().String()),
		out:         make(chan transport.Command, outboxSize),
		msgs:        make(chan transport.Command, msgBoxSize),
		pong:        make(chan struct{}, 1),
		in:          newInbox(cfg.MaxQueuedBytes),
		ctl:         lane{max: maxControl},
		lookups:     lane{max: maxLookups},
		outBytes:    newGate(cfg.MaxQueuedBytes),
		done:        make(chan struct{}),
		producers:   map[uint64]*sessProducer{},
		consumers:   map[uint64]*partition.Consumer{},
		subscribing: map[uint64]bool{},
		subReads:    map[uint64]*subRead{},
		subSeen:     map[*transport.Subscribe]uint64{},
		watches:     map[uint64]*streamWatch{},
	}, nil
}

// Close ends the session from outside; Serve returns.
func (s *Session) Close() {
	s.once.Do(func() {
		close(s.done)
		s.cancel()
	})
	s.conn.Close()
}

// Serve runs the session until the connection ends, then detaches every
// producer and consumer it held.
func (s *Session) Serve() {
	defer s.cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	hello, err := transport.AwaitConnect(ctx, s.conn)
	if err == nil {
		if pt, ok := s.nc.(interface{ Plaintext() bool }); ok && pt.Plaintext() {
			perr := wire.Errorf(transport.CodeNotAllowed, "node %s takes TLS connections only: connect with a fabriq+tls:// URL", s.cfg.NodeID)
			_ = s.conn.Fail(transport.CodeNotAllowed, perr)
			return
		}
		if aerr := s.authenticate(hello); aerr != nil {
			s.refused(aerr)
			_ = s.conn.Fail(transport.CodeOf(aerr), aerr)
			return
		}
		err = s.conn.Send(ctx, &transport.Connected{
			ProtocolVersion: transport.ProtocolVersion,
			ServerVersion:   s.cfg.Version,
			NodeID:          s.cfg.NodeID,
			MaxFrameSize:    s.cfg.MaxMessageBytes + 64<<10,
		})
	}
	if err != nil {
		s.logger.Debug("handshake failed", "err", err)
		return
	}
	s.logger = s.logger.With("client_name", hello.ClientName)
	if s.claims != nil {
		s.logger = s.logger.With("subject", s.claims.Subject)
		if s.claims.ExpiresAt != nil {
			s.wg.Add(1)
			go s.expireToken()
		}
	}
	s.wg.Add(2)
	go s.writeLoop()
	go func() {
		// Pings keep a quiet client's read timeout from expiring.
		defer s.wg.Done()
		s.conn.KeepAlive(s.ctx, 0)
	}()
	// One goroutine reads and never waits for a request: it answers Pings
	// and takes Pongs itself, even while requests wait (a subscribe
	// probing another client, EX-2, or waiting on Raft), so a busy
	// holder always answers its probe. Requests that may wait go to the
	// session's control workers (control); the rest (sends, acks, flow:
	// what must keep its order) are handled in order by this goroutine.
	// What is read and not yet handled is bounded by bytes
	// (Config.MaxQueuedBytes).
	readErr := make(chan error, 1)
	s.wg.Add(1)
	go s.readLoop(readErr)
	for {
		q, ok := s.in.next(s.done)
		if !ok {
			break
		}
		s.handle(q.cmd)
		s.in.give(q.size)
	}
	select {
	case err := <-readErr:
		s.failFrame(err)
	default:
	}
}

// readLoop reads the connection's frames until it fails (the error goes
// to readErr) or the session closes: it answers Pings and takes Pongs,
// hands slow requests to the control workers and queues the others for
// Serve, taking their bytes from the inbox first.
func (s *Session) readLoop(readErr chan<- error) {
	defer s.wg.Done()
	defer s.in.end()
	for {
		cmd, size, err := s.conn.ReceiveSized()
		if err != nil {
			readErr <- err
			return
		}
		switch c := cmd.(type) {
		case *transport.Pong:
			select {
			case s.pong <- struct{}{}:
			default:
			}
			continue
		case *transport.Ping:
			s.reply(&transport.Pong{})
			continue
		case *transport.Subscribe:
			s.readSubscribe(c)
		case *transport.CloseConsumer:
			s.readClose(c.ConsumerID)
		}
		q := queued{cmd: cmd, size: charge(size)}
		if !s.in.take(q.size, s.done) {
			return
		}
		if _, ok := cmd.(*transport.Lookup); ok {
			s.startJob(&s.lookups, controlJob{size: q.size, run: func() { s.handle(q.cmd) }})
			continue
		}
		if slowRequest(cmd) {
			s.control(q.size, func() { s.handle(q.cmd) })
			continue
		}
		s.in.put(q)
	}
}

// maxControl bounds the slow requests one session runs at once; more
// wait their turn, in order, within the session's byte bound.
const maxControl = 16

// maxLookups bounds the lookups one session runs at once, apart from its
// other slow requests. A lookup may wait for an election (up to the
// client's MaxWaitMillis), doing nothing meanwhile; after a node dies a
// client asks where hundreds of partitions went at once, and in the
// control lane the lookups of idle partitions, whose elections come last,
// held every worker while a busy partition's lookup, whose leader was
// already elected, waited behind them (0.85 s from kill to acknowledged
// send among 990 idle partitions, 0.03 s alone).
const maxLookups = 256

// slowRequest reports whether a request may wait (on Raft, on another
// node, on probing another client), and so is served off the reader and
// out of order with the session's other requests. Sends, acks, flow and
// redeliveries stay in order; so does the part of a producer's or
// consumer's close that they depend on (closeConsumer).
func slowRequest(cmd transport.Command) bool {
	switch cmd.(type) {
	case *transport.Lookup, *transport.PartitionedMetadata, *transport.Subscribe,
		*transport.Seek, *transport.Unsubscribe, *transport.CreateStream, *transport.DeleteStream,
		*transport.ListStreams, *transport.DescribeStream, *transport.ClusterStatus, *transport.RenewReplica,
		*transport.CreateTenant, *transport.DeleteTenant, *transport.CreateFabric, *transport.DeleteFabric,
		*transport.SetFabricRegions, *transport.ResetCursor, *transport.DeleteSubscription:
		return true
	}
	return false
}

// control runs a slow request on one of the session's control workers,
// and gives its charge of bytes back when done. Up to maxControl run at
// once; the others queue, in order. Workers are the session's
// goroutines: cleanup waits for them, and the session's context, which
// every request's waits derive from, ends them when it closes. Queued
// requests of a closed session are dropped.
func (s *Session) control(size int, job func()) {
	s.startJob(&s.ctl, controlJob{size: size, run: job})
}

// release runs on a control worker what a session must do even if it
// closes meanwhile (detaching a consumer it has let go of).
func (s *Session) release(job func()) {
	s.startJob(&s.ctl, controlJob{run: job, must: true})
}

// lane is a set of the session's workers: at most max run at once, and
// the jobs beyond wait their turn, in order.
type lane struct {
	max     int
	mu      sync.Mutex
	running int
	queue   []controlJob
}

// startJob runs job on a worker of l, or queues it when l has max.
func (s *Session) startJob(l *lane, job controlJob) {
	l.mu.Lock()
	if l.running >= l.max {
		l.queue = append(l.queue, job)
		l.mu.Unlock()
		return
	}
	l.running++
	s.wg.Add(1)
	l.mu.Unlock()
	go s.worker(l, job)
}

// controlJob is a slow request and its charge of bytes.
type controlJob struct {
	size int
	run  func()
	// must runs the job even once the session is closed.
	must bool
}

// worker runs job, then l's queued jobs until none is left.
func (s *Session) worker(l *lane, job controlJob) {
	defer s.wg.Done()
	for {
		select {
		case <-s.done:
			if job.must {
				job.run()
			}
		default:
			job.run()
		}
		s.in.give(job.size)
		l.mu.Lock()
		if len(l.queue) == 0 {
			l.running--
			l.queue = nil
			l.mu.Unlock()
			return
		}
		job = l.queue[0]
		l.queue[0] = controlJob{}
		l.queue = l.queue[1:]
		l.mu.Unlock()
	}
}

// failFrame answers a frame the codec refused with an Error, then closes;
// other errors (the peer went away) just end the session.
func (s *Session) failFrame(err error) {
	switch {
	case errors.Is(err, transport.ErrFrameTooLarge):
		s.conn.Fail(transport.CodeTooLarge, err)
	case errors.Is(err, transport.ErrMalformed):
		s.conn.Fail(transport.CodeProtocol, err)
	default:
		s.logger.Debug("connection ended", "err", err)
	}
}

// writeLoop sends queued frames, replies before messages.
func (s *Session) writeLoop() {
	defer s.wg.Done()
	for {
		var cmd transport.Command
		select {
		case <-s.done:
			return
		case cmd = <-s.out:
		default:
			select {
			case <-s.done:
				return
			case cmd = <-s.out:
			case cmd = <-s.msgs:
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		err := s.conn.Send(ctx, cmd)
		cancel()
		if m, ok := cmd.(*transport.Message); ok {
			s.outBytes.give(messageSize(m))
		}
		if err != nil {
			s.logger.Debug("write failed", "err", err)
			s.Close()
			return
		}
	}
}

// reply queues a frame for the client; a client too slow to take its
// frames loses its connection rather than stalling the node.
func (s *Session) reply(cmd transport.Command) {
	select {
	case s.out <- cmd:
	case <-s.done:
	default:
		s.logger.Warn("client does not read its frames; closing the connection")
		s.Close()
	}
}

// Deliver queues a Message frame, waiting for room (the dispatcher's
// backpressure) until ctx ends. A client that takes no frames until the
// deadline loses its connection; a push cancelled because its dispatcher
// stops leaves the connection alone.
func (s *Session) Deliver(ctx context.Context, m *transport.Message) error {
	size := messageSize(m)
	if err := s.outBytes.take(ctx, size, s.done); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			s.Close()
		}
		return err
	}
	select {
	case s.msgs <- m:
		return nil
	case <-s.done:
		s.outBytes.give(size)
		return errSessionClosed
	case <-ctx.Done():
		s.outBytes.give(size)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			s.Close()
		}
		return ctx.Err()
	}
}

// EvictConsumer drops a consumer its partition no longer serves and tells
// the client.
func (s *Session) EvictConsumer(id uint64) {
	s.mu.Lock()
	_, ok := s.consumers[id]
	delete(s.consumers, id)
	s.mu.Unlock()
	if ok {
		s.reply(&transport.CloseConsumer{ConsumerID: id})
	}
}

// Probe pings the client and waits for its Pong. Probes of one session
// take turns, so that each waits for the answer to its own ping.
func (s *Session) Probe(timeout time.Duration) bool {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	select {
	case <-s.pong: // an old answer
	default:
	}
	s.reply(&transport.Ping{})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.pong:
		return true
	case <-t.C:
		return false
	case <-s.done:
		return false
	}
}

// Drop closes the session's connection.
func (s *Session) Drop() { s.Close() }

// ActiveChange tells a failover consumer whether it is the master (FO-6).
func (s *Session) ActiveChange(id uint64, active bool) {
	s.reply(&transport.ActiveConsumerChange{ConsumerID: id, Active: active})
}

// EvictProducer drops the producer of a partition no longer led here and
// tells the client (partition.Holder).
func (s *Session) EvictProducer(p *partition.Partition, name string) {
	s.mu.Lock()
	var ids []uint64
	for id, sp := range s.producers {
		if sp.p == p && sp.name == name {
			ids = append(ids, id)
			delete(s.producers, id)
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.reply(&transport.CloseProducer{ProducerID: id})
	}
}

// replyErr answers a request with an Error.
func (s *Session) replyErr(requestID uint64, err error) {
	e := wire.From(err)
	e.RequestID = requestID
	s.refused(e)
	s.reply(e)
}

// Refusal reports whether an error code is one an operator counts and
// watches: requests refused for authentication, authorization, limits or
// disk space, rather than for what the client asked.
func Refusal(code transport.ErrorCode) bool {
	switch code {
	case transport.CodeAuthenticationFailed, transport.CodeAuthorizationFailed, transport.CodeLimitExceeded,
		transport.CodeDiskFull, transport.CodeBacklogQuotaExceeded, transport.CodeTooLarge, transport.CodeRateLimited:
		return true
	}
	return false
}

// refused tells Config.Refused of a refusal an operator watches.
func (s *Session) refused(err error) {
	code := transport.CodeOf(err)
	if s.cfg.Refused == nil || !Refusal(code) {
		return
	}
	subject := ""
	if s.claims != nil {
		subject = s.claims.Subject
	}
	s.cfg.Refused(code, s.conn.RemoteAddr().String(), subject, err)
}

// cleanup detaches everything the session held.
func (s *Session) cleanup() {
	s.Close()
	s.wg.Wait()
	s.mu.Lock()
	producers, consumers := s.producers, s.consumers
	s.producers, s.consumers = map[uint64]*sessProducer{}, map[uint64]*partition.Consumer{}
	s.mu.Unlock()
	for _, p := range producers {
		p.p.ReleaseProducer(p.name, s)
	}
	for _, c := range consumers {
		c.Detach()
	}
}

func (s *Session) handle(cmd transport.Command) {
	fullNames(cmd)
	if !s.authorize(cmd) {
		return
	}
	switch c := cmd.(type) {
	case *transport.Ping:
		s.reply(&transport.Pong{})
	case *transport.Pong:
		select {
		case s.pong <- struct{}{}:
		default:
		}
	case *transport.Lookup:
		s.lookup(c)
	case *transport.PartitionedMetadata:
		s.partitionedMetadata(c)
	case *transport.CreateProducer:
		s.createProducer(c)
	case *transport.Send:
		s.send(c)
	case *transport.CloseProducer:
		s.closeProducer(c)
	case *transport.Subscribe:
		s.subscribe(c)
	case *transport.Flow:
		s.flow(c)
	case *transport.Ack:
		s.ack(c)
	case *transport.Nack:
		s.redeliver(c.ConsumerID, c.Offsets)
	case *transport.RedeliverUnacked:
		s.redeliver(c.ConsumerID, c.Offsets)
	case *transport.Seek:
		s.seek(c)
	case *transport.Unsubscribe:
		s.unsubscribe(c)
	case *transport.CloseConsumer:
		s.closeConsumer(c)
	case *transport.CreateStream:
		s.createStream(c)
	case *transport.DeleteStream:
		s.deleteStream(c)
	case *transport.SetRetention:
		s.setRetention(c)
	case *transport.ListStreams:
		s.listStreams(c)
	case *transport.DescribeStream:
		s.describeStream(c)
	case *transport.ClusterStatus:
		s.clusterStatus(c)
	case *transport.RenewReplica:
		s.renewReplica(c)
	case *transport.ResetCursor:
		s.resetCursor(c)
	case *transport.DeleteSubscription:
		s.deleteSubscription(c)
	default:
		if s.tenancy(cmd) {
			return
		}
		s.conn.Fail(transport.CodeProtocol, fmt.Errorf("unexpected command %T from a client", cmd))
		s.Close()
	}
}

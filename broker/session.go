package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

const (
	// outboxSize bounds the replies queued for one connection.
	outboxSize = 4096
	// msgBoxSize bounds the Message frames queued for one connection.
	msgBoxSize = 64
	// maxPermits bounds one Flow grant.
	maxPermits = 1 << 20
	// maxAckOffsets bounds the offsets of one Ack.
	maxAckOffsets = 1 << 16
	// requestTimeout bounds a request that goes through Raft.
	requestTimeout = 10 * time.Second
)

// session is one client connection: its producers, its consumers, and a
// writer goroutine that sends what the node queues for the client.
type session struct {
	n      *Node
	conn   *transport.Conn
	logger *slog.Logger

	// out carries replies and events; msgs carries Message frames, which
	// wait for room (the dispatcher's backpressure) where replies never do,
	// so a consumer's backlog cannot crowd out a producer's receipts.
	out  chan transport.Command
	msgs chan transport.Command
	done chan struct{}
	// pong is signalled when the client answers a Ping.
	pong    chan struct{}
	probeMu sync.Mutex
	// ctx ends when the session closes.
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	wg     sync.WaitGroup

	mu        sync.Mutex
	producers map[uint64]*sessProducer
	consumers map[uint64]*sessConsumer
}

type sessProducer struct {
	name string
	p    *localPartition
}

type sessConsumer struct {
	c   *consumer
	sub string
	p   *localPartition
	d   *dispatcher
}

var producerSeq atomic.Uint64

func newSession(n *Node, nc net.Conn) (*session, error) {
	conn, err := transport.NewConn(nc, transport.Config{MaxFrameSize: n.cfg.MaxMessageBytes + 64<<10, Logger: n.logger})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &session{
		ctx:       ctx,
		cancel:    cancel,
		n:         n,
		conn:      conn,
		logger:    n.logger.With("client", nc.RemoteAddr().String()),
		out:       make(chan transport.Command, outboxSize),
		msgs:      make(chan transport.Command, msgBoxSize),
		pong:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		producers: map[uint64]*sessProducer{},
		consumers: map[uint64]*sessConsumer{},
	}, nil
}

// close ends the session from outside; serve returns.
func (s *session) close() {
	s.once.Do(func() {
		close(s.done)
		s.cancel()
	})
	s.conn.Close()
}

// serve runs the session until the connection ends.
func (s *session) serve() {
	defer s.cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	hello, err := transport.AwaitConnect(ctx, s.conn)
	if err == nil {
		err = s.conn.Send(ctx, &transport.Connected{
			ProtocolVersion: transport.ProtocolVersion,
			ServerVersion:   s.n.cfg.Version,
			NodeID:          s.n.cfg.NodeID,
			MaxFrameSize:    s.n.cfg.MaxMessageBytes + 64<<10,
		})
	}
	if err != nil {
		s.logger.Debug("handshake failed", "err", err)
		return
	}
	s.logger = s.logger.With("client_name", hello.ClientName)
	s.wg.Add(2)
	go s.writeLoop()
	go func() {
		// Pings keep a quiet client's read timeout from expiring.
		defer s.wg.Done()
		s.conn.KeepAlive(s.ctx, 0)
	}()
	// One goroutine reads, another handles: a Pong is seen even while a
	// command waits (a subscribe probing another client, EX-2), so two
	// clients probing each other both answer.
	frames := make(chan transport.Command, 64)
	readErr := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(frames)
		for {
			cmd, err := s.conn.Receive()
			if err != nil {
				readErr <- err
				return
			}
			if _, ok := cmd.(*transport.Pong); ok {
				select {
				case s.pong <- struct{}{}:
				default:
				}
				continue
			}
			select {
			case frames <- cmd:
			case <-s.done:
				return
			}
		}
	}()
	for cmd := range frames {
		s.handle(cmd)
	}
	select {
	case err := <-readErr:
		s.failFrame(err)
	default:
	}
}

// failFrame answers a frame the codec refused with an Error, then closes;
// other errors (the peer went away) just end the session.
func (s *session) failFrame(err error) {
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
func (s *session) writeLoop() {
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
		ctx, cancel := context.WithTimeout(context.Background(), deliverTimeout)
		err := s.conn.Send(ctx, cmd)
		cancel()
		if err != nil {
			s.logger.Debug("write failed", "err", err)
			s.close()
			return
		}
	}
}

// reply queues a frame for the client; a client too slow to take its
// frames loses its connection rather than stalling the node.
func (s *session) reply(cmd transport.Command) {
	select {
	case s.out <- cmd:
	case <-s.done:
	default:
		s.logger.Warn("client does not read its frames; closing the connection")
		s.close()
	}
}

// deliver queues a Message frame, waiting for room (the dispatcher's
// backpressure) until ctx ends.
func (s *session) deliver(ctx context.Context, m *transport.Message) error {
	select {
	case s.msgs <- m:
		return nil
	case <-s.done:
		return errors.New("connection closed")
	case <-ctx.Done():
		s.close()
		return ctx.Err()
	}
}

// evictConsumer drops a consumer its partition no longer serves and tells
// the client.
func (s *session) evictConsumer(id uint64) {
	s.mu.Lock()
	_, ok := s.consumers[id]
	delete(s.consumers, id)
	s.mu.Unlock()
	if ok {
		s.reply(&transport.CloseConsumer{ConsumerID: id})
	}
}

// probe pings the client and waits for its Pong. Probes of one session
// take turns, so that each waits for the answer to its own ping.
func (s *session) probe(timeout time.Duration) bool {
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

// drop closes the session's connection.
func (s *session) drop() { s.close() }

// activeChange tells a failover consumer whether it is the master (FO-6).
func (s *session) activeChange(id uint64, active bool) {
	s.reply(&transport.ActiveConsumerChange{ConsumerID: id, Active: active})
}

// evictProducer drops the producer of a partition no longer led here and
// tells the client.
func (s *session) evictProducer(p *partition, name string) {
	s.mu.Lock()
	var ids []uint64
	for id, sp := range s.producers {
		if sp.p.partition == p && sp.name == name {
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
func (s *session) replyErr(requestID uint64, err error) {
	e := toWire(err)
	e.RequestID = requestID
	s.reply(e)
}

// cleanup detaches everything the session held.
func (s *session) cleanup() {
	s.close()
	s.wg.Wait()
	s.mu.Lock()
	producers, consumers := s.producers, s.consumers
	s.producers, s.consumers = map[uint64]*sessProducer{}, map[uint64]*sessConsumer{}
	s.mu.Unlock()
	for _, p := range producers {
		p.p.releaseProducer(p.name, s)
	}
	for _, c := range consumers {
		c.p.detach(c.sub, c.c)
	}
}

func (s *session) handle(cmd transport.Command) {
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
		if err := s.n.renewReplica(c.Partition, c.Member, s.conn.RemoteAddr()); err != nil {
			s.replyErr(c.RequestID, err)
		} else {
			s.reply(&transport.Success{RequestID: c.RequestID})
		}
	default:
		s.conn.Fail(transport.CodeProtocol, fmt.Errorf("unexpected command %T from a client", cmd))
		s.close()
	}
}

// localLeader finds a partition this node leads, or the error to answer.
func (s *session) localLeader(name string) (*localPartition, error) {
	if _, err := geofabric.ParsePartition(name); err != nil {
		return nil, wireError(transport.CodeInvalidName, "%v", err)
	}
	lp, ok := s.n.partition(name)
	if !ok {
		return nil, s.n.notHere(name)
	}
	if !lp.group.IsLeader() {
		return nil, lp.notLeader()
	}
	return lp, nil
}

func (s *session) lookup(c *transport.Lookup) {
	res, err := s.n.lookup(c.Stream)
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	res.RequestID = c.RequestID
	s.reply(res)
}

func (s *session) partitionedMetadata(c *transport.PartitionedMetadata) {
	_, meta, err := s.n.stream(c.Stream)
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	s.reply(&transport.PartitionedMetadataResult{RequestID: c.RequestID, Partitions: int32(meta.Partitions)})
}

func (s *session) createProducer(c *transport.CreateProducer) {
	lp, err := s.localLeader(c.Stream)
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	name := c.ProducerName
	if name == "" {
		name = fmt.Sprintf("%s-%d", s.n.cfg.NodeID, producerSeq.Add(1))
	} else if err := geofabricCheckName(name); err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	s.mu.Lock()
	if _, dup := s.producers[c.ProducerID]; dup {
		s.mu.Unlock()
		s.replyErr(c.RequestID, wireError(transport.CodeInvalidArgument, "producer id %d is in use on this connection", c.ProducerID))
		return
	}
	s.mu.Unlock()
	if !lp.claimProducer(name, s) {
		s.replyErr(c.RequestID, wireError(transport.CodeProducerBusy, msgProducerBusy, name))
		return
	}
	// A re-attach from this session replaces its earlier producer ids.
	s.mu.Lock()
	for id, sp := range s.producers {
		if sp.p == lp && sp.name == name {
			delete(s.producers, id)
		}
	}
	s.producers[c.ProducerID] = &sessProducer{name: name, p: lp}
	s.mu.Unlock()
	// The last stored sequence id comes through the write path, after
	// every send proposed before: read from the state machine directly it
	// could miss sends still in flight (an earlier incarnation's, or a
	// log tail a new leader has not applied yet), and the producer would
	// reuse their ids.
	rid := c.RequestID
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req := &sendReq{producer: name}
	req.done = func(_ []uint64, err error) {
		if err != nil {
			s.mu.Lock()
			delete(s.producers, c.ProducerID)
			s.mu.Unlock()
			lp.releaseProducer(name, s)
			s.replyErr(rid, err)
			return
		}
		s.reply(&transport.ProducerReady{RequestID: rid, ProducerName: name, LastSequenceID: req.lastSeq})
	}
	lp.send(ctx, req)
}

// geofabricCheckName validates a producer or subscription name.
func geofabricCheckName(name string) error {
	if len(name) > 256 {
		return wireError(transport.CodeInvalidName, "name longer than 256 bytes")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return wireError(transport.CodeInvalidName, "name %q has a control character", name)
		}
	}
	return nil
}

func (s *session) send(c *transport.Send) {
	s.mu.Lock()
	p := s.producers[c.ProducerID]
	s.mu.Unlock()
	first := uint64(0)
	if len(c.Messages) > 0 {
		first = c.Messages[0].SequenceID
	}
	fail := func(err error) {
		e := toWire(err)
		s.reply(&transport.SendError{ProducerID: c.ProducerID, SequenceID: first, Code: e.Code, Message: e.Message, LeaderHint: e.LeaderHint})
	}
	if p == nil {
		fail(wireError(transport.CodeProducerNotFound, "no producer %d on this connection", c.ProducerID))
		return
	}
	if len(c.Messages) == 0 {
		fail(wireError(transport.CodeInvalidArgument, "a send needs at least one message"))
		return
	}
	size := 0
	for i, m := range c.Messages {
		size += len(m.Payload)
		if len(m.Payload) > s.n.cfg.MaxMessageBytes {
			fail(wireError(transport.CodeTooLarge, "message of %d bytes is above the limit of %d", len(m.Payload), s.n.cfg.MaxMessageBytes))
			return
		}
		if i > 0 && m.SequenceID <= c.Messages[i-1].SequenceID {
			fail(wireError(transport.CodeInvalidArgument, "sequence ids must increase within a send"))
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	p.p.send(ctx, &sendReq{
		producer: p.name,
		msgs:     c.Messages,
		done: func(offsets []uint64, err error) {
			if err != nil {
				fail(err)
				return
			}
			s.reply(&transport.SendReceipt{ProducerID: c.ProducerID, SequenceID: first, Offsets: offsets})
		},
	})
}

func (s *session) closeProducer(c *transport.CloseProducer) {
	s.mu.Lock()
	p := s.producers[c.ProducerID]
	delete(s.producers, c.ProducerID)
	s.mu.Unlock()
	if p != nil {
		p.p.releaseProducer(p.name, s)
	}
	if c.RequestID != 0 {
		s.reply(&transport.Success{RequestID: c.RequestID})
	}
}

func (s *session) subscribe(c *transport.Subscribe) {
	lp, err := s.localLeader(c.Stream)
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	if c.Subscription == "" {
		s.replyErr(c.RequestID, wireError(transport.CodeInvalidName, "a subscription needs a name"))
		return
	}
	if err := geofabricCheckName(c.Subscription); err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	if c.Mode > transport.KeyShared {
		s.replyErr(c.RequestID, wireError(transport.CodeInvalidArgument, "unknown subscription mode %d", c.Mode))
		return
	}
	if ks := c.KeyShared; ks != nil && c.Mode == transport.KeyShared {
		if ks.Mode > transport.Sticky {
			s.replyErr(c.RequestID, wireError(transport.CodeInvalidArgument, "unknown key_shared mode %d", ks.Mode))
			return
		}
		if ks.Mode == transport.AutoSplit && len(ks.Ranges) > 0 {
			s.replyErr(c.RequestID, wireError(transport.CodeInvalidArgument, "hash ranges are for sticky key_shared consumers; auto_split assigns hashes itself"))
			return
		}
	}
	name := c.ConsumerName
	if name == "" {
		name = fmt.Sprintf("consumer-%d", producerSeq.Add(1))
	}
	s.mu.Lock()
	if old, ok := s.consumers[c.ConsumerID]; ok {
		s.mu.Unlock()
		if old.sub == c.Subscription && old.p == lp {
			// SUB-6: idempotent on one connection for one consumer id.
			s.reply(&transport.SubscribeReady{RequestID: c.RequestID, ConsumerName: old.c.name})
			return
		}
		s.replyErr(c.RequestID, wireError(transport.CodeInvalidArgument, "consumer id %d is in use on this connection", c.ConsumerID))
		return
	}
	s.mu.Unlock()
	if c.PriorityLevel < 0 {
		s.replyErr(c.RequestID, wireError(transport.CodeInvalidArgument, "priority level must not be negative, not %d", c.PriorityLevel))
		return
	}
	cons := &consumer{id: c.ConsumerID, name: name, priority: c.PriorityLevel, out: s}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	d, err := lp.subscribe(ctx, subscribeReq{
		sub: c.Subscription, mode: c.Mode, initial: c.InitialPosition, keyShared: c.KeyShared,
		nonDurable: c.NonDurable, start: c.StartOffset,
	}, cons)
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	s.mu.Lock()
	s.consumers[c.ConsumerID] = &sessConsumer{c: cons, sub: c.Subscription, p: lp, d: d}
	s.mu.Unlock()
	s.reply(&transport.SubscribeReady{RequestID: c.RequestID, ConsumerName: name})
	if !d.attached(cons) {
		// Evicted (leadership lost) before the session knew it: tell the
		// client, which attaches again.
		s.evictConsumer(c.ConsumerID)
	}
}

func (s *session) consumer(id uint64) *sessConsumer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.consumers[id]
}

func (s *session) flow(c *transport.Flow) {
	sc := s.consumer(c.ConsumerID)
	if sc == nil {
		s.replyErr(0, wireError(transport.CodeConsumerNotFound, "flow for unknown consumer %d", c.ConsumerID))
		return
	}
	if c.Permits <= 0 || c.Permits > maxPermits {
		s.replyErr(0, wireError(transport.CodeInvalidArgument, "permits must be in 1..%d, not %d", maxPermits, c.Permits))
		return
	}
	sc.d.flow(sc.c, c.Permits)
}

func (s *session) ack(c *transport.Ack) {
	sc := s.consumer(c.ConsumerID)
	if sc == nil {
		s.replyErr(c.RequestID, wireError(transport.CodeConsumerNotFound, "ack for unknown consumer %d", c.ConsumerID))
		return
	}
	if len(c.Offsets) == 0 || len(c.Offsets) > maxAckOffsets {
		s.replyErr(c.RequestID, wireError(transport.CodeInvalidArgument, "an ack carries 1..%d offsets, not %d", maxAckOffsets, len(c.Offsets)))
		return
	}
	if c.Cumulative && (sc.d.mode == transport.Shared || sc.d.mode == transport.KeyShared) {
		s.replyErr(c.RequestID, wireError(transport.CodeNotAllowed, msgCumulativeShared))
		return
	}
	if c.Cumulative && len(c.Offsets) != 1 {
		s.replyErr(c.RequestID, wireError(transport.CodeInvalidArgument, "a cumulative ack names one offset"))
		return
	}
	next := sc.p.fsm.nextOffset()
	for _, o := range c.Offsets {
		if o >= next {
			s.replyErr(c.RequestID, wireError(transport.CodeInvalidArgument, "ack for unknown message: offset %d, partition ends at %d", o, next))
			return
		}
	}
	var done func(error)
	if c.RequestID != 0 {
		rid := c.RequestID
		done = func(err error) {
			if err != nil {
				s.replyErr(rid, err)
				return
			}
			s.reply(&transport.Success{RequestID: rid})
		}
	}
	sc.p.ack(&ackReq{sub: sc.sub, offsets: c.Offsets, cumulative: c.Cumulative, done: done})
}

func (s *session) redeliver(id uint64, offsets []uint64) {
	if sc := s.consumer(id); sc != nil {
		sc.d.redeliver(sc.c, offsets)
	}
}

func (s *session) seek(c *transport.Seek) {
	sc := s.consumer(c.ConsumerID)
	if sc == nil {
		s.replyErr(c.RequestID, wireError(transport.CodeConsumerNotFound, "seek for unknown consumer %d", c.ConsumerID))
		return
	}
	offset := c.Offset
	if c.ByTime {
		o, err := sc.p.log.OffsetForTime(c.PublishTime)
		if err != nil {
			s.replyErr(c.RequestID, err)
			return
		}
		offset = o
	}
	if next := sc.p.fsm.nextOffset(); offset > next {
		offset = next
	}
	if !sc.d.durable {
		sc.d.seekReader(max(offset, sc.p.fsm.startOffset()))
		s.reply(&transport.Success{RequestID: c.RequestID})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if _, err := sc.p.apply(ctx, entrySeek, seekEntry{Name: sc.sub, Offset: offset}); err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	sc.d.reset()
	s.reply(&transport.Success{RequestID: c.RequestID})
}

func (s *session) unsubscribe(c *transport.Unsubscribe) {
	sc := s.consumer(c.ConsumerID)
	if sc == nil {
		s.replyErr(c.RequestID, wireError(transport.CodeConsumerNotFound, "unsubscribe for unknown consumer %d", c.ConsumerID))
		return
	}
	if sc.d.consumerCount() > 1 && !c.Force {
		s.replyErr(c.RequestID, wireError(transport.CodeNotAllowed, msgUnsubscribeNotAlone))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if _, err := sc.p.apply(ctx, entryDeleteSubscription, deleteSubscriptionEntry{Name: sc.sub}); err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	s.mu.Lock()
	delete(s.consumers, c.ConsumerID)
	s.mu.Unlock()
	sc.p.detach(sc.sub, sc.c)
	s.reply(&transport.Success{RequestID: c.RequestID})
}

// closeConsumer detaches a consumer and answers once the acks it sent
// before are committed, so a client that closes and exits leaves no ack
// behind.
func (s *session) closeConsumer(c *transport.CloseConsumer) {
	s.mu.Lock()
	sc := s.consumers[c.ConsumerID]
	delete(s.consumers, c.ConsumerID)
	s.mu.Unlock()
	if sc == nil {
		if c.RequestID != 0 {
			s.reply(&transport.Success{RequestID: c.RequestID})
		}
		return
	}
	sc.p.detach(sc.sub, sc.c)
	rid := c.RequestID
	// An empty ack goes through the ack path after this consumer's acks:
	// its commit is theirs.
	sc.p.ack(&ackReq{sub: sc.sub, done: func(err error) {
		if rid == 0 {
			return
		}
		if err != nil {
			s.replyErr(rid, err)
			return
		}
		s.reply(&transport.Success{RequestID: rid})
	}})
}

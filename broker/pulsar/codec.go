package pulsar

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/pulsarwire"
	"github.com/fabriq-io/fabriq/pulsarwire/pb"
	"github.com/fabriq-io/fabriq/transport"
)

// maxProtocolVersion is the newest Pulsar protocol version fabriq
// answers with: CONNECTED names the lower of it and the client's.
const maxProtocolVersion = 20

// maxPending bounds the Pulsar requests in flight whose answers the codec
// shapes; a client that keeps more waiting is refused.
const maxPending = 1 << 16

// Config configures the codecs of a node.
type Config struct {
	// Addr is the node's advertised client address, HOST:PORT: lookups
	// answered "here" point at it.
	Addr string
	// TLS says the client port speaks TLS: lookups answer pulsar+ssl://
	// URLs.
	TLS bool
	// MaxMessageBytes is the largest message the node takes, told to
	// clients in CONNECTED; a batch decompresses to at most this.
	MaxMessageBytes int
}

// mode of a Sniff codec: undecided until the connection's first bytes.
const (
	undecided int32 = iota
	fabriqMode
	pulsarMode
)

// Sniff returns a codec for one connection of the client port: it speaks
// Pulsar when the connection's first bytes are a Pulsar frame, fabriq's
// own protocol otherwise.
func Sniff(cfg Config) transport.Codec {
	return &sniff{codec: newCodec(cfg)}
}

type sniff struct {
	mode  atomic.Int32
	codec *codec
}

func (s *sniff) Read(r *bufio.Reader, maxSize int) (transport.Command, int, error) {
	if s.mode.Load() == undecided {
		s.mode.Store(decide(r, maxSize))
	}
	if s.mode.Load() == pulsarMode {
		return s.codec.Read(r, maxSize)
	}
	return transport.FrameCodec{}.Read(r, maxSize)
}

// decide reads which protocol a connection speaks from its first bytes.
// A length no Pulsar frame has (below 5: a command size and a command;
// above the limit: a Pulsar client's first frame, CONNECT, is small) is
// fabriq's to refuse, at once: a client that sent only the length waits
// for the answer, and there is no fifth byte to peek at.
func decide(r *bufio.Reader, maxSize int) int32 {
	b, err := r.Peek(4)
	if err != nil {
		return fabriqMode // fabriq's reader says why
	}
	if n := int64(binary.BigEndian.Uint32(b)); n < 5 || n > int64(maxSize) {
		return fabriqMode
	}
	if b, err = r.Peek(5); err != nil || !pulsarwire.IsPulsar(b) {
		return fabriqMode
	}
	return pulsarMode
}

func (s *sniff) Append(dst []byte, cmd transport.Command, maxSize int) ([]byte, error) {
	if s.mode.Load() == pulsarMode {
		return s.codec.Append(dst, cmd, maxSize)
	}
	return transport.FrameCodec{}.Append(dst, cmd, maxSize)
}

// kind is what a request in flight was, for the shape of its answer.
type kind uint8

const (
	kindOther kind = iota
	kindLookup
	kindPartitions
	kindAck
	kindTopics
	kindLastID
	kindSubscribe
	kindProducer
	kindUnsubscribe
)

// request is a Pulsar request in flight.
type request struct {
	kind     kind
	consumer uint64 // kindAck, kindLastID, kindSubscribe, kindUnsubscribe
	producer uint64 // kindProducer
	// endpoint is a producer's or consumer's partition, kept once the
	// session accepts it (ProducerReady, SubscribeReady).
	endpoint endpoint
	pattern  *regexp.Regexp
	mode     pb.CommandGetTopicsOfNamespace_Mode
	sub      string // kindLastID: the consumer's subscription
}

// endpoint is a producer's or consumer's partition.
type endpoint struct {
	partition int32 // -1: an unpartitioned stream
	stream    string
	sub       string
}

// codec translates one Pulsar connection.
type codec struct {
	cfg Config

	// pending holds commands Read made and has not returned yet (an ACK
	// of more ids than one fabriq Ack takes).
	pending []transport.Command

	mu        sync.Mutex
	version   int32
	requests  map[uint64]request
	producers map[uint64]endpoint
	consumers map[uint64]endpoint
	// highest maps a send (producer id, first sequence id) to its highest
	// sequence id, for the receipt.
	highest map[[2]uint64]uint64
	// pongs says, for each Ping Read returned not yet answered, whether
	// it was the client's (nil) or a refusal in its place (the frame).
	pongs [][]byte
	// held keeps the role event of a consumer whose subscribe is not
	// answered yet: a Pulsar client knows the consumer only once it is,
	// so the event follows the answer.
	held map[uint64]bool
}

func newCodec(cfg Config) *codec {
	return &codec{
		cfg:       cfg,
		requests:  map[uint64]request{},
		producers: map[uint64]endpoint{},
		consumers: map[uint64]endpoint{},
		highest:   map[[2]uint64]uint64{},
		held:      map[uint64]bool{},
	}
}

// Read reads Pulsar frames until one says something to the session.
func (c *codec) Read(r *bufio.Reader, maxSize int) (transport.Command, int, error) {
	if len(c.pending) > 0 {
		cmd := c.pending[0]
		c.pending = c.pending[1:]
		return cmd, 0, nil
	}
	f, n, err := pulsarwire.ReadFrame(r, maxSize)
	if err != nil {
		return nil, n, translateReadError(err)
	}
	cmd, err := c.inbound(f)
	if err != nil {
		return nil, n, fmt.Errorf("%w: %v", transport.ErrMalformed, err)
	}
	if s, ok := cmd.(*transport.Send); ok {
		// A batch decompresses to more than it took on the wire: the
		// session bounds what it queues by what this returns.
		held := 0
		for _, m := range s.Messages {
			held += len(m.Payload) + len(m.Key) + len(m.OrderingKey) + 128
		}
		n = max(n, held)
	}
	return cmd, n, nil
}

// translateReadError makes pulsarwire's frame errors match transport's,
// which the session answers.
func translateReadError(err error) error {
	var fse *pulsarwire.FrameSizeError
	switch {
	case errors.As(err, &fse):
		return &transport.FrameSizeError{Size: fse.Size, Max: fse.Max}
	case errors.Is(err, pulsarwire.ErrMalformed), errors.Is(err, pulsarwire.ErrChecksum):
		return fmt.Errorf("%w: %v", transport.ErrMalformed, err)
	}
	return err
}

// track records a request in flight.
func (c *codec) track(id uint64, r request) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.requests) >= maxPending {
		return fmt.Errorf("more than %d requests in flight", maxPending)
	}
	c.requests[id] = r
	return nil
}

// take forgets and returns a request in flight.
func (c *codec) take(id uint64) request {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.requests[id]
	delete(c.requests, id)
	return r
}

// endpointOf returns the partition index a name gives (-1 for an
// unpartitioned stream's) and the full stream name.
func endpointOf(name string) endpoint {
	p, err := geofabric.ParsePartition(name)
	if err != nil {
		return endpoint{partition: -1}
	}
	e := endpoint{partition: -1, stream: p.Stream.String()}
	if strings.HasSuffix(name, fmt.Sprintf("-partition-%d", p.Index)) {
		e.partition = int32(p.Index)
	}
	return e
}

// earliest and latest are Pulsar's ids of a topic's start, (-1, -1), and
// end, (2^63-1, 2^63-1).
func earliest(id *pb.MessageIdData) bool { return id.GetLedgerId() == math.MaxUint64 }
func latest(id *pb.MessageIdData) bool   { return id.GetLedgerId() == math.MaxInt64 }

// offsetOf is the offset a message id names.
func offsetOf(id *pb.MessageIdData) uint64 {
	off := id.GetEntryId()
	if bi := id.GetBatchIndex(); bi > 0 {
		off += uint64(bi)
	}
	return off
}

func offsetsOf(ids []*pb.MessageIdData) []uint64 {
	out := make([]uint64, len(ids))
	for i, id := range ids {
		out[i] = offsetOf(id)
	}
	return out
}

// Sequence ids. fabriq deduplicates a producer's sends by increasing
// sequence ids of its messages; a Pulsar producer numbers its sends
// (batches) in increasing order, but the messages of key-based batches
// interleave (one batch holds 0, 7, 14, another 1, 8, 15). So message i
// of a Pulsar send of sequence id S is stored as S*seqScale+i: a send
// resent after a reconnection is recognised whole, and read back as
// S+i, which is the message's own id for batches of consecutive ids.
const (
	seqScale    = 1 << 20
	maxSequence = 1 << 43
)

// pulsarSeq is the Pulsar sequence id a stored one reads as; ids below
// seqScale (fabriq producers') read as they are.
func pulsarSeq(s uint64) uint64 { return s/seqScale + s%seqScale }

// maxAckOffsets is what one fabriq Ack carries at most; a Pulsar ACK of
// more becomes several.
const maxAckOffsets = 1 << 15

// inbound translates one frame the client sent.
func (c *codec) inbound(f *pulsarwire.Frame) (transport.Command, error) {
	b := f.Command
	switch b.GetType() {
	case pb.BaseCommand_CONNECT:
		m := b.GetConnect()
		if m == nil {
			return nil, fmt.Errorf("CONNECT without its body")
		}
		c.mu.Lock()
		c.version = m.GetProtocolVersion()
		c.mu.Unlock()
		hello := &transport.Connect{ProtocolVersion: transport.ProtocolVersion, ClientName: m.GetClientVersion(), ClientVersion: m.GetClientVersion()}
		if m.GetAuthMethodName() == "token" {
			hello.AuthToken = string(m.GetAuthData())
		}
		return hello, nil
	case pb.BaseCommand_PING:
		c.mu.Lock()
		c.pongs = append(c.pongs, nil)
		c.mu.Unlock()
		return &transport.Ping{}, nil
	case pb.BaseCommand_PONG:
		return &transport.Pong{}, nil
	case pb.BaseCommand_LOOKUP:
		m := b.GetLookupTopic()
		if err := c.track(m.GetRequestId(), request{kind: kindLookup}); err != nil {
			return nil, err
		}
		return &transport.Lookup{RequestID: m.GetRequestId(), Stream: m.GetTopic(), Wait: true}, nil
	case pb.BaseCommand_PARTITIONED_METADATA:
		m := b.GetPartitionMetadata()
		if err := c.track(m.GetRequestId(), request{kind: kindPartitions}); err != nil {
			return nil, err
		}
		return &transport.PartitionedMetadata{RequestID: m.GetRequestId(), Stream: m.GetTopic(), Wait: true}, nil
	case pb.BaseCommand_PRODUCER:
		m := b.GetProducer()
		if err := c.track(m.GetRequestId(), request{kind: kindProducer, producer: m.GetProducerId(), endpoint: endpointOf(m.GetTopic())}); err != nil {
			return nil, err
		}
		return &transport.CreateProducer{RequestID: m.GetRequestId(), ProducerID: m.GetProducerId(), Stream: m.GetTopic(), ProducerName: m.GetProducerName()}, nil
	case pb.BaseCommand_SEND:
		m := b.GetSend()
		if f.Metadata == nil {
			return nil, fmt.Errorf("SEND without a message")
		}
		if m.GetIsChunk() || f.Metadata.GetNumChunksFromMsg() > 1 {
			return c.refuseSend(m, pb.ServerError_NotAllowedError, "fabriq does not take chunked messages: send messages of at most the maximum size")
		}
		// A batch may go a little over the message limit (a client admits
		// its first message whole, and batch framing comes on top): the
		// frame's slack, as for fabriq's own sends.
		msgs, err := pulsarwire.Messages(f.Metadata, f.Payload, c.cfg.MaxMessageBytes+64<<10)
		if err != nil {
			return c.refuseSend(m, pb.ServerError_NotAllowedError, err.Error())
		}
		seq := m.GetSequenceId()
		if seq >= maxSequence || len(msgs) >= seqScale {
			return c.refuseSend(m, pb.ServerError_NotAllowedError,
				fmt.Sprintf("sequence id %d with %d messages: fabriq takes sequence ids below 2^43 and batches below 2^20 messages", seq, len(msgs)))
		}
		for i := range msgs {
			msgs[i].SequenceID = seq*seqScale + uint64(i)
		}
		high := max(m.GetHighestSequenceId(), seq+uint64(len(msgs))-1)
		c.mu.Lock()
		if len(c.highest) < maxPending {
			c.highest[[2]uint64{m.GetProducerId(), msgs[0].SequenceID}] = high
		}
		c.mu.Unlock()
		return &transport.Send{ProducerID: m.GetProducerId(), Messages: msgs}, nil
	case pb.BaseCommand_CLOSE_PRODUCER:
		m := b.GetCloseProducer()
		if err := c.track(m.GetRequestId(), request{}); err != nil {
			return nil, err
		}
		c.mu.Lock()
		delete(c.producers, m.GetProducerId())
		c.mu.Unlock()
		return &transport.CloseProducer{RequestID: m.GetRequestId(), ProducerID: m.GetProducerId()}, nil
	case pb.BaseCommand_SUBSCRIBE:
		return c.subscribe(b.GetSubscribe())
	case pb.BaseCommand_FLOW:
		m := b.GetFlow()
		return &transport.Flow{ConsumerID: m.GetConsumerId(), Permits: int64(m.GetMessagePermits())}, nil
	case pb.BaseCommand_ACK:
		return c.ack(b.GetAck())
	case pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES:
		m := b.GetRedeliverUnacknowledgedMessages()
		return &transport.RedeliverUnacked{ConsumerID: m.GetConsumerId(), Offsets: offsetsOf(m.GetMessageIds())}, nil
	case pb.BaseCommand_UNSUBSCRIBE:
		m := b.GetUnsubscribe()
		if err := c.track(m.GetRequestId(), request{kind: kindUnsubscribe, consumer: m.GetConsumerId()}); err != nil {
			return nil, err
		}
		return &transport.Unsubscribe{RequestID: m.GetRequestId(), ConsumerID: m.GetConsumerId(), Force: m.GetForce()}, nil
	case pb.BaseCommand_CLOSE_CONSUMER:
		m := b.GetCloseConsumer()
		if err := c.track(m.GetRequestId(), request{}); err != nil {
			return nil, err
		}
		c.mu.Lock()
		delete(c.consumers, m.GetConsumerId())
		c.mu.Unlock()
		return &transport.CloseConsumer{RequestID: m.GetRequestId(), ConsumerID: m.GetConsumerId()}, nil
	case pb.BaseCommand_SEEK:
		m := b.GetSeek()
		if err := c.track(m.GetRequestId(), request{}); err != nil {
			return nil, err
		}
		// A Pulsar broker closes the consumer after a seek, and the client
		// subscribes again (it clears its queue on the answer).
		s := &transport.Seek{RequestID: m.GetRequestId(), ConsumerID: m.GetConsumerId(), Evict: true}
		switch id := m.GetMessageId(); {
		case m.MessagePublishTime != nil:
			s.ByTime, s.PublishTime = true, int64(min(m.GetMessagePublishTime(), math.MaxInt64))
		case earliest(id):
			s.Offset = 0 // held up to the partition's start
		case latest(id):
			s.Offset = math.MaxUint64 // held down to its end
		default:
			s.Offset = offsetOf(id)
		}
		return s, nil
	case pb.BaseCommand_GET_TOPICS_OF_NAMESPACE:
		m := b.GetGetTopicsOfNamespace()
		r := request{kind: kindTopics, mode: m.GetMode()}
		if p := m.GetTopicsPattern(); p != "" {
			if len(p) > maxPattern {
				return c.refuse(m.GetRequestId(), pb.ServerError_InvalidTopicName, fmt.Sprintf("a topics pattern of %d bytes: at most %d", len(p), maxPattern))
			}
			re, err := regexp.Compile("^(?:" + p + ")$")
			if err != nil {
				return c.refuse(m.GetRequestId(), pb.ServerError_InvalidTopicName, fmt.Sprintf("topics pattern: %v", err))
			}
			r.pattern = re
		}
		if err := c.track(m.GetRequestId(), r); err != nil {
			return nil, err
		}
		return &transport.ListStreams{RequestID: m.GetRequestId(), Fabric: m.GetNamespace()}, nil
	case pb.BaseCommand_GET_LAST_MESSAGE_ID:
		m := b.GetGetLastMessageId()
		c.mu.Lock()
		e, ok := c.consumers[m.GetConsumerId()]
		c.mu.Unlock()
		if !ok {
			return c.refuse(m.GetRequestId(), pb.ServerError_ConsumerNotFound, fmt.Sprintf("no consumer %d on this connection", m.GetConsumerId()))
		}
		if err := c.track(m.GetRequestId(), request{kind: kindLastID, consumer: m.GetConsumerId(), sub: e.sub}); err != nil {
			return nil, err
		}
		idx := max(e.partition, 0)
		return &transport.DescribeStream{RequestID: m.GetRequestId(), Stream: e.stream, Partition: &idx}, nil
	}
	if id, ok := requestIDOf(b); ok {
		return c.refuse(id, pb.ServerError_NotAllowedError, fmt.Sprintf("fabriq does not serve %s", b.GetType()))
	}
	return nil, fmt.Errorf("unexpected %s from a client", b.GetType())
}

// refuse answers a request the codec refuses itself, in order with the
// session's answers: Read returns a Ping, and the Pong the session
// answers it with goes out as the refusal.
func (c *codec) refuse(id uint64, code pb.ServerError, msg string) (transport.Command, error) {
	return c.refuseFrame(&pb.BaseCommand{
		Type:  pb.BaseCommand_ERROR.Enum(),
		Error: &pb.CommandError{RequestId: proto.Uint64(id), Error: code.Enum(), Message: proto.String(cut(msg))},
	})
}

// refuseSend answers a SEND the codec refuses itself with SEND_ERROR.
func (c *codec) refuseSend(m *pb.CommandSend, code pb.ServerError, msg string) (transport.Command, error) {
	return c.refuseFrame(&pb.BaseCommand{Type: pb.BaseCommand_SEND_ERROR.Enum(), SendError: &pb.CommandSendError{
		ProducerId: proto.Uint64(m.GetProducerId()), SequenceId: proto.Uint64(m.GetSequenceId()), Error: code.Enum(), Message: proto.String(cut(msg))}})
}

// maxRefusal bounds the text of a refusal the codec writes itself; such
// refusals are queued outside the session's byte bounds.
const maxRefusal = 256

// maxPattern bounds a GET_TOPICS_OF_NAMESPACE pattern, compiled on the
// connection's reader (pulsar-client-go filters by itself and sends none).
const maxPattern = 1 << 10

func cut(msg string) string {
	if len(msg) > maxRefusal {
		return msg[:maxRefusal]
	}
	return msg
}

// refuseFrame sends b in the place of the Pong that answers the Ping it
// returns.
func (c *codec) refuseFrame(b *pb.BaseCommand) (transport.Command, error) {
	frame, err := pulsarwire.AppendFrame(nil, b, nil, nil)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.pongs = append(c.pongs, frame)
	c.mu.Unlock()
	return &transport.Ping{}, nil
}

// requestIDOf returns the request id of a command fabriq does not serve,
// so that it can be refused; ok is false for one without.
func requestIDOf(b *pb.BaseCommand) (uint64, bool) {
	// Every request of the protocol carries its id as field 1 or 2 of its
	// body; the generated types are not at hand for the ones left out of
	// pulsar.proto, so read the field from the unknown bytes.
	raw := b.ProtoReflect().GetUnknown()
	return requestIDIn(raw, int32(b.GetType()))
}

func (c *codec) subscribe(m *pb.CommandSubscribe) (transport.Command, error) {
	e := endpointOf(m.GetTopic())
	e.sub = m.GetSubscription()
	if err := c.track(m.GetRequestId(), request{kind: kindSubscribe, consumer: m.GetConsumerId(), endpoint: e}); err != nil {
		return nil, err
	}
	s := &transport.Subscribe{
		RequestID: m.GetRequestId(), ConsumerID: m.GetConsumerId(), Stream: m.GetTopic(), Subscription: m.GetSubscription(),
		Mode: transport.SubscriptionMode(m.GetSubType()), ConsumerName: m.GetConsumerName(), PriorityLevel: m.GetPriorityLevel(),
	}
	if m.GetInitialPosition() == pb.CommandSubscribe_Earliest {
		s.InitialPosition = transport.Earliest
	}
	if ks := m.GetKeySharedMeta(); ks != nil && s.Mode == transport.KeyShared {
		p := &transport.KeySharedPolicy{AllowOutOfOrder: ks.GetAllowOutOfOrderDelivery()}
		if ks.GetKeySharedMode() == pb.KeySharedMode_STICKY {
			p.Mode = transport.Sticky
			for _, r := range ks.GetHashRanges() {
				p.Ranges = append(p.Ranges, transport.HashRange{Start: r.GetStart(), End: r.GetEnd()})
			}
		}
		s.KeyShared = p
	}
	if !m.GetDurable() {
		s.NonDurable = true
		if id := m.GetStartMessageId(); id != nil {
			switch {
			case earliest(id):
				s.InitialPosition = transport.Earliest
			case latest(id):
				s.InitialPosition = transport.Latest
			default:
				off := offsetOf(id)
				s.StartOffset = &off
			}
		}
	}
	return s, nil
}

func (c *codec) ack(m *pb.CommandAck) (transport.Command, error) {
	offs := offsetsOf(m.GetMessageId())
	if len(offs) == 0 {
		return nil, fmt.Errorf("ACK without a message id")
	}
	cumulative := m.GetAckType() == pb.CommandAck_Cumulative
	if m.RequestId != nil {
		if err := c.track(m.GetRequestId(), request{kind: kindAck, consumer: m.GetConsumerId()}); err != nil {
			return nil, err
		}
	}
	var acks []transport.Command
	for len(offs) > 0 {
		n := min(len(offs), maxAckOffsets)
		acks = append(acks, &transport.Ack{ConsumerID: m.GetConsumerId(), Offsets: offs[:n], Cumulative: cumulative})
		offs = offs[n:]
	}
	// The request id goes with the last: its answer comes once every
	// earlier one is committed too.
	acks[len(acks)-1].(*transport.Ack).RequestID = m.GetRequestId()
	c.pending = append(c.pending, acks[1:]...)
	return acks[0], nil
}

// Append writes what a fabriq command says, in Pulsar frames.
func (c *codec) Append(dst []byte, cmd transport.Command, maxSize int) ([]byte, error) {
	start := len(dst)
	out, err := c.outbound(dst, cmd)
	if err != nil {
		return dst[:start], err
	}
	if n := len(out) - start; n > maxSize+4*maxFramesPerCommand {
		return dst[:start], &transport.FrameSizeError{Size: int64(n), Max: int64(maxSize)}
	}
	return out, nil
}

// maxFramesPerCommand is a bound used only to size-check a Message's
// frames: one per message delivered.
const maxFramesPerCommand = 1 << 12

func frame(dst []byte, b *pb.BaseCommand) ([]byte, error) {
	return pulsarwire.AppendFrame(dst, b, nil, nil)
}

func (c *codec) outbound(dst []byte, cmd transport.Command) ([]byte, error) {
	switch m := cmd.(type) {
	case *transport.Connected:
		c.mu.Lock()
		v := min(c.version, maxProtocolVersion)
		c.mu.Unlock()
		return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(), Connected: &pb.CommandConnected{
			ServerVersion: proto.String("fabriq " + m.ServerVersion), ProtocolVersion: proto.Int32(v),
			MaxMessageSize: proto.Int32(int32(min(c.cfg.MaxMessageBytes, math.MaxInt32))),
		}})
	case *transport.Ping:
		return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	case *transport.Pong:
		c.mu.Lock()
		var refusal []byte
		if len(c.pongs) > 0 {
			refusal = c.pongs[0]
			c.pongs = c.pongs[1:]
		}
		c.mu.Unlock()
		if refusal != nil {
			return append(dst, refusal...), nil
		}
		return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
	case *transport.LookupResult:
		c.take(m.RequestID)
		addr := m.Address
		if addr == "" {
			addr = c.cfg.Addr
		}
		r := &pb.CommandLookupTopicResponse{RequestId: proto.Uint64(m.RequestID), Response: pb.CommandLookupTopicResponse_Connect.Enum(),
			Authoritative: proto.Bool(true)}
		if c.cfg.TLS {
			r.BrokerServiceUrlTls = proto.String("pulsar+ssl://" + addr)
		} else {
			r.BrokerServiceUrl = proto.String("pulsar://" + addr)
		}
		return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: r})
	case *transport.PartitionedMetadataResult:
		c.take(m.RequestID)
		n := uint32(0) // one partition: an unpartitioned topic
		if m.Partitions > 1 {
			n = uint32(m.Partitions)
		}
		return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: &pb.CommandPartitionedTopicMetadataResponse{
			RequestId: proto.Uint64(m.RequestID), Partitions: proto.Uint32(n), Response: pb.CommandPartitionedTopicMetadataResponse_Success.Enum(),
		}})
	case *transport.ProducerReady:
		if r := c.take(m.RequestID); r.kind == kindProducer {
			c.mu.Lock()
			c.producers[r.producer] = r.endpoint
			c.mu.Unlock()
		}
		last := m.LastSequenceID
		if last >= 0 {
			last = int64(pulsarSeq(uint64(last)))
		}
		return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
			RequestId: proto.Uint64(m.RequestID), ProducerName: proto.String(m.ProducerName), LastSequenceId: proto.Int64(last),
			ProducerReady: proto.Bool(true),
		}})
	case *transport.SendReceipt:
		if len(m.Offsets) == 0 {
			return dst, fmt.Errorf("a send receipt without offsets")
		}
		c.mu.Lock()
		key := [2]uint64{m.ProducerID, m.SequenceID}
		high, ok := c.highest[key]
		delete(c.highest, key)
		e := c.producers[m.ProducerID]
		c.mu.Unlock()
		seq := m.SequenceID / seqScale
		if !ok {
			high = seq + uint64(len(m.Offsets)) - 1
		}
		return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
			ProducerId: proto.Uint64(m.ProducerID), SequenceId: proto.Uint64(seq), HighestSequenceId: proto.Uint64(high),
			MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(pulsarwire.LedgerID), EntryId: proto.Uint64(m.Offsets[0]), Partition: proto.Int32(e.partition)},
		}})
	case *transport.SendError:
		c.mu.Lock()
		delete(c.highest, [2]uint64{m.ProducerID, m.SequenceID})
		c.mu.Unlock()
		return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_SEND_ERROR.Enum(), SendError: &pb.CommandSendError{
			ProducerId: proto.Uint64(m.ProducerID), SequenceId: proto.Uint64(m.SequenceID / seqScale), Error: serverError(m.Code).Enum(), Message: proto.String(m.Message),
		}})
	case *transport.SubscribeReady:
		r := c.take(m.RequestID)
		out, err := success(dst, m.RequestID)
		c.mu.Lock()
		if r.kind == kindSubscribe {
			c.consumers[r.consumer] = r.endpoint
		}
		active, ok := c.held[r.consumer]
		delete(c.held, r.consumer)
		c.mu.Unlock()
		if err != nil || !ok {
			return out, err
		}
		return activeChange(out, r.consumer, active)
	case *transport.Success:
		r := c.take(m.RequestID)
		if r.kind == kindUnsubscribe {
			c.mu.Lock()
			delete(c.consumers, r.consumer)
			c.mu.Unlock()
		}
		if r.kind == kindAck {
			return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_ACK_RESPONSE.Enum(), AckResponse: &pb.CommandAckResponse{
				ConsumerId: proto.Uint64(r.consumer), RequestId: proto.Uint64(m.RequestID)}})
		}
		return success(dst, m.RequestID)
	case *transport.Error:
		return c.failure(dst, m)
	case *transport.Message:
		return c.deliver(dst, m)
	case *transport.ActiveConsumerChange:
		if c.holdActive(m.ConsumerID, m.Active) {
			return dst, nil
		}
		return activeChange(dst, m.ConsumerID, m.Active)
	case *transport.CloseProducer:
		// The node dropped the producer (its partition moved): the client
		// looks the leader up again.
		return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{
			ProducerId: proto.Uint64(m.ProducerID), RequestId: proto.Uint64(m.RequestID)}})
	case *transport.CloseConsumer:
		return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{
			ConsumerId: proto.Uint64(m.ConsumerID), RequestId: proto.Uint64(m.RequestID)}})
	case *transport.ListStreamsResult:
		return c.topics(dst, m)
	case *transport.DescribeStreamResult:
		return c.lastMessageID(dst, m)
	}
	// Nothing else reaches a Pulsar client: the codec never asks for it.
	return dst, nil
}

// holdActive keeps a role event for a consumer whose subscribe is not
// answered yet, and reports whether it did.
func (c *codec) holdActive(consumer uint64, active bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.requests {
		if r.kind == kindSubscribe && r.consumer == consumer {
			c.held[consumer] = active
			return true
		}
	}
	return false
}

func activeChange(dst []byte, consumer uint64, active bool) ([]byte, error) {
	return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_ACTIVE_CONSUMER_CHANGE.Enum(), ActiveConsumerChange: &pb.CommandActiveConsumerChange{
		ConsumerId: proto.Uint64(consumer), IsActive: proto.Bool(active)}})
}

func success(dst []byte, id uint64) ([]byte, error) {
	return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(id)}})
}

// failure answers a refused request in the shape its kind asks for.
func (c *codec) failure(dst []byte, m *transport.Error) ([]byte, error) {
	code, msg := serverError(m.Code), m.Message
	if m.Code == transport.CodeNotLeader && m.LeaderHint != "" {
		msg += " (leader " + m.LeaderHint + ")"
	}
	r := c.take(m.RequestID)
	if r.kind == kindSubscribe {
		c.mu.Lock()
		delete(c.held, r.consumer)
		c.mu.Unlock()
	}
	switch r.kind {
	case kindLookup:
		return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
			RequestId: proto.Uint64(m.RequestID), Response: pb.CommandLookupTopicResponse_Failed.Enum(), Error: code.Enum(), Message: proto.String(msg)}})
	case kindPartitions:
		return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: &pb.CommandPartitionedTopicMetadataResponse{
			RequestId: proto.Uint64(m.RequestID), Response: pb.CommandPartitionedTopicMetadataResponse_Failed.Enum(), Error: code.Enum(), Message: proto.String(msg)}})
	case kindAck:
		return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_ACK_RESPONSE.Enum(), AckResponse: &pb.CommandAckResponse{
			ConsumerId: proto.Uint64(r.consumer), RequestId: proto.Uint64(m.RequestID), Error: code.Enum(), Message: proto.String(msg)}})
	}
	return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
		RequestId: proto.Uint64(m.RequestID), Error: code.Enum(), Message: proto.String(msg)}})
}

// deliver writes one MESSAGE frame per message delivered.
func (c *codec) deliver(dst []byte, m *transport.Message) ([]byte, error) {
	c.mu.Lock()
	e := c.consumers[m.ConsumerID]
	c.mu.Unlock()
	var err error
	for i := range m.Messages {
		d := &m.Messages[i]
		b := &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{
			ConsumerId: proto.Uint64(m.ConsumerID),
			MessageId:  &pb.MessageIdData{LedgerId: proto.Uint64(pulsarwire.LedgerID), EntryId: proto.Uint64(d.Offset), Partition: proto.Int32(e.partition)},
		}}
		if d.RedeliveryCount > 0 {
			b.Message.RedeliveryCount = proto.Uint32(d.RedeliveryCount)
		}
		md := pulsarwire.Metadata(&d.Data)
		md.SequenceId = proto.Uint64(pulsarSeq(d.Data.SequenceID))
		if dst, err = pulsarwire.AppendFrame(dst, b, md, d.Data.Payload); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// topics answers GET_TOPICS_OF_NAMESPACE: the streams of the fabric,
// those the pattern matches when it has one.
func (c *codec) topics(dst []byte, m *transport.ListStreamsResult) ([]byte, error) {
	r := c.take(m.RequestID)
	topics := []string{}
	if r.mode != pb.CommandGetTopicsOfNamespace_NON_PERSISTENT {
		for _, s := range m.Streams {
			if r.pattern == nil || r.pattern.MatchString(s) {
				topics = append(topics, s)
			}
		}
	}
	sort.Strings(topics)
	return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE.Enum(), GetTopicsOfNamespaceResponse: &pb.CommandGetTopicsOfNamespaceResponse{
		RequestId: proto.Uint64(m.RequestID), Topics: topics, Filtered: proto.Bool(r.pattern != nil),
		TopicsHash: proto.String(transport.StreamsHash(topics)), Changed: proto.Bool(true),
	}})
}

// lastMessageID answers GET_LAST_MESSAGE_ID from the consumer's partition
// as its leader describes it: the last offset written, and the
// subscription's mark-delete position.
func (c *codec) lastMessageID(dst []byte, m *transport.DescribeStreamResult) ([]byte, error) {
	r := c.take(m.RequestID)
	c.mu.Lock()
	e := c.consumers[r.consumer]
	c.mu.Unlock()
	if r.kind != kindLastID || len(m.Info.Partitions) != 1 {
		return c.failure(dst, &transport.Error{RequestID: m.RequestID, Code: transport.CodeUnknown, Message: "no description of the consumer's partition"})
	}
	p := m.Info.Partitions[0]
	id := func(off int64) *pb.MessageIdData {
		if off < 0 { // nothing: Pulsar's earliest, (-1, -1)
			return &pb.MessageIdData{LedgerId: proto.Uint64(math.MaxUint64), EntryId: proto.Uint64(math.MaxUint64), Partition: proto.Int32(e.partition)}
		}
		return &pb.MessageIdData{LedgerId: proto.Uint64(pulsarwire.LedgerID), EntryId: proto.Uint64(uint64(off)), Partition: proto.Int32(e.partition)}
	}
	res := &pb.CommandGetLastMessageIdResponse{RequestId: proto.Uint64(m.RequestID), LastMessageId: id(int64(p.NextOffset) - 1)}
	for _, s := range p.Subscriptions {
		if s.Name == r.sub {
			res.ConsumerMarkDeletePosition = id(s.MarkDelete)
		}
	}
	return frame(dst, &pb.BaseCommand{Type: pb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE.Enum(), GetLastMessageIdResponse: res})
}

// serverError is the Pulsar error a fabriq error code reads as, chosen so
// that Pulsar clients retry what fabriq's own client retries.
func serverError(c transport.ErrorCode) pb.ServerError {
	switch c {
	case transport.CodeNotLeader, transport.CodeServiceNotReady, transport.CodeTimeout, transport.CodeClosed, transport.CodeDiskFull:
		return pb.ServerError_ServiceNotReady
	case transport.CodeStreamNotFound, transport.CodeTenantNotFound, transport.CodeFabricNotFound:
		return pb.ServerError_TopicNotFound
	case transport.CodeInvalidName:
		return pb.ServerError_InvalidTopicName
	case transport.CodeProducerBusy:
		return pb.ServerError_ProducerBusy
	case transport.CodeConsumerBusy, transport.CodeSubscriptionBusy:
		return pb.ServerError_ConsumerBusy
	case transport.CodeSubscriptionNotFound:
		return pb.ServerError_SubscriptionNotFound
	case transport.CodeConsumerNotFound, transport.CodeProducerNotFound:
		return pb.ServerError_ConsumerNotFound
	case transport.CodeAuthenticationFailed:
		return pb.ServerError_AuthenticationError
	case transport.CodeAuthorizationFailed:
		return pb.ServerError_AuthorizationError
	case transport.CodeBacklogQuotaExceeded:
		return pb.ServerError_ProducerBlockedQuotaExceededError
	case transport.CodeRateLimited, transport.CodeLimitExceeded:
		return pb.ServerError_TooManyRequests
	case transport.CodeNotAllowed, transport.CodeInvalidArgument, transport.CodeTooLarge:
		return pb.ServerError_NotAllowedError
	case transport.CodeConsumerAssignError:
		return pb.ServerError_ConsumerAssignError
	case transport.CodeOutOfOrderSequence:
		return pb.ServerError_PersistenceError
	}
	return pb.ServerError_UnknownError
}

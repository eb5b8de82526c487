package transport

import "fmt"

// ProtocolVersion is the version of the protocol this package speaks. A
// peer whose Connect names another version is refused with
// CodeVersionMismatch.
const ProtocolVersion = 1

// CommandType identifies a command on the wire. Values are part of the
// protocol: never renumber, only append.
type CommandType uint8

// Command types.
const (
	TypeConnect CommandType = iota + 1
	TypeConnected
	TypePing
	TypePong
	TypeLookup
	TypeLookupResult
	TypePartitionedMetadata
	TypePartitionedMetadataResult
	TypeCreateProducer
	TypeProducerReady
	TypeSend
	TypeSendReceipt
	TypeSendError
	TypeSubscribe
	TypeSubscribeReady
	TypeFlow
	TypeMessage
	TypeAck
	TypeNack
	TypeRedeliverUnacked
	TypeSeek
	TypeUnsubscribe
	TypeCloseProducer
	TypeCloseConsumer
	TypeActiveConsumerChange
	TypeCreateStream
	TypeDeleteStream
	TypeListStreams
	TypeListStreamsResult
	TypeDescribeStream
	TypeDescribeStreamResult
	TypeSuccess
	TypeError
	TypeClusterStatus
	TypeClusterStatusResult
	TypeRenewReplica
	TypeSetRetention
	TypeCreateTenant
	TypeDeleteTenant
	TypeListTenants
	TypeListTenantsResult
	TypeCreateFabric
	TypeDeleteFabric
	TypeListFabrics
	TypeListFabricsResult
	TypeDescribeFabric
	TypeDescribeFabricResult
	TypeWatchStreams
	TypeWatchStreamsResult
	TypeStreamsChanged
	TypeCloseWatch
	TypeSetFabricRegions
	TypeResetCursor
	TypeDeleteSubscription
)

// Command is one protocol command. Every command type is a pointer to one
// of the structs below.
type Command interface {
	Type() CommandType
}

// Connect opens a session; it must be the first command a client sends.
type Connect struct {
	ProtocolVersion int    `msgpack:"v"`
	ClientName      string `msgpack:"n,omitempty"`
	ClientVersion   string `msgpack:"cv,omitempty"`
	// AuthToken is the client's token (a JWT), required by nodes with
	// authentication on.
	AuthToken string `msgpack:"t,omitempty"`
}

// Connected accepts a Connect.
type Connected struct {
	ProtocolVersion int    `msgpack:"v"`
	ServerVersion   string `msgpack:"sv,omitempty"`
	NodeID          string `msgpack:"node,omitempty"`
	// MaxFrameSize is the largest frame the server accepts.
	MaxFrameSize int `msgpack:"mf,omitempty"`
}

// Ping asks the peer to answer Pong; either side may send it.
type Ping struct{}

// Pong answers Ping.
type Pong struct{}

// Lookup asks which node leads a stream partition.
type Lookup struct {
	RequestID uint64 `msgpack:"r"`
	Stream    string `msgpack:"s"` // a partition, in any form geofabric.ParsePartition reads
	// Wait asks the node to wait, within its request timeout, until it
	// can name the partition's leader, rather than answer NotLeader or
	// ServiceNotReady at once: Pulsar clients do not retry a lookup.
	Wait bool `msgpack:"w,omitempty"`
	// Hints, with Wait, says the client follows a NotLeader's leader hint
	// (a node that holds the partition): the node answers one at once
	// rather than wait until it can name the leader itself.
	Hints bool `msgpack:"hi,omitempty"`
	// MaxWaitMillis, with Wait, bounds the wait below the node's request
	// timeout (0: no lower bound): a client that asks another node after
	// it is not held by one cut off from the partition's majority.
	MaxWaitMillis uint32 `msgpack:"mw,omitempty"`
	// Unreachable, with Wait, is the client address of a leader this
	// client was just sent to and could not connect to: the node asked
	// does not name it again unless it finds its process alive (it
	// probes it), and waits for the partition's next leader instead.
	Unreachable string `msgpack:"u,omitempty"`
}

// LookupResult answers Lookup: Here when the node asked is the leader,
// else the client address of the leader.
type LookupResult struct {
	RequestID uint64 `msgpack:"r"`
	Here      bool   `msgpack:"h,omitempty"`
	Address   string `msgpack:"a,omitempty"`
	NodeID    string `msgpack:"node,omitempty"`
}

// PartitionedMetadata asks how many partitions a stream has.
type PartitionedMetadata struct {
	RequestID uint64 `msgpack:"r"`
	Stream    string `msgpack:"s"`
	// Wait asks the node to wait, within its request timeout, while it
	// cannot answer yet (ServiceNotReady: starting, catching up), as
	// Lookup.Wait.
	Wait bool `msgpack:"w,omitempty"`
}

// PartitionedMetadataResult answers PartitionedMetadata.
type PartitionedMetadataResult struct {
	RequestID  uint64 `msgpack:"r"`
	Partitions int32  `msgpack:"p"`
}

// CreateProducer attaches a producer to a stream partition. An empty
// ProducerName asks the broker to generate one.
type CreateProducer struct {
	RequestID    uint64 `msgpack:"r"`
	ProducerID   uint64 `msgpack:"id"`
	Stream       string `msgpack:"s"`
	ProducerName string `msgpack:"n,omitempty"`
}

// ProducerReady accepts a CreateProducer. LastSequenceID is the highest
// sequence id the partition has stored for this producer name, -1 if none.
type ProducerReady struct {
	RequestID      uint64 `msgpack:"r"`
	ProducerName   string `msgpack:"n"`
	LastSequenceID int64  `msgpack:"ls"`
}

// MessageData is one message as producers send it and consumers receive it.
type MessageData struct {
	Key         string            `msgpack:"k,omitempty"`
	OrderingKey []byte            `msgpack:"ok,omitempty"`
	Properties  map[string]string `msgpack:"p,omitempty"`
	EventTime   int64             `msgpack:"et,omitempty"`
	PublishTime int64             `msgpack:"pt,omitempty"`
	// ProducerName is set on delivery; producers leave it empty.
	ProducerName string `msgpack:"pn,omitempty"`
	SequenceID   uint64 `msgpack:"sq"`
	Payload      []byte `msgpack:"d"`
}

// Send carries a batch of messages of one producer; sequence ids increase
// within the batch.
type Send struct {
	ProducerID uint64        `msgpack:"id"`
	Messages   []MessageData `msgpack:"m"`
}

// SendReceipt acknowledges a Send once it is committed: Offsets[i] is the
// offset of the Send's i-th message (for a duplicate, the offset it was
// first stored at).
type SendReceipt struct {
	ProducerID uint64   `msgpack:"id"`
	SequenceID uint64   `msgpack:"sq"` // the first message's
	Offsets    []uint64 `msgpack:"o"`
}

// SendError refuses or fails a Send.
type SendError struct {
	ProducerID uint64    `msgpack:"id"`
	SequenceID uint64    `msgpack:"sq"`
	Code       ErrorCode `msgpack:"c"`
	Message    string    `msgpack:"m,omitempty"`
	LeaderHint string    `msgpack:"l,omitempty"`
}

// SubscriptionMode is a subscription's type.
type SubscriptionMode uint8

// Subscription modes; Exclusive is the default.
const (
	Exclusive SubscriptionMode = iota
	Shared
	Failover
	KeyShared
)

// InitialPosition is where a new subscription starts.
type InitialPosition uint8

// Initial positions; Latest is the default.
const (
	Latest InitialPosition = iota
	Earliest
)

// KeySharedMode is how a key_shared subscription assigns hashes.
type KeySharedMode uint8

// Key_shared modes; AutoSplit is the default.
const (
	AutoSplit KeySharedMode = iota
	Sticky
)

// HashRange is an inclusive range of key hash slots, 0..65535.
type HashRange struct {
	Start int32 `msgpack:"s" json:"start"`
	End   int32 `msgpack:"e" json:"end"`
}

// KeySharedPolicy configures a key_shared consumer.
type KeySharedPolicy struct {
	Mode            KeySharedMode `msgpack:"m,omitempty"`
	Ranges          []HashRange   `msgpack:"r,omitempty"`
	AllowOutOfOrder bool          `msgpack:"o,omitempty"`
}

// Subscribe attaches a consumer to a subscription of a stream partition.
type Subscribe struct {
	RequestID       uint64           `msgpack:"r"`
	ConsumerID      uint64           `msgpack:"id"`
	Stream          string           `msgpack:"s"`
	Subscription    string           `msgpack:"sub"`
	Mode            SubscriptionMode `msgpack:"m,omitempty"`
	ConsumerName    string           `msgpack:"n,omitempty"`
	InitialPosition InitialPosition  `msgpack:"ip,omitempty"`
	PriorityLevel   int32            `msgpack:"pl,omitempty"`
	KeyShared       *KeySharedPolicy `msgpack:"ks,omitempty"`
	// NonDurable makes a reader's subscription: no cursor outlives it.
	NonDurable bool `msgpack:"nd,omitempty"`
	// StartOffset, for a non-durable subscription, is where reading starts.
	StartOffset *uint64 `msgpack:"so,omitempty"`
}

// SubscribeReady accepts a Subscribe.
type SubscribeReady struct {
	RequestID    uint64 `msgpack:"r"`
	ConsumerName string `msgpack:"n"`
}

// Flow grants a consumer permits: how many more messages it may be sent.
type Flow struct {
	ConsumerID uint64 `msgpack:"id"`
	Permits    int64  `msgpack:"p"`
}

// Delivered is one message pushed to a consumer.
type Delivered struct {
	Offset          uint64      `msgpack:"o"`
	RedeliveryCount uint32      `msgpack:"rc,omitempty"`
	Data            MessageData `msgpack:"d"`
}

// Message pushes messages to a consumer, within its permits.
type Message struct {
	ConsumerID uint64      `msgpack:"id"`
	Messages   []Delivered `msgpack:"m"`
}

// Ack acknowledges messages. Cumulative acknowledges everything up to and
// including the one offset given. A RequestID other than zero asks for a
// receipt (Success or Error) once the ack is committed.
type Ack struct {
	RequestID  uint64   `msgpack:"r,omitempty"`
	ConsumerID uint64   `msgpack:"id"`
	Offsets    []uint64 `msgpack:"o"`
	Cumulative bool     `msgpack:"c,omitempty"`
}

// Nack asks for messages to be redelivered after the nack delay.
type Nack struct {
	ConsumerID uint64   `msgpack:"id"`
	Offsets    []uint64 `msgpack:"o"`
}

// RedeliverUnacked asks for the given unacked messages (all of them when
// Offsets is empty) to be delivered again.
type RedeliverUnacked struct {
	ConsumerID uint64   `msgpack:"id"`
	Offsets    []uint64 `msgpack:"o,omitempty"`
}

// Seek resets a subscription's cursor to an offset (inclusive) or, with
// ByTime, to the first message published at or after PublishTime.
type Seek struct {
	RequestID   uint64 `msgpack:"r"`
	ConsumerID  uint64 `msgpack:"id"`
	Offset      uint64 `msgpack:"o,omitempty"`
	ByTime      bool   `msgpack:"bt,omitempty"`
	PublishTime int64  `msgpack:"pt,omitempty"`
	// Evict drops the consumer once the seek is done and tells the client
	// (CloseConsumer after the Success), as a Pulsar broker does: the
	// client subscribes again, and what the consumer held unacknowledged
	// is delivered again from the new position.
	Evict bool `msgpack:"ev,omitempty"`
}

// Unsubscribe deletes the consumer's subscription.
type Unsubscribe struct {
	RequestID  uint64 `msgpack:"r"`
	ConsumerID uint64 `msgpack:"id"`
	Force      bool   `msgpack:"f,omitempty"`
}

// CloseProducer closes a producer; either side may send it (the broker with
// RequestID zero, when it can no longer serve it).
type CloseProducer struct {
	RequestID  uint64 `msgpack:"r,omitempty"`
	ProducerID uint64 `msgpack:"id"`
}

// CloseConsumer closes a consumer; either side may send it.
type CloseConsumer struct {
	RequestID  uint64 `msgpack:"r,omitempty"`
	ConsumerID uint64 `msgpack:"id"`
}

// ActiveConsumerChange tells a failover consumer it became active or
// inactive.
type ActiveConsumerChange struct {
	ConsumerID uint64 `msgpack:"id"`
	Active     bool   `msgpack:"a"`
}

// CreateStream creates a stream with its partitions.
type CreateStream struct {
	RequestID  uint64 `msgpack:"r"`
	Stream     string `msgpack:"s"`
	Partitions int32  `msgpack:"p"`
	Replicas   int32  `msgpack:"rf"`
	// Retention is the stream's retention, backlog quota and message TTL
	// policy; nil is the fabric's default.
	Retention *RetentionPolicy `msgpack:"rp,omitempty"`
	// Local makes a local stream, every replica in this region; empty
	// makes a global stream, spread over its fabric's regions.
	Local string `msgpack:"lo,omitempty"`
	// LeaderRegion is where the stream's partitions should be led.
	LeaderRegion string `msgpack:"lr,omitempty"`
}

// BacklogQuotaPolicy is what a partition does when a subscription's
// backlog is over the stream's backlog quota.
type BacklogQuotaPolicy uint8

// Backlog quota policies; ProducerException is the default.
const (
	// ProducerException refuses sends with BacklogQuotaExceeded until the
	// backlog is back under the quota.
	ProducerException BacklogQuotaPolicy = iota
	// ConsumerBacklogEviction acknowledges the oldest backlog on behalf of
	// the slowest subscriptions until the backlog fits the quota.
	ConsumerBacklogEviction
)

var backlogQuotaPolicyNames = [...]string{ProducerException: "producer_exception", ConsumerBacklogEviction: "consumer_backlog_eviction"}

// String returns the policy's name, as Pulsar names it.
func (p BacklogQuotaPolicy) String() string {
	if int(p) < len(backlogQuotaPolicyNames) {
		return backlogQuotaPolicyNames[p]
	}
	return fmt.Sprintf("BacklogQuotaPolicy(%d)", uint8(p))
}

// ParseBacklogQuotaPolicy returns the policy of a name: producer_exception
// or consumer_backlog_eviction.
func ParseBacklogQuotaPolicy(s string) (BacklogQuotaPolicy, error) {
	for i, n := range backlogQuotaPolicyNames {
		if s == n {
			return BacklogQuotaPolicy(i), nil
		}
	}
	return 0, fmt.Errorf("backlog quota policy %q: must be producer_exception or consumer_backlog_eviction", s)
}

// RetentionPolicy is a stream's retention, backlog quota and message TTL,
// as Pulsar's namespace policies of the same names. Messages acknowledged
// by every subscription (every message, for a stream with none) are
// deleted, whole segments at a time, unless the retention limits keep
// them: an acknowledged segment goes once it is older than RetentionTimeMs
// or the partition is larger than RetentionBytes. Zero in both deletes
// acknowledged messages at once; -1 in one is no limit on that dimension
// (-1 in both keeps everything); zero in only one of them is -1.
type RetentionPolicy struct {
	RetentionTimeMs int64 `msgpack:"rt,omitempty" json:"retention_time_ms"`
	RetentionBytes  int64 `msgpack:"rb,omitempty" json:"retention_bytes"`
	// BacklogQuotaBytes bounds, per partition, the bytes of the log from
	// the slowest subscription's first unacknowledged message on; zero
	// is no quota.
	BacklogQuotaBytes  int64              `msgpack:"bq,omitempty" json:"backlog_quota_bytes"`
	BacklogQuotaPolicy BacklogQuotaPolicy `msgpack:"bp,omitempty" json:"backlog_quota_policy"`
	// MessageTTLMs acknowledges, on behalf of every subscription, the
	// messages published longer ago than this; zero is no TTL.
	MessageTTLMs int64 `msgpack:"ttl,omitempty" json:"message_ttl_ms"`
}

// SetRetention replaces a stream's retention policy; partition leaders
// apply the new one at their next retention pass.
type SetRetention struct {
	RequestID uint64          `msgpack:"r"`
	Stream    string          `msgpack:"s"`
	Retention RetentionPolicy `msgpack:"rp"`
}

// DeleteStream deletes a stream; without Force it is refused while
// producers or consumers are attached.
type DeleteStream struct {
	RequestID uint64 `msgpack:"r"`
	Stream    string `msgpack:"s"`
	Force     bool   `msgpack:"f,omitempty"`
}

// ListStreams lists the streams of one fabric, "TENANT/FABRIC".
type ListStreams struct {
	RequestID uint64 `msgpack:"r"`
	Fabric    string `msgpack:"f"`
}

// ListStreamsResult answers ListStreams with full stream names, sorted.
type ListStreamsResult struct {
	RequestID uint64   `msgpack:"r"`
	Streams   []string `msgpack:"s"`
}

// DescribeStream asks for a stream's partitions and subscriptions. With
// Partition set, only that partition is described, by its leader (others
// answer NotLeader): consumer roles and unacked counts live there.
type DescribeStream struct {
	RequestID uint64 `msgpack:"r"`
	Stream    string `msgpack:"s"`
	Partition *int32 `msgpack:"p,omitempty"`
}

// DescribeStreamResult answers DescribeStream.
type DescribeStreamResult struct {
	RequestID uint64     `msgpack:"r"`
	Info      StreamInfo `msgpack:"i"`
}

// StreamInfo describes a stream.
type StreamInfo struct {
	Stream     string          `msgpack:"s" json:"stream"`
	Replicas   int32           `msgpack:"rf" json:"replicas"`
	Partitions []PartitionInfo `msgpack:"p" json:"partitions"`
	// Retention is the stream's policy.
	Retention RetentionPolicy `msgpack:"rp,omitempty" json:"retention"`
	// Local is a local stream's region; LeaderRegion where its
	// partitions should be led.
	Local        string `msgpack:"lo,omitempty" json:"local,omitempty"`
	LeaderRegion string `msgpack:"lr,omitempty" json:"leader_region,omitempty"`
}

// PartitionInfo describes one partition of a stream.
type PartitionInfo struct {
	Partition int32    `msgpack:"n" json:"partition"`
	Leader    string   `msgpack:"l" json:"leader"`
	Replicas  []string `msgpack:"r" json:"replicas"`
	// Regions are the replicas' regions, as Replicas.
	Regions []string `msgpack:"g,omitempty" json:"regions,omitempty"`
	// Members is the partition's Raft configuration as the answering
	// node's replica knows it, once committed: server ids, NODE or
	// NODE@INDEX for a replica placed by a move or renewed after damage
	// (empty where the node holds no replica).
	Members []string `msgpack:"mb,omitempty" json:"members,omitempty"`
	// StartOffset is the first offset the partition serves: where
	// retention has trimmed it to, the same on every replica.
	StartOffset uint64 `msgpack:"so" json:"start_offset"`
	NextOffset  uint64 `msgpack:"no" json:"next_offset"`
	// LogBytes is the size of the answering node's copy of the log.
	LogBytes int64 `msgpack:"lb,omitempty" json:"log_bytes"`
	// BacklogQuotaExceeded says the leader refuses sends: a
	// subscription's backlog is over the stream's quota.
	BacklogQuotaExceeded bool               `msgpack:"bqx,omitempty" json:"backlog_quota_exceeded,omitempty"`
	Subscriptions        []SubscriptionInfo `msgpack:"s" json:"subscriptions"`
}

// SubscriptionInfo describes a subscription of one partition.
type SubscriptionInfo struct {
	Name       string         `msgpack:"n" json:"name"`
	Mode       string         `msgpack:"m" json:"mode"`
	Backlog    uint64         `msgpack:"b" json:"backlog"`
	MarkDelete int64          `msgpack:"md" json:"mark_delete"`
	Consumers  []ConsumerInfo `msgpack:"c" json:"consumers"`
	// Blocked says the subscription holds too many unacked messages to
	// deliver more (SH-4).
	Blocked bool `msgpack:"bl,omitempty" json:"blocked"`
	// LookAhead counts key_shared messages read past a blocked key and not
	// delivered yet (KS-9).
	LookAhead int64 `msgpack:"la,omitempty" json:"look_ahead"`
	// DrainingKeys are key_shared keys waiting for their old consumer to
	// ack before moving to their new owner (KS-7); at most 100 are listed.
	DrainingKeys []string `msgpack:"dk,omitempty" json:"draining_keys,omitempty"`
}

// ConsumerInfo describes a consumer of a subscription.
type ConsumerInfo struct {
	Name    string `msgpack:"n" json:"name"`
	Role    string `msgpack:"r,omitempty" json:"role,omitempty"`
	Unacked int64  `msgpack:"u" json:"unacked"`
	Permits int64  `msgpack:"p" json:"permits"`
	// Blocked says the consumer holds too many unacked messages (SH-4).
	Blocked bool `msgpack:"bl,omitempty" json:"blocked"`
	// HashRanges are a sticky key_shared consumer's ranges.
	HashRanges []HashRange `msgpack:"hr,omitempty" json:"hash_ranges,omitempty"`
	// HashShare is the fraction of key hashes a key_shared consumer owns.
	HashShare float64 `msgpack:"hs,omitempty" json:"hash_share,omitempty"`
}

// Success answers a request that has no other result.
type Success struct {
	RequestID uint64 `msgpack:"r"`
}

// Error answers a request that failed (RequestID zero for a connection
// level error, sent before the connection is closed). It is also a Go
// error.
type Error struct {
	RequestID  uint64    `msgpack:"r,omitempty"`
	Code       ErrorCode `msgpack:"c"`
	Message    string    `msgpack:"m,omitempty"`
	LeaderHint string    `msgpack:"l,omitempty"` // client address of the leader, with CodeNotLeader
}

// ClusterStatus asks a node for the cluster's nodes and partitions as it
// sees them.
type ClusterStatus struct {
	RequestID uint64 `msgpack:"r"`
}

// RenewReplica is sent by a node to the metadata leader, not by clients:
// the node's copy of Partition, as member Member of its Raft group, is
// damaged and cannot be opened. The answer is Success once the metadata
// group has placed a new member on the node, which starts from an empty
// copy; NotLeader when the node asked is not the metadata leader.
type RenewReplica struct {
	RequestID uint64 `msgpack:"r"`
	Partition string `msgpack:"p"`
	Member    string `msgpack:"m"`
}

// ClusterStatusResult answers ClusterStatus.
type ClusterStatusResult struct {
	RequestID uint64      `msgpack:"r"`
	Status    ClusterInfo `msgpack:"s"`
}

// ClusterInfo is the cluster as one node sees it.
type ClusterInfo struct {
	// Node is the id of the node that answered.
	Node       string `msgpack:"n" json:"node"`
	MetaLeader string `msgpack:"ml" json:"meta_leader"`
	// MetaIndex is the last metadata entry the answering node's catalog
	// applied (a restarting node waits for its own to reach the
	// leader's before it acts on its catalog).
	MetaIndex uint64 `msgpack:"mi,omitempty" json:"meta_index,omitempty"`
	// FreeDisk is the free space of the answering node's data directory
	// at its last reading (once a second), MinFreeDisk its reserve
	// (--min-free-disk); both 0 when the node keeps no reserve.
	FreeDisk    int64             `msgpack:"fd,omitempty" json:"free_disk_bytes,omitempty"`
	MinFreeDisk int64             `msgpack:"mfd,omitempty" json:"min_free_disk_bytes,omitempty"`
	Nodes       []NodeStatus      `msgpack:"ns" json:"nodes"`
	Partitions  []PartitionStatus `msgpack:"ps" json:"partitions"`
}

// NodeStatus is one node of the cluster.
type NodeStatus struct {
	ID         string `msgpack:"id" json:"id"`
	State      string `msgpack:"st" json:"state"` // alive, suspect, dead, left
	Region     string `msgpack:"rg,omitempty" json:"region,omitempty"`
	ClientAddr string `msgpack:"c" json:"client_addr"`
	RaftAddr   string `msgpack:"ra" json:"raft_addr"`
}

// PartitionStatus is one partition: its leader as routing knows it and
// its replicas with how far each lags the leader, where the answering
// node can tell (it hosts the partition).
type PartitionStatus struct {
	Partition string          `msgpack:"p" json:"partition"`
	Leader    string          `msgpack:"l" json:"leader"`
	Term      uint64          `msgpack:"t" json:"term"`
	Replicas  []ReplicaStatus `msgpack:"r" json:"replicas"`
	// Asleep: the answering node's copy sleeps (its replicas closed until
	// asked for); Leader is then empty.
	Asleep bool `msgpack:"as,omitempty" json:"asleep,omitempty"`
}

// ReplicaStatus is one replica of a partition. Lag is the number of Raft
// entries it is behind the leader's last index, -1 when unknown.
type ReplicaStatus struct {
	Node string `msgpack:"n" json:"node"`
	Lag  int64  `msgpack:"lg" json:"lag"`
}

func (*ClusterStatus) Type() CommandType       { return TypeClusterStatus }
func (*ClusterStatusResult) Type() CommandType { return TypeClusterStatusResult }
func (*RenewReplica) Type() CommandType        { return TypeRenewReplica }
func (*SetRetention) Type() CommandType        { return TypeSetRetention }

func (*Connect) Type() CommandType                   { return TypeConnect }
func (*Connected) Type() CommandType                 { return TypeConnected }
func (*Ping) Type() CommandType                      { return TypePing }
func (*Pong) Type() CommandType                      { return TypePong }
func (*Lookup) Type() CommandType                    { return TypeLookup }
func (*LookupResult) Type() CommandType              { return TypeLookupResult }
func (*PartitionedMetadata) Type() CommandType       { return TypePartitionedMetadata }
func (*PartitionedMetadataResult) Type() CommandType { return TypePartitionedMetadataResult }
func (*CreateProducer) Type() CommandType            { return TypeCreateProducer }
func (*ProducerReady) Type() CommandType             { return TypeProducerReady }
func (*Send) Type() CommandType                      { return TypeSend }
func (*SendReceipt) Type() CommandType               { return TypeSendReceipt }
func (*SendError) Type() CommandType                 { return TypeSendError }
func (*Subscribe) Type() CommandType                 { return TypeSubscribe }
func (*SubscribeReady) Type() CommandType            { return TypeSubscribeReady }
func (*Flow) Type() CommandType                      { return TypeFlow }
func (*Message) Type() CommandType                   { return TypeMessage }
func (*Ack) Type() CommandType                       { return TypeAck }
func (*Nack) Type() CommandType                      { return TypeNack }
func (*RedeliverUnacked) Type() CommandType          { return TypeRedeliverUnacked }
func (*Seek) Type() CommandType                      { return TypeSeek }
func (*Unsubscribe) Type() CommandType               { return TypeUnsubscribe }
func (*CloseProducer) Type() CommandType             { return TypeCloseProducer }
func (*CloseConsumer) Type() CommandType             { return TypeCloseConsumer }
func (*ActiveConsumerChange) Type() CommandType      { return TypeActiveConsumerChange }
func (*CreateStream) Type() CommandType              { return TypeCreateStream }
func (*DeleteStream) Type() CommandType              { return TypeDeleteStream }
func (*ListStreams) Type() CommandType               { return TypeListStreams }
func (*ListStreamsResult) Type() CommandType         { return TypeListStreamsResult }
func (*DescribeStream) Type() CommandType            { return TypeDescribeStream }
func (*DescribeStreamResult) Type() CommandType      { return TypeDescribeStreamResult }
func (*Success) Type() CommandType                   { return TypeSuccess }
func (*Error) Type() CommandType                     { return TypeError }

// newCommand returns a zero command of type t, or nil for an unknown type.
func newCommand(t CommandType) Command {
	switch t {
	case TypeConnect:
		return new(Connect)
	case TypeConnected:
		return new(Connected)
	case TypePing:
		return new(Ping)
	case TypePong:
		return new(Pong)
	case TypeLookup:
		return new(Lookup)
	case TypeLookupResult:
		return new(LookupResult)
	case TypePartitionedMetadata:
		return new(PartitionedMetadata)
	case TypePartitionedMetadataResult:
		return new(PartitionedMetadataResult)
	case TypeCreateProducer:
		return new(CreateProducer)
	case TypeProducerReady:
		return new(ProducerReady)
	case TypeSend:
		return new(Send)
	case TypeSendReceipt:
		return new(SendReceipt)
	case TypeSendError:
		return new(SendError)
	case TypeSubscribe:
		return new(Subscribe)
	case TypeSubscribeReady:
		return new(SubscribeReady)
	case TypeFlow:
		return new(Flow)
	case TypeMessage:
		return new(Message)
	case TypeAck:
		return new(Ack)
	case TypeNack:
		return new(Nack)
	case TypeRedeliverUnacked:
		return new(RedeliverUnacked)
	case TypeSeek:
		return new(Seek)
	case TypeUnsubscribe:
		return new(Unsubscribe)
	case TypeCloseProducer:
		return new(CloseProducer)
	case TypeCloseConsumer:
		return new(CloseConsumer)
	case TypeActiveConsumerChange:
		return new(ActiveConsumerChange)
	case TypeCreateStream:
		return new(CreateStream)
	case TypeDeleteStream:
		return new(DeleteStream)
	case TypeListStreams:
		return new(ListStreams)
	case TypeListStreamsResult:
		return new(ListStreamsResult)
	case TypeDescribeStream:
		return new(DescribeStream)
	case TypeDescribeStreamResult:
		return new(DescribeStreamResult)
	case TypeSuccess:
		return new(Success)
	case TypeError:
		return new(Error)
	case TypeClusterStatus:
		return new(ClusterStatus)
	case TypeRenewReplica:
		return new(RenewReplica)
	case TypeSetRetention:
		return new(SetRetention)
	case TypeClusterStatusResult:
		return new(ClusterStatusResult)
	}
	return newTenancyCommand(t)
}

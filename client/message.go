package client

import (
	"fmt"
	"time"
)

// MessageID identifies a message: its partition's offset (MSG-1). Ids of
// one partition order by offset.
type MessageID struct {
	// Stream is the full stream name, without a partition suffix.
	Stream string
	// Partition is the partition's number (0 for an unpartitioned stream).
	Partition int
	Offset    uint64
}

// String returns STREAM:PARTITION:OFFSET.
func (id MessageID) String() string {
	return fmt.Sprintf("%s:%d:%d", id.Stream, id.Partition, id.Offset)
}

// ProducerMessage is a message to send.
type ProducerMessage struct {
	Payload []byte
	// Key routes the message to a partition and, on key_shared
	// subscriptions, to a consumer.
	Key string
	// OrderingKey, when set, is used instead of Key for both.
	OrderingKey []byte
	Properties  map[string]string
	// EventTime is the application's time of the message; zero means
	// unset.
	EventTime time.Time
}

// Message is a message received by a consumer or reader.
type Message struct {
	ID              MessageID
	Payload         []byte
	Key             string
	OrderingKey     []byte
	Properties      map[string]string
	EventTime       time.Time
	PublishTime     time.Time
	ProducerName    string
	SequenceID      uint64
	RedeliveryCount uint32
}

func timeFromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

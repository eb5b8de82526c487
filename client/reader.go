package client

import (
	"context"
	"errors"
	"time"
)

// ReaderOptions configures a Reader.
type ReaderOptions struct {
	// Stream is the full stream name.
	Stream string
	// StartMessageID, when set, is the first message read (inclusive) on
	// its partition; the other partitions start at StartPosition.
	StartMessageID *MessageID
	// StartPosition is where partitions without a StartMessageID start.
	// Default Latest.
	StartPosition InitialPosition
	// ReceiverQueueSize is as for consumers. Default 1000.
	ReceiverQueueSize int
	// Name is the reader's name. Default: generated.
	Name string
}

// readerStart is where a reader starts.
type readerStart struct {
	id *MessageID
}

// Reader reads a stream without a durable subscription (SUB-5): nothing is
// kept on the broker after it closes, and it acknowledges nothing. After a
// reconnect it resumes after the last message Next returned.
type Reader struct {
	cons *Consumer
}

// CreateReader starts a reader.
func (c *Client) CreateReader(ctx context.Context, opts ReaderOptions) (*Reader, error) {
	name := opts.Name
	if name == "" {
		name = randomName("reader")
	}
	if opts.StartMessageID != nil && opts.StartMessageID.Stream != opts.Stream {
		return nil, errors.New("client: the start message id is of another stream")
	}
	cons, err := c.subscribe(ctx, ConsumerOptions{
		Stream:                      opts.Stream,
		Subscription:                name,
		Name:                        name,
		SubscriptionInitialPosition: opts.StartPosition,
		ReceiverQueueSize:           opts.ReceiverQueueSize,
	}, &readerStart{id: opts.StartMessageID})
	if err != nil {
		return nil, err
	}
	return &Reader{cons: cons}, nil
}

// Next returns the next message, waiting until one arrives or ctx ends.
func (r *Reader) Next(ctx context.Context) (*Message, error) { return r.cons.Receive(ctx) }

// HasNext reports whether a message is waiting to be read now.
func (r *Reader) HasNext() bool {
	r.cons.mu.Lock()
	defer r.cons.mu.Unlock()
	return len(r.cons.queue) > 0
}

// SeekByTime moves every partition to the first message published at or
// after t.
func (r *Reader) SeekByTime(ctx context.Context, t time.Time) error { return r.cons.SeekByTime(ctx, t) }

// Close stops the reader.
func (r *Reader) Close() error { return r.cons.Close() }

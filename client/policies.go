package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fabriq-io/fabriq/transport"
)

// KeySharedMode is how a key_shared consumer is given key hashes.
type KeySharedMode int

// Key_shared modes; KeySharedAutoSplit is the default.
const (
	// KeySharedAutoSplit spreads hashes over the consumers by consistent
	// hashing of their names (KS-3).
	KeySharedAutoSplit KeySharedMode = iota
	// KeySharedSticky gives each consumer the hash ranges it declares
	// (KS-4).
	KeySharedSticky
)

// HashRange is an inclusive range of key hash slots, within 0..65535.
type HashRange struct {
	Start, End int
}

// KeySharedPolicy configures a key_shared consumer. Every consumer of a
// subscription must give the same Mode and AllowOutOfOrderDelivery.
type KeySharedPolicy struct {
	Mode KeySharedMode
	// Ranges are a sticky consumer's hash ranges.
	Ranges []HashRange
	// AllowOutOfOrderDelivery lets a key move to a new consumer before
	// the old one has acked its messages (KS-10).
	AllowOutOfOrderDelivery bool
}

// DLQPolicy sends a message that was delivered too often to a dead-letter
// stream and acknowledges it on the original (SH-7).
type DLQPolicy struct {
	// MaxDeliveries is how many deliveries a message gets; the next one
	// goes to the dead-letter stream instead. At least 1.
	MaxDeliveries uint32
	// Stream is the dead-letter stream; default STREAM-SUBSCRIPTION-DLQ
	// in the same fabric. It is created (one partition) if missing.
	Stream string
}

// ConsumerEventListener hears a failover consumer's role changes (FO-6).
// Calls come in order, from one goroutine of the consumer; they must not
// block for long.
type ConsumerEventListener interface {
	// BecameActive: this consumer is now the partition's master.
	BecameActive(c *Consumer, partition int)
	// BecameInactive: another consumer is the partition's master.
	BecameInactive(c *Consumer, partition int)
}

// Dead-letter message properties: where the message came from.
const (
	PropertyOriginMessageID = "ORIGIN_MESSAGE_ID"
	PropertyRealStream      = "REAL_STREAM"
)

// validateConsumerOptions refuses options that cannot work, before any
// round trip.
func validateConsumerOptions(o *ConsumerOptions) error {
	if o.Type < Exclusive || o.Type > KeyShared {
		return fmt.Errorf("client: unknown subscription type %d", o.Type)
	}
	if o.PriorityLevel < 0 {
		return fmt.Errorf("client: priority level must not be negative, not %d", o.PriorityLevel)
	}
	if p := o.KeySharedPolicy; p != nil {
		if o.Type != KeyShared {
			return errors.New("client: a key_shared policy needs Type KeyShared")
		}
		switch p.Mode {
		case KeySharedAutoSplit:
			if len(p.Ranges) > 0 {
				return errors.New("client: hash ranges are for sticky key_shared consumers")
			}
		case KeySharedSticky:
			if len(p.Ranges) == 0 {
				return errors.New("client: a sticky key_shared consumer needs hash ranges")
			}
			for _, r := range p.Ranges {
				if r.Start < 0 || r.End > 65535 || r.Start > r.End {
					return fmt.Errorf("client: hash range [%d, %d] is not within 0..65535", r.Start, r.End)
				}
			}
		default:
			return fmt.Errorf("client: unknown key_shared mode %d", p.Mode)
		}
	}
	if o.DLQ != nil && o.DLQ.MaxDeliveries < 1 {
		return errors.New("client: a dead-letter policy needs MaxDeliveries of at least 1")
	}
	if o.AckTimeout < 0 {
		return fmt.Errorf("client: ack timeout must not be negative, not %v", o.AckTimeout)
	}
	return nil
}

// keySharedWire is the policy as the broker takes it.
func keySharedWire(p *KeySharedPolicy) *transport.KeySharedPolicy {
	if p == nil {
		return nil
	}
	w := &transport.KeySharedPolicy{AllowOutOfOrder: p.AllowOutOfOrderDelivery}
	if p.Mode == KeySharedSticky {
		w.Mode = transport.Sticky
		for _, r := range p.Ranges {
			w.Ranges = append(w.Ranges, transport.HashRange{Start: int32(r.Start), End: int32(r.End)})
		}
	}
	return w
}

// event is a role change waiting for the listener.
type event struct {
	partition int
	active    bool
}

// events runs the listener's calls in order until the consumer closes.
func (cons *Consumer) events() {
	defer cons.bgWG.Done()
	for {
		cons.mu.Lock()
		evs := cons.pendingEvents
		cons.pendingEvents = nil
		cons.mu.Unlock()
		for _, e := range evs {
			if e.active {
				cons.opts.EventListener.BecameActive(cons, e.partition)
			} else {
				cons.opts.EventListener.BecameInactive(cons, e.partition)
			}
		}
		select {
		case <-cons.eventReady:
		case <-cons.done:
			return
		}
	}
}

// roleChanged queues a role change for the listener.
func (cons *Consumer) roleChanged(partition int, active bool) {
	if cons.opts.EventListener == nil {
		return
	}
	cons.mu.Lock()
	cons.pendingEvents = append(cons.pendingEvents, event{partition: partition, active: active})
	cons.mu.Unlock()
	select {
	case cons.eventReady <- struct{}{}:
	default:
	}
}

// track records a message handed to the app, for the ack timeout.
func (cons *Consumer) track(id MessageID) {
	if cons.opts.AckTimeout <= 0 {
		return
	}
	cons.mu.Lock()
	cons.unacked[id] = time.Now()
	cons.mu.Unlock()
}

// untrack forgets acknowledged or nacked messages: one id, or with
// cumulative every id of its partition up to it.
func (cons *Consumer) untrack(id MessageID, cumulative bool) {
	if cons.opts.AckTimeout <= 0 {
		return
	}
	cons.mu.Lock()
	defer cons.mu.Unlock()
	if !cumulative {
		delete(cons.unacked, id)
		return
	}
	maps.DeleteFunc(cons.unacked, func(o MessageID, _ time.Time) bool {
		return o.Partition == id.Partition && o.Offset <= id.Offset
	})
}

// ackTimeouts asks for the redelivery of messages that stayed unacked
// longer than AckTimeout (SH-6), until the consumer closes.
func (cons *Consumer) ackTimeouts() {
	defer cons.bgWG.Done()
	tick := time.NewTicker(max(cons.opts.AckTimeout/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-cons.done:
			return
		case now := <-tick.C:
			due := map[int][]uint64{}
			cons.mu.Lock()
			for id, at := range cons.unacked {
				if now.Sub(at) >= cons.opts.AckTimeout {
					due[id.Partition] = append(due[id.Partition], id.Offset)
					delete(cons.unacked, id)
				}
			}
			cons.mu.Unlock()
			for i, offs := range due {
				slices.Sort(offs)
				cons.parts[i].redeliver(offs)
			}
		}
	}
}

// deadLetterStream is the dead-letter stream's name.
func (cons *Consumer) deadLetterStream() string {
	if s := cons.opts.DLQ.Stream; s != "" {
		return s
	}
	return cons.stream.String() + "-" + cons.opts.Subscription + "-DLQ"
}

// deadLetter sends a message to the dead-letter stream, then acks it.
func (cons *Consumer) deadLetter(ctx context.Context, m *Message) error {
	p, err := cons.dlqProducer(ctx)
	if err != nil {
		return err
	}
	props := make(map[string]string, len(m.Properties)+2)
	maps.Copy(props, m.Properties)
	props[PropertyOriginMessageID] = m.ID.String()
	props[PropertyRealStream] = cons.stream.String()
	if _, err := p.Send(ctx, &ProducerMessage{Payload: m.Payload, Key: m.Key, OrderingKey: m.OrderingKey, Properties: props, EventTime: m.EventTime}); err != nil {
		return fmt.Errorf("client: send to the dead-letter stream: %w", err)
	}
	return cons.AckID(ctx, m.ID)
}

// dlqProducer returns the dead-letter producer, creating the stream and
// the producer on first use.
func (cons *Consumer) dlqProducer(ctx context.Context) (*Producer, error) {
	cons.dlqMu.Lock()
	defer cons.dlqMu.Unlock()
	if cons.closing.Load() {
		return nil, ErrClosed
	}
	if cons.dlq != nil {
		return cons.dlq, nil
	}
	stream := cons.deadLetterStream()
	p, err := cons.c.CreateProducer(ctx, ProducerOptions{Stream: stream, DisableBatching: true})
	if transport.CodeOf(err) == transport.CodeStreamNotFound {
		if err = cons.c.CreateStream(ctx, stream, 1, 0); err != nil && transport.CodeOf(err) != transport.CodeStreamExists {
			return nil, fmt.Errorf("client: create the dead-letter stream %s: %w", stream, err)
		}
		p, err = cons.c.CreateProducer(ctx, ProducerOptions{Stream: stream, DisableBatching: true})
	}
	if err != nil {
		return nil, fmt.Errorf("client: dead-letter producer for %s: %w", stream, err)
	}
	cons.dlq = p
	return p, nil
}

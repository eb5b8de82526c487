package client

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// CursorPosition says where ResetCursor moves a subscription's cursor:
// CursorAtEarliest (the zero value), CursorAtLatest, CursorAtTime or
// CursorAtOffset.
type CursorPosition struct {
	offset uint64
	time   *int64
	// one is the partition+1 of a position on one partition; 0: every
	// partition; -1: a partition below 0.
	one int
}

// String says where the position is: "earliest", "latest", "published
// at or after TIME" or "offset O of partition P".
func (p CursorPosition) String() string {
	switch {
	case p.time != nil:
		return "published at or after " + time.UnixMilli(*p.time).UTC().Format(time.RFC3339Nano)
	case p.one > 0:
		return fmt.Sprintf("offset %d of partition %d", p.offset, p.one-1)
	case p.one < 0:
		return fmt.Sprintf("offset %d of a partition below 0", p.offset)
	case p.offset == math.MaxUint64:
		return "latest"
	}
	return "earliest"
}

// CursorAtEarliest is, on every partition, the first message the partition keeps:
// the subscription reads again everything retention has kept.
func CursorAtEarliest() CursorPosition { return CursorPosition{} }

// CursorAtLatest is, on every partition, its end: the whole backlog is skipped.
func CursorAtLatest() CursorPosition { return CursorPosition{offset: math.MaxUint64} }

// CursorAtTime is, on every partition, the first message published at or after
// t (the end, where none was).
func CursorAtTime(t time.Time) CursorPosition {
	ms := t.UnixMilli()
	return CursorPosition{time: &ms}
}

// CursorAtOffset is offset on one partition alone (held within the
// partition's start and end); a partition below 0 is refused.
func CursorAtOffset(partition int, offset uint64) CursorPosition {
	if partition < 0 {
		return CursorPosition{offset: offset, one: -1}
	}
	return CursorPosition{offset: offset, one: partition + 1}
}

// ResetCursor moves a subscription's cursor on every partition of a
// stream (on one, for CursorAtOffset): the messages after the position are its
// backlog, those before it acknowledged, and every consumer attached
// restarts from there. A partition without the subscription is left
// alone; SubscriptionNotFound only when no partition has it.
func (c *Client) ResetCursor(ctx context.Context, stream, subscription string, to CursorPosition) error {
	if to.one < 0 {
		return &transport.Error{Code: transport.CodeInvalidArgument, Message: "a partition is 0 or more"}
	}
	return c.onPartitions(ctx, stream, to.one-1, func(partition string, id uint64) transport.Command {
		return &transport.ResetCursor{RequestID: id, Partition: partition, Subscription: subscription, Offset: to.offset, Time: to.time}
	})
}

// SkipBacklog acknowledges a subscription's whole backlog on every
// partition: ResetCursor to CursorAtLatest.
func (c *Client) SkipBacklog(ctx context.Context, stream, subscription string) error {
	return c.ResetCursor(ctx, stream, subscription, CursorAtLatest())
}

// DeleteSubscription deletes a subscription and its cursors on every
// partition of a stream. Without force it is refused (NotAllowed) while
// consumers are attached; with force they are disconnected, and one that
// subscribes again starts a new subscription at its initial position.
func (c *Client) DeleteSubscription(ctx context.Context, stream, subscription string, force bool) error {
	return c.onPartitions(ctx, stream, -1, func(partition string, id uint64) transport.Command {
		return &transport.DeleteSubscription{RequestID: id, Partition: partition, Subscription: subscription, Force: force}
	})
}

// ListSubscriptions returns the names of a stream's subscriptions, sorted.
func (c *Client) ListSubscriptions(ctx context.Context, stream string) ([]string, error) {
	info, err := c.DescribeStream(ctx, stream)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	names := []string{}
	for _, p := range info.Partitions {
		for _, s := range p.Subscriptions {
			if !seen[s.Name] {
				seen[s.Name] = true
				names = append(names, s.Name)
			}
		}
	}
	sort.Strings(names)
	return names, nil
}

// onPartitions sends a request to the leader of every partition of a
// stream, or of partition only (>= 0), one after the other. A partition
// that answers SubscriptionNotFound is skipped, unless none had the
// subscription; a retried request answered so had it (the first attempt
// did the work, its answer was lost).
func (c *Client) onPartitions(ctx context.Context, stream string, only int, req func(partition string, id uint64) transport.Command) error {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	info, err := c.DescribeStreamLocal(ctx, stream)
	if err != nil {
		return err
	}
	st, err := geofabric.ParseStream(info.Stream)
	if err != nil {
		return err
	}
	n := len(info.Partitions)
	if only >= n {
		return &transport.Error{Code: transport.CodeInvalidArgument, Message: fmt.Sprintf("stream %s has no partition %d (it has %d)", info.Stream, only, n)}
	}
	var notFound error
	found := false
	for i := range n {
		if only >= 0 && i != only {
			continue
		}
		name := st.Partition(i, n).String()
		attempts := 0
		err := c.retry(ctx, func(ctx context.Context) error {
			return c.atLeader(ctx, name, func(x *cnx) error {
				attempts++
				_, err := x.request(ctx, req(name, c.requestID()))
				return err
			})
		})
		switch {
		case transport.CodeOf(err) == transport.CodeSubscriptionNotFound && attempts == 1:
			notFound = err
		case transport.CodeOf(err) == transport.CodeSubscriptionNotFound:
			found = true
		case err != nil:
			if n > 1 {
				return fmt.Errorf("partition %d: %w", i, err)
			}
			return err
		default:
			found = true
		}
	}
	if !found && notFound != nil {
		return notFound
	}
	return nil
}

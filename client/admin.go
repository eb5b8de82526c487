package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// StreamInfo describes a stream: its partitions with their leaders,
// replicas, offsets and subscriptions.
type StreamInfo = transport.StreamInfo

// admin sends an admin request to any node, following NotLeader hints.
func (c *Client) admin(ctx context.Context, req func(id uint64) transport.Command) (transport.Command, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	var res transport.Command
	hint := ""
	err := c.retry(ctx, func(ctx context.Context) error {
		x, err := c.pick(ctx, &hint)
		if err != nil {
			return err
		}
		res, err = x.request(ctx, req(c.requestID()))
		hint = leaderHint(err)
		return err
	})
	return res, err
}

// leaderHint returns the address a NotLeader error points at.
func leaderHint(err error) string {
	var te *transport.Error
	if errors.As(err, &te) && te.Code == transport.CodeNotLeader {
		return te.LeaderHint
	}
	return ""
}

// RetentionPolicy is a stream's retention, backlog quota and message TTL
// (see transport.RetentionPolicy for the rules).
type RetentionPolicy = transport.RetentionPolicy

// Backlog quota policies: what a partition does when a subscription's
// backlog is over the quota.
const (
	// ProducerException refuses sends with a BacklogQuotaExceeded error.
	ProducerException = transport.ProducerException
	// ConsumerBacklogEviction acknowledges the oldest backlog on behalf of
	// the slowest subscriptions.
	ConsumerBacklogEviction = transport.ConsumerBacklogEviction
)

// StreamOption sets a property of a stream CreateStream creates.
type StreamOption func(*transport.CreateStream)

// WithRetention gives a stream a retention policy. Without it acknowledged
// messages are deleted, whole segments at a time, as soon as every
// subscription has acknowledged them, and the backlog has no quota.
func WithRetention(p RetentionPolicy) StreamOption {
	return func(c *transport.CreateStream) { c.Retention = &p }
}

// WithLocal makes a local stream: every replica in region, one of its
// fabric's. Without it a stream is global: its replicas spread over its
// fabric's regions.
func WithLocal(region string) StreamOption {
	return func(c *transport.CreateStream) { c.Local = region }
}

// WithLeaderRegion says where the stream's partitions should be led:
// leadership moves to a replica there, and repair keeps one there, so
// that producers of that region wait on one round trip between regions,
// not two.
func WithLeaderRegion(region string) StreamOption {
	return func(c *transport.CreateStream) { c.LeaderRegion = region }
}

// CreateStream creates a stream with partitions partitions, each
// replicated on replicas nodes; zero takes the fabric's default. It
// returns once every partition has a leader. A create the client retried
// (a lost connection, a node that gave up waiting for leaders) and found
// done, with the partitions, replicas and regions asked, succeeds: only
// a stream that was there before, or made otherwise, is StreamExists.
func (c *Client) CreateStream(ctx context.Context, stream string, partitions, replicas int, opts ...StreamOption) error {
	st, err := geofabric.ParseStream(stream)
	if err != nil {
		return err
	}
	var o transport.CreateStream
	for _, opt := range opts {
		opt(&o)
	}
	attempts := 0
	_, err = c.admin(ctx, func(id uint64) transport.Command {
		attempts++
		return &transport.CreateStream{RequestID: id, Stream: st.String(), Partitions: int32(partitions), Replicas: int32(replicas),
			Retention: o.Retention, Local: o.Local, LeaderRegion: o.LeaderRegion}
	})
	if attempts > 1 && transport.CodeOf(err) == transport.CodeStreamExists {
		// An earlier attempt may have created the stream before its
		// answer was lost (the connection dropped, or the node gave up
		// waiting for the new partitions' leaders): the stream found is
		// this call's own when it is the one asked for.
		if info, derr := c.DescribeStream(ctx, stream); derr == nil && len(info.Partitions) == partitions &&
			(replicas == 0 || int(info.Replicas) == replicas) && info.Local == o.Local && info.LeaderRegion == o.LeaderRegion {
			return nil
		}
	}
	return err
}

// SetRetention replaces a stream's retention policy. Partition leaders
// apply it at their next retention pass; a policy that keeps less deletes
// the segments it no longer keeps then.
func (c *Client) SetRetention(ctx context.Context, stream string, p RetentionPolicy) error {
	st, err := geofabric.ParseStream(stream)
	if err != nil {
		return err
	}
	_, err = c.admin(ctx, func(id uint64) transport.Command {
		return &transport.SetRetention{RequestID: id, Stream: st.String(), Retention: p}
	})
	return err
}

// DeleteStream deletes a stream and its data; without force it is refused
// while producers or consumers are attached.
func (c *Client) DeleteStream(ctx context.Context, stream string, force bool) error {
	st, err := geofabric.ParseStream(stream)
	if err != nil {
		return err
	}
	_, err = c.admin(ctx, func(id uint64) transport.Command {
		return &transport.DeleteStream{RequestID: id, Stream: st.String(), Force: force}
	})
	return err
}

// ListStreams lists the streams of a fabric, "TENANT/FABRIC".
func (c *Client) ListStreams(ctx context.Context, fabric string) ([]string, error) {
	if _, _, err := geofabric.ParseFabric(fabric); err != nil {
		return nil, err
	}
	res, err := c.admin(ctx, func(id uint64) transport.Command {
		return &transport.ListStreams{RequestID: id, Fabric: fabric}
	})
	if err != nil {
		return nil, err
	}
	r, ok := res.(*transport.ListStreamsResult)
	if !ok {
		return nil, fmt.Errorf("client: unexpected answer %T to list streams", res)
	}
	return r.Streams, nil
}

// DescribeStream describes a stream. Each partition is described by its
// leader, which alone knows the consumers' roles and unacked counts; a
// partition whose leader cannot be reached is described by the node that
// answered first, from its replica (roles there show as "away").
func (c *Client) DescribeStream(ctx context.Context, stream string) (StreamInfo, error) {
	info, err := c.DescribeStreamLocal(ctx, stream)
	if err != nil {
		return StreamInfo{}, err
	}
	st, _ := geofabric.ParseStream(info.Stream)
	for i := range info.Partitions {
		pi := &info.Partitions[i]
		if p, ok := c.describeAtLeader(ctx, st.Partition(int(pi.Partition), len(info.Partitions)).String(), st.String(), pi.Partition); ok {
			*pi = p
		}
	}
	return info, nil
}

// DescribeStreamLocal describes a stream as the first node that answers
// sees it from its own replicas: their offsets, and subscriptions with the
// roles that node knows (only a leader knows them). It tells whether that
// node's copies have caught up.
func (c *Client) DescribeStreamLocal(ctx context.Context, stream string) (StreamInfo, error) {
	st, err := geofabric.ParseStream(stream)
	if err != nil {
		return StreamInfo{}, err
	}
	res, err := c.admin(ctx, func(id uint64) transport.Command {
		return &transport.DescribeStream{RequestID: id, Stream: st.String()}
	})
	if err != nil {
		return StreamInfo{}, err
	}
	r, ok := res.(*transport.DescribeStreamResult)
	if !ok {
		return StreamInfo{}, fmt.Errorf("client: unexpected answer %T to describe stream", res)
	}
	return r.Info, nil
}

// describeLeaderWait bounds the wait for one partition's leader.
const describeLeaderWait = 5 * time.Second

// describeAtLeader asks a partition's leader to describe it.
func (c *Client) describeAtLeader(ctx context.Context, partition, stream string, index int32) (transport.PartitionInfo, bool) {
	ctx, cancel := context.WithTimeout(ctx, describeLeaderWait)
	defer cancel()
	x, err := c.lookup(ctx, partition)
	if err != nil {
		return transport.PartitionInfo{}, false
	}
	res, err := x.request(ctx, &transport.DescribeStream{RequestID: c.requestID(), Stream: stream, Partition: &index})
	if err != nil {
		return transport.PartitionInfo{}, false
	}
	r, ok := res.(*transport.DescribeStreamResult)
	if !ok || len(r.Info.Partitions) != 1 {
		return transport.PartitionInfo{}, false
	}
	return r.Info.Partitions[0], true
}

// ClusterInfo is the cluster as one node sees it.
type ClusterInfo = transport.ClusterInfo

// ClusterStatus asks a node for the cluster's nodes and partitions.
func (c *Client) ClusterStatus(ctx context.Context) (ClusterInfo, error) {
	res, err := c.admin(ctx, func(id uint64) transport.Command {
		return &transport.ClusterStatus{RequestID: id}
	})
	if err != nil {
		return ClusterInfo{}, err
	}
	r, ok := res.(*transport.ClusterStatusResult)
	if !ok {
		return ClusterInfo{}, fmt.Errorf("client: unexpected answer %T to cluster status", res)
	}
	return r.Status, nil
}

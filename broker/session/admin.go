package session

import (
	"context"
	"time"

	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// The admin requests of the client protocol: the node does the work
// (Node), the session answers.

func (s *Session) lookup(c *transport.Lookup) {
	var res *transport.LookupResult
	var err error
	if c.Wait {
		wait := requestTimeout
		if c.MaxWaitMillis > 0 {
			wait = min(wait, time.Duration(c.MaxWaitMillis)*time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(s.ctx, wait)
		res, err = s.node.LookupWait(ctx, c.Stream, c.Hints, c.Unreachable)
		cancel()
	} else {
		res, err = s.node.Lookup(c.Stream)
	}
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	res.RequestID = c.RequestID
	s.reply(res)
}

// lookupRetry is how often a waiting request asks again.
const lookupRetry = 50 * time.Millisecond

func (s *Session) partitionedMetadata(c *transport.PartitionedMetadata) {
	ctx, cancel := context.WithTimeout(s.ctx, requestTimeout)
	defer cancel()
	n, err := s.node.Partitions(ctx, c.Stream)
	if c.Wait {
		t := time.NewTicker(lookupRetry)
		defer t.Stop()
		for transport.CodeOf(err) == transport.CodeServiceNotReady {
			select {
			case <-ctx.Done():
			case <-t.C:
				n, err = s.node.Partitions(ctx, c.Stream)
				continue
			}
			break
		}
	}
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	s.reply(&transport.PartitionedMetadataResult{RequestID: c.RequestID, Partitions: int32(n)})
}

func (s *Session) createStream(c *transport.CreateStream) {
	ctx, cancel := context.WithTimeout(s.ctx, requestTimeout)
	defer cancel()
	s.answer(c.RequestID, s.node.CreateStream(ctx, c))
}

func (s *Session) deleteStream(c *transport.DeleteStream) {
	s.answer(c.RequestID, s.node.DeleteStream(s.ctx, c.Stream, c.Force))
}

func (s *Session) setRetention(c *transport.SetRetention) {
	s.answer(c.RequestID, s.node.SetRetention(context.Background(), c.Stream, c.Retention))
}

func (s *Session) listStreams(c *transport.ListStreams) {
	tenant, fabric, err := geofabric.ParseFabric(c.Fabric)
	if err != nil {
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidName, "%v", err))
		return
	}
	if !s.synced(s.ctx, c.RequestID) {
		return
	}
	// FabricNotFound, as Pulsar answers for a missing namespace.
	if _, err := s.node.DescribeFabric(tenant + "/" + fabric); err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	res := &transport.ListStreamsResult{RequestID: c.RequestID, Streams: []string{}}
	for _, name := range s.node.Streams() {
		st, err := geofabric.ParseStream(name)
		if err == nil && st.Tenant == tenant && st.Fabric == fabric {
			res.Streams = append(res.Streams, name)
		}
	}
	s.reply(res)
}

func (s *Session) describeStream(c *transport.DescribeStream) {
	// No catch-up here: a description is this node's view of its own
	// replicas, and clients and tools poll it; a stream missing from the
	// catalog is looked for again after one (Node.stream).
	info, err := s.node.DescribeStream(c.Stream, c.Partition)
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	s.reply(&transport.DescribeStreamResult{RequestID: c.RequestID, Info: info})
}

func (s *Session) clusterStatus(c *transport.ClusterStatus) {
	// A status read right after a change made through another node shows
	// that change: the catalog catches up first. When it cannot (the
	// metadata group has no leader) the node's own view is still the
	// answer, as an operator reads status most in an outage.
	_ = s.node.SyncCatalog(s.ctx)
	s.reply(&transport.ClusterStatusResult{RequestID: c.RequestID, Status: s.node.ClusterStatus()})
}

// renewReplica answers a node of an older version that asks over the
// client port for a new member in place of its damaged copy.
func (s *Session) renewReplica(c *transport.RenewReplica) {
	s.answer(c.RequestID, s.node.RenewReplica(c.Partition, c.Member, s.conn.RemoteAddr()))
}

// resetCursor moves a subscription's cursor for an operator.
func (s *Session) resetCursor(c *transport.ResetCursor) {
	p, err := s.node.LocalLeader(c.Partition)
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	offset := c.Offset
	if c.Time != nil {
		if offset, err = p.OffsetForTime(*c.Time); err != nil {
			s.replyErr(c.RequestID, err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(s.ctx, requestTimeout)
	defer cancel()
	s.answer(c.RequestID, p.ResetCursor(ctx, c.Subscription, offset))
}

// deleteSubscription deletes a subscription for an operator.
func (s *Session) deleteSubscription(c *transport.DeleteSubscription) {
	p, err := s.node.LocalLeader(c.Partition)
	if err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, requestTimeout)
	defer cancel()
	s.answer(c.RequestID, p.DeleteSubscription(ctx, c.Subscription, c.Force))
}

// answer answers a request with Success, or with its error.
func (s *Session) answer(requestID uint64, err error) {
	if err != nil {
		s.replyErr(requestID, err)
		return
	}
	s.reply(&transport.Success{RequestID: requestID})
}

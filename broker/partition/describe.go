package partition

import (
	"sort"

	"github.com/fabriq-io/fabriq/transport"
)

// Describe fills in what the partition knows of itself: its offsets (the
// replicated start, not this copy's own: every replica answers the same),
// its copy's log size, whether the leader refuses sends for the backlog
// quota, and its subscriptions.
func (p *Partition) Describe(pi *transport.PartitionInfo) {
	pi.StartOffset, pi.NextOffset = p.fsm.StartOffset(), p.fsm.NextOffset()
	pi.LogBytes = p.log.Info().Bytes
	if q := p.quota.Load(); q != nil && p.group.IsLeader() {
		pi.BacklogQuotaExceeded = q.exceeded
	}
	pi.Subscriptions = p.describeSubscriptions()
}

// describeSubscriptions reports each subscription's mode, backlog and
// consumers.
func (p *Partition) describeSubscriptions() []transport.SubscriptionInfo {
	next := p.fsm.NextOffset()
	subs := p.fsm.Subscriptions()
	out := make([]transport.SubscriptionInfo, 0, len(subs))
	for name, s := range subs {
		si := transport.SubscriptionInfo{
			Name:       name,
			Mode:       modeName(wireMode(s.Mode)),
			Backlog:    s.Cursor.Backlog(next),
			MarkDelete: int64(s.Cursor.Floor) - 1,
			Consumers:  []transport.ConsumerInfo{},
		}
		if d := p.dispatcherOf(name); d != nil && d.durable {
			d.describe(&si)
		} else {
			// Nobody attached here: members kept for their return (SUB-7).
			for _, m := range s.Members {
				si.Consumers = append(si.Consumers, transport.ConsumerInfo{Name: m.Name, Role: "away", HashRanges: wireRanges(m.Ranges)})
			}
		}
		out = append(out, si)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

package broker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabriq-io/fabriq/transport"
)

// The node's metrics, read from its state when scraped: nothing on the
// paths of sends and deliveries counts for them. Series of a partition's
// stream and subscriptions come from its leader alone, so that a sum over
// the cluster counts each once; each copy's size on disk from every node
// holding one.
var (
	descMessagesIn = prometheus.NewDesc("fabriq_partition_messages_in_total",
		"Messages appended to the partition since it was created (its next offset), reported by its leader.",
		[]string{"partition"}, nil)
	descLogBytes = prometheus.NewDesc("fabriq_partition_log_bytes",
		"Size on disk of this node's copy of the partition's log.",
		[]string{"partition"}, nil)
	descLeader = prometheus.NewDesc("fabriq_partition_leader",
		"1 when this node leads the partition, 0 when it holds a follower's copy.",
		[]string{"partition"}, nil)
	descTerm = prometheus.NewDesc("fabriq_partition_raft_term",
		"The Raft term of this node's copy of the partition: it moves with each election and leadership change.",
		[]string{"partition"}, nil)
	descBacklog = prometheus.NewDesc("fabriq_subscription_backlog",
		"Messages of the partition the subscription has not acknowledged, reported by the partition's leader.",
		[]string{"partition", "subscription"}, nil)
	descConsumers = prometheus.NewDesc("fabriq_subscription_consumers",
		"Consumers attached to the subscription on the partition's leader.",
		[]string{"partition", "subscription"}, nil)
	descPartitions = prometheus.NewDesc("fabriq_partitions",
		"Partitions this node holds a copy of, awake or asleep.", nil, nil)
	descAsleep = prometheus.NewDesc("fabriq_partitions_asleep",
		"Partitions whose copy on this node sleeps: closed until asked for.", nil, nil)
	descLeaderless = prometheus.NewDesc("fabriq_partitions_leaderless",
		"Partitions this node holds a copy of whose group knows no leader.", nil, nil)
	descConnections = prometheus.NewDesc("fabriq_client_connections",
		"Client connections open on this node.", nil, nil)
	descDiskFree = prometheus.NewDesc("fabriq_disk_free_bytes",
		"Free space of the data directory's file system at the last reading (0 with the reserve off).", nil, nil)
	descRefused = prometheus.NewDesc("fabriq_requests_refused_total",
		"Requests and connections this node refused, by reason: AuthenticationFailed, AuthorizationFailed, LimitExceeded, DiskFull, ProducerBlockedQuotaExceededError, TooLarge.",
		[]string{"reason"}, nil)
	descBytesIn = prometheus.NewDesc("fabriq_partition_bytes_in_total",
		"Payload bytes stored through this node while it led the partition (since its copy opened here).",
		[]string{"partition"}, nil)
	descMessagesOut = prometheus.NewDesc("fabriq_partition_messages_out_total",
		"Messages delivered to consumers by this node while it led the partition (since its copy opened here), redeliveries included.",
		[]string{"partition"}, nil)
	descBytesOut = prometheus.NewDesc("fabriq_partition_bytes_out_total",
		"Payload bytes delivered to consumers by this node while it led the partition (since its copy opened here).",
		[]string{"partition"}, nil)
	descElections = prometheus.NewDesc("fabriq_raft_elections_total",
		"Elections this node stood in, over its Raft groups: each time one of its members became a candidate.", nil, nil)
	descLeaderChanges = prometheus.NewDesc("fabriq_raft_leader_changes_total",
		"New leaders (or terms) the node's Raft group members learned of.", nil, nil)
	descThrottled = prometheus.NewDesc("fabriq_publish_throttled_seconds_total",
		"Time sends of the tenant waited on its publish rate limit on this node (--tenant-publish-rate).",
		[]string{"tenant"}, nil)
	descDiskReserve = prometheus.NewDesc("fabriq_disk_reserve_bytes",
		"Free space the node keeps in reserve (--min-free-disk): below it sends are refused.", nil, nil)
)

// Collector returns a prometheus.Collector of the node's metrics.
func (n *Node) Collector() prometheus.Collector { return nodeCollector{n} }

type nodeCollector struct{ n *Node }

// Describe implements prometheus.Collector.
func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMessagesIn, descLogBytes, descLeader, descTerm, descBacklog, descConsumers,
		descPartitions, descAsleep, descLeaderless, descConnections, descDiskFree, descDiskReserve, descRefused, descBytesIn, descMessagesOut, descBytesOut,
		descElections, descLeaderChanges, descThrottled} {
		ch <- d
	}
	c.n.commitLatency.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	if !n.serving.Load() {
		return
	}
	n.mu.Lock()
	parts := make([]*localPartition, 0, len(n.partitions))
	for _, lp := range n.partitions {
		parts = append(parts, lp)
	}
	conns := len(n.sessions)
	asleep := len(n.asleep)
	n.mu.Unlock()
	leaderless := 0
	for _, lp := range parts {
		name := lp.Name()
		leads := lp.group.IsLeader()
		if id, _ := lp.group.Leader(); id == "" {
			leaderless++
		}
		ch <- prometheus.MustNewConstMetric(descLogBytes, prometheus.GaugeValue, float64(lp.log.Info().Bytes), name)
		ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, boolValue(leads), name)
		ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(lp.group.Term()), name)
		if !leads {
			continue // a follower's copy: its size, no subscriptions to read
		}
		var pi transport.PartitionInfo
		lp.Describe(&pi)
		ch <- prometheus.MustNewConstMetric(descMessagesIn, prometheus.CounterValue, float64(pi.NextOffset), name)
		tr := lp.Traffic()
		ch <- prometheus.MustNewConstMetric(descBytesIn, prometheus.CounterValue, float64(tr.BytesIn.Load()), name)
		ch <- prometheus.MustNewConstMetric(descMessagesOut, prometheus.CounterValue, float64(tr.MessagesOut.Load()), name)
		ch <- prometheus.MustNewConstMetric(descBytesOut, prometheus.CounterValue, float64(tr.BytesOut.Load()), name)
		for _, s := range pi.Subscriptions {
			attached := 0
			for _, ci := range s.Consumers {
				if ci.Role != "away" {
					attached++
				}
			}
			ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(s.Backlog), name, s.Name)
			ch <- prometheus.MustNewConstMetric(descConsumers, prometheus.GaugeValue, float64(attached), name, s.Name)
		}
	}
	ch <- prometheus.MustNewConstMetric(descPartitions, prometheus.GaugeValue, float64(len(parts)+asleep))
	ch <- prometheus.MustNewConstMetric(descAsleep, prometheus.GaugeValue, float64(asleep))
	ch <- prometheus.MustNewConstMetric(descLeaderless, prometheus.GaugeValue, float64(leaderless))
	ch <- prometheus.MustNewConstMetric(descConnections, prometheus.GaugeValue, float64(conns))
	free, reserve := n.disk.reading()
	ch <- prometheus.MustNewConstMetric(descDiskFree, prometheus.GaugeValue, float64(free))
	ch <- prometheus.MustNewConstMetric(descDiskReserve, prometheus.GaugeValue, float64(reserve))
	ch <- prometheus.MustNewConstMetric(descElections, prometheus.CounterValue, float64(n.raftEvents.Elections.Load()))
	ch <- prometheus.MustNewConstMetric(descLeaderChanges, prometheus.CounterValue, float64(n.raftEvents.LeaderChanges.Load()))
	n.commitLatency.Collect(ch)
	for tenant, secs := range n.publish.throttledSeconds() {
		ch <- prometheus.MustNewConstMetric(descThrottled, prometheus.CounterValue, secs, tenant)
	}
	for code, count := range n.refused.snapshot() {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(count), code.String())
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

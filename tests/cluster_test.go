package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/transport"
)

// clusterNode is a node of a test cluster with fixed addresses, so that it
// can be restarted where it was.
type clusterNode struct {
	*node
	id     string
	dir    string
	gossip string
	args   []string
	// past holds the node's processes before its restarts.
	past []*node
}

// startCluster starts n nodes that bootstrap together by gossip, each
// with its data in a directory of its own under a temporary one.
func startCluster(t testing.TB, n int, extra ...string) []*clusterNode {
	t.Helper()
	root := t.TempDir()
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = filepath.Join(root, fmt.Sprint("n", i+1))
	}
	return startClusterIn(t, dirs, extra...)
}

// startClusterIn starts len(dirs) nodes that bootstrap together by
// gossip, node i with its data in dirs[i].
func startClusterIn(t testing.TB, dirs []string, extra ...string) []*clusterNode {
	t.Helper()
	return startClusterPer(t, dirs, nil, extra...)
}

// startClusterPer is startClusterIn with perNode(i) added to node i's
// arguments.
func startClusterPer(t testing.TB, dirs []string, perNode func(i int) []string, extra ...string) []*clusterNode {
	t.Helper()
	if s := secureOf(t); s != nil {
		extra = append(slices.Clone(extra), s.nodeArgs...)
	}
	n := len(dirs)
	gossip := make([]string, n)
	for i := range gossip {
		gossip[i] = freeAddr(t)
	}
	nodes := make([]*clusterNode, n)
	for i := range nodes {
		cn := &clusterNode{id: fmt.Sprintf("n%d", i+1), dir: dirs[i], gossip: gossip[i]}
		cn.args = []string{
			"--client-addr", freeAddr(t), "--raft-addr", freeAddr(t), "--gossip-addr", gossip[i],
			"--bootstrap-expect", fmt.Sprint(n), "--join", gossip[(i+1)%n],
		}
		cn.args = append(cn.args, extra...)
		if perNode != nil {
			cn.args = append(cn.args, perNode(i)...)
		}
		cn.node = launch(t, cn.id, cn.dir, cn.args...)
		nodes[i] = cn
	}
	for _, cn := range nodes {
		cn.waitReady()
	}
	// Before every node's own cleanup, which prints its last lines.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logs := map[string][]string{}
		for _, cn := range nodes {
			for _, n := range append(slices.Clone(cn.past), cn.node) {
				logs[cn.id] = append(logs[cn.id], n.logs.String())
			}
		}
		t.Logf("the cluster's logs in short:\n%s", digest(logs))
	})
	return nodes
}

// restart starts a stopped node again with its data and addresses.
func (cn *clusterNode) restart(t testing.TB) {
	t.Helper()
	cn.past = append(cn.past, cn.node)
	cn.node = startNode(t, cn.id, cn.dir, cn.args...)
}

func byID(nodes []*clusterNode, id string) *clusterNode {
	for _, n := range nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// streamAndProducer creates stream with one partition on 3 replicas and
// returns a producer on it.
func streamAndProducer(ctx context.Context, t testing.TB, c *client.Client, stream string, sendTimeout time.Duration, opts ...client.StreamOption) *client.Producer {
	t.Helper()
	if err := createStream(ctx, c, stream, 1, 3, opts...); err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, SendTimeout: sendTimeout})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// leaderOf returns a partition's leader as the cluster reports it.
func leaderOf(ctx context.Context, t testing.TB, c *client.Client, partition string) string {
	t.Helper()
	for {
		st, err := c.ClusterStatus(ctx)
		if err == nil {
			for _, p := range st.Partitions {
				if p.Partition == partition && p.Leader != "" {
					return p.Leader
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no leader for %s: %v", partition, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// produceAll sends count messages asynchronously and returns the
// acknowledged ids by payload; hook runs once, after half were queued.
func produceAll(ctx context.Context, t *testing.T, p *client.Producer, count int, hook func()) (map[string]client.MessageID, []error) {
	t.Helper()
	return produce(ctx, p, count, 0, "m", hook)
}

// produce sends count messages, one every interval (0: as fast as the
// producer takes them), keyed in 101 keys, without waiting for receipts;
// it returns the acknowledged ones by payload and the failures.
func produce(ctx context.Context, p *client.Producer, count int, interval time.Duration, prefix string, hook func()) (map[string]client.MessageID, []error) {
	var mu sync.Mutex
	acked := map[string]client.MessageID{}
	var failed []error
	var wg sync.WaitGroup
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for i := range count {
		if tick != nil {
			<-tick
		}
		if i == count/2 && hook != nil {
			hook()
		}
		wg.Add(1)
		p.SendAsync(ctx, &client.ProducerMessage{Key: fmt.Sprint("k", i%101), Payload: []byte(fmt.Sprint(prefix, i))}, func(id client.MessageID, m *client.ProducerMessage, err error) {
			mu.Lock()
			if err != nil {
				failed = append(failed, err)
			} else {
				acked[string(m.Payload)] = id
			}
			mu.Unlock()
			wg.Done()
		})
	}
	wg.Wait()
	return acked, failed
}

// readAll reads a subscription from the earliest message until every
// acknowledged message came back, checking per-partition offset order.
func readAll(ctx context.Context, t *testing.T, c *client.Client, stream string, acked map[string]client.MessageID) {
	t.Helper()
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "check", SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	last := map[int]uint64{}
	delivered := map[string]client.MessageID{}
	seen := 0 // acknowledged messages delivered
	ackErrs := 0
	for seen < len(acked) {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of %d acknowledged messages: %v", seen, len(acked), err)
		}
		payload := string(m.Payload)
		if id, ok := delivered[payload]; ok {
			// A redelivery: an ack lost with a leader change (leaders
			// even out while this reads) brings the message back, at
			// the same offset.
			if id != m.ID {
				t.Fatalf("%s delivered at %v, then again at %v", payload, id, m.ID)
			}
		} else {
			if prev, ok := last[m.ID.Partition]; ok && m.ID.Offset <= prev {
				t.Fatalf("partition %d: offset %d after %d", m.ID.Partition, m.ID.Offset, prev)
			}
			last[m.ID.Partition] = m.ID.Offset
			delivered[payload] = m.ID
			if id, ok := acked[payload]; ok {
				if id != m.ID {
					t.Fatalf("%s read at %v, acknowledged at %v", payload, m.ID, id)
				}
				seen++
			}
		}
		// An ack can fail while the consumer follows a leader change;
		// the message then comes back, which the check above allows.
		if err := cons.Ack(ctx, m); err != nil {
			if ackErrs == 0 {
				t.Logf("ack of %v: %v", m.ID, err)
			}
			ackErrs++
		}
	}
	if ackErrs > 0 {
		t.Logf("%d acks failed and were redelivered or left", ackErrs)
	}
}

// aFollower returns a node that does not lead the stream's (first)
// partition.
func aFollower(ctx context.Context, t *testing.T, c *client.Client, nodes []*clusterNode, stream string) *clusterNode {
	t.Helper()
	leader := leaderOf(ctx, t, c, stream)
	return nodes[slices.IndexFunc(nodes, func(n *clusterNode) bool { return n.id != leader })]
}

// waitIdentical waits until every node holds the same offsets for every
// partition of the stream.
func waitIdentical(ctx context.Context, t testing.TB, nodes []*clusterNode, stream string) {
	t.Helper()
	for {
		var views []string
		for _, n := range nodes {
			c, err := client.New(client.Options{URL: n.url(), OperationTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			info, err := c.DescribeStreamLocal(ctx, stream)
			c.Close()
			if err != nil {
				views = append(views, err.Error())
				continue
			}
			v := ""
			for _, p := range info.Partitions {
				v += fmt.Sprintf("%d:%d..%d ", p.Partition, p.StartOffset, p.NextOffset)
			}
			views = append(views, v)
		}
		same := true
		for _, v := range views[1:] {
			same = same && v == views[0]
		}
		if same {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("replicas differ: %q", views)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// 3 nodes, a 3-replica stream with 4 partitions: 20,000 acknowledged
// messages while the leader of a partition is killed; all come back in
// offset order, and the killed node, restarted, catches up.
func TestClusterKillLeader(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 4*time.Minute)
	const stream = "persistent://acme/prod/replicated"
	admin := newClient(t, nodes[0].url())
	if err := createStream(ctx, admin, stream, 4, 3); err != nil {
		t.Fatal(err)
	}
	victimID := leaderOf(ctx, t, admin, stream+"-partition-0")
	victim := byID(nodes, victimID)
	// The producing client knows one node, not the victim: it reaches
	// the leaders of the other partitions through it.
	var entry *clusterNode
	for _, n := range nodes {
		if n != victim {
			entry = n
			break
		}
	}
	c := newClient(t, entry.url())
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Time{}
	acked, failed := produceAll(ctx, t, p, 20_000, func() {
		victim.kill()
		killed = time.Now()
	})
	if len(failed) > 0 {
		t.Fatalf("%d sends failed, first: %v", len(failed), failed[0])
	}
	t.Logf("20,000 messages acknowledged; leader %s of partition 0 killed at %v", victimID, killed.Format(time.TimeOnly))
	readAll(ctx, t, c, stream, acked)
	victim.restart(t)
	waitIdentical(ctx, t, nodes, stream)
}

// Rolling restart of every node under a steady producer: no send fails and
// no message is lost.
func TestClusterRollingRestart(t *testing.T) {
	t.Parallel() // mostly waiting on processes: see TestMain
	nodes := startCluster(t, 3)
	ctx := testContext(t, 4*time.Minute)
	const stream = "persistent://acme/prod/rolling"
	url := "fabriq://" + nodes[0].addr + "," + nodes[1].addr + "," + nodes[2].addr
	c := newClient(t, url)
	if err := createStream(ctx, c, stream, 3, 3); err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var acked map[string]client.MessageID
	var failed []error
	go func() {
		defer close(done)
		acked, failed = produce(ctx, p, 6000, 2*time.Millisecond, "r", nil)
	}()
	for _, n := range nodes {
		if err := n.stop(); err != nil {
			t.Fatal(err)
		}
		n.restart(t)
	}
	<-done
	if len(failed) > 0 {
		t.Fatalf("%d sends failed during the rolling restart, first: %v", len(failed), failed[0])
	}
	readAll(ctx, t, c, stream, acked)
}

// 5 nodes: two killed at once; partitions that keep a live majority keep
// serving, and after --replace-dead-after every partition is back to its
// full replica count on live nodes.
func TestClusterReplacesDeadNodes(t *testing.T) {
	t.Parallel() // mostly waiting on failure detection and restarts: see TestMain
	nodes := startCluster(t, 5, "--replace-dead-after", "3s")
	ctx := testContext(t, 4*time.Minute)
	const stream = "persistent://acme/prod/repair"
	url := ""
	for i, n := range nodes {
		if i > 0 {
			url += ","
		}
		url += n.addr
	}
	c := newClient(t, "fabriq://"+url)
	if err := createStream(ctx, c, stream, 2, 3); err != nil {
		t.Fatal(err)
	}
	st, err := c.ClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	placement := map[string][]string{}
	for _, p := range st.Partitions {
		for _, r := range p.Replicas {
			placement[p.Partition] = append(placement[p.Partition], r.Node)
		}
	}
	if len(placement) != 2 {
		t.Fatalf("the status read after the create shows partitions %v, want both", placement)
	}
	// Two victims that never hold a majority of one partition.
	var victims []*clusterNode
	for i := 0; i < len(nodes) && victims == nil; i++ {
		for j := i + 1; j < len(nodes) && victims == nil; j++ {
			ok := true
			for _, reps := range placement {
				lost := 0
				for _, r := range reps {
					if r == nodes[i].id || r == nodes[j].id {
						lost++
					}
				}
				ok = ok && lost < 2
			}
			if ok {
				victims = []*clusterNode{nodes[i], nodes[j]}
			}
		}
	}
	if victims == nil {
		t.Fatalf("no pair of nodes spares every majority in %v", placement)
	}
	victims[0].kill()
	victims[1].kill()
	dead := map[string]bool{victims[0].id: true, victims[1].id: true}
	t.Logf("killed %s and %s; placement was %v", victims[0].id, victims[1].id, placement)

	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	acked, failed := produceAll(ctx, t, p, 2000, nil)
	if len(failed) > 0 {
		t.Fatalf("%d sends failed with a live majority in every partition, first: %v", len(failed), failed[0])
	}
	// Every partition regains three replicas, none on a dead node.
	for {
		st, err := c.ClusterStatus(ctx)
		done := err == nil && len(st.Partitions) == 2
		if done {
			for _, p := range st.Partitions {
				if len(p.Replicas) != 3 || p.Leader == "" {
					done = false
				}
				for _, r := range p.Replicas {
					if dead[r.Node] {
						done = false
					}
				}
			}
		}
		if done {
			t.Logf("replicas after repair: %+v", st.Partitions)
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("replicas not repaired: %+v, %v", st, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
	var live []*clusterNode
	for _, n := range nodes {
		if !dead[n.id] {
			live = append(live, n)
		}
	}
	waitIdentical(ctx, t, live, stream)
	readAll(ctx, t, c, stream, acked)
}

// Leaders even out: with six partitions on three nodes each node ends up
// leading two.
func TestClusterBalancesLeaders(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	c := newClient(t, nodes[0].url())
	const stream = "persistent://acme/prod/balance"
	if err := createStream(ctx, c, stream, 6, 3); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := c.ClusterStatus(ctx)
		count := map[string]int{}
		if err == nil {
			for _, p := range st.Partitions {
				count[p.Leader]++
			}
		}
		if count["n1"] == 2 && count["n2"] == 2 && count["n3"] == 2 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("leaders per node %v, want two each (%v)", count, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// The leader balancing hands over idle partitions before busy ones: a
// move interrupts a busy partition's sends, an idle one's costs nothing.
// A node stopped and started again leads nothing; the other two, each
// over its share, give it leaderships of idle partitions only, while the
// busy stream's producer stays attached to its leaders.
func TestClusterBalancingMovesIdlePartitionsFirst(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	c := newClient(t, nodes[0].url())
	// The busy stream's name sorts before the idle one's: moved in name
	// order, its partitions would go first.
	const busy, idle = "persistent://acme/prod/a-busy", "persistent://acme/prod/b-idle"
	if err := createStream(ctx, c, busy, 3, 3); err != nil {
		t.Fatal(err)
	}
	if err := createStream(ctx, c, idle, 12, 3); err != nil {
		t.Fatal(err)
	}
	leaders := func(want func(map[string]int) bool, what string) map[string]string {
		t.Helper()
		for {
			st, err := c.ClusterStatus(ctx)
			count := map[string]int{}
			byPartition := map[string]string{}
			if err == nil {
				for _, p := range st.Partitions {
					count[p.Leader]++
					byPartition[p.Partition] = p.Leader
				}
				if len(byPartition) == 15 && want(count) {
					return byPartition
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: leaders per node %v (%v)", what, count, err)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	stopped := nodes[2]
	if err := stopped.stop(); err != nil {
		t.Fatal(err)
	}
	leaders(func(n map[string]int) bool { return n["n1"]+n["n2"] == 15 }, "every partition led by n1 and n2")
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: busy, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, failed := produceAll(ctx, t, p, 30, nil); len(failed) > 0 {
		t.Fatal(failed[0])
	}
	before := leaders(func(n map[string]int) bool { return n["n1"]+n["n2"] == 15 }, "the busy stream attached")
	stopped.restart(t)
	after := leaders(func(n map[string]int) bool { return n["n1"] == 5 && n["n2"] == 5 && n["n3"] == 5 }, "balanced")
	for part, l := range before {
		if strings.HasPrefix(part, busy) && after[part] != l {
			t.Errorf("busy partition %s moved from %s to %s, with idle partitions to move", part, l, after[part])
		}
	}
	if _, failed := produceAll(ctx, t, p, 30, nil); len(failed) > 0 {
		t.Fatal(failed[0])
	}
}

// A node restarted with its data but at new addresses rejoins under its
// identity: the others learn its new addresses, its replicas follow, and
// no stale entry is left.
func TestClusterNodeMovesAddress(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	const stream = "persistent://acme/prod/moved"
	c := newClient(t, nodes[0].url())
	if err := createStream(ctx, c, stream, 3, 3); err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, failed := produceAll(ctx, t, p, 300, nil); len(failed) > 0 {
		t.Fatal(failed[0])
	}
	moved := nodes[1]
	if err := moved.stop(); err != nil {
		t.Fatal(err)
	}
	newClientAddr := freeAddr(t)
	moved.args = []string{
		"--client-addr", newClientAddr, "--raft-addr", freeAddr(t), "--gossip-addr", freeAddr(t),
		"--join", nodes[0].gossip,
	}
	moved.restart(t)
	// The cluster sees it alive at its new address, and only there.
	for {
		st, err := c.ClusterStatus(ctx)
		ok := err == nil && len(st.Nodes) == 3
		if ok {
			for _, n := range st.Nodes {
				if n.ID == moved.id && (n.ClientAddr != newClientAddr || n.State != "alive") {
					ok = false
				}
			}
		}
		if ok {
			t.Logf("after the move: %+v", st.Nodes)
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the moved node is not known at its new address: %+v %v", st, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if _, failed := produceAll(ctx, t, p, 300, nil); len(failed) > 0 {
		t.Fatal(failed[0])
	}
	// Its replicas caught up at the new address.
	waitIdentical(ctx, t, nodes, stream)
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
}

// A replica moved off a dead node and later given back to that node,
// alive again, joins its partition's group as a new member: it starts from
// an empty copy and catches up, its old copy (with a Raft configuration
// the group has left behind) is never opened again and goes once the
// group has removed the old member, and no acknowledged message is lost.
func TestClusterReplicaGivenBack(t *testing.T) {
	t.Parallel() // mostly waiting on failure detection and restarts: see TestMain
	nodes := startCluster(t, 4, "--replace-dead-after", "2s")
	ctx := testContext(t, 4*time.Minute)
	const stream = "persistent://acme/prod/back"
	c := newClient(t, clusterURL(nodes))
	if err := createStream(ctx, c, stream, 1, 3); err != nil {
		t.Fatal(err)
	}
	replicas := func() []string {
		st, err := c.ClusterStatus(ctx)
		if err != nil || len(st.Partitions) != 1 || st.Partitions[0].Leader == "" {
			return nil
		}
		var ids []string
		for _, r := range st.Partitions[0].Replicas {
			ids = append(ids, r.Node)
		}
		return ids
	}
	// waitPlaced waits until the partition's replicas are on want (in any
	// order) with a leader among them.
	waitPlaced := func(want []string) {
		t.Helper()
		for {
			got := slices.Clone(replicas())
			slices.Sort(got)
			w := slices.Sorted(slices.Values(want))
			if slices.Equal(got, w) {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("replicas %v, want %v", got, w)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	var placed []string
	for placed == nil {
		placed = replicas()
	}
	var spare *clusterNode
	for _, n := range nodes {
		if !slices.Contains(placed, n.id) {
			spare = n
		}
	}
	first := byID(nodes, placed[2])
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]client.MessageID{}
	send := func(prefix string) {
		t.Helper()
		got, failed := produce(ctx, p, 500, 0, prefix, nil)
		if len(failed) > 0 {
			t.Fatalf("%d sends failed, first: %v", len(failed), failed[0])
		}
		maps.Copy(acked, got)
	}
	send("a")
	// The first node dies; its replica moves to the spare.
	first.kill()
	waitPlaced([]string{placed[0], placed[1], spare.id})
	send("b")
	// It comes back; the spare dies and the replica goes back to it, the
	// only live node without one.
	first.restart(t)
	spare.kill()
	waitPlaced(placed)
	send("c")
	live := []*clusterNode{byID(nodes, placed[0]), byID(nodes, placed[1]), first}
	waitIdentical(ctx, t, live, stream)
	readAll(ctx, t, c, stream, acked)
	// Its copy belongs to the new member; the old one goes.
	root := filepath.Join(first.dir, "partitions", "acme", "prod")
	for {
		dirs, _ := filepath.Glob(filepath.Join(root, "*"))
		owner, _ := os.ReadFile(filepath.Join(root, "back", "replica"))
		if len(dirs) == 1 && strings.HasPrefix(string(owner), first.id+"@") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("copies on %s: %v, the current one belongs to %q", first.id, dirs, owner)
		case <-time.After(200 * time.Millisecond):
		}
	}
	// The spare, back, holds a copy of a member the group has removed:
	// it goes too.
	spare.restart(t)
	spareCopy := filepath.Join(spare.dir, "partitions", "acme", "prod", "back")
	for {
		if _, err := os.Stat(spareCopy); errors.Is(err, os.ErrNotExist) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s still holds %s", spare.id, spareCopy)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// A node whose copy of a partition was damaged while it was down (bytes
// flipped in its log below what it had synced) does not serve it: it
// asks for a new member, starts from an empty copy, catches up from the
// others, and nothing acknowledged is lost; the damaged copy goes.
func TestClusterRepairsDamagedCopy(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	const stream = "persistent://acme/prod/damaged"
	c := newClient(t, clusterURL(nodes))
	p := streamAndProducer(ctx, t, c, stream, time.Minute)
	acked, failed := produce(ctx, p, 2000, 0, "a", nil)
	if len(failed) > 0 {
		t.Fatalf("%d sends failed, first: %v", len(failed), failed[0])
	}
	victim := aFollower(ctx, t, c, nodes, stream)
	waitIdentical(ctx, t, nodes, stream)
	if err := victim.stop(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(victim.dir, "partitions", "acme", "prod", "damaged")
	segs, _ := filepath.Glob(filepath.Join(dir, "log", "*.log"))
	if len(segs) == 0 {
		t.Fatalf("no log segment in %s", dir)
	}
	seg := segs[len(segs)-1]
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	if _, err := f.WriteAt([]byte{0xde, 0xad, 0xbe, 0xef}, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Logf("flipped 4 bytes at %d of %s (%d bytes) on %s", fi.Size()/2, filepath.Base(seg), fi.Size(), victim.id)
	victim.restart(t)
	more, failed := produce(ctx, p, 500, 0, "b", nil)
	if len(failed) > 0 {
		t.Fatalf("%d sends failed, first: %v", len(failed), failed[0])
	}
	maps.Copy(acked, more)
	waitIdentical(ctx, t, nodes, stream)
	for {
		dirs, _ := filepath.Glob(dir + "*")
		owner, _ := os.ReadFile(filepath.Join(dir, "replica"))
		if len(dirs) == 1 && strings.HasPrefix(string(owner), victim.id+"@") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("copies on %s: %v, the current one belongs to %q", victim.id, dirs, owner)
		case <-time.After(200 * time.Millisecond):
		}
	}
	readAll(ctx, t, c, stream, acked)
}

// A copy whose sealed segment is damaged on disk opens as usual (sealed
// segments are not scanned at open); the first read of the damaged part,
// once it leads, fails its checks: the copy stops serving (consumers move
// to the new leader and get every message intact), is marked damaged and
// renewed with an empty copy that catches up from the others.
func TestClusterRenewsCopyDamagedInSealedSegment(t *testing.T) {
	nodes := startCluster(t, 3, "--segment-bytes", "64KiB")
	ctx := testContext(t, 4*time.Minute)
	const stream = "persistent://acme/prod/sealed"
	c := newClient(t, clusterURL(nodes))
	p := streamAndProducer(ctx, t, c, stream, time.Minute, client.WithRetention(client.RetentionPolicy{RetentionTimeMs: -1, RetentionBytes: -1}))
	acked, failed := produce(ctx, p, 6000, 0, "a", nil)
	if len(failed) > 0 {
		t.Fatalf("%d sends failed, first: %v", len(failed), failed[0])
	}
	waitIdentical(ctx, t, nodes, stream)
	victim := aFollower(ctx, t, c, nodes, stream)
	if err := victim.stop(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(victim.dir, "partitions", "acme", "prod", "sealed")
	segs, _ := filepath.Glob(filepath.Join(dir, "log", "*.log"))
	if len(segs) < 3 {
		t.Fatalf("want sealed segments in %s, have %v", dir, segs)
	}
	f, err := os.OpenFile(segs[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	if _, err := f.WriteAt([]byte{0xde, 0xad, 0xbe, 0xef}, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Logf("overwrote 4 bytes at %d of sealed segment %s (%d bytes) on %s", fi.Size()/2, filepath.Base(segs[0]), fi.Size(), victim.id)
	victim.restart(t)
	// Leadership goes round (a node stopped hands it over) until the
	// damaged copy leads: consumers read from the leader.
	for leader := leaderOf(ctx, t, c, stream); leader != victim.id; leader = leaderOf(ctx, t, c, stream) {
		l := byID(nodes, leader)
		if err := l.stop(); err != nil {
			t.Fatal(err)
		}
		l.restart(t)
		if ctx.Err() != nil {
			t.Fatalf("%s never led", victim.id)
		}
	}
	readAll(ctx, t, c, stream, acked)
	if !strings.Contains(victim.logs.String(), "partition copy is damaged: a read failed its checks") {
		t.Fatalf("%s did not report its damaged copy", victim.id)
	}
	for {
		owner, _ := os.ReadFile(filepath.Join(dir, "replica"))
		_, marked := os.Stat(filepath.Join(dir, "damaged"))
		if strings.HasPrefix(string(owner), victim.id+"@") && marked != nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the damaged copy on %s was not renewed: it belongs to %q", victim.id, owner)
		case <-time.After(200 * time.Millisecond):
		}
	}
	waitIdentical(ctx, t, nodes, stream)
}

// A node whose Raft log (raft.db) was damaged while it was down, in an
// entry its partition log no longer holds (the log's torn tail, cut at
// open), would replay the damaged entry into its log: instead the copy
// refuses to open, asks for a new member, starts from an empty copy and
// catches up; every replica ends byte-identical. Without entry checksums
// the node appended the damaged message and its copy differed.
func TestClusterRenewsCopyWithDamagedRaftLog(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	const stream = "persistent://acme/prod/raftdb"
	c := newClient(t, clusterURL(nodes))
	p := streamAndProducer(ctx, t, c, stream, time.Minute)
	defer p.Close()
	acked, send := ackedSends(ctx, t, p)
	send("a", 200)
	waitIdentical(ctx, t, nodes, stream)
	victim := aFollower(ctx, t, c, nodes, stream)
	// Killed, not stopped: its log's tail is not synced (Raft's log is),
	// so the cut below is a torn tail that the log drops at open.
	victim.kill()
	dir := filepath.Join(victim.dir, "partitions", "acme", "prod", "raftdb")
	segs, _ := filepath.Glob(filepath.Join(dir, "log", "*.log"))
	if len(segs) == 0 {
		t.Fatalf("no log segment in %s", dir)
	}
	fi, err := os.Stat(segs[len(segs)-1])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(segs[len(segs)-1], fi.Size()-1); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "raft", "raft.db")
	b, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	last := []byte("a-000199-")
	flipped := 0
	for i := bytes.Index(b, last); i >= 0; i = bytes.Index(b, last) {
		b[i+len(last)-1] ^= 0x01
		flipped++
	}
	if flipped == 0 {
		t.Fatalf("%q not in %s", last, db)
	}
	if err := os.WriteFile(db, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("on %s: cut the log's last byte, flipped a bit in %d copies of the last message in raft.db", victim.id, flipped)
	victim.restart(t)
	send("b", 100)
	for {
		owner, _ := os.ReadFile(filepath.Join(dir, "replica"))
		if strings.HasPrefix(string(owner), victim.id+"@") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the copy on %s with a damaged Raft log was not renewed: it belongs to %q", victim.id, owner)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if !strings.Contains(victim.logs.String(), "raft state damaged on disk") {
		t.Errorf("%s did not say why its copy was renewed", victim.id)
	}
	waitIdentical(ctx, t, nodes, stream)
	readAll(ctx, t, c, stream, acked)
	hashes := map[string]string{}
	for _, n := range nodes {
		if err := n.stop(); err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		segs, _ := filepath.Glob(filepath.Join(n.dir, "partitions", "acme", "prod", "raftdb", "log", "*.log"))
		for _, s := range segs {
			b, err := os.ReadFile(s)
			if err != nil {
				t.Fatal(err)
			}
			h.Write(b)
		}
		hashes[n.id] = hex.EncodeToString(h.Sum(nil))[:16]
	}
	if len(slices.Compact(slices.Sorted(maps.Values(hashes)))) != 1 {
		t.Fatalf("replicas differ: %v", hashes)
	}
}

// What was created or deleted through the metadata leader shows at once
// through a node whose catalog lags (it was paused during the change):
// the node catches up before it answers a stream missing, and before it
// lists streams, fabrics and tenants or describes a fabric.
func TestCatalogReadsOnLaggingNode(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, time.Minute)
	c := newClient(t, clusterURL(nodes))
	st, err := c.ClusterStatus(ctx)
	if err != nil || st.MetaLeader == "" {
		t.Fatalf("cluster status %+v, %v", st, err)
	}
	var lagging *clusterNode
	for _, n := range nodes {
		if n.id != st.MetaLeader {
			lagging = n
		}
	}
	leader := newClient(t, byID(nodes, st.MetaLeader).url())
	if err := ensureFabric(ctx, leader, "persistent://acme/lag/x"); err != nil {
		t.Fatal(err)
	}
	for i := range 15 { // without the catch-up, most runs fail within a few rounds
		stream, fabric := fmt.Sprintf("persistent://acme/lag/s%d", i), fmt.Sprintf("acme/f%d", i)
		previous := fmt.Sprintf("persistent://acme/lag/s%d", i-1)
		if err := lagging.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// One replica: the changes never wait on the paused node.
		err := leader.CreateStream(ctx, stream, 1, 1)
		if err == nil {
			err = leader.CreateFabric(ctx, fabric, client.FabricOptions{})
		}
		if err == nil && i > 0 {
			err = leader.DeleteStream(ctx, previous, true)
		}
		if cerr := lagging.cmd.Process.Signal(syscall.SIGCONT); cerr != nil {
			t.Fatal(cerr)
		}
		if err != nil {
			t.Fatal(err)
		}
		// A client of the lagging node alone: its first answers count.
		c, err := client.New(client.Options{URL: lagging.url(), OperationTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Any read catches the node up: each kind goes first in turn.
		checks := []func() error{
			func() error {
				streams, err := c.ListStreams(ctx, "acme/lag")
				if err != nil || !slices.Contains(streams, stream) || slices.Contains(streams, previous) {
					return fmt.Errorf("streams of acme/lag just after %s was created and %s deleted: %v, %v", stream, previous, streams, err)
				}
				return nil
			},
			func() error {
				fabrics, err := c.ListFabrics(ctx, "acme")
				if err != nil || !slices.ContainsFunc(fabrics, func(f client.FabricInfo) bool { return f.Fabric == fabric }) {
					return fmt.Errorf("fabrics of acme just after %s was created: %v, %v", fabric, fabrics, err)
				}
				return nil
			},
			func() error {
				if _, err := c.DescribeFabric(ctx, fabric); err != nil {
					return fmt.Errorf("describe of %s just after its create: %v", fabric, err)
				}
				return nil
			},
			func() error {
				if _, err := c.DescribeStreamLocal(ctx, stream); err != nil {
					return fmt.Errorf("describe of %s just after its create: %v", stream, err)
				}
				return nil
			},
		}
		for j := range checks {
			if err := checks[(i+j)%len(checks)](); err != nil {
				t.Fatalf("through %s: %v", lagging.id, err)
			}
		}
	}
}

// A lookup that waits for an election does not hold up the other lookups
// of its connection, and never names a dead node. Two of three nodes die;
// on one connection to the survivor a client asks forty times where a
// partition without a quorum went (each lookup waits for a leader that
// cannot be elected), then where a partition the survivor leads went:
// that one is answered first, and the forty end without a leader, not
// with the dead leader gossip last announced (the survivor's replica
// stands as its successor and knows no leader: the route it fell back to
// sent clients to a closed port). (With
// lookups run among the session's other slow requests, sixteen waiting
// ones held every worker and the others queued behind them: after a node
// died among 990 idle partitions, a busy partition's first send took
// 0.85 s instead of 0.03 s, its lookup queued behind the idle ones'.)
func TestWaitingLookupsDoNotHoldUpOthers(t *testing.T) {
	t.Parallel() // mostly waiting on processes: see TestMain
	nodes := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	const orphan, here = "persistent://acme/prod/orphan", "persistent://acme/prod/here"
	admin := newClient(t, nodes[0].url())
	if err := createStream(ctx, admin, orphan, 1, 3); err != nil {
		t.Fatal(err)
	}
	if err := createStream(ctx, admin, here, 1, 1); err != nil {
		t.Fatal(err)
	}
	survivor := byID(nodes, leaderOf(ctx, t, admin, here))
	admin.Close()
	for _, n := range nodes {
		if n != survivor {
			n.kill()
		}
	}

	conn := rawConn(ctx, t, survivor.addr, "raw", transport.Config{})
	defer conn.Close()
	ask := func(id uint64, partition string) {
		if err := conn.Send(ctx, &transport.Lookup{RequestID: id, Stream: partition, Wait: true, Hints: true, MaxWaitMillis: 5_000}); err != nil {
			t.Fatal(err)
		}
	}
	next := func() transport.Command { return rawNext(ctx, t, conn) }
	// The orphan's leader, if the survivor led it, steps down once its
	// lease runs out: until then its lookups are answered at once.
	for id := uint64(1); ; id++ {
		if err := conn.Send(ctx, &transport.Lookup{RequestID: id, Stream: orphan}); err != nil {
			t.Fatal(err)
		}
		res := next()
		if e, ok := res.(*transport.Error); ok && e.Code == transport.CodeServiceNotReady {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the survivor still answers %#v for a partition without a quorum", res)
		case <-time.After(100 * time.Millisecond):
		}
	}
	const waiting = 40
	for i := range waiting {
		ask(uint64(1000+i), orphan)
	}
	ask(1, here)
	res := next()
	if r, ok := res.(*transport.LookupResult); !ok || r.RequestID != 1 || !r.Here {
		t.Fatalf("first answer %#v, want the survivor's own partition found here before the %d waiting lookups", res, waiting)
	}
	for range waiting {
		res := next()
		if e, ok := res.(*transport.Error); !ok || e.Code != transport.CodeServiceNotReady {
			t.Fatalf("a lookup of a partition without a quorum answered %#v, want ServiceNotReady", res)
		}
	}
}

// A client that could not connect to the leader a lookup named says so in
// its next lookup; the node asked probes that leader's Raft port, and a
// leader whose process is alive is named all the same: a client's report
// alone never makes a live leader look dead. (A dead one's port refuses,
// the node marks it gone, and the lookup waits for its successor:
// cluster's TestProbeReportedTrustsOnlyThePort, client's
// TestLookupTellsTheNodeOfAnUnreachableLeader.)
func TestLookupNamesAReportedLeaderThatIsAlive(t *testing.T) {
	t.Parallel() // mostly waiting on processes: see TestMain
	nodes := startCluster(t, 3)
	ctx := testContext(t, time.Minute)
	const stream = "persistent://acme/prod/reported"
	admin := newClient(t, nodes[0].url())
	defer admin.Close()
	if err := createStream(ctx, admin, stream, 1, 3); err != nil {
		t.Fatal(err)
	}
	leader := byID(nodes, leaderOf(ctx, t, admin, stream))
	var other *clusterNode
	for _, n := range nodes {
		if n != leader {
			other = n
			break
		}
	}
	conn := rawConn(ctx, t, other.addr, "raw", transport.Config{})
	defer conn.Close()
	// Once the node asked names the leader from its own copy (a copy
	// opened after the create returned answers with a hint instead).
	id, named := uint64(0), ""
	eventually(ctx, t, other.id+" naming the leader", func() bool {
		id++
		if err := conn.Send(ctx, &transport.Lookup{RequestID: id, Stream: stream}); err != nil {
			t.Fatal(err)
		}
		if r, ok := rawNext(ctx, t, conn).(*transport.LookupResult); ok && !r.Here {
			named = r.Address
		}
		return named != ""
	})
	if named != leader.addr {
		t.Logf("the leadership moved from %s to %s", leader.addr, named)
	}
	if err := conn.Send(ctx, &transport.Lookup{RequestID: id + 1, Stream: stream, Wait: true, Hints: true, MaxWaitMillis: 5_000, Unreachable: named}); err != nil {
		t.Fatal(err)
	}
	res := rawNext(ctx, t, conn)
	if r, ok := res.(*transport.LookupResult); !ok || r.Address != named {
		t.Fatalf("a lookup reporting the live leader %s unreachable answered %#v, want that leader", named, res)
	}
}

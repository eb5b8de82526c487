package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/subscription"
	"github.com/fabriq-io/fabriq/tests/checker"
	"github.com/fabriq-io/fabriq/transport"
)

// clusterURL is a client URL naming every node.
func clusterURL(nodes []*clusterNode) string {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.addr
	}
	scheme := "fabriq://"
	if len(nodes) > 0 && nodes[0].secure {
		scheme = "fabriq+tls://"
	}
	return scheme + strings.Join(addrs, ",")
}

// subscriptionOf returns a subscription's view on one partition.
func subscriptionOf(ctx context.Context, t testing.TB, c *client.Client, stream string, partition int, sub string) (transport.SubscriptionInfo, bool) {
	t.Helper()
	info, err := c.DescribeStream(ctx, stream)
	if err != nil {
		return transport.SubscriptionInfo{}, false
	}
	for _, p := range info.Partitions {
		if int(p.Partition) != partition {
			continue
		}
		for _, s := range p.Subscriptions {
			if s.Name == sub {
				return s, true
			}
		}
	}
	return transport.SubscriptionInfo{}, false
}

// eventually polls cond until it holds or ctx ends.
func eventually(ctx context.Context, t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s", what)
		case <-tick.C:
		}
	}
}

// stopped reports whether every thread of process pid is stopped by a
// signal (state T in /proc).
func stopped(t testing.TB, pid int) bool {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of process %d: %v", pid, err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			return false // a thread that just ended; look again
		}
		// The state follows the command name, which is in parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

// EX-1, EX-2 on three nodes: a second exclusive consumer is refused; a
// holder whose process froze (SIGSTOP: its connection stays open, nothing
// answers) is replaced by a newcomer within the probe timeout.
func TestClusterExclusive(t *testing.T) { testClusterExclusive(t) }

func testClusterExclusive(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	url := clusterURL(nodes)
	c := newClient(t, url)
	const stream = "persistent://acme/prod/exclusive"
	if err := createStream(ctx, c, stream, 1, 3); err != nil {
		t.Fatal(err)
	}
	first, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Name: "first"})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if _, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Name: "second"}); transport.CodeOf(err) != transport.CodeConsumerBusy ||
		!strings.Contains(err.Error(), "Exclusive consumer is already connected") {
		t.Fatalf("second exclusive consumer: %v", err)
	}

	frozen := exec.Command(filepath.Join(bin, "fabriq"), "consume", stream, "-s", "silent", "--name", "frozen")
	frozen.Env = append(frozen.Environ(), cliEnv(t, url)...)
	if err := frozen.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		frozen.Process.Signal(syscall.SIGCONT)
		frozen.Process.Kill()
		frozen.Wait()
	})
	eventually(ctx, t, "the CLI consumer to attach", func() bool {
		s, ok := subscriptionOf(ctx, t, c, stream, 0, "silent")
		return ok && len(s.Consumers) == 1 && s.Consumers[0].Name == "frozen" && s.Consumers[0].Role == "active"
	})
	if err := frozen.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The stop takes effect when the kernel next schedules each thread:
	// until then the process may still answer.
	eventually(ctx, t, "the CLI consumer to stop", func() bool { return stopped(t, frozen.Process.Pid) })
	// Within the read idle timeout (60 s) of the node: only the probe
	// can free the place.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	newcomer, err := c.Subscribe(sctx, client.ConsumerOptions{Stream: stream, Subscription: "silent", Name: "newcomer"})
	if err != nil {
		t.Fatalf("the newcomer was refused: %v", err)
	}
	defer newcomer.Close()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("to the newcomer")})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := newcomer.Receive(ctx); err != nil || m.ID != id {
		t.Fatalf("newcomer got %v %v", m, err)
	}
}

// receipt is a message a survivor received.
type receipt struct {
	offset uint64
	count  uint32
}

// SH-5 on three nodes: three shared consumers share 30,000 messages; one
// of them (a CLI process) is killed mid-way. Every message is acked, none
// by two survivors; the dead one's unacked messages go to the others
// before newer ones. SH-6, SH-7: a nacked message comes back after 200 ms
// with count 1, and the 4th delivery goes to the dead-letter stream.
func TestClusterShared(t *testing.T) { testClusterShared(t) }

func testClusterShared(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 4*time.Minute)
	url := clusterURL(nodes)
	c := newClient(t, url)
	const stream = "persistent://acme/prod/shared"
	if err := createStream(ctx, c, stream, 1, 3); err != nil {
		t.Fatal(err)
	}
	const total = 30_000
	const queue = 10
	var survivors []*client.Consumer
	for _, name := range []string{"s1", "s2"} {
		cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "work", Type: client.Shared, Name: name,
			ReceiverQueueSize: queue, AckWithReceipt: true, SubscriptionInitialPosition: client.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		survivors = append(survivors, cons)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	acked, failed := produce(ctx, p, total, 0, "w", nil)
	if len(failed) > 0 {
		t.Fatalf("%d sends failed: %v", len(failed), failed[0])
	}
	// The third consumer is a process, killed with SIGKILL mid-way.
	doomed := exec.Command(filepath.Join(bin, "fabriq"), "consume", stream, "-s", "work", "-t", "shared", "--name", "doomed", "--json")
	doomed.Env = append(doomed.Environ(), cliEnv(t, url)...)
	var doomedOut lockedBuffer
	doomed.Stdout = &doomedOut
	if err := doomed.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { doomed.Process.Kill(); doomed.Wait() })

	var mu sync.Mutex
	got := map[string][]receipt{} // survivor → what it received, in order
	ackedBy := map[uint64]string{}
	atKill := map[string]int{} // how many messages each survivor had acked at the kill
	killed := make(chan struct{})
	var dup []string
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for _, cons := range survivors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Acks go out concurrently; one counts once its receipt says
			// it is committed.
			sem := make(chan struct{}, 64)
			var acks sync.WaitGroup
			defer acks.Wait()
			for {
				m, err := cons.Receive(rctx)
				if err != nil {
					return
				}
				mu.Lock()
				got[cons.Name()] = append(got[cons.Name()], receipt{offset: m.ID.Offset, count: m.RedeliveryCount})
				mu.Unlock()
				sem <- struct{}{}
				acks.Add(1)
				go func() {
					defer acks.Done()
					defer func() { <-sem }()
					if err := cons.Ack(rctx, m); err != nil {
						return // not confirmed: it comes back
					}
					mu.Lock()
					if prev, ok := ackedBy[m.ID.Offset]; ok && len(dup) < 10 {
						dup = append(dup, fmt.Sprintf("offset %d acked by %s and %s", m.ID.Offset, prev, cons.Name()))
					}
					ackedBy[m.ID.Offset] = cons.Name()
					mu.Unlock()
				}()
			}
		}()
	}
	// Kill the CLI consumer once a third of the messages are done, by the
	// survivors' acks and its printed lines.
	go func() {
		defer close(killed)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			mu.Lock()
			n := len(ackedBy)
			mu.Unlock()
			if n+strings.Count(doomedOut.String(), "\n") >= total/3 || rctx.Err() != nil {
				return
			}
		}
	}()
	<-killed
	doomed.Process.Kill()
	doomed.Wait()
	mu.Lock()
	for name, rs := range got {
		atKill[name] = len(rs)
	}
	mu.Unlock()
	printed := map[uint64]bool{}
	for _, line := range strings.Split(strings.TrimSpace(doomedOut.String()), "\n") {
		var off uint64
		if i := strings.Index(line, `"offset":`); i >= 0 {
			fmt.Sscan(line[i+len(`"offset":`):], &off)
			printed[off] = true
		}
	}
	if len(printed) == 0 {
		t.Fatal("the CLI consumer received nothing before it was killed")
	}
	eventually(ctx, t, "every message to be acked", func() bool {
		s, ok := subscriptionOf(ctx, t, c, stream, 0, "work")
		mu.Lock()
		n := len(ackedBy)
		mu.Unlock()
		return ok && s.Backlog == 0 && n+len(printed) >= total
	})
	stop()
	wg.Wait()
	if len(dup) > 0 {
		t.Fatalf("acked twice: %v", dup)
	}
	// Everything sent is acked by a survivor or was printed (then acked)
	// by the dead consumer.
	for payload, id := range acked {
		if _, ok := ackedBy[id.Offset]; !ok && !printed[id.Offset] {
			t.Fatalf("%s (offset %d) was never acked", payload, id.Offset)
		}
	}
	// The dead consumer's unacked messages came back with a redelivery
	// count, to the survivors, before newer messages: a survivor may take
	// at most its receive queue of messages newer than everything seen
	// before the kill ahead of its last redelivered one.
	var seenBefore uint64
	for o := range printed {
		seenBefore = max(seenBefore, o)
	}
	for name, rs := range got {
		for _, r := range rs[:atKill[name]] {
			seenBefore = max(seenBefore, r.offset)
		}
	}
	var redelivered int
	for name, rs := range got {
		last := -1
		for i, r := range rs {
			if r.count > 0 {
				last = i
				redelivered++
			}
		}
		newer := 0
		for _, r := range rs[:last+1] {
			if r.count == 0 && r.offset > seenBefore {
				newer++
			}
		}
		if newer > queue+20 {
			t.Fatalf("%s took %d newer messages before the dead consumer's last redelivered one", name, newer)
		}
	}
	if redelivered == 0 {
		t.Fatal("nothing the dead consumer held was redelivered: it held nothing unacked?")
	}
	byName := map[string]int{}
	for _, name := range ackedBy {
		byName[name]++
	}
	t.Logf("30,000 messages: %d acked by s1, %d by s2, %d printed by the killed consumer, %d redelivered after the kill",
		byName["s1"], byName["s2"], len(printed), redelivered)

	// SH-6, SH-7 on the same cluster.
	nacker, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "poison", Type: client.Shared,
		NackRedeliveryDelay: 200 * time.Millisecond, DLQ: &client.DLQPolicy{MaxDeliveries: 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer nacker.Close()
	id, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("poison")})
	if err != nil {
		t.Fatal(err)
	}
	var nackedAt time.Time
	for want := range uint32(3) {
		m, err := nacker.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.ID != id || m.RedeliveryCount != want {
			t.Fatalf("delivery %d: %v with count %d", want+1, m.ID, m.RedeliveryCount)
		}
		if want == 1 && time.Since(nackedAt) < 200*time.Millisecond {
			t.Fatalf("redelivered %v after the nack, before the 200ms delay", time.Since(nackedAt))
		}
		nackedAt = time.Now()
		nacker.Nack(m)
	}
	go nacker.Receive(rctxFor(t, ctx)) // the 4th delivery goes to the dead-letter stream
	dlqStream := stream + "-poison-DLQ"
	var dlq *client.Consumer
	eventually(ctx, t, "the dead-letter stream", func() bool {
		dlq, err = c.Subscribe(ctx, client.ConsumerOptions{Stream: dlqStream, Subscription: "inspect", SubscriptionInitialPosition: client.Earliest})
		return err == nil
	})
	defer dlq.Close()
	m, err := dlq.Receive(ctx)
	if err != nil || string(m.Payload) != "poison" || m.Properties[client.PropertyOriginMessageID] != id.String() {
		t.Fatalf("dead letter: %v %v", m, err)
	}
}

// rctxFor returns a context cancelled when the test ends.
func rctxFor(t *testing.T, ctx context.Context) context.Context {
	c, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	return c
}

// FO-3, FO-5 on three nodes: consumers b, a, c on four partitions: the
// masters are a, b, c, a. When a's client goes away, the masters are b, c,
// b, c: a's partitions go to the next in line (0 to b, 3 to c), each
// starting at its first unacknowledged message.
func TestClusterFailover(t *testing.T) { testClusterFailover(t) }

func testClusterFailover(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	url := clusterURL(nodes)
	admin := newClient(t, url)
	const stream = "persistent://acme/prod/failover"
	if err := createStream(ctx, admin, stream, 4, 3); err != nil {
		t.Fatal(err)
	}
	clients := map[string]*client.Client{}
	cons := map[string]*client.Consumer{}
	for _, name := range []string{"b", "a", "c"} {
		clients[name] = newClient(t, url)
		cc, err := clients[name].Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "fo", Type: client.Failover, Name: name, AckWithReceipt: true})
		if err != nil {
			t.Fatal(err)
		}
		cons[name] = cc
	}
	masters := func() []string {
		out := make([]string, 4)
		for i := range out {
			s, ok := subscriptionOf(ctx, t, admin, stream, i, "fo")
			if !ok {
				t.Logf("no view of partition %d", i)
			}
			for _, ci := range s.Consumers {
				if ci.Role == "master" {
					out[i] = ci.Name
				}
			}
		}
		return out
	}
	eventually(ctx, t, "masters a, b, c, a", func() bool { return slices.Equal(masters(), []string{"a", "b", "c", "a"}) })
	t.Logf("masters: a, b, c, a")
	p, err := admin.CreateProducer(ctx, client.ProducerOptions{Stream: stream, MessageRouter: func(m *client.ProducerMessage, n int) int {
		var i int
		fmt.Sscan(m.Key, &i)
		return i % n
	}})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int][]client.MessageID{}
	for i := range 40 {
		id, err := p.Send(ctx, &client.ProducerMessage{Key: fmt.Sprint(i), Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		ids[id.Partition] = append(ids[id.Partition], id)
	}
	// Each master gets its partitions' ten messages; a acks the first four
	// of each of its partitions and holds the rest.
	want := map[string]int{"a": 20, "b": 10, "c": 10}
	for name, n := range want {
		perPartition := map[int]int{}
		for range n {
			m, err := cons[name].Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ms := masters(); ms[m.ID.Partition] != name {
				t.Fatalf("partition %d delivered to %s, its master is %s", m.ID.Partition, name, ms[m.ID.Partition])
			}
			if m.ID != ids[m.ID.Partition][perPartition[m.ID.Partition]] {
				t.Fatalf("%s: got %v, want %v", name, m.ID, ids[m.ID.Partition][perPartition[m.ID.Partition]])
			}
			perPartition[m.ID.Partition]++
			if name != "a" || perPartition[m.ID.Partition] <= 4 {
				if err := cons[name].Ack(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	clients["a"].Close()
	// With b and c left, partition i goes to candidate i mod 2.
	eventually(ctx, t, "masters b, c, b, c", func() bool { return slices.Equal(masters(), []string{"b", "c", "b", "c"}) })
	for name, partition := range map[string]int{"b": 0, "c": 3} {
		for k := 4; k < 10; k++ {
			m, err := cons[name].Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if m.ID != ids[partition][k] {
				t.Fatalf("%s after the hand-over got %v, want %v: the first unacked, nothing skipped", name, m.ID, ids[partition][k])
			}
		}
	}
	for _, name := range []string{"b", "c"} {
		cons[name].Close()
	}
}

// mustKeyed is keyed for the test's goroutine.
func mustKeyed(ctx context.Context, t *testing.T, p *client.Producer, keys []string, from, to int) []client.MessageID {
	t.Helper()
	ids, err := checker.Produce(ctx, p, keys, from, to)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// KS-3, KS-7 on three nodes: 300 keys over 3 consumers, each key on one
// consumer, in order; a 4th joins while the others hold unacked messages:
// no key is unacked on two consumers at once, and keys that do not move
// keep flowing while the moved ones wait for their acks.
func TestClusterKeyShared(t *testing.T) { testClusterKeyShared(t) }

func testClusterKeyShared(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	url := clusterURL(nodes)
	c := newClient(t, url)
	const stream = "persistent://acme/prod/keyed"
	if err := createStream(ctx, c, stream, 1, 3); err != nil {
		t.Fatal(err)
	}
	keys := checker.Keys(300)
	before := subscription.NewAutoSplit([]string{"k1", "k2", "k3"})
	after := subscription.NewAutoSplit([]string{"k1", "k2", "k3", "k4"})
	moving := map[string]bool{}
	for _, k := range keys {
		moving[k] = before.Owner(subscription.Slot(k)) != after.Owner(subscription.Slot(k))
	}
	h := checker.NewKeyHistory()
	var wg sync.WaitGroup
	defer wg.Wait()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	release := make(chan struct{})
	var heldMu sync.Mutex
	held := map[*client.Consumer][]*client.Message{}
	join := func(name string) {
		cons, err := newClient(t, url).Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "ks", Type: client.KeyShared, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cons.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			checker.Consume(rctx, cons, h, func(m *client.Message) bool {
				select {
				case <-release:
					return false
				default:
				}
				heldMu.Lock()
				defer heldMu.Unlock()
				held[cons] = append(held[cons], m)
				return true
			})
		}()
	}
	for _, name := range []string{"k1", "k2", "k3"} {
		join(name)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, KeyBasedBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	mustKeyed(ctx, t, p, keys, 0, 1)
	eventually(ctx, t, "the first round", func() bool { return h.Len() == len(keys) })
	join("k4")
	mustKeyed(ctx, t, p, keys, 1, 3)
	staying := 0
	for _, k := range keys {
		if !moving[k] {
			staying++
		}
	}
	eventually(ctx, t, "the keys that stay to flow", func() bool {
		n := 0
		for _, d := range h.Deliveries() {
			if d.Seq > 0 {
				if moving[d.Key] {
					t.Fatalf("moved key %s delivered (message %d to %s) while its first message was unacked", d.Key, d.Seq, d.Consumer)
				}
				n++
			}
		}
		return n == 2*staying
	})
	close(release)
	heldMu.Lock()
	for cons, ms := range held {
		for _, m := range ms {
			h.Released(cons.Name(), m.Key)
			if err := cons.Ack(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	heldMu.Unlock()
	eventually(ctx, t, "every message", func() bool { return h.Missing(checker.Each(keys, 3)) == 0 })
	if err := h.CheckOrder(checker.Each(keys, 3)); err != nil {
		t.Fatal(err)
	}
	for _, d := range h.Deliveries() {
		owner := before
		if d.Seq > 0 {
			owner = after
		}
		if want := owner.Owner(subscription.Slot(d.Key)); d.Consumer != want {
			t.Fatalf("key %s message %d went to %s, its owner is %s", d.Key, d.Seq, d.Consumer, want)
		}
	}
	t.Logf("300 keys: %d moved to the 4th consumer after their acks, %d kept flowing", len(keys)-staying, staying)
}

// survivalArgs are extra fabriqd flags for the survival test.
var survivalArgs []string

// roles records failover role changes (FO-6).
type roles struct {
	mu     sync.Mutex
	active map[string]int // consumer → partitions it is active on
	after  []string       // BecameActive events since mark
	marked bool
}

func (r *roles) BecameActive(c *client.Consumer, partition int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.active[c.Name()]++
	if r.marked {
		r.after = append(r.after, c.Name())
	}
}

func (r *roles) BecameInactive(c *client.Consumer, partition int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.active[c.Name()]--
}

// gate is a client's network: held, it cuts the client's connections and
// refuses new ones, so the client cannot reconnect until released.
type gate struct {
	mu    sync.Mutex
	held  bool
	conns []net.Conn
}

func (g *gate) dial(ctx context.Context, addr string) (net.Conn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held {
		return nil, errors.New("network down")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		g.conns = append(g.conns, c)
	}
	return c, err
}

func (g *gate) hold(on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held = on
	if on {
		for _, c := range g.conns {
			c.Close()
		}
		g.conns = nil
	}
}

// SUB-7, KS-11: with consumers attached in failover and in key_shared
// mode, SIGKILL the partition's leader. One key_shared consumer and the
// failover master come back late (their network is down for a while,
// within the reconnect grace). Their roles wait for them: the same
// consumer is master, every key goes to the same consumer as before, the
// other keys flow meanwhile, no acknowledged message is lost, and per key
// the order holds across the failover.
func TestClusterRolesSurviveLeaderKill(t *testing.T) {
	nodes := startCluster(t, 3, survivalArgs...)
	ctx := testContext(t, 3*time.Minute)
	url := clusterURL(nodes)
	c := newClient(t, url)
	const stream = "persistent://acme/prod/survive"
	if err := createStream(ctx, c, stream, 1, 3); err != nil {
		t.Fatal(err)
	}
	keys := checker.Keys(100)
	h := checker.NewKeyHistory()
	var foMu sync.Mutex
	foGot := map[string][]uint64{} // failover consumer → offsets, in order
	ev := &roles{active: map[string]int{}}
	// FO-4: the master of an unpartitioned stream is picked on a ring by
	// the stream's name.
	master := subscription.Master([]subscription.Candidate{{Name: "f1"}, {Name: "f2"}, {Name: "f3"}}, -1, stream)
	late := &gate{}
	var wg sync.WaitGroup
	defer wg.Wait()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	clientFor := func(isLate bool) *client.Client {
		opts := client.Options{URL: url, OperationTimeout: 20 * time.Second}
		if isLate {
			opts.Dial = late.dial
		}
		cc, err := client.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	for i := 1; i <= 3; i++ {
		ks, err := clientFor(i == 3).Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "ks", Type: client.KeyShared, Name: fmt.Sprint("k", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ks.Close() })
		name := fmt.Sprint("f", i)
		fo, err := clientFor(name == master).Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "fo", Type: client.Failover, Name: name, EventListener: ev})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fo.Close() })
		wg.Add(2)
		go func() { defer wg.Done(); checker.Consume(rctx, ks, h, nil) }()
		go func() {
			defer wg.Done()
			for {
				m, err := fo.Receive(rctx)
				if err != nil {
					return
				}
				foMu.Lock()
				foGot[fo.Name()] = append(foGot[fo.Name()], m.ID.Offset)
				foMu.Unlock()
				fo.Ack(rctx, m)
			}
		}()
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, SendTimeout: time.Minute, KeyBasedBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	sent := mustKeyed(ctx, t, p, keys, 0, 5)
	eventually(ctx, t, "the first rounds", func() bool { return h.Len() >= len(keys)*5 })
	ownerBefore := map[string]string{}
	for k, who := range h.Owners() {
		ownerBefore[k] = who[0]
	}
	ev.mu.Lock()
	ev.marked = true
	ev.mu.Unlock()

	victim := byID(nodes, leaderOf(ctx, t, c, stream))
	victim.kill()
	killed := time.Now()
	// The late consumers' network goes down with the leader (before a
	// new leader is elected, so they cannot have reattached).
	late.hold(true)
	// Sends go on through the election; the producer retries.
	type result struct {
		ids []client.MessageID
		err error
	}
	more := make(chan result, 1)
	go func() {
		ids, err := checker.Produce(ctx, p, keys, 5, 10)
		more <- result{ids, err}
	}()
	// The keys of k1 and k2 flow while k3 is away: only k3's keys wait.
	// The late ones stay away for at least 2 s (the fault lasts that long).
	eventually(ctx, t, "the keys of the consumers that came back", func() bool {
		if time.Since(killed) < 2*time.Second {
			return false
		}
		for _, d := range h.Deliveries() {
			if d.Seq >= 5 && d.Consumer != "k3" {
				return true
			}
		}
		return false
	})
	resumed := time.Since(killed)
	late.hold(false)
	released := time.Since(killed)
	r := <-more
	if r.err != nil {
		t.Fatalf("a send failed across the failover: %v", r.err)
	}
	sent = append(sent, r.ids...)
	eventually(ctx, t, "every message after the failover", func() bool { return h.Missing(checker.Each(keys, 10)) == 0 })
	t.Logf("leader %s killed; %d messages acknowledged; other keys flowed %v after the kill; k3 and %s let back in after %v; all caught up after %v",
		victim.id, len(sent), resumed.Round(time.Millisecond), master, released.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	if err := h.CheckOrder(checker.Each(keys, 10)); err != nil {
		t.Fatal(err)
	}
	if err := h.CheckSticky(); err != nil {
		t.Fatalf("after the failover: %v", err)
	}
	for k, who := range h.Owners() {
		if who[0] != ownerBefore[k] {
			t.Fatalf("key %s was %s's and is now %v", k, ownerBefore[k], who)
		}
	}
	missing := 0
	waitCtx, cancelWait := context.WithTimeout(ctx, time.Minute)
	defer cancelWait()
	eventually(waitCtx, t, "the failover subscription to catch up", func() bool {
		foMu.Lock()
		defer foMu.Unlock()
		seen := map[uint64]bool{}
		for _, o := range foGot[master] {
			seen[o] = true
		}
		missing = 0
		for _, id := range sent {
			if !seen[id.Offset] {
				missing++
			}
		}
		if waitCtx.Err() != nil || missing > 0 && time.Since(killed) > 20*time.Second {
			for name, offs := range foGot {
				t.Logf("%s received %d", name, len(offs))
			}
			t.Logf("missing %d; active events after the kill %v; describe %+v", missing, ev.after, func() any { s, _ := subscriptionOf(ctx, t, c, stream, 0, "fo"); return s }())
		}
		return missing == 0
	})
	foMu.Lock()
	defer foMu.Unlock()
	for name, offs := range foGot {
		if name != master && len(offs) > 0 {
			t.Fatalf("failover: %s received %d messages; the master was and must stay %s", name, len(offs), master)
		}
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, name := range ev.after {
		if name != master {
			t.Fatalf("failover: %s became active after the kill; the master is %s", name, master)
		}
	}
	victim.restart(t)
}

package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// fastGossip tightens the gossip timings for tests. With SuspicionMult 4 a
// cluster of 3 expects no confirmations (memberlist wants SuspicionMult-2
// other members), so the suspicion timeout is exactly 4 probe intervals.
// Push-pull is slow on purpose, so that tests see what gossip and joins do
// without it.
func fastGossip(c *MembershipConfig) {
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.SuspicionMult = 4
	c.GossipInterval = 50 * time.Millisecond
	c.PushPullInterval = 30 * time.Second
}

func testMeta(id string) NodeMeta {
	return NodeMeta{
		Region:     "region-" + id,
		ClientAddr: "127.0.0.1:6650",
		RaftAddr:   "127.0.0.1:7650",
		HTTPAddr:   "127.0.0.1:8080",
		Version:    "test-" + id,
	}
}

// newMember starts a member on 127.0.0.1:0 with fast timings, joining
// join; mod adjusts its configuration. Cleanup closes it.
func newMember(t *testing.T, id string, join []string, mod func(*MembershipConfig)) *Membership {
	t.Helper()
	cfg := MembershipConfig{
		NodeID:   id,
		BindAddr: "127.0.0.1:0",
		Meta:     testMeta(id),
		Join:     join,
		Logger:   testLogger(),
	}
	fastGossip(&cfg)
	if mod != nil {
		mod(&cfg)
	}
	m, err := NewMembership(cfg)
	if err != nil {
		t.Fatalf("new membership %s: %v", id, err)
	}
	if err := m.Start(); err != nil {
		t.Fatalf("start membership %s: %v", id, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// startCluster starts n members, node-0 first and the others joining it,
// and waits until every member sees all n alive.
func startCluster(t *testing.T, n int, mod func(*MembershipConfig)) []*Membership {
	t.Helper()
	ms := []*Membership{newMember(t, "node-0", nil, mod)}
	for i := 1; i < n; i++ {
		ms = append(ms, newMember(t, fmt.Sprintf("node-%d", i), []string{ms[0].Addr()}, mod))
	}
	for _, m := range ms {
		waitAlive(t, m, n, 10*time.Second)
	}
	return ms
}

func waitAlive(t *testing.T, m *Membership, n int, d time.Duration) {
	t.Helper()
	eventually(t, d, fmt.Sprintf("%s to see %d live members", m.cfg.NodeID, n), func() bool {
		alive := 0
		for _, mb := range m.Members() {
			if mb.State == MemberAlive {
				alive++
			}
		}
		return alive == n
	})
}

func member(m *Membership, id string) (Member, bool) {
	for _, mb := range m.Members() {
		if mb.ID == id {
			return mb, true
		}
	}
	return Member{}, false
}

// waitState waits until every one of ms sees member id in state, and
// returns how long that took.
func waitState(t *testing.T, ms []*Membership, id string, state MemberState, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for _, m := range ms {
		eventually(t, d-time.Since(start), fmt.Sprintf("%s to see %s %v", m.cfg.NodeID, id, state), func() bool {
			mb, ok := member(m, id)
			return ok && mb.State == state
		})
	}
	return time.Since(start)
}

// nextEvent returns the next event of w for member id, skipping others.
func nextEvent(t *testing.T, w *MemberWatch, id string, d time.Duration) MemberEvent {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-w.C:
			if !ok {
				t.Fatalf("watch closed waiting for an event of %s", id)
			}
			if ev.Member.ID == id {
				return ev
			}
		case <-timer.C:
			t.Fatalf("no event for %s within %v", id, d)
		}
	}
}

func TestMembershipConfigValidate(t *testing.T) {
	big := strings.Repeat("x", 600)
	tests := []struct {
		name    string
		mod     func(*MembershipConfig)
		want    string // substring of the error; "" for valid
		wantErr error
	}{
		{"defaults", func(*MembershipConfig) {}, "", nil},
		{"port 0", func(c *MembershipConfig) { c.BindAddr = "127.0.0.1:0" }, "", nil},
		{"no node id", func(c *MembershipConfig) { c.NodeID = "" }, "NodeID of 0 bytes", nil},
		{"long node id", func(c *MembershipConfig) { c.NodeID = strings.Repeat("n", 256); c.Meta.ID = c.NodeID }, "NodeID of 256 bytes", nil},
		{"meta id differs", func(c *MembershipConfig) { c.Meta.ID = "other" }, "differs from NodeID", nil},
		{"meta too large", func(c *MembershipConfig) { c.Meta.Region = big }, "too large", ErrMetaTooLarge},
		{"host name", func(c *MembershipConfig) { c.BindAddr = "localhost:7946" }, "not an IP address", nil},
		{"no port", func(c *MembershipConfig) { c.BindAddr = "127.0.0.1" }, "BindAddr", nil},
		{"advertise unspecified", func(c *MembershipConfig) { c.AdvertiseAddr = "0.0.0.0:7946" }, "not an address others can reach", nil},
		{"advertise port with dynamic bind", func(c *MembershipConfig) {
			c.BindAddr = "127.0.0.1:0"
			c.AdvertiseAddr = "10.0.0.1:7946"
		}, "needs a fixed BindAddr port", nil},
		{"advertise host with dynamic bind", func(c *MembershipConfig) {
			c.BindAddr = "127.0.0.1:0"
			c.AdvertiseAddr = "10.0.0.1:0"
		}, "", nil},
		{"ipv6 any without advertise", func(c *MembershipConfig) { c.BindAddr = "[::]:7946" }, "needs an AdvertiseAddr", nil},
		{"bad join", func(c *MembershipConfig) { c.Join = []string{"10.0.0.1"} }, "not host:port", nil},
		{"probe timeout not below interval", func(c *MembershipConfig) {
			c.ProbeInterval = 100 * time.Millisecond
			c.ProbeTimeout = 100 * time.Millisecond
		}, "ProbeTimeout", nil},
		{"probe timeout defaults below a short interval", func(c *MembershipConfig) { c.ProbeInterval = 100 * time.Millisecond }, "", nil},
		{"negative suspicion", func(c *MembershipConfig) { c.SuspicionMult = -1 }, "SuspicionMult", nil},
		{"tiny tombstone ttl", func(c *MembershipConfig) { c.TombstoneTTL = time.Millisecond }, "TombstoneTTL", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := MembershipConfig{NodeID: "node-1"}
			tt.mod(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.want)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Validate = %v, want errors.Is %v", err, tt.wantErr)
			}
			if _, err := NewMembership(c); err == nil {
				t.Fatal("NewMembership accepted the configuration")
			}
		})
	}
}

func TestDetectionTime(t *testing.T) {
	d := DefaultMembershipConfig()
	tests := []struct {
		n    int
		want time.Duration
	}{
		{1, 4300 * time.Millisecond},
		{3, 4300 * time.Millisecond},
		{10, 4300 * time.Millisecond},
		{100, 6300 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := d.DetectionTime(tt.n); got != tt.want {
			t.Errorf("DetectionTime(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

func TestMembershipLifecycle(t *testing.T) {
	cfg := MembershipConfig{NodeID: "solo", BindAddr: "127.0.0.1:0", Meta: testMeta("solo"), Logger: testLogger()}
	fastGossip(&cfg)
	m, err := NewMembership(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.LocalMember(); got.ID != "solo" || got.Addr != "" || got.Region != "region-solo" {
		t.Fatalf("LocalMember before Start = %+v", got)
	}
	if err := m.Leave(ctxTimeout(t, time.Second)); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("Leave before Start = %v, want ErrNotStarted", err)
	}
	meta := testMeta("solo")
	meta.ClientAddr = "127.0.0.1:6651"
	if err := m.UpdateMeta(ctxTimeout(t, time.Second), meta); err != nil {
		t.Fatalf("UpdateMeta before Start: %v", err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start = %v, want ErrStarted", err)
	}
	host, port, err := net.SplitHostPort(m.Addr())
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("Addr = %q (%v), want 127.0.0.1 and the bound port", m.Addr(), err)
	}
	local := m.LocalMember()
	if local.Addr != m.Addr() || local.State != MemberAlive || local.ClientAddr != "127.0.0.1:6651" {
		t.Fatalf("LocalMember = %+v", local)
	}
	if got := m.Members(); len(got) != 1 || got[0].ID != "solo" {
		t.Fatalf("Members = %+v", got)
	}
	w := m.Watch()
	if ev := nextEvent(t, w, "solo", time.Second); ev.Type != EventJoin {
		t.Fatalf("first event %+v, want a join", ev)
	}
	rw := m.Routes().Watch()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for range w.C { // closed by Close
	}
	for range rw.C {
	}
	w.Stop()
	if err := m.Start(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close = %v, want ErrClosed", err)
	}
	if err := m.Leave(ctxTimeout(t, time.Second)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Leave after Close = %v, want ErrClosed", err)
	}
	if err := m.UpdateMeta(ctxTimeout(t, time.Second), meta); !errors.Is(err, ErrClosed) {
		t.Fatalf("UpdateMeta after Close = %v, want ErrClosed", err)
	}
	if err := m.Routes().Announce("p", Route{LeaderID: "solo", Term: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Announce after Close = %v, want ErrClosed", err)
	}
	if _, ok := <-m.Watch().C; ok {
		t.Fatal("a watch started after Close delivered an event")
	}
	if got := m.Members(); len(got) != 1 {
		t.Fatalf("Members after Close = %+v", got)
	}

	// A Membership closed before it started.
	m2, err := NewMembership(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m2.Close()
	if err := m2.Start(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close = %v, want ErrClosed", err)
	}
}

func TestMembershipJoin(t *testing.T) {
	t.Parallel()
	ms := startCluster(t, 3, nil)
	for _, m := range ms {
		got := m.Members()
		if len(got) != 3 {
			t.Fatalf("%s sees %d members", m.cfg.NodeID, len(got))
		}
		for i, mb := range got {
			other := ms[i] // sorted by id: node-0, node-1, node-2
			want := testMeta(other.cfg.NodeID)
			want.ID = other.cfg.NodeID
			want.RaftProtocol = RaftProtocol
			if mb.NodeMeta != want || mb.Addr != other.Addr() || mb.State != MemberAlive || mb.Since.IsZero() {
				t.Fatalf("%s sees %+v, want %+v at %s", m.cfg.NodeID, mb, want, other.Addr())
			}
		}
	}
	// A watch starts with every member.
	w := ms[1].Watch()
	defer w.Stop()
	seen := map[string]bool{}
	for len(seen) < 3 {
		select {
		case ev := <-w.C:
			if ev.Type != EventJoin || ev.Member.State != MemberAlive {
				t.Fatalf("initial event %+v", ev)
			}
			seen[ev.Member.ID] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("initial events: saw %v", seen)
		}
	}
}

// unusedAddr returns a 127.0.0.1 address on which nothing listens yet.
func unusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestMembershipJoinRetries(t *testing.T) {
	t.Parallel()
	seedAddr := unusedAddr(t)

	logs := newLogRecorder()
	joiner := newMember(t, "joiner", []string{seedAddr}, func(c *MembershipConfig) { c.Logger = slog.New(logs) })
	logs.wait(t, 10*time.Second, "could not join the cluster yet")
	seed := newMember(t, "seed", nil, func(c *MembershipConfig) { c.BindAddr = seedAddr })
	for _, m := range []*Membership{seed, joiner} {
		waitAlive(t, m, 2, 10*time.Second)
	}
}

// A node that another node joined before its own Join address was up
// still joins that address once it is: the three end in one cluster, not
// in two that never meet.
func TestMembershipJoinedStillJoinsItsSeed(t *testing.T) {
	t.Parallel()
	seedAddr := unusedAddr(t)

	logs := newLogRecorder()
	a := newMember(t, "a", []string{seedAddr}, func(c *MembershipConfig) { c.Logger = slog.New(logs) })
	c := newMember(t, "c", []string{a.Addr()}, nil)
	for _, m := range []*Membership{a, c} {
		waitAlive(t, m, 2, 10*time.Second)
	}
	// Let a finish a join round that began with c already in its view:
	// that round ends a join that counted any other member as enough.
	rounds := logs.count("the cluster")
	eventually(t, 10*time.Second, "a join round of a after c joined it", func() bool {
		return logs.count("the cluster") > rounds+1 || logs.has("joined the cluster")
	})
	seed := newMember(t, "seed", nil, func(cfg *MembershipConfig) { cfg.BindAddr = seedAddr })
	for _, m := range []*Membership{a, c, seed} {
		waitAlive(t, m, 3, 20*time.Second)
	}
}

func TestMembershipFailureDetection(t *testing.T) {
	t.Parallel()
	ms := startCluster(t, 3, nil)
	w := ms[0].Watch()
	defer w.Stop()
	nextEvent(t, w, "node-2", time.Second) // its initial join

	limit := ms[0].cfg.DetectionTime(3)
	ms[2].Close() // no Leave: the others must find out
	took := waitState(t, ms[:2], "node-2", MemberDead, 2*limit)
	t.Logf("node-2 declared dead by both others after %v (DetectionTime %v)", took, limit)
	if ev := nextEvent(t, w, "node-2", time.Second); ev.Type != EventDead || ev.Member.State != MemberDead {
		t.Fatalf("event %+v, want a dead event", ev)
	}
	waitAlive(t, ms[0], 2, time.Second)
}

func TestMembershipLeave(t *testing.T) {
	t.Parallel()
	ms := startCluster(t, 3, nil)
	w := ms[0].Watch()
	defer w.Stop()
	nextEvent(t, w, "node-2", time.Second)

	if err := ms[2].Leave(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if err := ms[2].Leave(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("second Leave: %v", err)
	}
	if err := ms[2].UpdateMeta(ctxTimeout(t, time.Second), testMeta("node-2")); !errors.Is(err, ErrLeft) {
		t.Fatalf("UpdateMeta after Leave = %v, want ErrLeft", err)
	}
	if got := ms[2].LocalMember().State; got != MemberLeft {
		t.Fatalf("the leaver sees itself %v", got)
	}
	ms[2].Close()
	// The others see it Left, at once and for good: not Dead once probes
	// to it fail.
	waitState(t, ms[:2], "node-2", MemberLeft, 5*time.Second)
	if ev := nextEvent(t, w, "node-2", time.Second); ev.Type != EventLeave {
		t.Fatalf("event %+v, want a leave event", ev)
	}
	limit := ms[0].cfg.DetectionTime(3)
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case ev := <-w.C:
			if ev.Member.ID == "node-2" {
				t.Fatalf("after leaving: %+v", ev)
			}
		case <-time.After(time.Until(deadline)):
		}
	}
	for _, m := range ms[:2] {
		if mb, _ := member(m, "node-2"); mb.State != MemberLeft {
			t.Fatalf("%s sees node-2 %v after %v", m.cfg.NodeID, mb.State, limit)
		}
	}
}

func TestMembershipRestartNewAddress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		waitDead bool // restart once the others have declared the old run dead
	}{
		{"after it was declared dead", true},
		{"before it was declared dead", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ms := startCluster(t, 3, nil)
			limit := ms[0].cfg.DetectionTime(3)
			old := ms[2].Addr()
			ms[2].Close()
			if tt.waitDead {
				waitState(t, ms[:2], "node-2", MemberDead, 2*limit)
			}
			restarted := newMember(t, "node-2", []string{ms[0].Addr()}, func(c *MembershipConfig) {
				c.Meta.ClientAddr = "127.0.0.1:6652"
			})
			if restarted.Addr() == old {
				t.Fatalf("restarted on the same address %s", old)
			}
			start := time.Now()
			for _, m := range ms[:2] {
				eventually(t, 3*limit, m.cfg.NodeID+" to see node-2 at its new address", func() bool {
					mb, ok := member(m, "node-2")
					return ok && mb.State == MemberAlive && mb.Addr == restarted.Addr() && mb.ClientAddr == "127.0.0.1:6652"
				})
			}
			t.Logf("new address known to all after %v (DetectionTime %v)", time.Since(start), limit)
			waitAlive(t, restarted, 3, 5*time.Second)
		})
	}
}

func TestMembershipUpdateMeta(t *testing.T) {
	t.Parallel()
	ms := startCluster(t, 3, nil)
	w := ms[0].Watch()
	defer w.Stop()
	nextEvent(t, w, "node-1", time.Second)

	meta := testMeta("node-1")
	meta.ClientAddr = "127.0.0.1:7001"
	meta.Version = "v2"
	if err := ms[1].UpdateMeta(ctxTimeout(t, 5*time.Second), meta); err != nil {
		t.Fatalf("UpdateMeta: %v", err)
	}
	for _, m := range ms {
		eventually(t, 5*time.Second, m.cfg.NodeID+" to see node-1's new meta", func() bool {
			mb, _ := member(m, "node-1")
			return mb.ClientAddr == "127.0.0.1:7001" && mb.Version == "v2" && mb.State == MemberAlive
		})
	}
	if ev := nextEvent(t, w, "node-1", time.Second); ev.Type != EventUpdate || ev.Member.Version != "v2" {
		t.Fatalf("event %+v, want an update", ev)
	}

	tooBig := meta
	tooBig.Region = strings.Repeat("r", 600)
	if err := ms[1].UpdateMeta(ctxTimeout(t, time.Second), tooBig); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("UpdateMeta with large meta = %v, want ErrMetaTooLarge", err)
	}
	other := meta
	other.ID = "node-9"
	if err := ms[1].UpdateMeta(ctxTimeout(t, time.Second), other); err == nil {
		t.Fatal("UpdateMeta accepted another node's id")
	}
}

// logRecorder is a slog.Handler that keeps the messages it sees.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func newLogRecorder() *logRecorder { return &logRecorder{} }

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) has(sub string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.msgs, func(m string) bool { return strings.Contains(m, sub) })
}

// count returns how many lines contain sub.
func (r *logRecorder) count(sub string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

func (r *logRecorder) wait(t *testing.T, d time.Duration, sub string) {
	t.Helper()
	eventually(t, d, fmt.Sprintf("a log line containing %q", sub), func() bool { return r.has(sub) })
}

// TestLeaveIntentOrder: whether a leave intent arrives before or after
// memberlist's news that the node is gone, the node ends Left; an intent of
// an earlier run of the node does not make a crash look like a leave.
func TestLeaveIntentOrder(t *testing.T) {
	const inst = 42
	tests := []struct {
		name       string
		intentInst uint64
		before     bool // the intent arrives before memberlist's news
		want       MemberState
		wantEvents []MemberEventType
	}{
		{"intent first", inst, true, MemberLeft, []MemberEventType{EventLeave}},
		{"intent last", inst, false, MemberLeft, []MemberEventType{EventDead, EventLeave}},
		{"intent of an earlier run first", inst + 1, true, MemberDead, []MemberEventType{EventDead}},
		{"intent of an earlier run last", inst + 1, false, MemberDead, []MemberEventType{EventDead}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewMembership(MembershipConfig{NodeID: "self", Logger: testLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			meta, err := encodeMeta(testMeta("peer"), inst)
			if err != nil {
				t.Fatal(err)
			}
			peer := nodeInfo{name: "peer", addr: "127.0.0.1:7000", meta: meta}
			m.applyNode(inJoin, peer)
			w := m.Watch()
			defer w.Stop()
			if ev := nextEvent(t, w, "peer", time.Second); ev.Type != EventJoin {
				t.Fatalf("initial event %+v", ev)
			}
			intent := func() {
				m.handleMsg(encodeLeaveMsg("peer", tt.intentInst), time.Now())
			}
			if tt.before {
				intent()
			}
			m.applyNode(inLeave, peer)
			if !tt.before {
				intent()
			}
			got, _ := member(m, "peer")
			if got.State != tt.want {
				t.Fatalf("state %v, want %v", got.State, tt.want)
			}
			// The watch coalesces a node's events for a slow reader: the
			// last one is what counts.
			ev := nextEvent(t, w, "peer", time.Second)
			if last := tt.wantEvents[len(tt.wantEvents)-1]; ev.Type != last && ev.Type != tt.wantEvents[0] {
				t.Fatalf("event %v, want %v", ev.Type, tt.wantEvents)
			}
			if ev.Type != tt.wantEvents[len(tt.wantEvents)-1] {
				if ev = nextEvent(t, w, "peer", time.Second); ev.Type != tt.wantEvents[len(tt.wantEvents)-1] {
					t.Fatalf("last event %v, want %v", ev.Type, tt.wantEvents)
				}
			}
		})
	}
}

// Each node advertises what it speaks on its Raft port; a node that
// advertises nothing (an older version) speaks ProtocolGroups, and an
// address no member advertises is unknown.
func TestMembershipProtocolOf(t *testing.T) {
	ms := startCluster(t, 2, func(c *MembershipConfig) { c.Meta.RaftAddr = c.NodeID + ":7650" })
	eventually(t, 10*time.Second, "node-0 to know node-1's Raft address", func() bool {
		return ms[0].ProtocolOf("node-1:7650") == RaftProtocol
	})
	if p := ms[0].ProtocolOf("nowhere:7650"); p != ProtocolUnknown {
		t.Fatalf("an unknown address speaks %d", p)
	}
	old, err := msgpack.Marshal(map[string]any{"a": "10.0.0.1:7650", "v": "older"})
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := decodeMeta("old", old)
	if err != nil || m.RaftProtocol != ProtocolGroups || m.RaftAddr != "10.0.0.1:7650" {
		t.Fatalf("an older node's metadata decodes to %+v, %v", m, err)
	}
}

// With gossip keys, members holding the cluster's key form it; a node
// with another key, or with none, cannot join: its tries fail and neither
// side lists the other.
func TestMembershipGossipKeys(t *testing.T) {
	t.Parallel()
	key := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	ms := startCluster(t, 2, func(c *MembershipConfig) { c.Keys = [][]byte{key(1)} })
	for _, outsider := range []struct {
		id   string
		keys [][]byte
	}{{"other-key", [][]byte{key(2)}}, {"no-key", nil}} {
		rec := newLogRecorder()
		m := newMember(t, outsider.id, []string{ms[0].Addr()}, func(c *MembershipConfig) {
			c.Keys = outsider.keys
			c.Logger = slog.New(rec)
		})
		rec.wait(t, 10*time.Second, "could not join the cluster yet")
		if n := len(m.Members()); n != 1 {
			t.Errorf("%s lists %d members after its join failed", outsider.id, n)
		}
		for _, in := range ms {
			if _, ok := member(in, outsider.id); ok {
				t.Errorf("%s lists %s, whose key is not the cluster's", in.cfg.NodeID, outsider.id)
			}
		}
	}
	// A rotation's first step: a node that has the new key after the old
	// (sealing with the old, taking both) joins those that have the old.
	newMember(t, "rotating", []string{ms[0].Addr()}, func(c *MembershipConfig) { c.Keys = [][]byte{key(1), key(3)} })
	waitAlive(t, ms[0], 3, 10*time.Second)
}

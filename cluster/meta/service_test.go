package meta

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fabriq-io/fabriq/cluster"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeGossip is a membership the test sets.
type fakeGossip struct {
	mu      sync.Mutex
	members []cluster.Member
	changed chan struct{}
}

func newFakeGossip(members ...cluster.Member) *fakeGossip {
	return &fakeGossip{members: members, changed: make(chan struct{}, 1)}
}

func (g *fakeGossip) Members() []cluster.Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.members)
}

func (g *fakeGossip) Changed() <-chan struct{} { return g.changed }

// setCatalog replaces the catalog format a member advertises.
func (g *fakeGossip) setCatalog(id string, format int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.members {
		if g.members[i].ID == id {
			g.members[i].Catalog = format
		}
	}
}

// set replaces a member's state and wakes the watchers.
func (g *fakeGossip) set(id string, state cluster.MemberState, since time.Time) {
	g.mu.Lock()
	for i := range g.members {
		if g.members[i].ID == id {
			g.members[i].State, g.members[i].Since = state, since
		}
	}
	g.mu.Unlock()
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// fakeHost runs, for every partition the catalog places on its node, a
// copy whose group holds exactly the placed members; leaders says which
// node leads each partition (default: the first replica). It counts the
// Views calls.
type fakeHost struct {
	node string
	svc  *Service

	mu        sync.Mutex
	viewCalls int
	changed   int
}

func (h *fakeHost) Views(parts []string) []View {
	h.mu.Lock()
	h.viewCalls++
	h.mu.Unlock()
	placed := h.svc.Placed()
	out := make([]View, len(parts))
	for i, p := range parts {
		if a, ok := placed[p]; ok {
			out[i] = View{Member: a.Member, Leader: h.LeaderOf(p) == h.node, Members: a.Members}
		}
	}
	return out
}

func (h *fakeHost) LeaderOf(p string) string {
	if m := h.svc.Members(p); len(m) > 0 {
		return NodeOf(m[0])
	}
	return ""
}

func (h *fakeHost) InUse(string) bool { return false }

func (h *fakeHost) Wake(string) {}

func (h *fakeHost) TransferLeadership(context.Context, string, string, string) error { return nil }

func (h *fakeHost) CatalogChanged() {
	h.mu.Lock()
	h.changed++
	h.mu.Unlock()
}

func (h *fakeHost) calls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.viewCalls
}

// testService is one node's control plane on its own Raft port.
type testService struct {
	*Service
	host *fakeHost
	addr string
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// startServices starts a control plane on each listener, node-0, node-1,
// ...; gossip lists them all alive, and they bootstrap the metadata group
// together.
func startServices(t *testing.T, lns []net.Listener, mod ...func(*Config)) ([]*testService, *fakeGossip) {
	t.Helper()
	var members []cluster.Member
	for i, ln := range lns {
		id := fmt.Sprintf("node-%d", i)
		members = append(members, cluster.Member{NodeMeta: cluster.NodeMeta{ID: id, ClientAddr: ln.Addr().String(), RaftAddr: ln.Addr().String(), Catalog: CatalogFormat}, State: cluster.MemberAlive})
	}
	g := newFakeGossip(members...)
	root := t.TempDir()
	var out []*testService
	for i, ln := range lns {
		out = append(out, startService(t, ln, members[i].ID, filepath.Join(root, members[i].ID), len(lns), g, mod...))
	}
	return out, g
}

func startService(t *testing.T, ln net.Listener, id, dir string, expect int, g *fakeGossip, mod ...func(*Config)) *testService {
	t.Helper()
	mux := cluster.NewMux(ln, nil)
	if err := mux.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mux.Close() })
	srv := cluster.NewRPCServer(mux, nil)
	client := cluster.NewRPCClient()
	t.Cleanup(func() { client.Close() })
	host := &fakeHost{node: id}
	gcfg := cluster.GroupConfig{Dir: dir, NodeID: id, Mux: mux, HeartbeatTimeout: 150 * time.Millisecond,
		LeaderLeaseTimeout: 150 * time.Millisecond, CommitTimeout: 5 * time.Millisecond}
	cfg := Config{
		Self:  Node{ID: id, ClientAddr: ln.Addr().String(), RaftAddr: ln.Addr().String()},
		Group: gcfg, BootstrapExpect: expect, ReplaceDeadAfter: time.Minute, BalanceInterval: time.Hour,
		Gossip: g, Host: host, RPC: srv, Client: client,
	}
	for _, m := range mod {
		m(&cfg)
	}
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	host.svc = svc
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return &testService{Service: svc, host: host, addr: ln.Addr().String()}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func leaderOf(t *testing.T, svcs []*testService) *testService {
	t.Helper()
	var leader *testService
	eventually(t, "a metadata leader", func() bool {
		for _, s := range svcs {
			if s.IsLeader() {
				leader = s
				return true
			}
		}
		return false
	})
	return leader
}

// One node alone: it bootstraps, registers itself, catches up, and serves
// the admin requests with their errors.
func TestServiceAlone(t *testing.T) {
	ln := listen(t)
	s := startService(t, ln, "node-0", t.TempDir(), 1, newFakeGossip(cluster.Member{
		NodeMeta: cluster.NodeMeta{ID: "node-0", ClientAddr: ln.Addr().String(), RaftAddr: ln.Addr().String(), Catalog: CatalogFormat}, State: cluster.MemberAlive}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the catalog to catch up", s.Current)
	name := "persistent://t/f/s"
	tenancySteps(ctx, t, s.Service, name)
	placement, err := s.CreateStream(ctx, StreamSpec{Name: name}) // the fabric's 2 partitions
	if err != nil || len(placement) != 2 || !slices.Equal(placement[1], []string{"node-0"}) {
		t.Fatalf("create: %v %v", placement, err)
	}
	if st, _ := s.Catalog().Stream(name); st.Retention.MessageTTLMs != 60_000 {
		t.Fatalf("stream retention %+v, want the fabric's default", st.Retention)
	}
	if err := s.DeleteFabric(ctx, "t/f"); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("delete of a fabric with a stream: %v", err)
	}
	if err := s.DeleteTenant(ctx, "t"); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("delete of a tenant with a fabric: %v", err)
	}
	if _, err := s.CreateStream(ctx, StreamSpec{Name: name}); !errors.Is(err, ErrStreamExists) {
		t.Fatalf("create again: %v", err)
	}
	if _, err := s.CreateStream(ctx, StreamSpec{Name: "persistent://t/f/r3", Replicas: 3}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("three replicas on one node: %v", err)
	}
	if _, err := s.CreateStream(ctx, StreamSpec{Name: "no name"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bad name: %v", err)
	}
	if a := s.Placed()[name+"-partition-1"]; a.Member != "node-0" || !slices.Equal(a.Bootstrap, []string{"node-0"}) {
		t.Fatalf("placed %+v", s.Placed())
	}
	if err := s.SetRetention(ctx, name, Retention{TimeMs: -1}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRetention(ctx, "persistent://t/f/none", Retention{}); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("retention of a missing stream: %v", err)
	}
	if err := s.DeleteStream(ctx, name); err != nil || s.Members(name+"-partition-0") != nil {
		t.Fatalf("delete: %v, members %v", err, s.Members(name+"-partition-0"))
	}
	if i, err := s.Index(ctx); err != nil || i != s.Catalog().Applied() {
		t.Fatalf("index %d %v", i, err)
	}
}

// Two nodes: the follower catches up through the leader, renews its own
// member through the leader and may not renew another node's; a round of
// views over a thousand partitions makes one call per node.
func TestServiceRenewAndViews(t *testing.T) {
	svcs, _ := startServices(t, []net.Listener{listen(t), listen(t)})
	leader := leaderOf(t, svcs)
	follower := svcs[0]
	if follower == leader {
		follower = svcs[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, s := range svcs {
		if err := s.WaitRegistered(ctx); err != nil {
			t.Fatal(err)
		}
		eventually(t, s.cfg.Self.ID+"'s catalog to catch up", s.Current)
	}
	mustFabric(ctx, t, leader.Service, "t/f")
	if _, err := follower.CreateStream(ctx, StreamSpec{Name: "persistent://t/f/s", Replicas: 2}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("create on a follower: %v", err)
	}
	if _, err := leader.CreateStream(ctx, StreamSpec{Name: "persistent://t/f/s", Replicas: 2, Partitions: 1000}); err != nil {
		t.Fatal(err)
	}
	part := "persistent://t/f/s-partition-7"
	eventually(t, "the follower to know the stream", func() bool { return follower.Members(part) != nil })

	// Another node's member: refused, whoever asks.
	other := "persistent://t/f/s-partition-8"
	self := follower.Placed()[part].Member
	err := leader.Renew(ctx, other, leader.Placed()[other].Member, &net.TCPAddr{IP: net.IPv4(10, 9, 9, 9), Port: 1})
	if !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("a renewal from another host: %v", err)
	}
	if err := follower.AskRenewal(ctx, part, self); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the renewed member", func() bool { return follower.Placed()[part].Member != self })
	if err := follower.AskRenewal(ctx, part, self); !errors.Is(err, ErrNotMember) {
		t.Fatalf("renewing a renewed member: %v", err)
	}

	var parts []Repair
	for i := range 1000 {
		parts = append(parts, Repair{Name: fmt.Sprintf("persistent://t/f/s-partition-%d", i), Placement: []string{"node-0", "node-1"}})
	}
	before := follower.host.calls()
	leaders, views := leader.settledViews(ctx, parts)
	if got := follower.host.calls() - before; got != 1 {
		t.Fatalf("views of 1000 partitions took %d calls to the other node", got)
	}
	if len(leaders) != 1000 || len(views.of(part)) != 2 {
		t.Fatalf("%d leaders, views of %s: %+v", len(leaders), part, views.of(part))
	}
}

// The metadata leader moves the replica of a node dead for longer than
// the delay to the least loaded live node, once the partition has
// settled.
func TestServiceReplacesDeadNode(t *testing.T) {
	svcs, g := startServices(t, []net.Listener{listen(t), listen(t), listen(t), listen(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	leader := leaderOf(t, svcs)
	eventually(t, "four nodes registered", func() bool { return len(leader.Catalog().Nodes()) == 4 })
	mustFabric(ctx, t, leader.Service, "t/f")
	if _, err := leader.CreateStream(ctx, StreamSpec{Name: "persistent://t/f/s", Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	st, _ := leader.Catalog().Stream("persistent://t/f/s")
	if !slices.Equal(st.Placement[0], []string{"node-0", "node-1", "node-2"}) {
		t.Fatalf("placement %v", st.Placement)
	}
	svcs[2].Close()
	g.set("node-2", cluster.MemberDead, time.Now().Add(-time.Hour))
	live := []*testService{svcs[0], svcs[1], svcs[3]}
	eventually(t, "the dead node's replica to move", func() bool {
		// A new leader may not have applied every entry yet.
		st, ok := leaderOf(t, live).Catalog().Stream("persistent://t/f/s")
		return ok && slices.Equal(st.Placement[0], []string{"node-0", "node-1", "node-3"})
	})
	st, _ = leaderOf(t, live).Catalog().Stream("persistent://t/f/s")
	if m := st.Members(0); st.SinceOf(0, 2) == 0 || m[2] != fmt.Sprintf("node-3@%d", st.SinceOf(0, 2)) {
		t.Fatalf("members %v", m)
	}
}

// In a rolling upgrade, a node whose metadata leader runs an older
// version (no node-to-node calls) catches up through the leader's client
// port, and asks it nothing else.
func TestServiceCatchesUpFromAnOlderLeader(t *testing.T) {
	var mu sync.Mutex
	var svcs []*testService
	legacyCalls := 0
	older := func(c *Config) {
		c.Protocol = func(string) int { return cluster.ProtocolGroups }
		c.LegacyIndex = func(ctx context.Context, clientAddr string) (uint64, error) {
			mu.Lock()
			legacyCalls++
			all := svcs
			mu.Unlock()
			for _, s := range all {
				if s.addr == clientAddr && s.IsLeader() {
					return s.Index(ctx)
				}
			}
			return 0, errors.New("not the leader")
		}
	}
	started, _ := startServices(t, []net.Listener{listen(t), listen(t)}, older)
	mu.Lock()
	svcs = started
	mu.Unlock()
	for _, s := range started {
		eventually(t, s.cfg.Self.ID+"'s catalog to catch up", s.Current)
	}
	mu.Lock()
	n := legacyCalls
	mu.Unlock()
	if n == 0 {
		t.Fatal("the follower caught up without asking the leader's client port")
	}
	leader := leaderOf(t, started)
	follower := started[0]
	if follower == leader {
		follower = started[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := follower.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	if err := follower.AskRenewal(ctx, "persistent://t/f/s", follower.cfg.Self.ID); !errors.Is(err, errOlderNode) {
		t.Fatalf("a renewal asked of an older leader: %v", err)
	}
}

// mustFabric creates a tenant and its fabric.
func mustFabric(ctx context.Context, t *testing.T, s *Service, fabric string) {
	t.Helper()
	tenant, _, _ := strings.Cut(fabric, "/")
	if err := s.CreateTenant(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateFabric(ctx, FabricSpec{Name: fabric}); err != nil {
		t.Fatal(err)
	}
}

// tenancySteps walks a lone service through the rules of tenants and
// fabrics, up to creating the fabric of stream (tenant t, fabric t/f)
// with defaults of 2 partitions and a one-minute message TTL.
func tenancySteps(ctx context.Context, t *testing.T, s *Service, stream string) {
	t.Helper()
	if _, err := s.CreateStream(ctx, StreamSpec{Name: stream}); !errors.Is(err, ErrTenantNotFound) {
		t.Fatalf("a stream of a missing tenant: %v", err)
	}
	if err := s.CreateFabric(ctx, FabricSpec{Name: "t/f"}); !errors.Is(err, ErrTenantNotFound) {
		t.Fatalf("a fabric of a missing tenant: %v", err)
	}
	if err := s.CreateTenant(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTenant(ctx, "t"); !errors.Is(err, ErrTenantExists) {
		t.Fatalf("the tenant again: %v", err)
	}
	if _, err := s.CreateStream(ctx, StreamSpec{Name: stream}); !errors.Is(err, ErrFabricNotFound) {
		t.Fatalf("a stream of a missing fabric: %v", err)
	}
	for _, bad := range []FabricSpec{
		{Name: "t"}, {Name: "t/f", Regions: []string{"eu west"}}, {Name: "t/f", Defaults: StreamDefaults{Partitions: 5000}},
	} {
		if err := s.CreateFabric(ctx, bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("fabric %+v: %v, want ErrInvalid", bad, err)
		}
	}
	spec := FabricSpec{Name: "persistent://t/f", Defaults: StreamDefaults{Partitions: 2, Retention: Retention{MessageTTLMs: 60_000}}}
	if err := s.CreateFabric(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateFabric(ctx, spec); !errors.Is(err, ErrFabricExists) {
		t.Fatalf("the fabric again: %v", err)
	}
	// A fabric of regions this lone node (of no region) is not in.
	if err := s.CreateFabric(ctx, FabricSpec{Name: "t/far", Regions: []string{"us", "eu", "us"}}); err != nil {
		t.Fatal(err)
	}
	if f, ok := s.Catalog().Fabric("t/far"); !ok || !slices.Equal(f.Regions, []string{"eu", "us"}) {
		t.Fatalf("fabric t/far is %+v (%v), want regions eu, us", f, ok)
	}
	if _, err := s.CreateStream(ctx, StreamSpec{Name: "persistent://t/far/s"}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "region eu, us") {
		t.Fatalf("a stream of a fabric with no node: %v", err)
	}
	if _, err := s.CreateStream(ctx, StreamSpec{Name: "persistent://t/far/s", Local: "ap"}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not one of fabric t/far's") {
		t.Fatalf("a local stream outside its fabric's regions: %v", err)
	}
	if err := s.DeleteFabric(ctx, "t/far"); err != nil {
		t.Fatal(err)
	}
	// public/default exists from the start and stays; other fabrics of
	// public come on first use.
	eventually(t, "the default fabric", func() bool { _, ok := s.Catalog().Fabric("public/default"); return ok })
	if err := s.DeleteFabric(ctx, "public/default"); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("delete of public/default: %v", err)
	}
	if err := s.DeleteTenant(ctx, "public"); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("delete of public: %v", err)
	}
	if _, err := s.CreateStream(ctx, StreamSpec{Name: "persistent://public/scratch/x"}); err != nil {
		t.Fatalf("a stream of a new fabric of public: %v", err)
	}
	if _, ok := s.Catalog().Fabric("public/scratch"); !ok {
		t.Fatal("fabric public/scratch was not made on first use")
	}
}

// A rolling upgrade: while a live node advertises a catalog format older
// than tenants and fabrics, the leader writes none of their entries (that
// node would stop at them); once it reads them, it does.
func TestNewEntriesWaitForEveryNode(t *testing.T) {
	svcs, g := startServices(t, []net.Listener{listen(t), listen(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	leader := leaderOf(t, svcs)
	old := svcs[0]
	if old == leader {
		old = svcs[1]
	}
	g.setCatalog(old.cfg.Self.ID, 0)
	if err := leader.CreateTenant(ctx, "acme"); !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), old.cfg.Self.ID) {
		t.Fatalf("a tenant while %s reads no tenants: %v", old.cfg.Self.ID, err)
	}
	if leader.Catalog().Tenant("acme") {
		t.Fatal("the refused tenant was written")
	}
	g.setCatalog(old.cfg.Self.ID, CatalogFormat)
	if err := leader.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

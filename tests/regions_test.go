package tests

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/transport"
)

// Nodes in three regions (n1 in eu; n2 to n5 in us; n6 in ap): a
// global stream of a fabric of eu and us spreads over both and never
// goes to ap, one of a fabric of every region over all three; --leader-region eu moves leadership to n1, and back to it
// after a failover once n1 is back; a local stream of us stays in us
// through a node kill and the repair that follows.
func TestRegions(t *testing.T) {
	t.Parallel() // mostly waiting on failure detection and restarts: see TestMain
	regions := []string{"eu", "us", "us", "us", "us", "ap"}
	root := t.TempDir()
	dirs := make([]string, len(regions))
	for i := range dirs {
		dirs[i] = filepath.Join(root, fmt.Sprint("n", i+1))
	}
	nodes := startClusterPer(t, dirs, func(i int) []string { return []string{"--region", regions[i]} }, "--replace-dead-after", "6s")
	regionOf := map[string]string{}
	for i, n := range nodes {
		regionOf[n.id] = regions[i]
	}
	ctx := testContext(t, 3*time.Minute)
	// Each step's start, in the output of a failed run: where the three
	// minutes went.
	start := time.Now()
	step := func(what string) { t.Logf("%6.2fs %s", time.Since(start).Seconds(), what) }
	c := newClient(t, clusterURL(nodes))
	step("tenant and fabric")
	if err := c.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateFabric(ctx, "acme/west", client.FabricOptions{Regions: []string{"eu", "us"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	// describe describes a stream once the node asked knows it (a
	// node's catalog may lag the creation by a moment).
	describe := func(stream string) client.StreamInfo {
		t.Helper()
		var info client.StreamInfo
		var err error
		eventually(ctx, t, "a description of "+stream, func() bool {
			info, err = c.DescribeStream(ctx, stream)
			return err == nil
		})
		return info
	}
	placedIn := func(stream string) [][]string {
		t.Helper()
		info := describe(stream)
		var out [][]string
		for _, p := range info.Partitions {
			var rs []string
			for _, id := range p.Replicas {
				rs = append(rs, regionOf[id])
			}
			slices.Sort(rs)
			if !slices.Equal(p.Regions, regionsOf(p.Replicas, regionOf)) {
				t.Fatalf("describe says replicas %v are in %v", p.Replicas, p.Regions)
			}
			out = append(out, rs)
		}
		return out
	}

	// Global: every partition in both regions, none in ap.
	step("global stream")
	const global = "persistent://acme/west/global"
	if err := c.CreateStream(ctx, global, 3, 0); err != nil {
		t.Fatal(err)
	}
	for _, rs := range placedIn(global) {
		if !slices.Equal(rs, []string{"eu", "us", "us"}) {
			t.Fatalf("a partition of the global stream is in %v, want eu, us, us", rs)
		}
	}
	// A fabric of every region (public/default): each of the three holds
	// a replica of every partition.
	const everywhere = "persistent://public/default/everywhere"
	step("stream of every region")
	if err := c.CreateStream(ctx, everywhere, 2, 3); err != nil {
		t.Fatal(err)
	}
	for _, rs := range placedIn(everywhere) {
		if !slices.Equal(rs, []string{"ap", "eu", "us"}) {
			t.Fatalf("a partition of a stream of every region is in %v, want ap, eu, us", rs)
		}
	}
	// Too few nodes where a local stream may go: refused, clearly.
	step("local stream too big for its region")
	if err := c.CreateStream(ctx, "persistent://acme/west/big", 1, 2, client.WithLocal("eu")); transport.CodeOf(err) != transport.CodeInvalidArgument {
		t.Fatalf("two replicas local to a region of one node: %v, want an invalid argument", err)
	}

	// Leader region: leadership goes to n1, and comes back to it.
	const led = "persistent://acme/west/led"
	step("stream with a leader region")
	if err := c.CreateStream(ctx, led, 1, 3, client.WithLeaderRegion("eu")); err != nil {
		t.Fatal(err)
	}
	leaderOf := func() string {
		info, err := c.DescribeStream(ctx, led)
		if err != nil || len(info.Partitions) != 1 {
			return ""
		}
		return info.Partitions[0].Leader
	}
	eventually(ctx, t, "the leader in eu", func() bool { return leaderOf() == "n1" })
	n1 := nodes[0]
	step("n1 killed")
	n1.kill()
	eventually(ctx, t, "a leader in us while eu is down", func() bool { return regionOf[leaderOf()] == "us" })
	step("n1 restarted")
	n1.restart(t)
	eventually(ctx, t, "the leader back in eu", func() bool { return leaderOf() == "n1" })

	// Local: in us, and still in us after one of its nodes dies and the
	// replica moves.
	const local = "persistent://acme/west/local"
	step("local stream")
	if err := c.CreateStream(ctx, local, 1, 3, client.WithLocal("us")); err != nil {
		t.Fatal(err)
	}
	info := describe(local)
	if rs := placedIn(local); !slices.Equal(rs[0], []string{"us", "us", "us"}) {
		t.Fatalf("the local stream is in %v", rs)
	}
	victim := byID(nodes, info.Partitions[0].Replicas[0])
	step(victim.id + " killed")
	victim.kill()
	eventually(ctx, t, "the local stream's replica to move", func() bool {
		info, err := c.DescribeStream(ctx, local)
		return err == nil && !slices.Contains(info.Partitions[0].Replicas, victim.id)
	})
	if rs := placedIn(local); !slices.Equal(rs[0], []string{"us", "us", "us"}) {
		t.Fatalf("after the repair the local stream is in %v", rs)
	}
}

// regionsOf returns the regions of nodes, as regionOf gives them.
func regionsOf(nodes []string, regionOf map[string]string) []string {
	out := make([]string, len(nodes))
	for i, id := range nodes {
		out[i] = regionOf[id]
	}
	return out
}

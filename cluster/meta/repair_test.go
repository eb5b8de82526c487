package meta

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/cluster"
)

func member(id string, state cluster.MemberState, since time.Time) cluster.Member {
	return cluster.Member{NodeMeta: cluster.NodeMeta{ID: id, RaftAddr: id + ":7650"}, State: state, Since: since}
}

// A node is dead once gossip has seen it down for longer than the delay,
// left or failed alike; this node never is; a node gossip sees alive
// (a suspect one too) is live, and so is this node whatever gossip says.
func TestDeadAndLiveNodes(t *testing.T) {
	now := time.Unix(1000, 0)
	members := []cluster.Member{
		member("a", cluster.MemberAlive, now.Add(-time.Hour)),
		member("b", cluster.MemberDead, now.Add(-2*time.Minute)),
		member("c", cluster.MemberLeft, now.Add(-2*time.Minute)),
		member("d", cluster.MemberDead, now.Add(-30*time.Second)),
		member("self", cluster.MemberDead, now.Add(-time.Hour)),
	}
	dead := DeadNodes(members, "self", now, time.Minute)
	if !reflect.DeepEqual(dead, map[string]bool{"b": true, "c": true}) {
		t.Fatalf("dead %v", dead)
	}
	if live := LiveNodes(members, "self"); !reflect.DeepEqual(live, []string{"a", "self"}) {
		t.Fatalf("live %v", live)
	}
	if live := LiveNodes(append(members, member("self", cluster.MemberAlive, now)), "self"); !reflect.DeepEqual(live, []string{"a", "self"}) {
		t.Fatalf("live with self alive %v", live)
	}
}

// A partition with a dead replica is repaired while its live replicas are
// a majority, and reported lost otherwise; a replica on a node down for
// less than the delay counts as neither dead nor live.
func TestFindRepairs(t *testing.T) {
	s := Stream{Name: "persistent://t/f/s", Partitions: 4, Placement: [][]string{
		{"a", "b", "c"}, // healthy
		{"a", "b", "x"}, // x dead: repair
		{"a", "x", "y"}, // x, y dead: lost
		{"a", "x", "z"}, // x dead, z down but not dead yet: a alone is no majority
	}, Since: [][]uint64{nil, {0, 4, 0}}}
	dead := map[string]bool{"x": true, "y": true}
	repairs, lost := FindRepairs([]Stream{s}, dead, []string{"a", "b", "c"})
	want := []Repair{{Stream: s.Name, Partition: 1, Name: "persistent://t/f/s-partition-1", Placement: []string{"a", "b", "x"}, Members: []string{"a", "b@4", "x"}, Leaving: []string{"x"}}}
	if !reflect.DeepEqual(repairs, want) {
		t.Fatalf("repairs %+v, want %+v", repairs, want)
	}
	if len(lost) != 2 || lost[0].Partition != 2 || lost[1].Partition != 3 || !reflect.DeepEqual(lost[0].Leaving, []string{"x", "y"}) {
		t.Fatalf("lost %+v", lost)
	}
	if k := repairs[0].Key(); k != "persistent://t/f/s/1" {
		t.Fatalf("key %s", k)
	}
}

// A replica moves to the least loaded live node that holds none of the
// partition, the first of equals; a node the stream's spread allows, of
// the leader region when the partition would have no replica there, of a
// region the others do not use.
func TestTarget(t *testing.T) {
	regionOf := map[string]string{"a": "eu", "b": "eu", "c": "us", "d": "us", "x": "us", "y": "ap"}
	for _, tc := range []struct {
		placement, live []string
		load            map[string]int
		spread          Spread
		want            string
		ok              bool
	}{
		{[]string{"a", "x"}, []string{"a", "b", "c"}, map[string]int{"b": 3, "c": 1}, Spread{}, "c", true},
		{[]string{"a", "x"}, []string{"a", "b", "c", "d"}, map[string]int{"c": 1, "d": 1}, Spread{}, "c", true}, // not the lighter b: us is unused once x goes
		{[]string{"a", "b"}, []string{"a", "b"}, nil, Spread{}, "", false},
		{[]string{"a", "x"}, []string{"a", "b", "c", "y"}, nil, Spread{Regions: []string{"eu", "us"}}, "c", true}, // not ap
		{[]string{"c", "x"}, []string{"a", "c", "d"}, nil, Spread{Regions: []string{"us"}}, "d", true},            // local: not eu
		{[]string{"c", "x"}, []string{"a", "c"}, nil, Spread{Regions: []string{"us"}}, "", false},                 // local, region full
		{[]string{"a", "x"}, []string{"a", "b", "c", "d"}, map[string]int{"c": 9, "d": 9}, Spread{Leader: "us"}, "c", true},
	} {
		got, ok := Target(tc.placement, "x", tc.live, tc.load, regionOf, tc.spread)
		if got != tc.want || ok != tc.ok {
			t.Fatalf("Target(%v, %v, %v, %+v) = %q %v, want %q %v", tc.placement, tc.live, tc.load, tc.spread, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSettled(t *testing.T) {
	want := []string{"a", "b@5", "c"}
	placement := []string{"a", "b", "c"}
	agreed := View{Members: []string{"c", "a", "b@5"}}
	lead := View{Member: "a", Leader: true, Members: agreed.Members}
	for _, tc := range []struct {
		name   string
		leader string
		except []string
		views  map[string]View
		err    string // a part of the error, "" for settled
	}{
		{"settled", "a", nil, map[string]View{"a": lead, "b": agreed, "c": agreed}, ""},
		{"leader unknown", "", nil, nil, "leader is not known"},
		{"leader silent", "a", nil, map[string]View{"b": agreed, "c": agreed}, "did not answer"},
		{"leader deposed", "a", nil, map[string]View{"a": agreed, "b": agreed, "c": agreed}, "no longer leads"},
		{"change in flight", "a", nil, map[string]View{"a": {Leader: true}, "b": agreed, "c": agreed}, "no committed configuration"},
		{"members differ", "a", nil, map[string]View{"a": {Leader: true, Members: []string{"a", "b", "c"}}}, "the catalog places"},
		{"a member behind", "a", nil, map[string]View{"a": lead, "b": {Members: []string{"a", "b", "c"}}, "c": agreed}, "node b has not caught up"},
		{"a member without a copy", "a", nil, map[string]View{"a": lead, "b": {}, "c": agreed}, "node b has not caught up"},
		{"the member leaving is not asked", "a", []string{"b"}, map[string]View{"a": lead, "c": agreed}, ""},
		{"a placed node silent", "a", nil, map[string]View{"a": lead, "b": agreed}, "node c did not answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Settled(want, placement, tc.except, tc.leader, tc.views)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("not settled: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err %v, want one saying %q", err, tc.err)
			}
		})
	}
}

// Live nodes are registered when the catalog lacks them or holds other
// addresses; they join the metadata group as voters up to the limit, as
// non-voters after, and a member at a new address is added again as what
// it was.
func TestRegistrationsAndMetaChanges(t *testing.T) {
	catalog := map[string]Node{"a": {ID: "a", RaftAddr: "a:1"}, "b": {ID: "b", RaftAddr: "b:1"}}
	want := []Node{{ID: "a", RaftAddr: "a:1"}, {ID: "b", RaftAddr: "b:2"}, {ID: "c", RaftAddr: "c:1"}, {ID: "d", RaftAddr: "d:1"}, {ID: "e", RaftAddr: "e:1"}}
	reg := Registrations(want, func(id string) (Node, bool) { n, ok := catalog[id]; return n, ok })
	if fmt.Sprint(reg) != "[{b  b:2 } {c  c:1 } {d  d:1 } {e  e:1 }]" {
		t.Fatalf("registrations %v", reg)
	}
	servers := []cluster.Server{{ID: "a", Address: "a:1", Voter: true}, {ID: "b", Address: "b:1", Voter: false}, {ID: "z", Address: "z:1", Voter: true}}
	got := MetaChanges(want, servers, 4)
	exp := []MetaChange{{ID: "b", Addr: "b:2"}, {ID: "c", Addr: "c:1", Voter: true}, {ID: "d", Addr: "d:1", Voter: true}, {ID: "e", Addr: "e:1"}}
	if !reflect.DeepEqual(got, exp) {
		t.Fatalf("changes %+v, want %+v", got, exp)
	}
	if got := MetaChanges(want[:1], servers, 4); len(got) != 0 {
		t.Fatalf("changes for a member in place: %+v", got)
	}
}

func TestNodeHosts(t *testing.T) {
	n := Node{ClientAddr: "10.0.0.1:6650", RaftAddr: "[::1]:7650"}
	if got := n.Hosts(); !reflect.DeepEqual(got, []string{"10.0.0.1", "::1"}) {
		t.Fatalf("hosts %v", got)
	}
}

package meta

import (
	"reflect"
	"testing"

	"github.com/fabriq-io/fabriq/cluster"
)

// A node runs each partition placed on it as the member placed: the node
// id for the initial placement, NODE@INDEX after a move or renewal; only
// a partition still in its initial placement may be bootstrapped.
func TestAssignments(t *testing.T) {
	streams := []Stream{
		{Name: "persistent://t/f/s", Partitions: 2, Placement: [][]string{{"a", "b"}, {"b", "c"}},
			Initial: [][]string{nil, {"b", "c"}}, Since: [][]uint64{{0, 9}}},
		{Name: "persistent://t/f/one", Partitions: 1, Placement: [][]string{{"b"}}, Initial: [][]string{{"b"}}},
		{Name: "not a name", Partitions: 1, Placement: [][]string{{"b"}}},
	}
	placed, bad := Assignments(streams, "b")
	want := map[string]Assignment{
		"persistent://t/f/s-partition-0": {Member: "b@9", Members: []string{"a", "b@9"}},
		"persistent://t/f/s-partition-1": {Member: "b", Members: []string{"b", "c"}, Bootstrap: []string{"b", "c"}},
		"persistent://t/f/one":           {Member: "b", Members: []string{"b"}, Bootstrap: []string{"b"}},
	}
	if !reflect.DeepEqual(placed, want) || !reflect.DeepEqual(bad, []string{"not a name"}) {
		t.Fatalf("placed %+v (bad %v), want %+v", placed, bad, want)
	}
}

// What a node does with its copies: keep those placed as they run, retire
// those moved away, drop those of deleted streams (with their data) and
// those placed again as a new member (then open the new member), hand over
// the leadership of a retired copy, open what is missing.
func TestPlanNode(t *testing.T) {
	placed := map[string]Assignment{
		"keep":     {Member: "n"},
		"renewed":  {Member: "n@7"},
		"new":      {Member: "n"},
		"back":     {Member: "n@9"}, // retired here, placed again
		"back-run": {Member: "n@8"},
	}
	running := map[string]string{"keep": "n", "renewed": "n", "moved": "n", "gone": "n@3", "back-run": "n"}
	retired := map[string]bool{"back": false, "old-leads": true, "old": false, "retired-gone": true}
	exists := func(p string) bool { return p != "gone" && p != "retired-gone" }
	got := PlanNode(placed, running, retired, exists)
	want := Plan{
		Retire:   []string{"moved"},
		HandOver: []string{"old-leads"},
		Drop: []Drop{
			{Partition: "back", Retired: true},
			{Partition: "back-run"},
			{Partition: "gone", Remove: true},
			{Partition: "renewed"},
			{Partition: "retired-gone", Remove: true, Retired: true},
		},
		Open: []string{"back", "back-run", "new", "renewed"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("plan\n %+v\nwant\n %+v", got, want)
	}
	if got := PlanNode(map[string]Assignment{"keep": {Member: "n"}}, map[string]string{"keep": "n"}, nil, exists); !reflect.DeepEqual(got, Plan{}) {
		t.Fatalf("a node running what is placed plans %+v", got)
	}
}

// A leader first removes the members whose node is down or runs a new
// member, then adds the missing members (and those at a new address),
// then removes the members moved to live nodes' elsewhere; never itself.
func TestMemberChanges(t *testing.T) {
	addrs := map[string]string{"a": "a:1", "b": "b:1", "c": "c:2", "d": "d:1", "e": "e:1"}
	addr := func(n string) (string, bool) { a, ok := addrs[n]; return a, ok }
	alive := func(n string) bool { return n != "x" }
	servers := []cluster.Server{
		{ID: "a", Address: "a:1"}, // the leader, kept
		{ID: "b", Address: "b:1"}, // renewed as b@9: goes first
		{ID: "c", Address: "c:1"}, // moved address: added again
		{ID: "x", Address: "x:1"}, // moved away, its node dead: goes first
		{ID: "e", Address: "e:1"}, // moved away, its node alive: goes last
		{ID: "self-old", Address: "s:1"},
	}
	want := []string{"a", "b@9", "c", "d@4", "u"} // u: a node the catalog does not know
	got := MemberChanges(servers, want, "self-old", addr, alive)
	exp := []MemberChange{
		{Remove: true, ID: "b"},
		{Remove: true, ID: "x"},
		{ID: "b@9", Addr: "b:1"},
		{ID: "c", Addr: "c:2"},
		{ID: "d@4", Addr: "d:1"},
		{Remove: true, ID: "e"},
	}
	if !reflect.DeepEqual(got, exp) {
		t.Fatalf("changes\n %+v\nwant\n %+v", got, exp)
	}
	in := []cluster.Server{{ID: "a", Address: "a:1"}, {ID: "c", Address: "c:2"}}
	if got := MemberChanges(in, []string{"a", "c"}, "a", addr, alive); len(got) != 0 {
		t.Fatalf("changes for a group that matches: %+v", got)
	}
}

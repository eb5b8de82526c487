package broker

import "testing"

// A node is ready only serving, with a metadata leader and every
// partition of its led.
func TestReadinessReady(t *testing.T) {
	ready := Readiness{Serving: true, MetadataLeader: "n1", Partitions: 2, Halted: []string{"p2"}}
	if !ready.Ready() {
		t.Fatalf("%+v is not ready", ready)
	}
	for _, r := range []Readiness{
		{MetadataLeader: "n1", Partitions: 2},
		{Serving: true, Partitions: 2},
		{Serving: true, MetadataLeader: "n1", Partitions: 2, Leaderless: []string{"p1"}},
	} {
		if r.Ready() {
			t.Errorf("%+v is ready", r)
		}
	}
}

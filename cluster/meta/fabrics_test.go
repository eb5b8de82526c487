package meta

import (
	"slices"
	"testing"
)

// Tenants hold fabrics and fabrics hold streams: neither is created
// under a parent that is missing, and neither is deleted while it holds
// anything.
func TestTenantsAndFabrics(t *testing.T) {
	c := NewCatalog(nil, nil)
	steps := []struct {
		entry Entry
		done  bool
	}{
		{CreateFabric{Name: "acme/eu"}, false}, // no tenant acme yet
		{CreateTenant{Name: "acme"}, true},
		{CreateTenant{Name: "acme"}, false}, // exists
		{CreateFabric{Name: "acme/eu", Regions: []string{"eu-1", "eu-2"}, Defaults: StreamDefaults{Partitions: 4}}, true},
		{CreateFabric{Name: "acme/eu"}, false}, // exists
		{DeleteTenant{Name: "acme"}, false},    // holds acme/eu
		{CreateStream{Name: "persistent://acme/eu/orders", Partitions: 1, Replicas: 1, Placement: [][]string{{"n1"}}}, true},
		{DeleteFabric{Name: "acme/eu"}, false}, // holds orders
		{DeleteStream{Name: "persistent://acme/eu/orders"}, true},
		{DeleteFabric{Name: "acme/eu"}, true},
		{DeleteFabric{Name: "acme/eu"}, false}, // gone
		{DeleteTenant{Name: "acme"}, true},
		{DeleteTenant{Name: "acme"}, false}, // gone
	}
	for i, s := range steps {
		if got := mustApply(t, c, uint64(i+1), s.entry).Done; got != s.done {
			t.Fatalf("step %d, %T %+v: done %v, want %v", i, s.entry, s.entry, got, s.done)
		}
		if i == 3 {
			f, ok := c.Fabric("acme/eu")
			if !ok || !slices.Equal(f.Regions, []string{"eu-1", "eu-2"}) || f.Defaults.Partitions != 4 {
				t.Fatalf("fabric acme/eu is %+v (%v)", f, ok)
			}
		}
	}
	if len(c.Tenants()) != 0 || len(c.Fabrics("acme")) != 0 {
		t.Fatalf("left tenants %v, fabrics %v", c.Tenants(), c.Fabrics("acme"))
	}
}

// A stream created in a fabric the catalog does not have (an entry of a
// version without fabrics) brings its tenant and fabric along.
func TestStreamAdoptsItsFabric(t *testing.T) {
	c := NewCatalog(nil, nil)
	mustApply(t, c, 1, CreateStream{Name: "persistent://old/prod/s", Partitions: 1, Replicas: 1, Placement: [][]string{{"n1"}}})
	if !c.Tenant("old") {
		t.Fatal("tenant old not adopted")
	}
	if f, ok := c.Fabric("old/prod"); !ok || len(f.Regions) != 0 {
		t.Fatalf("fabric old/prod is %+v (%v), want adopted with every region", f, ok)
	}
	if mustApply(t, c, 2, DeleteFabric{Name: "old/prod"}).Done {
		t.Fatal("the adopted fabric was deleted while it holds a stream")
	}
}

// A fabric's regions change only when no stream of it would be left
// outside them: a replica on a node of a dropped region, or a local or
// leader region dropped. Adding a region is always allowed.
func TestSetFabricRegions(t *testing.T) {
	c := NewCatalog(nil, nil)
	steps := []struct {
		entry Entry
		done  bool
	}{
		{RegisterNode{ID: "a", Region: "eu"}, true},
		{RegisterNode{ID: "b", Region: "us"}, true},
		{SetFabricRegions{Name: "t/f", Regions: []string{"eu"}}, false}, // no such fabric
		{CreateTenant{Name: "t"}, true},
		{CreateFabric{Name: "t/f", Regions: []string{"eu", "us"}}, true},
		{CreateStream{Name: "persistent://t/f/g", Partitions: 1, Replicas: 2, Placement: [][]string{{"a", "b"}}}, true},
		{SetFabricRegions{Name: "t/f", Regions: []string{"eu"}}, false},            // g has a replica in us
		{SetFabricRegions{Name: "t/f", Regions: []string{"ap", "eu", "us"}}, true}, // adding
		{DeleteStream{Name: "persistent://t/f/g"}, true},
		{CreateStream{Name: "persistent://t/f/l", Partitions: 1, Replicas: 1, Placement: [][]string{{"a"}}, Local: "eu"}, true},
		{SetFabricRegions{Name: "t/f", Regions: []string{"ap", "us"}}, false}, // l is local to eu
		{CreateStream{Name: "persistent://t/f/led", Partitions: 1, Replicas: 1, Placement: [][]string{{"a"}}, LeaderRegion: "eu"}, true},
		{DeleteStream{Name: "persistent://t/f/l"}, true},
		{SetFabricRegions{Name: "t/f", Regions: []string{"ap", "us"}}, false}, // led is led in eu, its replica there
		{SetFabricRegions{Name: "t/f", Regions: []string{"eu"}}, true},
		{SetFabricRegions{Name: "t/f"}, true}, // every region
	}
	for i, s := range steps {
		if got := mustApply(t, c, uint64(i+1), s.entry).Done; got != s.done {
			t.Fatalf("step %d, %T %+v: done %v, want %v", i, s.entry, s.entry, got, s.done)
		}
	}
	if f, _ := c.Fabric("t/f"); len(f.Regions) != 0 {
		t.Fatalf("regions %v, want every region", f.Regions)
	}
}

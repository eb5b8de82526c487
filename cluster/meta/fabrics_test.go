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

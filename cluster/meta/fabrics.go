package meta

import (
	"maps"
	"slices"
	"strings"

	"github.com/fabriq-io/fabriq/geofabric"
)

func (s *state) createTenant(_ uint64, e CreateTenant) bool {
	if _, ok := s.Tenants[e.Name]; ok {
		return false
	}
	s.Tenants[e.Name] = Tenant(e)
	return true
}

// deleteTenant deletes a tenant without fabrics.
func (s *state) deleteTenant(_ uint64, e DeleteTenant) bool {
	if _, ok := s.Tenants[e.Name]; !ok || s.tenantHasFabrics(e.Name) {
		return false
	}
	delete(s.Tenants, e.Name)
	return true
}

// createFabric creates a fabric of an existing tenant.
func (s *state) createFabric(_ uint64, e CreateFabric) bool {
	tenant, _, _ := strings.Cut(e.Name, "/")
	if _, ok := s.Tenants[tenant]; !ok {
		return false
	}
	if _, ok := s.Fabrics[e.Name]; ok {
		return false
	}
	s.Fabrics[e.Name] = Fabric(e)
	return true
}

// deleteFabric deletes a fabric without streams.
func (s *state) deleteFabric(_ uint64, e DeleteFabric) bool {
	if _, ok := s.Fabrics[e.Name]; !ok || s.fabricHasStreams(e.Name) {
		return false
	}
	delete(s.Fabrics, e.Name)
	return true
}

func (s *state) tenantHasFabrics(tenant string) bool {
	for name := range s.Fabrics {
		if t, _, _ := strings.Cut(name, "/"); t == tenant {
			return true
		}
	}
	return false
}

func (s *state) fabricHasStreams(fabric string) bool {
	for name := range s.Streams {
		if fabricOf(name) == fabric {
			return true
		}
	}
	return false
}

// fabricOf returns TENANT/FABRIC of a full stream name, or "" for a name
// that does not parse.
func fabricOf(stream string) string {
	st, err := geofabric.ParseStream(stream)
	if err != nil {
		return ""
	}
	return st.FabricName()
}

// adopt adds the tenant and fabric of a stream when the catalog lacks
// them: streams created by versions without fabrics, in their log or in
// their snapshot, bring theirs along, with no regions (every region) and
// no defaults.
func (s *state) adopt(stream string) {
	st, err := geofabric.ParseStream(stream)
	if err != nil {
		return
	}
	if _, ok := s.Tenants[st.Tenant]; !ok {
		s.Tenants[st.Tenant] = Tenant{Name: st.Tenant}
	}
	if _, ok := s.Fabrics[st.FabricName()]; !ok {
		s.Fabrics[st.FabricName()] = Fabric{Name: st.FabricName()}
	}
}

// setFabricRegions replaces a fabric's regions unless a stream of it would
// be left outside them (outside).
func (s *state) setFabricRegions(_ uint64, e SetFabricRegions) bool {
	f, ok := s.Fabrics[e.Name]
	if !ok || s.outside(e.Name, e.Regions) != "" {
		return false
	}
	f.Regions = e.Regions
	s.Fabrics[e.Name] = f
	return true
}

// outside names the first stream of a fabric that regions would leave
// outside: with a replica on a node of another region, or a local or
// leader region not among them; "" when none. Empty regions is every
// region.
func (s *state) outside(fabric string, regions []string) string {
	if len(regions) == 0 {
		return ""
	}
	in := func(r string) bool { return slices.Contains(regions, r) }
	for _, name := range slices.Sorted(maps.Keys(s.Streams)) {
		st := s.Streams[name]
		if fabricOf(name) != fabric {
			continue
		}
		if (st.Local != "" && !in(st.Local)) || (st.LeaderRegion != "" && !in(st.LeaderRegion)) {
			return name
		}
		for _, p := range st.Placement {
			for _, node := range p {
				if !in(s.Nodes[node].Region) {
					return name
				}
			}
		}
	}
	return ""
}

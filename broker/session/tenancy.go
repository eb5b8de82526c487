package session

import (
	"context"
	"slices"

	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// tenancy serves the requests about tenants and fabrics; it reports
// whether cmd was one.
func (s *Session) tenancy(cmd transport.Command) bool {
	ctx, cancel := context.WithTimeout(s.ctx, requestTimeout)
	defer cancel()
	switch c := cmd.(type) {
	case *transport.CreateTenant:
		s.answer(c.RequestID, s.node.CreateTenant(ctx, c.Tenant))
	case *transport.DeleteTenant:
		s.answer(c.RequestID, s.node.DeleteTenant(ctx, c.Tenant))
	case *transport.ListTenants:
		if !s.synced(ctx, c.RequestID) {
			break
		}
		tenants := s.node.Tenants()
		if s.cfg.Auth != nil {
			tenants = slices.DeleteFunc(tenants, func(t string) bool { return !s.visible(t, "") })
		}
		s.reply(&transport.ListTenantsResult{RequestID: c.RequestID, Tenants: tenants})
	case *transport.CreateFabric:
		s.answer(c.RequestID, s.node.CreateFabric(ctx, c))
	case *transport.DeleteFabric:
		s.answer(c.RequestID, s.node.DeleteFabric(ctx, c.Fabric))
	case *transport.SetFabricRegions:
		s.answer(c.RequestID, s.node.SetFabricRegions(ctx, c.Fabric, c.Regions))
	case *transport.ListFabrics:
		if !s.synced(ctx, c.RequestID) {
			break
		}
		fabrics, err := s.node.Fabrics(c.Tenant)
		if err != nil {
			s.replyErr(c.RequestID, err)
			break
		}
		fabrics = slices.DeleteFunc(fabrics, func(f transport.FabricInfo) bool {
			tenant, name, err := geofabric.ParseFabric(f.Fabric)
			return err != nil || !s.visible(tenant, name)
		})
		s.reply(&transport.ListFabricsResult{RequestID: c.RequestID, Fabrics: fabrics})
	case *transport.WatchStreams:
		s.watchStreams(c)
	case *transport.CloseWatch:
		s.closeWatch(c)
	case *transport.DescribeFabric:
		if !s.synced(ctx, c.RequestID) {
			break
		}
		info, err := s.node.DescribeFabric(c.Fabric)
		if err != nil {
			s.replyErr(c.RequestID, err)
			break
		}
		s.reply(&transport.DescribeFabricResult{RequestID: c.RequestID, Info: info})
	default:
		return false
	}
	return true
}

// synced waits until the node's catalog holds everything committed
// before a read, so that it sees a change made through another node a
// moment ago; if it cannot, it answers the request with the error.
func (s *Session) synced(ctx context.Context, requestID uint64) bool {
	if err := s.node.SyncCatalog(ctx); err != nil {
		s.replyErr(requestID, err)
		return false
	}
	return true
}

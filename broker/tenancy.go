package broker

import (
	"context"

	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/cluster/meta"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

func (h sessionNode) CreateTenant(ctx context.Context, name string) error {
	return h.n.metaChange(func() error { return h.n.control.CreateTenant(ctx, name) })
}

func (h sessionNode) DeleteTenant(ctx context.Context, name string) error {
	return h.n.metaChange(func() error { return h.n.control.DeleteTenant(ctx, name) })
}

func (h sessionNode) Tenants() []string { return h.n.catalog.Tenants() }

func (h sessionNode) CreateFabric(ctx context.Context, c *transport.CreateFabric) error {
	spec := meta.FabricSpec{Name: c.Fabric, Regions: c.Regions, Defaults: meta.StreamDefaults{
		Partitions: int(c.Defaults.Partitions), Replicas: int(c.Defaults.Replicas)}}
	if r := c.Defaults.Retention; r != nil {
		if err := validRetention(*r); err != nil {
			return wire.Errorf(transport.CodeInvalidArgument, "%v", err)
		}
		spec.Defaults.Retention = retentionFromWire(*r)
	}
	return h.n.metaChange(func() error { return h.n.control.CreateFabric(ctx, spec) })
}

func (h sessionNode) DeleteFabric(ctx context.Context, name string) error {
	return h.n.metaChange(func() error { return h.n.control.DeleteFabric(ctx, name) })
}

func (h sessionNode) SetFabricRegions(ctx context.Context, name string, regions []string) error {
	return h.n.metaChange(func() error { return h.n.control.SetFabricRegions(ctx, name, regions) })
}

func (h sessionNode) Fabrics(tenant string) ([]transport.FabricInfo, error) {
	if _, err := geofabric.ParseTenant(tenant); err != nil {
		return nil, wire.Errorf(transport.CodeInvalidName, "%v", err)
	}
	if !h.n.catalog.Tenant(tenant) {
		return nil, h.n.notFound(transport.CodeTenantNotFound, "tenant %s does not exist", tenant)
	}
	out := []transport.FabricInfo{}
	for _, f := range h.n.catalog.Fabrics(tenant) {
		out = append(out, h.n.fabricInfo(f))
	}
	return out, nil
}

func (h sessionNode) DescribeFabric(name string) (transport.FabricInfo, error) {
	tenant, fabric, err := geofabric.ParseFabric(name)
	if err != nil {
		return transport.FabricInfo{}, wire.Errorf(transport.CodeInvalidName, "%v", err)
	}
	f, ok := h.n.catalog.Fabric(tenant + "/" + fabric)
	if !ok && tenant == geofabric.DefaultTenant && fabric == geofabric.DefaultFabric {
		// There from the start, even before the metadata leader wrote it.
		f, ok = meta.Fabric{Name: tenant + "/" + fabric}, true
	}
	if !ok {
		return transport.FabricInfo{}, h.n.notFound(transport.CodeFabricNotFound, "fabric %s/%s does not exist", tenant, fabric)
	}
	return h.n.fabricInfo(f), nil
}

// metaChange runs a change of the metadata group, which only its leader
// makes: elsewhere the answer is NotLeader with the leader's address.
func (n *Node) metaChange(change func() error) error {
	if !n.control.IsLeader() {
		return n.metaNotLeader(n.control.Leader())
	}
	if err := change(); err != nil {
		return n.metaError(err)
	}
	return nil
}

// notFound is the answer for a tenant or fabric the catalog does not
// have, or ServiceNotReady while the catalog catches up (see
// streamNotFound).
func (n *Node) notFound(code transport.ErrorCode, format string, args ...any) error {
	if !n.catalogCurrent() {
		return wire.Errorf(transport.CodeServiceNotReady, "node %s is catching up with the metadata group", n.cfg.NodeID)
	}
	return wire.Errorf(code, format, args...)
}

// fabricInfo describes a fabric to clients.
func (n *Node) fabricInfo(f meta.Fabric) transport.FabricInfo {
	info := transport.FabricInfo{Fabric: f.Name, Regions: f.Regions, Defaults: transport.StreamDefaults{
		Partitions: int32(f.Defaults.Partitions), Replicas: int32(f.Defaults.Replicas)}}
	if f.Defaults.Retention != (meta.Retention{}) {
		r := retentionToWire(f.Defaults.Retention)
		info.Defaults.Retention = &r
	}
	info.Streams = int32(n.catalog.StreamsIn(f.Name))
	return info
}

// autoCreate creates a stream on its first use (Config.NoAutoCreate is
// off) and waits until this node's catalog has it.
func (n *Node) autoCreate(ctx context.Context, name string) (meta.Stream, error) {
	st, err := geofabric.ParseStream(name)
	if err != nil {
		return meta.Stream{}, wire.Errorf(transport.CodeInvalidName, "%v", err)
	}
	if err := n.control.AutoCreate(ctx, st.String(), n.cfg.AutoCreateFabrics); err != nil {
		return meta.Stream{}, n.metaError(err)
	}
	for {
		changed := n.catalog.Watch()
		if sm, ok := n.catalog.Stream(st.String()); ok {
			n.logger.Info("stream created on first use", "stream", st.String(), "partitions", sm.Partitions)
			return sm, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return meta.Stream{}, wire.Errorf(transport.CodeServiceNotReady, "stream %s was created; this node has not seen it yet", st)
		}
	}
}

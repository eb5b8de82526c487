package client

import (
	"context"
	"fmt"

	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// FabricInfo describes a fabric: its regions, the defaults of its new
// streams and how many streams it holds.
type FabricInfo = transport.FabricInfo

// FabricOptions configures a fabric CreateFabric creates; zero fields
// take the cluster's defaults.
type FabricOptions struct {
	// Regions are the regions the fabric's streams may use; none is every
	// region of the cluster.
	Regions []string
	// Partitions, Replicas and Retention are what a stream created in
	// the fabric without saying otherwise gets (0, 0 and nil: one
	// partition, one replica, no retention).
	Partitions int
	Replicas   int
	Retention  *RetentionPolicy
}

// CreateTenant creates a tenant; a tenant holds fabrics.
func (c *Client) CreateTenant(ctx context.Context, tenant string) error {
	if _, err := geofabric.ParseTenant(tenant); err != nil {
		return err
	}
	_, err := c.admin(ctx, func(id uint64) transport.Command {
		return &transport.CreateTenant{RequestID: id, Tenant: tenant}
	})
	return err
}

// DeleteTenant deletes a tenant; it is refused (NotEmpty) while the
// tenant has fabrics.
func (c *Client) DeleteTenant(ctx context.Context, tenant string) error {
	if _, err := geofabric.ParseTenant(tenant); err != nil {
		return err
	}
	_, err := c.admin(ctx, func(id uint64) transport.Command {
		return &transport.DeleteTenant{RequestID: id, Tenant: tenant}
	})
	return err
}

// ListTenants lists the tenants, sorted.
func (c *Client) ListTenants(ctx context.Context) ([]string, error) {
	res, err := c.admin(ctx, func(id uint64) transport.Command {
		return &transport.ListTenants{RequestID: id}
	})
	if err != nil {
		return nil, err
	}
	r, ok := res.(*transport.ListTenantsResult)
	if !ok {
		return nil, fmt.Errorf("client: unexpected answer %T to list tenants", res)
	}
	return r.Tenants, nil
}

// CreateFabric creates the fabric "TENANT/FABRIC" of an existing tenant.
func (c *Client) CreateFabric(ctx context.Context, fabric string, opts FabricOptions) error {
	tenant, name, err := geofabric.ParseFabric(fabric)
	if err != nil {
		return err
	}
	req := transport.CreateFabric{Fabric: tenant + "/" + name, Regions: opts.Regions, Defaults: transport.StreamDefaults{
		Partitions: int32(opts.Partitions), Replicas: int32(opts.Replicas), Retention: opts.Retention}}
	_, err = c.admin(ctx, func(id uint64) transport.Command {
		r := req
		r.RequestID = id
		return &r
	})
	return err
}

// SetFabricRegions replaces a fabric's regions (none: every region).
// Adding regions always works; a change that would leave a stream of the
// fabric with a replica, a local or a leader region outside the new ones
// is refused (NotAllowed, naming the stream): nothing moves or is deleted
// silently.
func (c *Client) SetFabricRegions(ctx context.Context, fabric string, regions []string) error {
	tenant, name, err := geofabric.ParseFabric(fabric)
	if err != nil {
		return err
	}
	_, err = c.admin(ctx, func(id uint64) transport.Command {
		return &transport.SetFabricRegions{RequestID: id, Fabric: tenant + "/" + name, Regions: regions}
	})
	return err
}

// DeleteFabric deletes a fabric; it is refused (NotEmpty) while the
// fabric has streams.
func (c *Client) DeleteFabric(ctx context.Context, fabric string) error {
	tenant, name, err := geofabric.ParseFabric(fabric)
	if err != nil {
		return err
	}
	_, err = c.admin(ctx, func(id uint64) transport.Command {
		return &transport.DeleteFabric{RequestID: id, Fabric: tenant + "/" + name}
	})
	return err
}

// ListFabrics lists a tenant's fabrics, by name.
func (c *Client) ListFabrics(ctx context.Context, tenant string) ([]FabricInfo, error) {
	if _, err := geofabric.ParseTenant(tenant); err != nil {
		return nil, err
	}
	res, err := c.admin(ctx, func(id uint64) transport.Command {
		return &transport.ListFabrics{RequestID: id, Tenant: tenant}
	})
	if err != nil {
		return nil, err
	}
	r, ok := res.(*transport.ListFabricsResult)
	if !ok {
		return nil, fmt.Errorf("client: unexpected answer %T to list fabrics", res)
	}
	return r.Fabrics, nil
}

// DescribeFabric describes a fabric.
func (c *Client) DescribeFabric(ctx context.Context, fabric string) (FabricInfo, error) {
	tenant, name, err := geofabric.ParseFabric(fabric)
	if err != nil {
		return FabricInfo{}, err
	}
	res, err := c.admin(ctx, func(id uint64) transport.Command {
		return &transport.DescribeFabric{RequestID: id, Fabric: tenant + "/" + name}
	})
	if err != nil {
		return FabricInfo{}, err
	}
	r, ok := res.(*transport.DescribeFabricResult)
	if !ok {
		return FabricInfo{}, fmt.Errorf("client: unexpected answer %T to describe fabric", res)
	}
	return r.Info, nil
}

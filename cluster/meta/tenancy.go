package meta

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fabriq-io/fabriq/geofabric"
)

// FabricSpec is what CreateFabric creates.
type FabricSpec struct {
	Name     string         // TENANT/FABRIC, with or without the scheme
	Regions  []string       // the regions its streams may use; empty is every region
	Defaults StreamDefaults // for the streams created in it
}

// CreateTenant creates a tenant, as the metadata leader. The errors:
// ErrInvalid, *NotLeaderError, ErrTenantExists, ErrNotReady.
func (s *Service) CreateTenant(ctx context.Context, name string) error {
	if _, err := geofabric.ParseTenant(name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	res, err := s.apply(ctx, CreateTenant{Name: name})
	if err != nil {
		return err
	}
	if !res.Done {
		return fmt.Errorf("%w: %s", ErrTenantExists, name)
	}
	return nil
}

// DeleteTenant deletes a tenant that has no fabric, as the metadata
// leader. DefaultTenant stays. The errors: ErrInvalid, *NotLeaderError,
// ErrTenantNotFound, ErrNotEmpty, ErrNotAllowed, ErrNotReady.
func (s *Service) DeleteTenant(ctx context.Context, name string) error {
	if _, err := geofabric.ParseTenant(name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if name == geofabric.DefaultTenant {
		return fmt.Errorf("%w: tenant %s holds the streams of short names and is not deleted", ErrNotAllowed, name)
	}
	if !s.catalog.Tenant(name) {
		return fmt.Errorf("%w: %s", ErrTenantNotFound, name)
	}
	if f := s.catalog.Fabrics(name); len(f) > 0 {
		return fmt.Errorf("%w: tenant %s has %d fabrics (%s first); delete them first", ErrNotEmpty, name, len(f), f[0].Name)
	}
	res, err := s.apply(ctx, DeleteTenant{Name: name})
	if err != nil {
		return err
	}
	if !res.Done {
		return fmt.Errorf("%w: tenant %s changed meanwhile; try again", ErrNotReady, name)
	}
	return nil
}

// CreateFabric creates a fabric of an existing tenant, as the metadata
// leader. The errors: ErrInvalid, *NotLeaderError, ErrTenantNotFound,
// ErrFabricExists, ErrNotReady.
func (s *Service) CreateFabric(ctx context.Context, spec FabricSpec) error {
	tenant, fabric, err := geofabric.ParseFabric(spec.Name)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	e := CreateFabric{Name: tenant + "/" + fabric, Defaults: spec.Defaults}
	for _, r := range spec.Regions {
		if err := geofabric.CheckRegion(r); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	e.Regions = slices.Compact(slices.Sorted(slices.Values(spec.Regions)))
	if err := checkDefaults(spec.Defaults); err != nil {
		return err
	}
	if !s.catalog.Tenant(tenant) {
		return fmt.Errorf("%w: %s (create it first)", ErrTenantNotFound, tenant)
	}
	res, err := s.apply(ctx, e)
	if err != nil {
		return err
	}
	if !res.Done {
		if _, ok := s.catalog.Fabric(e.Name); ok {
			return fmt.Errorf("%w: %s", ErrFabricExists, e.Name)
		}
		return fmt.Errorf("%w: tenant %s changed meanwhile; try again", ErrNotReady, tenant)
	}
	return nil
}

// SetFabricRegions replaces a fabric's regions, as the metadata leader.
// Adding regions is always allowed; a change that would leave a stream of
// the fabric with a replica, a local or a leader region outside the new
// regions is refused (ErrNotAllowed, naming the stream): nothing is moved
// or deleted silently. Empty regions is every region. The errors:
// ErrInvalid, *NotLeaderError, ErrFabricNotFound, ErrNotAllowed,
// ErrNotReady.
func (s *Service) SetFabricRegions(ctx context.Context, name string, regions []string) error {
	tenant, fabric, err := geofabric.ParseFabric(name)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	name = tenant + "/" + fabric
	for _, r := range regions {
		if err := geofabric.CheckRegion(r); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	regions = slices.Compact(slices.Sorted(slices.Values(regions)))
	if _, ok := s.catalog.Fabric(name); !ok {
		return fmt.Errorf("%w: %s", ErrFabricNotFound, name)
	}
	refuse := func(stream string) error {
		return fmt.Errorf("%w: stream %s of fabric %s has replicas or a region outside %s; delete or move it first",
			ErrNotAllowed, stream, name, strings.Join(regions, ", "))
	}
	if st := s.catalog.Outside(name, regions); st != "" {
		return refuse(st)
	}
	res, err := s.apply(ctx, SetFabricRegions{Name: name, Regions: regions})
	if err != nil {
		return err
	}
	if !res.Done {
		if st := s.catalog.Outside(name, regions); st != "" {
			return refuse(st)
		}
		return fmt.Errorf("%w: fabric %s changed meanwhile; try again", ErrNotReady, name)
	}
	return nil
}

// checkDefaults checks a fabric's stream defaults.
func checkDefaults(d StreamDefaults) error {
	if d.Partitions != 0 {
		if err := geofabric.ValidatePartitions(d.Partitions); err != nil {
			return fmt.Errorf("%w: default %v", ErrInvalid, err)
		}
	}
	if d.Replicas < 0 {
		return fmt.Errorf("%w: default replicas must be at least 1, not %d", ErrInvalid, d.Replicas)
	}
	return nil
}

// DeleteFabric deletes a fabric that has no stream, as the metadata
// leader. DefaultTenant/DefaultFabric stays. The errors: ErrInvalid,
// *NotLeaderError, ErrFabricNotFound, ErrNotEmpty, ErrNotAllowed,
// ErrNotReady.
func (s *Service) DeleteFabric(ctx context.Context, name string) error {
	tenant, fabric, err := geofabric.ParseFabric(name)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	name = tenant + "/" + fabric
	if tenant == geofabric.DefaultTenant && fabric == geofabric.DefaultFabric {
		return fmt.Errorf("%w: fabric %s holds the streams of short names and is not deleted", ErrNotAllowed, name)
	}
	if _, ok := s.catalog.Fabric(name); !ok {
		return fmt.Errorf("%w: %s", ErrFabricNotFound, name)
	}
	if n := s.catalog.StreamsIn(name); n > 0 {
		return fmt.Errorf("%w: fabric %s has %d streams; delete them first", ErrNotEmpty, name, n)
	}
	res, err := s.apply(ctx, DeleteFabric{Name: name})
	if err != nil {
		return err
	}
	if !res.Done {
		return fmt.Errorf("%w: fabric %s changed meanwhile; try again", ErrNotReady, name)
	}
	return nil
}

// streamFabric returns the fabric a new stream goes in, creating it (and
// its tenant) where allowed: in DefaultTenant, anywhere with
// AutoCreateFabrics, or when fabrics is set.
func (s *Service) streamFabric(ctx context.Context, st geofabric.Stream, fabrics bool) (Fabric, error) {
	if f, ok := s.catalog.Fabric(st.FabricName()); ok {
		return f, nil
	}
	auto := fabrics || s.cfg.AutoCreateFabrics || st.Tenant == geofabric.DefaultTenant
	if !s.catalog.Tenant(st.Tenant) {
		if !auto {
			return Fabric{}, fmt.Errorf("%w: %s: create it and its fabric %s first", ErrTenantNotFound, st.Tenant, st.FabricName())
		}
		if err := s.CreateTenant(ctx, st.Tenant); err != nil && !errors.Is(err, ErrTenantExists) {
			return Fabric{}, err
		}
	}
	if !auto {
		return Fabric{}, fmt.Errorf("%w: %s: create it first", ErrFabricNotFound, st.FabricName())
	}
	if err := s.CreateFabric(ctx, FabricSpec{Name: st.FabricName()}); err != nil && !errors.Is(err, ErrFabricExists) {
		return Fabric{}, err
	}
	f, _ := s.catalog.Fabric(st.FabricName())
	return f, nil
}

// ensureDefaultFabric creates DefaultTenant and its DefaultFabric when
// the catalog lacks them, as the metadata leader: every cluster has them
// from the start.
func (s *Service) ensureDefaultFabric(ctx context.Context) error {
	st := geofabric.Stream{Tenant: geofabric.DefaultTenant, Fabric: geofabric.DefaultFabric}
	_, err := s.streamFabric(ctx, st, false)
	return err
}

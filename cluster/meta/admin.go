package meta

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fabriq-io/fabriq/geofabric"
)

// StreamSpec is what CreateStream creates.
type StreamSpec struct {
	Name       string // a full stream name, persistent://TENANT/FABRIC/STREAM
	Partitions int    // 0 is the fabric's default, or 1
	Replicas   int    // 0 is the fabric's default, or 1
	// Retention is the retention policy; nil is the fabric's default.
	Retention *Retention
	// Fabrics creates the stream's tenant and fabric when they are
	// missing, as Config.AutoCreateFabrics does for every stream.
	Fabrics bool
	// Local makes a local stream: every replica in this region, which
	// must be one of the fabric's. Empty makes a global stream, spread
	// over the fabric's regions.
	Local string
	// LeaderRegion is where the stream's partitions should be led; it
	// must be a region the stream's replicas may use.
	LeaderRegion string
}

// CreateStream places a new stream's partitions on the registered nodes
// and records it, as the metadata leader; it returns the placement. The
// stream's fabric must exist, unless it may be created here (see
// Config.AutoCreateFabrics); what the spec leaves out comes from the
// fabric's defaults. The errors: ErrInvalid (a name, a partition count,
// or a replication factor the cluster cannot hold), *NotLeaderError,
// ErrTenantNotFound, ErrFabricNotFound, ErrStreamExists, ErrNotReady.
func (s *Service) CreateStream(ctx context.Context, spec StreamSpec) ([][]string, error) {
	st, err := geofabric.ParseStream(spec.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !s.group.IsLeader() {
		return nil, &NotLeaderError{LeaderID: s.Leader()}
	}
	if _, ok := s.catalog.Stream(st.String()); ok {
		return nil, fmt.Errorf("%w: %s", ErrStreamExists, st)
	}
	f, err := s.streamFabric(ctx, st, spec.Fabrics)
	if err != nil {
		return nil, err
	}
	partitions := cmp.Or(spec.Partitions, f.Defaults.Partitions, 1)
	replicas := cmp.Or(spec.Replicas, f.Defaults.Replicas, 1)
	retention := f.Defaults.Retention
	if spec.Retention != nil {
		retention = *spec.Retention
	}
	if err := geofabric.ValidatePartitions(partitions); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	spread, err := streamSpread(spec, f)
	if err != nil {
		return nil, err
	}
	placement, err := Place(s.placeable(), Load(s.catalog.Streams()), partitions, replicas, spread)
	if err != nil {
		return nil, err
	}
	res, err := s.apply(ctx, CreateStream{Name: st.String(), Partitions: partitions, Replicas: replicas, Placement: placement,
		Retention: retention, Local: spec.Local, LeaderRegion: spec.LeaderRegion})
	if err != nil {
		return nil, err
	}
	if !res.Done {
		return nil, fmt.Errorf("%w: %s", ErrStreamExists, st)
	}
	return placement, nil
}

// streamSpread checks a new stream's regions against its fabric's and
// returns where its replicas may go.
func streamSpread(spec StreamSpec, f Fabric) (Spread, error) {
	for _, r := range []string{spec.Local, spec.LeaderRegion} {
		if r == "" {
			continue
		}
		if err := geofabric.CheckRegion(r); err != nil {
			return Spread{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	if spec.Local != "" && len(f.Regions) > 0 && !slices.Contains(f.Regions, spec.Local) {
		return Spread{}, fmt.Errorf("%w: region %s is not one of fabric %s's (%s)", ErrInvalid, spec.Local, f.Name, strings.Join(f.Regions, ", "))
	}
	spread := SpreadOf(Stream{Local: spec.Local, LeaderRegion: spec.LeaderRegion}, f.Regions)
	if spec.LeaderRegion != "" && !spread.allows(spec.LeaderRegion) {
		return Spread{}, fmt.Errorf("%w: the leader region %s is not a region the stream's replicas may use (%s)", ErrInvalid, spec.LeaderRegion, spread.where())
	}
	return spread, nil
}

// placeable returns the registered nodes that gossip does not see down:
// a new stream's replicas go to nodes that can take them now.
func (s *Service) placeable() []Node {
	nodes := s.catalog.Nodes()
	if s.cfg.Gossip == nil {
		return nodes
	}
	dead := DeadNodes(s.cfg.Gossip.Members(), s.cfg.Self.ID, time.Now(), 0)
	return slices.DeleteFunc(nodes, func(n Node) bool { return dead[n.ID] })
}

// DeleteStream deletes a stream, as the metadata leader. Deleting a
// stream that is not there does nothing. The errors: *NotLeaderError,
// ErrNotReady.
func (s *Service) DeleteStream(ctx context.Context, name string) error {
	_, err := s.apply(ctx, DeleteStream{Name: name})
	return err
}

// SetRetention replaces a stream's retention policy, as the metadata
// leader. The errors: *NotLeaderError, ErrStreamNotFound, ErrNotReady.
func (s *Service) SetRetention(ctx context.Context, name string, policy Retention) error {
	res, err := s.apply(ctx, SetRetention{Stream: name, Retention: policy})
	if err != nil {
		return err
	}
	if !res.Done {
		return fmt.Errorf("%w: %s", ErrStreamNotFound, name)
	}
	return nil
}

// AutoCreate creates a stream on its first use, with its fabric's
// defaults, and with its tenant and fabric when fabrics is set; a stream
// that exists meanwhile is no error. Any node may call it: a follower
// asks the metadata leader. The errors: ErrInvalid, ErrTenantNotFound,
// ErrFabricNotFound, ErrNotReady.
func (s *Service) AutoCreate(ctx context.Context, stream string, fabrics bool) error {
	if s.group.IsLeader() {
		return s.autoCreateHere(ctx, stream, fabrics)
	}
	leader := s.Leader()
	if leader == "" {
		return fmt.Errorf("%w: the metadata group has no leader", ErrNotReady)
	}
	err := s.call(ctx, leader, methodAutoCreate, &autoCreateRequest{Stream: stream, Fabrics: fabrics}, &none{})
	if errors.Is(err, ErrNotLeader) {
		return fmt.Errorf("%w: the metadata leader changed", ErrNotReady)
	}
	return err
}

// autoCreateHere is AutoCreate on the metadata leader.
func (s *Service) autoCreateHere(ctx context.Context, stream string, fabrics bool) error {
	_, err := s.CreateStream(ctx, StreamSpec{Name: stream, Fabrics: fabrics})
	if errors.Is(err, ErrStreamExists) {
		return nil
	}
	return err
}

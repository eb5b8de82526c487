package meta

import (
	"context"
	"fmt"

	"github.com/fabriq-io/fabriq/geofabric"
)

// StreamSpec is what CreateStream creates.
type StreamSpec struct {
	Name       string    // a full stream name, persistent://TENANT/FABRIC/STREAM
	Partitions int       // 0 is 1
	Replicas   int       // 0 is 1
	Retention  Retention // the retention policy
}

// CreateStream places a new stream's partitions on the registered nodes
// and records it, as the metadata leader; it returns the placement. The
// errors: ErrInvalid (a name, a partition count, or a replication factor
// the cluster cannot hold), *NotLeaderError, ErrStreamExists, ErrNotReady.
func (s *Service) CreateStream(ctx context.Context, spec StreamSpec) ([][]string, error) {
	st, err := geofabric.ParseStream(spec.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !s.group.IsLeader() {
		return nil, &NotLeaderError{LeaderID: s.Leader()}
	}
	partitions, replicas := spec.Partitions, spec.Replicas
	if partitions == 0 {
		partitions = 1
	}
	if replicas == 0 {
		replicas = 1
	}
	if err := geofabric.ValidatePartitions(partitions); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, ok := s.catalog.Stream(st.String()); ok {
		return nil, fmt.Errorf("%w: %s", ErrStreamExists, st)
	}
	placement, err := Place(s.catalog.Nodes(), Load(s.catalog.Streams()), partitions, replicas)
	if err != nil {
		return nil, err
	}
	res, err := s.apply(ctx, CreateStream{Name: st.String(), Partitions: partitions, Replicas: replicas, Placement: placement, Retention: spec.Retention})
	if err != nil {
		return nil, err
	}
	if !res.Done {
		return nil, fmt.Errorf("%w: %s", ErrStreamExists, st)
	}
	return placement, nil
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

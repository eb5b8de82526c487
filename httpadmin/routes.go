package httpadmin

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/fabriq-io/fabriq/client"
)

// FabricSpec is the body of a fabric's PUT: the regions its streams may
// use (none: every region) and the defaults of its new streams.
type FabricSpec struct {
	Regions    []string                `json:"regions,omitempty"`
	Partitions int                     `json:"partitions,omitempty"`
	Replicas   int                     `json:"replicas,omitempty"`
	Retention  *client.RetentionPolicy `json:"retention,omitempty"`
}

// StreamSpec is the body of a stream's PUT; zero fields take the fabric's
// defaults. Local makes a local stream of that region; LeaderRegion says
// where its partitions should be led.
type StreamSpec struct {
	Partitions   int                     `json:"partitions,omitempty"`
	Replicas     int                     `json:"replicas,omitempty"`
	Retention    *client.RetentionPolicy `json:"retention,omitempty"`
	Local        string                  `json:"local,omitempty"`
	LeaderRegion string                  `json:"leader_region,omitempty"`
}

// ResetSpec is the body of a cursor reset: exactly one of To ("earliest"
// or "latest"), Time (RFC 3339: the first message published at or after
// it) or Offset with Partition (on that partition alone).
type ResetSpec struct {
	To        string     `json:"to,omitempty"`
	Time      *time.Time `json:"time,omitempty"`
	Partition *int       `json:"partition,omitempty"`
	Offset    *uint64    `json:"offset,omitempty"`
}

// position returns where s moves a cursor.
func (s ResetSpec) position() (client.CursorPosition, error) {
	set := 0
	for _, b := range []bool{s.To != "", s.Time != nil, s.Offset != nil} {
		if b {
			set++
		}
	}
	if set != 1 {
		return client.CursorPosition{}, fmt.Errorf(`%w: give one of "to", "time" or "offset" (with "partition")`, errBadRequest)
	}
	if (s.Offset != nil) != (s.Partition != nil) {
		return client.CursorPosition{}, fmt.Errorf(`%w: "offset" and "partition" go together`, errBadRequest)
	}
	switch {
	case s.Time != nil:
		return client.CursorAtTime(*s.Time), nil
	case s.Offset != nil:
		if *s.Partition < 0 {
			return client.CursorPosition{}, fmt.Errorf(`%w: "partition" is 0 or more`, errBadRequest)
		}
		return client.CursorAtOffset(*s.Partition, *s.Offset), nil
	case s.To == "earliest":
		return client.CursorAtEarliest(), nil
	case s.To == "latest":
		return client.CursorAtLatest(), nil
	}
	return client.CursorPosition{}, fmt.Errorf(`%w: "to" is "earliest" or "latest", not %q`, errBadRequest, s.To)
}

func tenantOf(r *http.Request) string { return r.PathValue("tenant") }
func fabricOf(r *http.Request) string { return r.PathValue("tenant") + "/" + r.PathValue("fabric") }
func streamOf(r *http.Request) string {
	return "persistent://" + fabricOf(r) + "/" + r.PathValue("stream")
}

func (a *api) listTenants(ctx context.Context, c *client.Client, _ *http.Request) (any, error) {
	return c.ListTenants(ctx)
}

func (a *api) createTenant(ctx context.Context, c *client.Client, r *http.Request) (any, error) {
	return nil, c.CreateTenant(ctx, tenantOf(r))
}

func (a *api) deleteTenant(ctx context.Context, c *client.Client, r *http.Request) (any, error) {
	return nil, c.DeleteTenant(ctx, tenantOf(r))
}

func (a *api) listFabrics(ctx context.Context, c *client.Client, r *http.Request) (any, error) {
	return c.ListFabrics(ctx, tenantOf(r))
}

func (a *api) createFabric(ctx context.Context, c *client.Client, r *http.Request) (any, error) {
	var s FabricSpec
	if err := decode(r, &s, true); err != nil {
		return nil, err
	}
	return nil, c.CreateFabric(ctx, fabricOf(r), client.FabricOptions{Regions: s.Regions, Partitions: s.Partitions, Replicas: s.Replicas, Retention: s.Retention})
}

func (a *api) describeFabric(ctx context.Context, c *client.Client, r *http.Request) (any, error) {
	return c.DescribeFabric(ctx, fabricOf(r))
}

func (a *api) deleteFabric(ctx context.Context, c *client.Client, r *http.Request) (any, error) {
	return nil, c.DeleteFabric(ctx, fabricOf(r))
}

func (a *api) listStreams(ctx context.Context, c *client.Client, r *http.Request) (any, error) {
	return c.ListStreams(ctx, fabricOf(r))
}

func (a *api) createStream(ctx context.Context, c *client.Client, r *http.Request) (any, error) {
	var s StreamSpec
	if err := decode(r, &s, true); err != nil {
		return nil, err
	}
	var opts []client.StreamOption
	if s.Retention != nil {
		opts = append(opts, client.WithRetention(*s.Retention))
	}
	if s.Local != "" {
		opts = append(opts, client.WithLocal(s.Local))
	}
	if s.LeaderRegion != "" {
		opts = append(opts, client.WithLeaderRegion(s.LeaderRegion))
	}
	return nil, c.CreateStream(ctx, streamOf(r), s.Partitions, s.Replicas, opts...)
}

func (a *api) describeStream(ctx context.Context, c *client.Client, r *http.Request) (any, error) {
	return c.DescribeStream(ctx, streamOf(r))
}

func (a *api) deleteStream(ctx context.Context, c *client.Client, r *http.Request) (any, error) {
	force, err := flag(r, "force")
	if err != nil {
		return nil, err
	}
	return nil, c.DeleteStream(ctx, streamOf(r), force)
}

func (a *api) setRetention(ctx context.Context, c *client.Client, r *http.Request) (any, error) {
	var p client.RetentionPolicy
	if err := decode(r, &p, false); err != nil {
		return nil, err
	}
	return nil, c.SetRetention(ctx, streamOf(r), p)
}

func (a *api) listSubscriptions(ctx context.Context, c *client.Client, r *http.Request) (any, error) {
	return c.ListSubscriptions(ctx, streamOf(r))
}

func (a *api) deleteSubscription(ctx context.Context, c *client.Client, r *http.Request) (any, error) {
	force, err := flag(r, "force")
	if err != nil {
		return nil, err
	}
	return nil, c.DeleteSubscription(ctx, streamOf(r), r.PathValue("subscription"), force)
}

func (a *api) resetCursor(ctx context.Context, c *client.Client, r *http.Request) (any, error) {
	var s ResetSpec
	if err := decode(r, &s, false); err != nil {
		return nil, err
	}
	pos, err := s.position()
	if err != nil {
		return nil, err
	}
	return nil, c.ResetCursor(ctx, streamOf(r), r.PathValue("subscription"), pos)
}

func (a *api) skipBacklog(ctx context.Context, c *client.Client, r *http.Request) (any, error) {
	return nil, c.SkipBacklog(ctx, streamOf(r), r.PathValue("subscription"))
}

func (a *api) clusterStatus(ctx context.Context, c *client.Client, _ *http.Request) (any, error) {
	return c.ClusterStatus(ctx)
}

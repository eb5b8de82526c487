package transport

import (
	"crypto/sha256"
	"encoding/hex"
)

// CreateTenant creates a tenant.
type CreateTenant struct {
	RequestID uint64 `msgpack:"r"`
	Tenant    string `msgpack:"t"`
}

// DeleteTenant deletes a tenant; refused (NotEmpty) while it has fabrics.
type DeleteTenant struct {
	RequestID uint64 `msgpack:"r"`
	Tenant    string `msgpack:"t"`
}

// ListTenants lists the tenants.
type ListTenants struct {
	RequestID uint64 `msgpack:"r"`
}

// ListTenantsResult answers ListTenants, sorted.
type ListTenantsResult struct {
	RequestID uint64   `msgpack:"r"`
	Tenants   []string `msgpack:"t"`
}

// CreateFabric creates a fabric of an existing tenant: TENANT/FABRIC, the
// regions its streams may use (none is every region) and the defaults of
// the streams created in it.
type CreateFabric struct {
	RequestID uint64         `msgpack:"r"`
	Fabric    string         `msgpack:"f"`
	Regions   []string       `msgpack:"g,omitempty"`
	Defaults  StreamDefaults `msgpack:"d"`
}

// StreamDefaults are a fabric's defaults for the streams created in it
// without saying otherwise; zero is the cluster's (one partition, one
// replica, no retention).
type StreamDefaults struct {
	Partitions int32            `msgpack:"p,omitempty" json:"partitions,omitempty"`
	Replicas   int32            `msgpack:"rf,omitempty" json:"replicas,omitempty"`
	Retention  *RetentionPolicy `msgpack:"rp,omitempty" json:"retention,omitempty"`
}

// SetFabricRegions replaces a fabric's regions (none is every region);
// refused (NotAllowed) while a stream of the fabric has a replica, a local
// or a leader region outside the new ones.
type SetFabricRegions struct {
	RequestID uint64   `msgpack:"r"`
	Fabric    string   `msgpack:"f"`
	Regions   []string `msgpack:"g,omitempty"`
}

// DeleteFabric deletes a fabric; refused (NotEmpty) while it has streams.
type DeleteFabric struct {
	RequestID uint64 `msgpack:"r"`
	Fabric    string `msgpack:"f"`
}

// ListFabrics lists a tenant's fabrics.
type ListFabrics struct {
	RequestID uint64 `msgpack:"r"`
	Tenant    string `msgpack:"t"`
}

// ListFabricsResult answers ListFabrics, by name.
type ListFabricsResult struct {
	RequestID uint64       `msgpack:"r"`
	Fabrics   []FabricInfo `msgpack:"f"`
}

// DescribeFabric asks for one fabric.
type DescribeFabric struct {
	RequestID uint64 `msgpack:"r"`
	Fabric    string `msgpack:"f"`
}

// DescribeFabricResult answers DescribeFabric.
type DescribeFabricResult struct {
	RequestID uint64     `msgpack:"r"`
	Info      FabricInfo `msgpack:"i"`
}

// FabricInfo describes a fabric.
type FabricInfo struct {
	Fabric   string         `msgpack:"f" json:"fabric"`
	Regions  []string       `msgpack:"g,omitempty" json:"regions"`
	Defaults StreamDefaults `msgpack:"d" json:"defaults"`
	Streams  int32          `msgpack:"s" json:"streams"` // how many streams it holds
}

func (*CreateTenant) Type() CommandType         { return TypeCreateTenant }
func (*DeleteTenant) Type() CommandType         { return TypeDeleteTenant }
func (*ListTenants) Type() CommandType          { return TypeListTenants }
func (*ListTenantsResult) Type() CommandType    { return TypeListTenantsResult }
func (*CreateFabric) Type() CommandType         { return TypeCreateFabric }
func (*DeleteFabric) Type() CommandType         { return TypeDeleteFabric }
func (*ListFabrics) Type() CommandType          { return TypeListFabrics }
func (*ListFabricsResult) Type() CommandType    { return TypeListFabricsResult }
func (*DescribeFabric) Type() CommandType       { return TypeDescribeFabric }
func (*DescribeFabricResult) Type() CommandType { return TypeDescribeFabricResult }

// newTenancyCommand returns a new command of one of the types above.
func newTenancyCommand(t CommandType) Command {
	switch t {
	case TypeCreateTenant:
		return new(CreateTenant)
	case TypeDeleteTenant:
		return new(DeleteTenant)
	case TypeListTenants:
		return new(ListTenants)
	case TypeListTenantsResult:
		return new(ListTenantsResult)
	case TypeCreateFabric:
		return new(CreateFabric)
	case TypeDeleteFabric:
		return new(DeleteFabric)
	case TypeListFabrics:
		return new(ListFabrics)
	case TypeListFabricsResult:
		return new(ListFabricsResult)
	case TypeDescribeFabric:
		return new(DescribeFabric)
	case TypeDescribeFabricResult:
		return new(DescribeFabricResult)
	case TypeWatchStreams:
		return new(WatchStreams)
	case TypeWatchStreamsResult:
		return new(WatchStreamsResult)
	case TypeStreamsChanged:
		return new(StreamsChanged)
	case TypeCloseWatch:
		return new(CloseWatch)
	case TypeSetFabricRegions:
		return new(SetFabricRegions)
	}
	return newSubscriptionCommand(t)
}

// WatchStreams asks for the streams of one fabric whose full names match
// Pattern (a Go regular expression, matched against the whole name), and
// keeps a watch open: StreamsChanged follows every change of that set
// until CloseWatch or the connection's end. WatchID names the watch on
// the connection.
type WatchStreams struct {
	RequestID uint64 `msgpack:"r"`
	WatchID   uint64 `msgpack:"w"`
	Fabric    string `msgpack:"f"`
	Pattern   string `msgpack:"p"`
}

// WatchStreamsResult answers WatchStreams with the matching streams,
// sorted, and the hash of that list (StreamsHash).
type WatchStreamsResult struct {
	RequestID uint64   `msgpack:"r"`
	Streams   []string `msgpack:"s"`
	Hash      string   `msgpack:"h"`
}

// StreamsChanged pushes a watch's matching streams after a change: the
// whole list, sorted, so that a client that missed a push is right again
// with the next one, and its hash.
type StreamsChanged struct {
	WatchID uint64   `msgpack:"w"`
	Streams []string `msgpack:"s"`
	Hash    string   `msgpack:"h"`
}

// CloseWatch ends a watch.
type CloseWatch struct {
	RequestID uint64 `msgpack:"r"`
	WatchID   uint64 `msgpack:"w"`
}

func (*WatchStreams) Type() CommandType       { return TypeWatchStreams }
func (*WatchStreamsResult) Type() CommandType { return TypeWatchStreamsResult }
func (*StreamsChanged) Type() CommandType     { return TypeStreamsChanged }
func (*CloseWatch) Type() CommandType         { return TypeCloseWatch }
func (*SetFabricRegions) Type() CommandType   { return TypeSetFabricRegions }

// StreamsHash is the hash of a sorted list of stream names that watches
// carry: hex of the first 8 bytes of SHA-256 over the names, each ended
// by a newline.
func StreamsHash(sorted []string) string {
	h := sha256.New()
	for _, s := range sorted {
		h.Write([]byte(s))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

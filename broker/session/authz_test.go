package session

import (
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/fabriq-io/fabriq/auth"
	"github.com/fabriq-io/fabriq/transport"
)

// Every request against a token of tenant a (produce and consume, every
// fabric) and c/f (admin): what names a alone or c/f passes, what names b
// is refused, and requests with no tenant are an operator's.
func TestPermission(t *testing.T) {
	claims := &auth.Claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: "app"},
		Grants: []auth.Grant{
			{Tenant: "a", Actions: []auth.Action{auth.Produce, auth.Consume}},
			{Tenant: "c", Fabric: "f", Actions: []auth.Action{auth.Admin}},
		},
	}
	part := func(s string) string { return "persistent://" + s + "-partition-0" }
	for _, tc := range []struct {
		cmd   transport.Command
		allow bool
	}{
		{&transport.Lookup{RequestID: 1, Stream: part("a/f/s")}, true},
		{&transport.Lookup{RequestID: 1, Stream: part("b/f/s")}, false},
		{&transport.PartitionedMetadata{RequestID: 1, Stream: "persistent://a/f/s"}, true},
		{&transport.PartitionedMetadata{RequestID: 1, Stream: "persistent://b/f/s"}, false},
		{&transport.CreateProducer{RequestID: 1, Stream: part("a/f/s")}, true},
		{&transport.CreateProducer{RequestID: 1, Stream: part("b/f/s")}, false},
		{&transport.CreateProducer{RequestID: 1, Stream: part("c/f/s")}, true}, // admin allows produce
		{&transport.CreateProducer{RequestID: 1, Stream: part("c/g/s")}, false},
		{&transport.Subscribe{RequestID: 1, Stream: part("a/f/s")}, true},
		{&transport.Subscribe{RequestID: 1, Stream: part("b/f/s")}, false},
		{&transport.ResetCursor{RequestID: 1, Partition: part("a/f/s"), Subscription: "x"}, true},
		{&transport.ResetCursor{RequestID: 1, Partition: part("b/f/s"), Subscription: "x"}, false},
		{&transport.DeleteSubscription{RequestID: 1, Partition: part("a/f/s"), Subscription: "x"}, true},
		{&transport.DeleteSubscription{RequestID: 1, Partition: part("b/f/s"), Subscription: "x"}, false},
		{&transport.WatchStreams{RequestID: 1, Fabric: "a/f"}, true},
		{&transport.WatchStreams{RequestID: 1, Fabric: "b/f"}, false},
		{&transport.ListStreams{RequestID: 1, Fabric: "a/f"}, true},
		{&transport.ListStreams{RequestID: 1, Fabric: "b/f"}, false},
		{&transport.DescribeStream{RequestID: 1, Stream: "persistent://a/f/s"}, true},
		{&transport.DescribeStream{RequestID: 1, Stream: "persistent://b/f/s"}, false},
		{&transport.CreateStream{RequestID: 1, Stream: "persistent://a/f/s"}, false}, // no admin on a
		{&transport.CreateStream{RequestID: 1, Stream: "persistent://c/f/s"}, true},
		{&transport.DeleteStream{RequestID: 1, Stream: "persistent://c/f/s"}, true},
		{&transport.DeleteStream{RequestID: 1, Stream: "persistent://b/f/s"}, false},
		{&transport.SetRetention{RequestID: 1, Stream: "persistent://c/f/s"}, true},
		{&transport.SetRetention{RequestID: 1, Stream: "persistent://a/f/s"}, false},
		{&transport.DescribeFabric{RequestID: 1, Fabric: "a/f"}, true},
		{&transport.DescribeFabric{RequestID: 1, Fabric: "b/f"}, false},
		{&transport.ListFabrics{RequestID: 1, Tenant: "a"}, true},
		{&transport.ListFabrics{RequestID: 1, Tenant: "b"}, false},
		// Fabrics are managed by an admin of the whole tenant: c/f's admin
		// may not delete c/f or make c/g.
		{&transport.CreateFabric{RequestID: 1, Fabric: "c/g"}, false},
		{&transport.DeleteFabric{RequestID: 1, Fabric: "c/f"}, false},
		{&transport.SetFabricRegions{RequestID: 1, Fabric: "c/f"}, false},
		{&transport.CreateTenant{RequestID: 1, Tenant: "a"}, false},
		{&transport.DeleteTenant{RequestID: 1, Tenant: "a"}, false},
		{&transport.ClusterStatus{RequestID: 1}, false},
		{&transport.RenewReplica{RequestID: 1, Partition: part("a/f/s")}, false},
		{&transport.ListTenants{RequestID: 1}, true}, // filtered
		{&transport.Send{ProducerID: 1}, true},
		{&transport.Ack{ConsumerID: 1}, true},
		{&transport.Flow{ConsumerID: 1}, true},
		// A name that does not parse goes on to be refused as InvalidName.
		{&transport.CreateProducer{RequestID: 1, Stream: "persistent://../x"}, true},
		// Not a client's request: an operator's alone.
		{&transport.Connected{}, false},
	} {
		id, err := permission(claims, tc.cmd)
		if allowed := err == nil; allowed != tc.allow {
			t.Errorf("%T %+v: allowed %v, want %v (%v)", tc.cmd, tc.cmd, allowed, tc.allow, err)
		}
		if err != nil {
			if transport.CodeOf(err) != transport.CodeAuthorizationFailed {
				t.Errorf("%T: refused with %v", tc.cmd, err)
			}
			if want := requestIDOf(tc.cmd); id != want {
				t.Errorf("%T: refusal answers request %d, want %d", tc.cmd, id, want)
			}
		}
		root := &auth.Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "root"}, Superuser: true}
		if _, err := permission(root, tc.cmd); err != nil {
			t.Errorf("%T: refused to a superuser: %v", tc.cmd, err)
		}
	}
}

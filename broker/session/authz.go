package session

import (
	"fmt"
	"reflect"
	"time"

	"github.com/fabriq-io/fabriq/auth"
	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// authenticate checks the token of a session's Connect when the node has
// authentication on; it returns the error to refuse the connection with.
func (s *Session) authenticate(hello *transport.Connect) error {
	if s.cfg.Auth == nil {
		return nil
	}
	claims, err := s.cfg.Auth.Verify(hello.AuthToken)
	if err != nil {
		return &transport.Error{Code: transport.CodeAuthenticationFailed, Message: err.Error()}
	}
	s.claims = claims
	return nil
}

// expireToken ends the session when its token expires: the client
// reconnects with a fresh one (client.Options.TokenSupplier).
func (s *Session) expireToken() {
	defer s.wg.Done()
	t := time.NewTimer(time.Until(s.claims.ExpiresAt.Time))
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.done:
		return
	}
	err := &transport.Error{Code: transport.CodeAuthenticationFailed, Message: fmt.Sprintf("the token of %q expired", s.claims.Subject)}
	s.refused(err)
	_ = s.conn.Fail(err.Code, err)
	s.Close()
}

// authorize checks a request against the session's token and answers a
// refusal itself; it reports whether the request may go on. Requests on a
// producer or consumer (sends, acks, flow, seek) were authorised with it.
// The check reads only the names a request carries, never the catalog, so
// a refusal says nothing of whether what it names exists.
func (s *Session) authorize(cmd transport.Command) bool {
	if s.cfg.Auth == nil {
		return true
	}
	id, err := permission(s.claims, cmd)
	if err != nil {
		s.replyErr(id, err)
		return false
	}
	return true
}

// permission returns nil when claims allow cmd, else the request's id and
// AuthorizationFailed. A name that does not parse is let through: the
// request's handler refuses it with InvalidName, for any token.
func permission(c *auth.Claims, cmd transport.Command) (uint64, error) {
	var (
		id             uint64
		what           string
		tenant, fabric string
		ok             bool
		action         auth.Action // "" is any action
	)
	partitionOf := func(name string) bool {
		p, err := geofabric.ParsePartition(name)
		tenant, fabric = p.Stream.Tenant, p.Stream.Fabric
		return err != nil
	}
	streamOf := func(name string) bool {
		st, err := geofabric.ParseStream(name)
		tenant, fabric = st.Tenant, st.Fabric
		return err != nil
	}
	fabricOf := func(name string) bool {
		var err error
		tenant, fabric, err = geofabric.ParseFabric(name)
		return err != nil
	}
	superuser := func(id uint64, what string) (uint64, error) {
		if c.Superuser {
			return 0, nil
		}
		return id, refusal(c, what)
	}
	switch m := cmd.(type) {
	case *transport.Lookup:
		id, what = m.RequestID, "look up"
		if partitionOf(m.Stream) {
			return 0, nil
		}
	case *transport.PartitionedMetadata:
		id, what = m.RequestID, "look up"
		if streamOf(m.Stream) {
			return 0, nil
		}
	case *transport.DescribeStream:
		id, what = m.RequestID, "describe"
		if streamOf(m.Stream) {
			return 0, nil
		}
	case *transport.CreateProducer:
		id, what, action = m.RequestID, "produce", auth.Produce
		if partitionOf(m.Stream) {
			return 0, nil
		}
	case *transport.Subscribe:
		id, what, action = m.RequestID, "consume", auth.Consume
		if partitionOf(m.Stream) {
			return 0, nil
		}
	case *transport.ResetCursor:
		// What a consumer may do to its own subscription (Seek).
		id, what, action = m.RequestID, "move cursors", auth.Consume
		if partitionOf(m.Partition) {
			return 0, nil
		}
	case *transport.DeleteSubscription:
		// What a consumer may do to its own subscription (Unsubscribe).
		id, what, action = m.RequestID, "delete subscriptions", auth.Consume
		if partitionOf(m.Partition) {
			return 0, nil
		}
	case *transport.WatchStreams:
		id, what, action = m.RequestID, "watch streams", auth.Consume
		if fabricOf(m.Fabric) {
			return 0, nil
		}
	case *transport.ListStreams:
		id, what = m.RequestID, "list streams"
		if fabricOf(m.Fabric) {
			return 0, nil
		}
	case *transport.CreateStream:
		id, what, action = m.RequestID, "create streams", auth.Admin
		if streamOf(m.Stream) {
			return 0, nil
		}
	case *transport.DeleteStream:
		id, what, action = m.RequestID, "delete streams", auth.Admin
		if streamOf(m.Stream) {
			return 0, nil
		}
	case *transport.SetRetention:
		id, what, action = m.RequestID, "change streams", auth.Admin
		if streamOf(m.Stream) {
			return 0, nil
		}
	case *transport.DescribeFabric:
		id, what = m.RequestID, "describe"
		if fabricOf(m.Fabric) {
			return 0, nil
		}
	case *transport.CreateFabric:
		id, what, action = m.RequestID, "create fabrics", auth.Admin
		if fabricOf(m.Fabric) {
			return 0, nil
		}
		fabric = ""
	case *transport.DeleteFabric:
		id, what, action = m.RequestID, "delete fabrics", auth.Admin
		if fabricOf(m.Fabric) {
			return 0, nil
		}
		fabric = ""
	case *transport.SetFabricRegions:
		id, what, action = m.RequestID, "change fabrics", auth.Admin
		if fabricOf(m.Fabric) {
			return 0, nil
		}
		fabric = ""
	case *transport.ListFabrics:
		// The answer lists only the fabrics the token reaches.
		id, what, tenant = m.RequestID, "list fabrics", m.Tenant
	case *transport.CreateTenant:
		return superuser(m.RequestID, "create tenants")
	case *transport.DeleteTenant:
		return superuser(m.RequestID, "delete tenants")
	case *transport.ClusterStatus:
		return superuser(m.RequestID, "read the cluster's status")
	case *transport.RenewReplica:
		return superuser(m.RequestID, "renew replicas")
	case *transport.ListTenants:
		// The answer lists only the tenants the token reaches.
		return 0, nil
	case *transport.Send, *transport.Flow, *transport.Ack, *transport.Nack, *transport.RedeliverUnacked,
		*transport.Seek, *transport.Unsubscribe, *transport.CloseProducer, *transport.CloseConsumer,
		*transport.CloseWatch, *transport.Ping, *transport.Pong:
		// On a producer, consumer or watch the session opened, authorised
		// then.
		return 0, nil
	default:
		// A request this table does not know is an operator's: a new
		// command is closed to clients until it is added here.
		return superuser(requestIDOf(cmd), fmt.Sprintf("send %T", cmd))
	}
	if action == "" {
		ok = c.Reaches(tenant, fabric)
	} else {
		ok = c.Allows(action, tenant, fabric)
	}
	if ok {
		return 0, nil
	}
	place := tenant
	if fabric != "" {
		place += "/" + fabric
	}
	return id, refusal(c, what+" in "+place)
}

func refusal(c *auth.Claims, what string) error {
	return wire.Errorf(transport.CodeAuthorizationFailed, "the token of %q may not %s", c.Subject, what)
}

// visible reports whether the session may see tenant, or fabric of tenant
// when fabric is not empty, in a listing.
func (s *Session) visible(tenant, fabric string) bool {
	return s.cfg.Auth == nil || s.claims.Reaches(tenant, fabric)
}

// requestIDOf returns the RequestID field of a request, 0 if it has none.
func requestIDOf(cmd transport.Command) uint64 {
	v := reflect.ValueOf(cmd)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return 0
	}
	f := v.Elem().FieldByName("RequestID")
	if !f.IsValid() || f.Kind() != reflect.Uint64 {
		return 0
	}
	return f.Uint()
}

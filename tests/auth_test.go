package tests

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/fabriq-io/fabriq/auth"
	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/transport"
)

// writeSecret writes an HMAC secret file for --auth-secret-file.
func writeSecret(t *testing.T, dir, secret string) string {
	t.Helper()
	path := filepath.Join(dir, "auth-secret")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// cliToken makes a token with `fabriq token create`.
func cliToken(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := fabriqCLI(t, "", "", append([]string{"token", "create"}, args...)...)
	if code != 0 {
		t.Fatalf("fabriq token create %v: exit %d: %s", args, code, errOut)
	}
	return strings.TrimSpace(out)
}

func tokenClient(t *testing.T, url, token string) *client.Client {
	t.Helper()
	c, err := client.New(client.Options{URL: url, Token: token, OperationTimeout: 20 * time.Second, ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawLookup sends a Lookup of partition over a connection of its own, as
// any program speaking the protocol can, and returns the answer.
func rawLookup(ctx context.Context, t *testing.T, addr, token, partition string) (transport.Command, error) {
	t.Helper()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := transport.NewConn(nc, transport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := transport.Handshake(ctx, conn, &transport.Connect{AuthToken: token}); err != nil {
		return nil, err
	}
	if err := conn.Send(ctx, &transport.Lookup{RequestID: 7, Stream: partition}); err != nil {
		t.Fatal(err)
	}
	return conn.Receive()
}

// With authentication on, a token of tenant a may do what its grants say
// on a and nothing on b: every request naming b is refused with
// AuthorizationFailed, the same refusal whether or not what it names
// exists. Tokens missing, wrongly signed or expired are refused at the
// handshake; an operator's token does everything.
func TestAuthTenantIsolation(t *testing.T) {
	t.Parallel() // mostly waiting on processes: see TestMain
	dir := t.TempDir()
	secret := writeSecret(t, dir, "a-secret-of-the-cluster-at-least-32-bytes-long")
	nodes := startCluster(t, 3, "--auth-secret-file", secret)
	url := clusterURL(nodes)
	ctx := testContext(t, 3*time.Minute)

	ops := tokenClient(t, url, cliToken(t, "--secret-file", secret, "--subject", "ops", "--superuser", "--expires", "1h"))
	for _, s := range []string{"a/f/s1", "a/f/x-1", "b/f/s1", "b/f/x-1"} {
		if err := createStream(ctx, ops, s, 2, 3); err != nil {
			t.Fatalf("the operator creates %s: %v", s, err)
		}
	}
	send := func(c *client.Client, stream string, n int) error {
		p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
		if err != nil {
			return err
		}
		defer p.Close()
		for i := range n {
			if _, err := p.Send(ctx, &client.ProducerMessage{Key: fmt.Sprint(i), Payload: []byte(stream)}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := send(ops, "b/f/x-1", 5); err != nil {
		t.Fatalf("the operator produces to b: %v", err)
	}
	if st, err := ops.ClusterStatus(ctx); err != nil || len(st.Nodes) != 3 {
		t.Fatalf("the operator reads the cluster's status: %v, %v", st, err)
	}

	tokA := cliToken(t, "--secret-file", secret, "--subject", "app-a", "--tenant", "a", "--actions", "produce,consume")
	a := tokenClient(t, url, tokA)

	// a's own streams work.
	if err := send(a, "a/f/s1", 3); err != nil {
		t.Fatalf("a produces to its own stream: %v", err)
	}
	own, err := a.Subscribe(ctx, client.ConsumerOptions{Stream: "a/f/s1", Subscription: "own", SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatalf("a consumes its own stream: %v", err)
	}
	for range 3 {
		m, err := own.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		own.Ack(ctx, m)
	}
	own.Close()

	refused := func(what string, err error) {
		t.Helper()
		if transport.CodeOf(err) != transport.CodeAuthorizationFailed {
			t.Errorf("%s: got %v, want AuthorizationFailed", what, err)
		}
	}
	// Each refusal of an existing stream of b reads word for word as the
	// refusal of one that does not exist.
	same := func(what string, op func(stream string) error) {
		t.Helper()
		errHas, errNone := op("b/f/s1"), op("b/f/nothing-here")
		refused(what+" of b's stream", errHas)
		refused(what+" of a stream b does not have", errNone)
		if errHas != nil && errNone != nil && errHas.Error() != errNone.Error() {
			t.Errorf("%s: refusals differ: %q and %q: they tell whether the stream exists", what, errHas, errNone)
		}
	}
	same("produce", func(s string) error { return send(a, s, 1) })
	same("consume", func(s string) error {
		c, err := a.Subscribe(ctx, client.ConsumerOptions{Stream: s, Subscription: "steal"})
		if err == nil {
			c.Close()
		}
		return err
	})
	same("describe", func(s string) error { _, err := a.DescribeStream(ctx, s); return err })
	same("delete", func(s string) error { return a.DeleteStream(ctx, s, true) })
	same("lookup", func(s string) error {
		res, err := rawLookup(ctx, t, nodes[0].addr, tokA, "persistent://"+s+"-partition-0")
		if err == nil {
			if e, ok := res.(*transport.Error); ok {
				return e
			}
			return fmt.Errorf("answered %T %+v", res, res)
		}
		return err
	})
	_, err = a.ListStreams(ctx, "b/f")
	refused("list b's streams", err)
	_, err = a.ListFabrics(ctx, "b")
	refused("list b's fabrics", err)
	_, err = a.DescribeFabric(ctx, "b/f")
	refused("describe b's fabric", err)
	refused("create a stream in b", a.CreateStream(ctx, "b/f/new", 1, 3))
	refused("delete b's fabric", a.DeleteFabric(ctx, "b/f"))
	refused("delete tenant b", a.DeleteTenant(ctx, "b"))
	_, err = a.ClusterStatus(ctx)
	refused("read the cluster's status", err)
	_, err = a.SubscribeMulti(ctx, client.MultiOptions{Pattern: "persistent://b/f/.*"},
		client.ConsumerOptions{Subscription: "steal", SubscriptionInitialPosition: client.Earliest})
	refused("a pattern over b's fabric", err)
	// Without admin, a may not manage its own tenant either.
	refused("create a stream without admin", a.CreateStream(ctx, "a/f/new", 1, 3))
	if tenants, err := a.ListTenants(ctx); err != nil || len(tenants) != 1 || tenants[0] != "a" {
		t.Errorf("a lists tenants %v (%v); want [a] alone", tenants, err)
	}
	if _, err := ops.DescribeStream(ctx, "b/f/s1"); err != nil {
		t.Errorf("b's stream after a's delete: %v", err)
	}

	// a's pattern consumer of its own fabric gets a's messages, never b's
	// (b/f/x-1 has messages and the same name).
	mc, err := a.SubscribeMulti(ctx, client.MultiOptions{Pattern: "persistent://a/f/x-.*"},
		client.ConsumerOptions{Subscription: "pat", Type: client.Shared, SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if err := send(a, "a/f/x-1", 4); err != nil {
		t.Fatal(err)
	}
	if err := send(ops, "b/f/x-1", 4); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		m, err := mc.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.ID.Stream != "persistent://a/f/x-1" || string(m.Payload) != "a/f/x-1" {
			t.Fatalf("message %d of a's pattern consumer is from %s: %q", i, m.ID.Stream, m.Payload)
		}
		mc.Ack(ctx, m)
	}
	// b's 9 messages are all still there for b's own subscriber.
	if err := send(ops, "a/f/x-1", 1); err != nil {
		t.Fatal(err)
	}
	if m, err := mc.Receive(ctx); err != nil || m.ID.Stream != "persistent://a/f/x-1" {
		t.Fatalf("after b's sends, a's consumer got %v, %v", m, err)
	}

	// Tokens refused at the handshake: missing, wrongly signed, expired.
	other := writeSecret(t, t.TempDir(), "another-secret-not-the-clusters-at-least-32-bytes")
	expired, err := jwt.NewWithClaims(jwt.SigningMethodHS256, &auth.Claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: "late", ExpiresAt: jwt.NewNumericDate(time.Now().Add(-time.Minute))},
		Superuser:        true,
	}).SignedString([]byte("a-secret-of-the-cluster-at-least-32-bytes-long"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ what, token, says string }{
		{"no token", "", "no token"},
		{"a token of another secret", cliToken(t, "--secret-file", other, "--subject", "x", "--superuser"), "signature"},
		{"an expired token", expired, "expired"},
		{"garbage", "garbage", "malformed"},
	} {
		c := tokenClient(t, url, tc.token)
		_, err := c.ListTenants(ctx)
		if transport.CodeOf(err) != transport.CodeAuthenticationFailed || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: got %v, want AuthenticationFailed saying %q", tc.what, err, tc.says)
		}
		_, err = rawLookup(ctx, t, nodes[1].addr, tc.token, "persistent://a/f/s1-partition-0")
		if transport.CodeOf(err) != transport.CodeAuthenticationFailed {
			t.Errorf("%s, raw: got %v, want AuthenticationFailed", tc.what, err)
		}
	}

	// The refusals are counted by reason.
	_, body := getHTTP(ctx, t, nodes[0].node, "/metrics")
	for _, reason := range []string{"AuthenticationFailed", "AuthorizationFailed"} {
		if !strings.Contains(string(body), `fabriq_requests_refused_total{reason="`+reason+`"}`) {
			t.Errorf("/metrics counts no %s refusal", reason)
		}
	}

	// The operator deletes what a could not.
	if err := ops.DeleteStream(ctx, "b/f/s1", true); err != nil {
		t.Fatalf("the operator deletes b's stream: %v", err)
	}
}

// A connection ends when its token expires; the client reconnects with a
// fresh token from its supplier, and its producer goes on.
func TestAuthTokenRefresh(t *testing.T) {
	t.Parallel() // mostly waiting on processes: see TestMain
	const secretText = "a-secret-of-the-cluster-at-least-32-bytes-long"
	secret := writeSecret(t, t.TempDir(), secretText)
	n := startNode(t, "n1", t.TempDir(), "--auth-secret-file", secret)
	ctx := testContext(t, time.Minute)
	signer, err := auth.NewSigner([]byte(secretText))
	if err != nil {
		t.Fatal(err)
	}
	var issued atomic.Int32
	c, err := client.New(client.Options{URL: n.url(), OperationTimeout: 20 * time.Second,
		TokenSupplier: func(context.Context) (string, error) {
			issued.Add(1)
			return signer.Sign(auth.Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "short-lived"}, Superuser: true}, 2*time.Second)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: "refresh"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Send until the client has had to fetch two more tokens, each after
	// the last expired: every send must succeed across the expiries.
	first := issued.Load()
	sent := 0
	for issued.Load() < first+2 {
		if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("m")}); err != nil {
			t.Fatalf("send %d (tokens issued %d): %v", sent, issued.Load(), err)
		}
		sent++
		if ctx.Err() != nil {
			t.Fatalf("the client took %d tokens in a minute", issued.Load())
		}
	}
	if !strings.Contains(n.logs.String(), "AuthenticationFailed") {
		t.Error("the node logged no refusal of the expired token")
	}
	t.Logf("%d sends across %d tokens (%d before the first send)", sent, issued.Load(), first)
}

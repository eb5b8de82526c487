package tests

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
)

// adminHTTP calls the admin API of nodes over HTTPS, checking their
// certificates against the cluster's CA.
type adminHTTP struct {
	t  *testing.T
	hc *http.Client
}

func newAdminHTTP(t *testing.T, caFile string) *adminHTTP {
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(caFile)
	if err != nil || !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("the CA %s: %v", caFile, err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &adminHTTP{t: t, hc: &http.Client{Timeout: 40 * time.Second, Transport: tr}}
}

// do sends a request with token ("" for none) and a JSON body (nil for
// none): the status, the error code of a refusal, and the body.
func (a *adminHTTP) do(ctx context.Context, n *clusterNode, method, path, token string, body any) (int, string, []byte) {
	a.t.Helper()
	var in io.Reader
	if body != nil {
		b, ok := body.(string)
		if !ok {
			raw, err := json.Marshal(body)
			if err != nil {
				a.t.Fatal(err)
			}
			b = string(raw)
		}
		in = bytes.NewBufferString(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "https://"+n.http+"/admin/v1/"+path, in)
	if err != nil {
		a.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := a.hc.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	var refusal struct{ Code string }
	if res.StatusCode >= 400 {
		if err := json.Unmarshal(out, &refusal); err != nil {
			a.t.Fatalf("%s %s answered %d with a body that is not JSON: %q", method, path, res.StatusCode, out)
		}
	}
	return res.StatusCode, refusal.Code, out
}

// want checks a request's status and, for a refusal, its code.
func (a *adminHTTP) want(ctx context.Context, n *clusterNode, method, path, token string, body any, status int, code string) []byte {
	a.t.Helper()
	got, gotCode, out := a.do(ctx, n, method, path, token, body)
	if got != status || gotCode != code {
		a.t.Fatalf("%s %s: %d %s, want %d %s: %s", method, path, got, gotCode, status, code, out)
	}
	return out
}

// backlogOf sums a subscription's backlog over a described stream's
// partitions; -1 if no partition has it.
func backlogOf(t *testing.T, describe []byte, sub string) int {
	t.Helper()
	var info client.StreamInfo
	if err := json.Unmarshal(describe, &info); err != nil {
		t.Fatalf("describe: %v: %s", err, describe)
	}
	total, found := 0, false
	for _, p := range info.Partitions {
		for _, s := range p.Subscriptions {
			if s.Name == sub {
				total += int(s.Backlog)
				found = true
			}
		}
	}
	if !found {
		return -1
	}
	return total
}

// The admin API over HTTPS on a cluster with TLS and authentication:
// tenants, fabrics, streams and subscriptions are made, read, moved and
// deleted through any node, behind the same tokens as the binary
// protocol; what it refuses comes with the protocol's error code and a
// matching status.
func TestHTTPAdmin(t *testing.T) {
	s := secure(t)
	nodes := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	api := newAdminHTTP(t, s.caFile)
	ops := s.token
	acme := cliToken(t, "--secret-file", s.secretFile, "--subject", "acme-app", "--tenant", "acme", "--actions", "produce,consume", "--expires", "1h")
	producer := cliToken(t, "--secret-file", s.secretFile, "--subject", "acme-producer", "--tenant", "acme", "--actions", "produce", "--expires", "1h")
	other := cliToken(t, "--secret-file", s.secretFile, "--subject", "other-app", "--tenant", "other", "--actions", "produce,consume,admin", "--expires", "1h")
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	const stream = "tenants/acme/fabrics/prod/streams/orders"

	// Tenants, fabrics and streams, made through different nodes.
	api.want(ctx, n1, "PUT", "tenants/acme", ops, nil, http.StatusNoContent, "")
	api.want(ctx, n2, "PUT", "tenants/acme", ops, nil, http.StatusConflict, "TenantExists")
	api.want(ctx, n2, "PUT", "tenants/acme/fabrics/prod", ops, map[string]any{"partitions": 2, "replicas": 3}, http.StatusNoContent, "")
	api.want(ctx, n3, "PUT", stream, ops, `{"partitons": 4}`, http.StatusBadRequest, "InvalidArgument")
	api.want(ctx, n3, "PUT", stream, ops, nil, http.StatusNoContent, "")
	var tenants []string
	if err := json.Unmarshal(api.want(ctx, n3, "GET", "tenants", ops, nil, http.StatusOK, ""), &tenants); err != nil || !slices.Contains(tenants, "acme") {
		t.Fatalf("tenants: %v %v", tenants, err)
	}
	var fabrics []client.FabricInfo
	if err := json.Unmarshal(api.want(ctx, n1, "GET", "tenants/acme/fabrics", ops, nil, http.StatusOK, ""), &fabrics); err != nil ||
		len(fabrics) != 1 || fabrics[0].Fabric != "acme/prod" || fabrics[0].Defaults.Replicas != 3 {
		t.Fatalf("fabrics: %+v %v", fabrics, err)
	}
	var streams []string
	if err := json.Unmarshal(api.want(ctx, n2, "GET", "tenants/acme/fabrics/prod/streams", acme, nil, http.StatusOK, ""), &streams); err != nil ||
		!slices.Equal(streams, []string{"persistent://acme/prod/orders"}) {
		t.Fatalf("streams: %v %v", streams, err)
	}
	var info client.StreamInfo
	if err := json.Unmarshal(api.want(ctx, n1, "GET", stream, acme, nil, http.StatusOK, ""), &info); err != nil ||
		len(info.Partitions) != 2 || info.Replicas != 3 {
		t.Fatalf("the stream takes its fabric's defaults: %+v %v", info, err)
	}
	api.want(ctx, n1, "GET", "tenants/acme/fabrics/prod/streams/nothing", acme, nil, http.StatusNotFound, "StreamNotFound")
	api.want(ctx, n1, "GET", "tenants/acme/fabrics/prod/streams/a%2Fb", acme, nil, http.StatusBadRequest, "InvalidName")
	api.want(ctx, n1, "DELETE", "tenants/acme/fabrics/prod", ops, nil, http.StatusConflict, "NotEmpty")

	// A subscription that has read and acknowledged everything.
	c := newClient(t, clusterURL(nodes))
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: "persistent://acme/prod/orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sendN := func(prefix string, n int) {
		for i := range n {
			if _, err := p.Send(ctx, &client.ProducerMessage{Key: fmt.Sprint(prefix, i), Payload: []byte(fmt.Sprint(prefix, i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	sendN("a-", 10)
	subscribe := func() *client.Consumer {
		cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: "persistent://acme/prod/orders", Subscription: "billing",
			Type: client.Shared, SubscriptionInitialPosition: client.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		return cons
	}
	// receiveAll receives n messages and acknowledges them, returning
	// their payloads.
	receiveAll := func(cons *client.Consumer, n int) []string {
		var got []string
		for range n {
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatalf("after %d of %d: %v", len(got), n, err)
			}
			if err := cons.Ack(ctx, m); err != nil {
				t.Fatal(err)
			}
			got = append(got, string(m.Payload))
		}
		slices.Sort(got)
		return got
	}
	cons := subscribe()
	first := receiveAll(cons, 10)
	// Acks commit on their own time: the backlog reaches 0.
	eventually(ctx, t, "the backlog of billing is 0", func() bool {
		return backlogOf(t, api.want(ctx, n2, "GET", stream, acme, nil, http.StatusOK, ""), "billing") == 0
	})

	// Reset to the earliest: the consumer attached gets everything again.
	sub := stream + "/subscriptions/billing"
	api.want(ctx, n3, "POST", sub+"/reset", acme, map[string]string{"to": "earliest"}, http.StatusNoContent, "")
	if again := receiveAll(cons, 10); !slices.Equal(again, first) {
		t.Fatalf("after the reset to earliest: %v, want %v", again, first)
	}
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}

	// By time: an hour ahead is the end, the epoch the start.
	api.want(ctx, n1, "POST", sub+"/reset", acme, map[string]any{"time": time.Now().Add(time.Hour)}, http.StatusNoContent, "")
	if b := backlogOf(t, api.want(ctx, n1, "GET", stream, acme, nil, http.StatusOK, ""), "billing"); b != 0 {
		t.Fatalf("backlog %d after a reset to an hour ahead, want 0", b)
	}
	api.want(ctx, n2, "POST", sub+"/reset", acme, map[string]any{"time": time.Unix(0, 0)}, http.StatusNoContent, "")
	if b := backlogOf(t, api.want(ctx, n2, "GET", stream, acme, nil, http.StatusOK, ""), "billing"); b != 10 {
		t.Fatalf("backlog %d after a reset to the epoch, want 10", b)
	}

	// Skip the backlog: a consumer then gets only what is sent after.
	api.want(ctx, n3, "POST", sub+"/skip", acme, nil, http.StatusNoContent, "")
	if b := backlogOf(t, api.want(ctx, n3, "GET", stream, acme, nil, http.StatusOK, ""), "billing"); b != 0 {
		t.Fatalf("backlog %d after skip, want 0", b)
	}
	cons = subscribe()
	sendN("b-", 3)
	if got := receiveAll(cons, 3); !slices.Equal(got, []string{"b-0", "b-1", "b-2"}) {
		t.Fatalf("after skip: %v, want the three sent after", got)
	}

	// One partition by offset: one message back on partition 0 alone.
	if err := json.Unmarshal(api.want(ctx, n1, "GET", stream, acme, nil, http.StatusOK, ""), &info); err != nil {
		t.Fatal(err)
	}
	next0 := info.Partitions[0].NextOffset
	api.want(ctx, n1, "POST", sub+"/reset", acme, map[string]any{"partition": 0, "offset": next0 - 1}, http.StatusNoContent, "")
	if got := receiveAll(cons, 1); len(got) != 1 {
		t.Fatalf("after the reset of partition 0: %v", got)
	}
	api.want(ctx, n1, "POST", sub+"/reset", acme, map[string]any{"partition": 2, "offset": 0}, http.StatusBadRequest, "InvalidArgument")
	api.want(ctx, n1, "POST", sub+"/reset", acme, map[string]any{"to": "yesterday"}, http.StatusBadRequest, "InvalidArgument")
	api.want(ctx, n1, "POST", stream+"/subscriptions/nobody/reset", acme, map[string]string{"to": "latest"}, http.StatusNotFound, "SubscriptionNotFound")

	// Deleting a subscription: refused while a consumer is attached.
	api.want(ctx, n2, "DELETE", sub, acme, nil, http.StatusConflict, "NotAllowed")
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}
	api.want(ctx, n2, "DELETE", sub, acme, nil, http.StatusNoContent, "")
	var subs []string
	if err := json.Unmarshal(api.want(ctx, n3, "GET", stream+"/subscriptions", acme, nil, http.StatusOK, ""), &subs); err != nil || len(subs) != 0 {
		t.Fatalf("subscriptions after the delete: %v %v", subs, err)
	}
	api.want(ctx, n2, "DELETE", sub, acme, nil, http.StatusNotFound, "SubscriptionNotFound")

	// The same tokens as the binary protocol: none, a bad one, another
	// tenant's, one without the action.
	api.want(ctx, n1, "GET", stream, "", nil, http.StatusUnauthorized, "AuthenticationFailed")
	api.want(ctx, n1, "GET", stream, "not-a-token", nil, http.StatusUnauthorized, "AuthenticationFailed")
	api.want(ctx, n1, "GET", stream, other, nil, http.StatusForbidden, "AuthorizationFailed")
	api.want(ctx, n1, "GET", "tenants/acme/fabrics/prod/streams/nothing", other, nil, http.StatusForbidden, "AuthorizationFailed")
	api.want(ctx, n1, "POST", sub+"/skip", other, nil, http.StatusForbidden, "AuthorizationFailed")
	// Moving and deleting a subscription take the consume action.
	api.want(ctx, n1, "GET", stream, producer, nil, http.StatusOK, "")
	api.want(ctx, n1, "POST", sub+"/skip", producer, nil, http.StatusForbidden, "AuthorizationFailed")
	api.want(ctx, n1, "POST", sub+"/reset", producer, map[string]string{"to": "earliest"}, http.StatusForbidden, "AuthorizationFailed")
	api.want(ctx, n1, "DELETE", sub, producer, nil, http.StatusForbidden, "AuthorizationFailed")
	api.want(ctx, n1, "DELETE", stream, other, nil, http.StatusForbidden, "AuthorizationFailed")
	api.want(ctx, n1, "DELETE", stream, acme, nil, http.StatusForbidden, "AuthorizationFailed") // no admin
	api.want(ctx, n1, "PUT", "tenants/other", acme, nil, http.StatusForbidden, "AuthorizationFailed")
	api.want(ctx, n1, "GET", "cluster", acme, nil, http.StatusForbidden, "AuthorizationFailed")
	var st client.ClusterInfo
	if err := json.Unmarshal(api.want(ctx, n1, "GET", "cluster", ops, nil, http.StatusOK, ""), &st); err != nil || len(st.Nodes) != 3 {
		t.Fatalf("cluster: %+v %v", st, err)
	}
	resp, err := api.hc.Do(mustRequest(ctx, t, "GET", "https://"+n1.http+"/admin/v1/"+stream, "Basic b3BzOm9wcw=="))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("Basic auth answered %d %v, want 401 with WWW-Authenticate", resp.StatusCode, resp.Header)
	}

	// Delete the stream, the fabric, the tenant.
	api.want(ctx, n3, "DELETE", stream+"?force=true", ops, nil, http.StatusNoContent, "")
	api.want(ctx, n3, "GET", stream, ops, nil, http.StatusNotFound, "StreamNotFound")
	// A listing catches up with changes made through other nodes.
	if err := json.Unmarshal(api.want(ctx, n1, "GET", "tenants/acme/fabrics/prod/streams", ops, nil, http.StatusOK, ""), &streams); err != nil || len(streams) != 0 {
		t.Fatalf("streams after the delete: %v %v", streams, err)
	}
	api.want(ctx, n1, "DELETE", "tenants/acme/fabrics/prod", ops, nil, http.StatusNoContent, "")
	api.want(ctx, n2, "DELETE", "tenants/acme", ops, nil, http.StatusNoContent, "")
	api.want(ctx, n2, "GET", "tenants/acme/fabrics", ops, nil, http.StatusNotFound, "TenantNotFound")
	api.want(ctx, n2, "GET", "nowhere", ops, nil, http.StatusNotFound, "NotFound")
}

func mustRequest(ctx context.Context, t *testing.T, method, url, authorization string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", authorization)
	return req
}

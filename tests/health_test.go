package tests

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"
)

// readyz is the body of a node's /readyz.
type readyz struct {
	Ready          bool     `json:"ready"`
	Serving        bool     `json:"serving"`
	MetadataLeader string   `json:"metadata_leader"`
	Partitions     int      `json:"partitions"`
	Asleep         int      `json:"asleep"`
	Leaderless     []string `json:"leaderless"`
}

// getHTTP fetches path of a node's HTTP port: the status and the body.
func getHTTP(ctx context.Context, t testing.TB, n *node, path string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.http+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s of node %s: %v", path, n.id, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s of node %s: %v", path, n.id, err)
	}
	return res.StatusCode, body
}

// readiness fetches a node's /readyz.
func readiness(ctx context.Context, t testing.TB, n *node) (int, readyz) {
	t.Helper()
	code, body := getHTTP(ctx, t, n, "/readyz")
	var r readyz
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("/readyz of node %s answered %d %q: %v", n.id, code, body, err)
	}
	return code, r
}

// A node's /healthz answers while its process runs; its /readyz says
// ready (200) once the metadata group and every partition it has a copy
// of are led, and not ready (503), naming the partitions, once they have
// lost their leaders: two of the three nodes killed.
func TestHealthAndReadiness(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	c := newClient(t, nodes[0].url())
	const stream = "persistent://public/default/health"
	if err := createStream(ctx, c, stream, 2, 3); err != nil {
		t.Fatal(err)
	}
	survivor := nodes[0]
	if code, body := getHTTP(ctx, t, survivor.node, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz answered %d %q", code, body)
	}
	var r readyz
	var code int
	eventually(ctx, t, "the node ready with both partitions", func() bool {
		code, r = readiness(ctx, t, survivor.node)
		return code == http.StatusOK && r.Partitions == 2
	})
	if !r.Ready || !r.Serving || r.MetadataLeader == "" || len(r.Leaderless) != 0 {
		t.Fatalf("/readyz answered 200 with %+v", r)
	}

	nodes[1].kill()
	nodes[2].kill()
	want := []string{stream + "-partition-0", stream + "-partition-1"}
	// Each group notices on its own timer: the node is not ready from the
	// first, and says so of each as it goes.
	eventually(ctx, t, "the node not ready, its partitions and the metadata group leaderless", func() bool {
		code, r = readiness(ctx, t, survivor.node)
		if r.Ready != (code == http.StatusOK) || !r.Serving {
			t.Fatalf("/readyz answered %d with %+v", code, r)
		}
		return code == http.StatusServiceUnavailable && slices.Equal(r.Leaderless, want) && r.MetadataLeader == ""
	})
	if code, body := getHTTP(ctx, t, survivor.node, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz of a node that lost its peers answered %d %q: the process runs", code, body)
	}
	t.Logf("not ready: %+v", r)
}

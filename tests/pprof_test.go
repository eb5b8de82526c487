package tests

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// fabriqd --pprof-addr serves Go's profiles; without it nothing listens.
func TestPprofAddr(t *testing.T) {
	t.Parallel() // mostly waiting on processes: see TestMain
	n := startNode(t, "n1", t.TempDir(), "--pprof-addr", "127.0.0.1:0")
	var addr string
	for _, line := range strings.Split(n.logs.String(), "\n") {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "serving profiles" {
			addr = rec.Addr
		}
	}
	if addr == "" {
		t.Fatalf("no \"serving profiles\" line in the log:\n%s", n.logs.String())
	}
	c := http.Client{Timeout: 30 * time.Second}
	for _, path := range []string{"/debug/pprof/cmdline", "/debug/pprof/heap?debug=1", "/debug/pprof/mutex?debug=1"} {
		res, err := c.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || len(body) == 0 {
			t.Fatalf("GET %s: %s, %d bytes", path, res.Status, len(body))
		}
		if path == "/debug/pprof/cmdline" && !strings.Contains(string(body), "fabriqd") {
			t.Fatalf("cmdline %q", body)
		}
	}
	if strings.Contains(startNode(t, "n2", t.TempDir()).logs.String(), "serving profiles") {
		t.Fatal("a node without --pprof-addr serves profiles")
	}
}

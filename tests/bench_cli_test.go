package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// benchResult is the part of `fabriq bench --json` the tests read.
type benchResult struct {
	Stream   string `json:"stream"`
	Produced struct {
		Messages int64   `json:"messages"`
		Failed   int64   `json:"failed"`
		Rate     float64 `json:"msgs_per_sec"`
		Publish  latency `json:"publish_latency"`
	} `json:"produced"`
	Consumed struct {
		Messages int64   `json:"messages"`
		Rate     float64 `json:"msgs_per_sec"`
		EndToEnd latency `json:"end_to_end_latency"`
	} `json:"consumed"`
}

type latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// ordered reports whether the percentiles are in order and there are n.
func (l latency) ordered(n int64) bool {
	return l.Count == n && 0 < l.P50 && l.P50 <= l.P99 && l.P99 <= l.Max
}

func runBench(t *testing.T, url string, args ...string) benchResult {
	t.Helper()
	out, errOut, code := fabriqCLI(t, url, "", append([]string{"bench", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("fabriq bench %v: exit %d\n%s\n%s", args, code, out, errOut)
	}
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("fabriq bench %v printed no JSON result: %v\n%s", args, err, out)
	}
	return res
}

// `fabriq bench` runs what it is asked against a real cluster: every
// message sent is acknowledged and received once, the histograms count
// them, --rate is a ceiling, the stream it made is gone after; a backlog
// made by one run is drained by another; bad input is refused. `fabriq
// bench failover` kills the leader through the command it is given and
// finds nothing acknowledged missing.
func TestCLIBench(t *testing.T) {
	t.Parallel() // mostly waiting on processes: see TestMain
	nodes := startCluster(t, 3)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr)
	}
	url := "fabriq://" + strings.Join(addrs, ",")

	res := runBench(t, url, "--partitions", "2", "--replicas", "3", "--consumers", "2", "-t", "shared",
		"--messages", "3000", "--rate", "1500")
	if res.Produced.Messages != 3000 || res.Produced.Failed != 0 || res.Consumed.Messages != 3000 {
		t.Fatalf("sent 3000: %+v", res)
	}
	if !res.Produced.Publish.ordered(3000) || !res.Consumed.EndToEnd.ordered(3000) {
		t.Fatalf("latencies: publish %+v, end-to-end %+v", res.Produced.Publish, res.Consumed.EndToEnd)
	}
	// Message k is not sent before k/rate: over 3,000 the rate cannot
	// exceed 1,500 by more than one message's worth.
	if res.Produced.Rate <= 0 || res.Produced.Rate > 1500*3000/2999.0 {
		t.Fatalf("--rate 1500 produced %.0f msg/s", res.Produced.Rate)
	}
	out, errOut, code := fabriqCLI(t, url, "", "stream", "list", "public/default")
	if code != 0 || strings.Contains(out, res.Stream) {
		t.Fatalf("the bench stream %s is still there: %d %s %s", res.Stream, code, out, errOut)
	}

	// A backlog (kept by retention: nobody subscribes while it is made),
	// then consumers alone drain it.
	if out, errOut, code := fabriqCLI(t, url, "", "stream", "create", "drain", "--replicas", "3", "--retention-time", "-1", "--retention-size", "-1"); code != 0 {
		t.Fatalf("stream create: %d %s %s", code, out, errOut)
	}
	res = runBench(t, url, "--stream", "drain", "--keys", "100", "--consumers", "0", "--messages", "1000")
	if res.Produced.Messages != 1000 || res.Consumed.Messages != 0 {
		t.Fatalf("backlog: %+v", res)
	}
	res = runBench(t, url, "--stream", "drain", "--producers", "0", "--consumers", "3", "-t", "key_shared",
		"--initial-position", "earliest", "--messages", "1000")
	if res.Consumed.Messages != 1000 || !res.Consumed.EndToEnd.ordered(1000) {
		t.Fatalf("drained: %+v", res)
	}

	for _, bad := range []struct {
		args []string
		says string
	}{
		{[]string{"--size", "8"}, "--size must be at least 16"},
		{[]string{"--consumers", "2"}, "exclusive subscription takes one consumer"},
		{[]string{"--producers", "0", "--consumers", "0"}, "nothing to run"},
		{[]string{"failover"}, "--kill is required"},
	} {
		out, errOut, code := fabriqCLI(t, url, "", append([]string{"bench"}, bad.args...)...)
		if code == 0 || !strings.Contains(errOut, bad.says) {
			t.Fatalf("bench %v: exit %d, stderr %q (want %q), stdout %q", bad.args, code, errOut, bad.says, out)
		}
	}

	// One kill of the leader, by pid.
	pids := t.TempDir()
	for _, n := range nodes {
		if err := os.WriteFile(filepath.Join(pids, n.id+".pid"), []byte(fmt.Sprint(n.cmd.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code = fabriqCLI(t, url, "", "bench", "failover", "--kills", "1", "--interval", "100ms", "--json",
		"--kill", fmt.Sprintf("kill -KILL $(cat %s/$FABRIQ_NODE.pid)", pids))
	if code != 0 {
		t.Fatalf("bench failover: exit %d\n%s\n%s", code, out, errOut)
	}
	var fo struct {
		Kills []struct {
			Node       string  `json:"node"`
			ToAck      float64 `json:"to_ack_ms"`
			ToDelivery float64 `json:"to_delivery_ms"`
		} `json:"kills"`
		Acked     int64 `json:"acked"`
		Delivered int64 `json:"delivered"`
		Missing   int64 `json:"missing"`
	}
	if err := json.Unmarshal([]byte(out), &fo); err != nil {
		t.Fatalf("bench failover printed no JSON result: %v\n%s", err, out)
	}
	if len(fo.Kills) != 1 || fo.Kills[0].ToAck <= 0 || fo.Kills[0].ToDelivery <= 0 || fo.Acked == 0 || fo.Missing != 0 || fo.Delivered < fo.Acked {
		t.Fatalf("bench failover: %+v", fo)
	}
	for _, n := range nodes {
		if n.id != fo.Kills[0].Node {
			continue
		}
		select {
		case <-n.exited:
			return
		case <-time.After(30 * time.Second):
			t.Fatalf("bench failover says it killed %s, which still runs", n.id)
		}
	}
	t.Fatalf("bench failover killed %q, not a node of the cluster", fo.Kills[0].Node)
}

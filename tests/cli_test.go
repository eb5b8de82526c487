package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/transport"
)

// fabriqCLI runs the CLI as a script would and returns stdout, stderr and
// the exit status.
func fabriqCLI(t *testing.T, url, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx := testContext(t, time.Minute)
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "fabriq"), args...)
	cmd.Env = append(cmd.Environ(), cliEnv(t, url)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// The CLI contract, driven as a shell script would drive it.
func TestCLIContract(t *testing.T) {
	n := startNode(t, "n1", t.TempDir())
	url := n.url()
	const stream = "persistent://acme/prod/cli"

	cliFabric(t, url, "acme/prod")
	if out, errOut, code := fabriqCLI(t, url, "", "stream", "create", stream, "--partitions", "2", "--replicas", "1"); code != 0 {
		t.Fatalf("stream create: %d %s %s", code, out, errOut)
	}
	out, _, code := fabriqCLI(t, url, "", "stream", "list", "acme/prod")
	if code != 0 || strings.TrimSpace(out) != stream {
		t.Fatalf("stream list: %d %q", code, out)
	}

	// produce -m … --key … -n …: one JSON line per acknowledged message.
	out, errOut, code := fabriqCLI(t, url, "", "produce", stream, "-m", "a", "-m", "b", "--key", "k1", "-n", "2")
	if code != 0 {
		t.Fatalf("produce: %d %s", code, errOut)
	}
	lines := jsonLines(t, out)
	if len(lines) != 4 {
		t.Fatalf("produce printed %d lines, want 4:\n%s", len(lines), out)
	}
	for _, l := range lines {
		for _, field := range []string{"id", "stream", "partition", "offset", "key", "payload"} {
			if _, ok := l[field]; !ok {
				t.Fatalf("produce line lacks %q: %v", field, l)
			}
		}
		if l["stream"] != stream || l["key"] != "k1" {
			t.Fatalf("produce line %v", l)
		}
	}

	// produce --stdin reads JSON lines, key optional.
	out, errOut, code = fabriqCLI(t, url, "{\"key\": \"x\", \"payload\": \"from stdin\"}\n{\"payload\": \"no key\"}\n", "produce", stream, "--stdin")
	if code != 0 {
		t.Fatalf("produce --stdin: %d %s", code, errOut)
	}
	// Acknowledgements of different partitions come in any order.
	got := map[any]any{}
	for _, l := range jsonLines(t, out) {
		got[l["payload"]] = l["key"]
	}
	if len(got) != 2 || got["from stdin"] != "x" || got["no key"] != nil {
		t.Fatalf("produce --stdin printed:\n%s", out)
	}

	// consume --json prints every message with its fields.
	out, errOut, code = fabriqCLI(t, url, "", "consume", stream, "-s", "audit", "-n", "6", "--initial-position", "earliest", "--json", "--name", "c1")
	if code != 0 {
		t.Fatalf("consume: %d %s", code, errOut)
	}
	lines = jsonLines(t, out)
	if len(lines) != 6 {
		t.Fatalf("consume printed %d lines, want 6:\n%s", len(lines), out)
	}
	payloads := map[string]int{}
	for _, l := range lines {
		for _, field := range []string{"id", "stream", "partition", "offset", "key", "payload", "redelivery_count", "consumer"} {
			if _, ok := l[field]; !ok {
				t.Fatalf("consume line lacks %q: %v", field, l)
			}
		}
		if l["consumer"] != "c1" {
			t.Fatalf("consume line %v", l)
		}
		payloads[l["payload"].(string)]++
	}
	if payloads["a"] != 2 || payloads["b"] != 2 || payloads["from stdin"] != 1 || payloads["no key"] != 1 {
		t.Fatalf("consumed payloads %v", payloads)
	}

	// The acks were committed: describe shows no backlog.
	out, errOut, code = fabriqCLI(t, url, "", "stream", "describe", stream, "--json")
	if code != 0 {
		t.Fatalf("describe: %d %s", code, errOut)
	}
	var d struct {
		Stream     string `json:"stream"`
		Partitions []struct {
			Partition int      `json:"partition"`
			Leader    string   `json:"leader"`
			Replicas  []string `json:"replicas"`
		} `json:"partitions"`
		Subscriptions []struct {
			Name    string `json:"name"`
			Mode    string `json:"mode"`
			Backlog uint64 `json:"backlog"`
		} `json:"subscriptions"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("describe --json: %v\n%s", err, out)
	}
	if d.Stream != stream || len(d.Partitions) != 2 || d.Partitions[0].Leader != "n1" || len(d.Partitions[1].Replicas) != 1 {
		t.Fatalf("describe: %+v", d)
	}
	if len(d.Subscriptions) != 1 || d.Subscriptions[0].Name != "audit" || d.Subscriptions[0].Mode != "exclusive" || d.Subscriptions[0].Backlog != 0 {
		t.Fatalf("describe subscriptions: %+v", d.Subscriptions)
	}

	// cluster status names the node and leads every partition.
	out, errOut, code = fabriqCLI(t, url, "", "cluster", "status", "--json")
	if code != 0 {
		t.Fatalf("cluster status: %d %s", code, errOut)
	}
	var st struct {
		Node  string `json:"node"`
		Nodes []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"nodes"`
		Partitions []struct {
			Partition string `json:"partition"`
			Leader    string `json:"leader"`
			Replicas  []struct {
				Node string `json:"node"`
				Lag  int64  `json:"lag"`
			} `json:"replicas"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("cluster status --json: %v\n%s", err, out)
	}
	if st.Node != "n1" || len(st.Nodes) != 1 || st.Nodes[0].State != "alive" || len(st.Partitions) != 2 {
		t.Fatalf("cluster status: %+v", st)
	}
	for _, p := range st.Partitions {
		if p.Leader != "n1" || len(p.Replicas) != 1 || p.Replicas[0].Lag < 0 {
			t.Fatalf("cluster status partition: %+v", p)
		}
	}

	// Errors go to stderr with a non-zero status.
	for _, args := range [][]string{
		{"stream", "create", "not/a-stream"},
		{"stream", "create", "persistent://nobody/prod/s"},          // no such tenant
		{"produce", "persistent://acme/nowhere/missing", "-m", "x"}, // no such fabric
		{"consume", stream},
		{"produce", stream},
	} {
		out, errOut, code := fabriqCLI(t, url, "", args...)
		if code == 0 || errOut == "" || out != "" {
			t.Errorf("fabriq %v: status %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	// A bad stdin line: what came before is printed, the failure is not.
	out, errOut, code = fabriqCLI(t, url, "{\"payload\": \"good\"}\nnot json\n", "produce", stream, "--stdin")
	if code == 0 || !strings.Contains(errOut, "line 2") || len(jsonLines(t, out)) != 1 {
		t.Fatalf("bad stdin: status %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// stream create and set-retention take a retention policy in human units;
// describe shows it; bad values are refused with a non-zero status.
func TestCLIRetention(t *testing.T) {
	n := startNode(t, "n1", t.TempDir())
	url := n.url()
	const stream = "persistent://acme/prod/kept"
	cliFabric(t, url, "acme/prod")
	if out, errOut, code := fabriqCLI(t, url, "", "stream", "create", stream, "--retention-time", "7d", "--retention-size", "1GiB",
		"--backlog-quota-size", "10MiB", "--backlog-quota-policy", "consumer_backlog_eviction", "--message-ttl", "1h"); code != 0 {
		t.Fatalf("stream create: %d %s %s", code, out, errOut)
	}
	describe := func() transport.RetentionPolicy {
		t.Helper()
		out, errOut, code := fabriqCLI(t, url, "", "stream", "describe", stream, "--json")
		if code != 0 {
			t.Fatalf("describe: %d %s", code, errOut)
		}
		var d struct {
			Retention transport.RetentionPolicy `json:"retention"`
		}
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("describe --json: %v\n%s", err, out)
		}
		return d.Retention
	}
	want := transport.RetentionPolicy{RetentionTimeMs: 7 * 24 * 3600 * 1000, RetentionBytes: 1 << 30, BacklogQuotaBytes: 10 << 20,
		BacklogQuotaPolicy: transport.ConsumerBacklogEviction, MessageTTLMs: 3600 * 1000}
	if got := describe(); got != want {
		t.Fatalf("created with %+v, want %+v", got, want)
	}
	if out, errOut, code := fabriqCLI(t, url, "", "stream", "set-retention", stream, "--retention-time", "-1", "--retention-size", "-1"); code != 0 ||
		!strings.Contains(out, "kept forever") {
		t.Fatalf("set-retention: %d %q %s", code, out, errOut)
	}
	if got := describe(); got != (transport.RetentionPolicy{RetentionTimeMs: -1, RetentionBytes: -1}) {
		t.Fatalf("after set-retention %+v", got)
	}
	out, _, _ := fabriqCLI(t, url, "", "stream", "describe", stream)
	if !strings.Contains(out, "retention: acknowledged messages are kept forever") {
		t.Fatalf("describe does not show the policy:\n%s", out)
	}
	for _, args := range [][]string{
		{"stream", "create", "persistent://acme/prod/bad", "--retention-size", "lots"},
		{"stream", "create", "persistent://acme/prod/bad", "--backlog-quota-policy", "drop"},
		{"stream", "create", "persistent://acme/prod/bad", "--message-ttl", "-1"},
		{"stream", "set-retention", "persistent://acme/prod/missing", "--retention-time", "1h"},
	} {
		out, errOut, code := fabriqCLI(t, url, "", args...)
		if code == 0 || errOut == "" || out != "" {
			t.Errorf("fabriq %v: status %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

// cliFabric creates a tenant and its fabric with the CLI.
func cliFabric(t *testing.T, url, fabric string) {
	t.Helper()
	tenant, _, _ := strings.Cut(fabric, "/")
	if out, errOut, code := fabriqCLI(t, url, "", "tenant", "create", tenant); code != 0 {
		t.Fatalf("tenant create %s: %d %s %s", tenant, code, out, errOut)
	}
	if out, errOut, code := fabriqCLI(t, url, "", "fabric", "create", fabric); code != 0 {
		t.Fatalf("fabric create %s: %d %s %s", fabric, code, out, errOut)
	}
}

// As a new user would: with nothing created, a short name produces and
// consumes (the stream is made on first use in public/default), through
// any node of a cluster, the metadata leader or not.
func TestCLIShortNamesOnFirstUse(t *testing.T) {
	t.Parallel() // mostly waiting on processes: see TestMain
	nodes := startCluster(t, 3)
	for i, n := range nodes {
		stream := fmt.Sprintf("my-topic-%d", i)
		if out, errOut, code := fabriqCLI(t, n.url(), "", "produce", stream, "-m", "hi"); code != 0 {
			t.Fatalf("produce %s through %s: %d %s %s", stream, n.id, code, out, errOut)
		}
		other := nodes[(i+1)%len(nodes)]
		out, errOut, code := fabriqCLI(t, other.url(), "", "consume", stream, "-s", "s", "--initial-position", "earliest", "-n", "1", "--json")
		if code != 0 {
			t.Fatalf("consume %s through %s: %d %s %s", stream, other.id, code, out, errOut)
		}
		if msgs := jsonLines(t, out); len(msgs) != 1 || msgs[0]["payload"] != "hi" {
			t.Fatalf("consumed %q", out)
		}
	}
	out, errOut, code := fabriqCLI(t, nodes[0].url(), "", "stream", "list", "public/default")
	if code != 0 || !strings.Contains(out, "persistent://public/default/my-topic-2") {
		t.Fatalf("stream list: %d %s %s", code, out, errOut)
	}
}

// The tenant and fabric commands, and a fabric's defaults taken by stream
// create.
func TestCLITenantsAndFabrics(t *testing.T) {
	t.Parallel() // mostly waiting on processes: see TestMain
	url := startNode(t, "n1", t.TempDir(), "--region", "eu-west").url()
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := fabriqCLI(t, url, "", args...)
		if code != 0 {
			t.Fatalf("fabriq %v: %d %s %s", args, code, out, errOut)
		}
		return out
	}
	run("tenant", "create", "acme")
	run("fabric", "create", "acme/eu", "--regions", "eu-west,eu-central", "--partitions", "2", "--retention-time", "1h")
	if out := run("tenant", "list"); strings.Fields(out)[0] != "acme" || !strings.Contains(out, "public") {
		t.Fatalf("tenant list: %q", out)
	}
	if out := run("fabric", "list", "acme"); strings.TrimSpace(out) != "acme/eu" {
		t.Fatalf("fabric list: %q", out)
	}
	if out := run("stream", "create", "acme/eu/orders"); !strings.Contains(out, "with 2 partition(s)") {
		t.Fatalf("stream create in a fabric with 2 default partitions: %q", out)
	}
	// The node is in eu-west: dropping eu-west would strand orders.
	if out, errOut, code := fabriqCLI(t, url, "", "fabric", "set-regions", "acme/eu", "--regions", "eu-central"); code == 0 || !strings.Contains(errOut, "orders") || out != "" {
		t.Fatalf("set-regions leaving a stream outside: status %d, stdout %q, stderr %q", code, out, errOut)
	}
	run("fabric", "set-regions", "acme/eu", "--regions", "eu-west,eu-central,eu-north")
	run("fabric", "set-regions", "acme/eu", "--regions", "eu-west,eu-central")
	var info client.FabricInfo
	if err := json.Unmarshal([]byte(run("fabric", "describe", "acme/eu", "--json")), &info); err != nil {
		t.Fatal(err)
	}
	if info.Streams != 1 || !slices.Equal(info.Regions, []string{"eu-central", "eu-west"}) || info.Defaults.Retention == nil || info.Defaults.Retention.RetentionTimeMs != 3_600_000 {
		t.Fatalf("fabric describe: %+v", info)
	}
	for _, args := range [][]string{
		{"fabric", "delete", "acme/eu"}, // holds a stream
		{"tenant", "delete", "acme"},    // holds a fabric
		{"fabric", "create", "nobody/eu"},
		{"tenant", "create", "a/b"},
	} {
		if out, errOut, code := fabriqCLI(t, url, "", args...); code == 0 || errOut == "" || out != "" {
			t.Errorf("fabriq %v: status %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	run("stream", "delete", "acme/eu/orders")
	run("fabric", "delete", "acme/eu")
	run("tenant", "delete", "acme")
}

// consume reads a list of streams, or a pattern, through one
// subscription.
func TestCLIConsumeListAndPattern(t *testing.T) {
	t.Parallel() // mostly waiting on processes: see TestMain
	url := startNode(t, "n1", t.TempDir()).url()
	cliFabric(t, url, "acme/eu")
	for _, s := range []string{"acme/eu/a-1", "acme/eu/a-2", "acme/eu/b-1"} {
		if out, errOut, code := fabriqCLI(t, url, "", "produce", s, "-m", s); code != 0 {
			t.Fatalf("produce %s: %d %s %s", s, code, out, errOut)
		}
	}
	streamsOf := func(args ...string) []string {
		t.Helper()
		out, errOut, code := fabriqCLI(t, url, "", append(args, "--initial-position", "earliest", "--json")...)
		if code != 0 {
			t.Fatalf("fabriq %v: %d %s %s", args, code, out, errOut)
		}
		var got []string
		for _, m := range jsonLines(t, out) {
			got = append(got, m["stream"].(string))
		}
		slices.Sort(got)
		return got
	}
	if got := streamsOf("consume", "--pattern", "persistent://acme/eu/a-.*", "-s", "p", "-n", "2"); !slices.Equal(got, []string{"persistent://acme/eu/a-1", "persistent://acme/eu/a-2"}) {
		t.Fatalf("pattern consumer read %v", got)
	}
	if got := streamsOf("consume", "acme/eu/a-1,acme/eu/b-1", "-s", "l", "-n", "2"); !slices.Equal(got, []string{"persistent://acme/eu/a-1", "persistent://acme/eu/b-1"}) {
		t.Fatalf("list consumer read %v", got)
	}
	for _, args := range [][]string{
		{"consume", "--pattern", "persistent://acme/.*/a-1", "-s", "x"}, // fabric not literal
		{"consume", "acme/eu/a-1", "--pattern", "persistent://acme/eu/a-.*", "-s", "x"},
	} {
		if out, errOut, code := fabriqCLI(t, url, "", args...); code == 0 || errOut == "" || out != "" {
			t.Errorf("fabriq %v: status %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

// The subscription commands: list, reset (earliest, a duration ago, an
// offset of one partition), skip and delete, each visible in the
// subscription's backlog as stream describe reports it.
func TestCLISubscriptions(t *testing.T) {
	n := startNode(t, "n1", t.TempDir())
	url := n.url()
	ctx := testContext(t, time.Minute)
	const stream = "persistent://acme/prod/orders"
	cliFabric(t, url, "acme/prod")
	if out, errOut, code := fabriqCLI(t, url, "", "stream", "create", stream, "--partitions", "2"); code != 0 {
		t.Fatalf("stream create: %d %s %s", code, out, errOut)
	}
	c := newClient(t, url)
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 6 {
		if _, err := p.Send(ctx, &client.ProducerMessage{Key: fmt.Sprint(i), Payload: []byte("m")}); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "billing", Type: client.Shared, SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := cons.Ack(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := cons.Close(); err != nil { // its acks are committed
		t.Fatal(err)
	}
	backlog := func() int {
		t.Helper()
		out, errOut, code := fabriqCLI(t, url, "", "stream", "describe", stream, "--json")
		if code != 0 {
			t.Fatalf("describe: %d %s", code, errOut)
		}
		var d struct {
			Subscriptions []struct {
				Name    string `json:"name"`
				Backlog int    `json:"backlog"`
			} `json:"subscriptions"`
		}
		if err := json.Unmarshal([]byte(out), &d); err != nil || len(d.Subscriptions) != 1 || d.Subscriptions[0].Name != "billing" {
			t.Fatalf("describe --json: %v\n%s", err, out)
		}
		return d.Subscriptions[0].Backlog
	}
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := fabriqCLI(t, url, "", append([]string{"subscription"}, args...)...)
		if code != 0 {
			t.Fatalf("subscription %v: %d %s %s", args, code, out, errOut)
		}
		return out
	}
	if out := run("list", stream); out != "billing\n" {
		t.Fatalf("list: %q", out)
	}
	for _, step := range []struct {
		args    []string
		backlog int
	}{
		{[]string{"reset", stream, "billing", "--to", "earliest"}, 6},
		{[]string{"skip", stream, "billing"}, 0},
		{[]string{"reset", stream, "billing", "--to", "1h"}, 6}, // all published less than an hour ago
		{[]string{"reset", stream, "billing", "--to", "latest"}, 0},
		{[]string{"reset", stream, "billing", "--to", "0", "--partition", "1"}, -1}, // partition 1's count
	} {
		run(step.args...)
		got := backlog()
		if step.backlog >= 0 && got != step.backlog {
			t.Fatalf("after %v: backlog %d, want %d", step.args, got, step.backlog)
		}
		if step.backlog < 0 && (got == 0 || got == 6) {
			t.Fatalf("after %v: backlog %d, want partition 1's messages alone", step.args, got)
		}
	}
	for _, args := range [][]string{
		{"reset", stream, "billing", "--to", "3"},                     // an offset needs a partition
		{"reset", stream, "billing", "--to", "0", "--partition", "2"}, // no such partition
		{"reset", stream, "billing", "--to", "someday"},
		{"reset", stream, "nobody", "--to", "earliest"},
		{"skip", "persistent://acme/prod/missing", "billing"},
	} {
		out, errOut, code := fabriqCLI(t, url, "", append([]string{"subscription"}, args...)...)
		if code == 0 || errOut == "" || out != "" {
			t.Errorf("fabriq subscription %v: status %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	run("delete", stream, "billing")
	if out := run("list", stream); out != "" {
		t.Fatalf("list after delete: %q", out)
	}
}

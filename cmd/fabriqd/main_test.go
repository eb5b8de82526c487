package main

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestHelpExplainsFlags(t *testing.T) {
	var out bytes.Buffer
	cmd := newRootCommand(&out, new(bytes.Buffer))
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--node-id", "--data-dir", "--client-addr", "--raft-addr", "--gossip-addr", "--http-addr", "--region", "--join", "--bootstrap-expect",
		"--segment-bytes", "--retention-interval", "--raft-snapshot-threshold", "--raft-snapshot-bytes", "--raft-trailing-logs"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("--help does not mention %s", flag)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	var out bytes.Buffer
	cmd := newRootCommand(&out, new(bytes.Buffer))
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), version) {
		t.Fatalf("--version printed %q", out.String())
	}
}

func TestBadFlagsFailClearly(t *testing.T) {
	for _, args := range [][]string{
		{"--log-level", "loud"},
		{"--bootstrap-expect", "-1", "--data-dir", "x"},
		{"--segment-bytes", "lots"},
		{"--segment-bytes", "0"},
		{"--segment-bytes", "1KiB", "--data-dir", "x"},
	} {
		cmd := newRootCommand(new(bytes.Buffer), new(bytes.Buffer))
		// No HTTP port: the refusal must be the flag's, not a port in use.
		cmd.SetArgs(append(args, "--http-addr="))
		if err := cmd.Execute(); err == nil {
			t.Errorf("fabriqd %v started", args)
		} else if strings.Contains(err.Error(), "address already in use") {
			t.Errorf("fabriqd %v: %v, not the flag's refusal", args, err)
		}
	}
}

func TestMinFreeDiskTakesSizes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"1GiB", 1 << 30}, {"512MiB", 512 << 20}, {"1.5g", 3 << 29}, {"2GB", 2e9},
		{"4096", 4096}, {"off", -1}, {"0", -1}, {" 64 MiB ", 64 << 20},
	} {
		var s sizeOrOff
		if err := s.Set(c.in); err != nil || int64(s) != c.want {
			t.Errorf("--min-free-disk %q = %d, %v; want %d", c.in, int64(s), err, c.want)
		}
	}
	for _, bad := range []string{"", "lots", "-1GiB", "1XiB", "1e30GiB"} {
		var s sizeOrOff
		if err := s.Set(bad); err == nil {
			t.Errorf("--min-free-disk %q accepted as %d", bad, int64(s))
		}
	}
	cmd := newRootCommand(new(bytes.Buffer), new(bytes.Buffer))
	cmd.SetArgs([]string{"--min-free-disk", "100KiB", "--data-dir", t.TempDir(), "--http-addr="})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "MinFreeDisk") {
		t.Errorf("a reserve of 100KiB: %v, want a MinFreeDisk error", err)
	}
}

func TestSegmentBytesFlag(t *testing.T) {
	for in, want := range map[string]int64{"65536": 65536, "64KiB": 64 << 10, "64MiB": 64 << 20, "1GiB": 1 << 30, "2MB": 2e6} {
		var f sizeFlag
		if err := f.Set(in); err != nil || int64(f) != want {
			t.Errorf("--segment-bytes %s = %d, %v; want %d", in, f, err, want)
		}
	}
}

// printed runs fabriqd with args (ending in --print-config) and returns
// what it printed, or its error.
func printed(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := newRootCommand(&out, new(bytes.Buffer))
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fabriqd.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A config file sets flags, the command line overrides it, and
// --print-config shows the result as a file that reads back the same.
func TestConfigFile(t *testing.T) {
	path := writeConfig(t, `
# a node of three
node-id: n2
region: eu-west
join: [10.0.0.1:7946, 10.0.0.3:7946]
retention-interval: 9s
min-free-disk: 2GiB
log-json: true
`)
	out, err := printed(t, "--config", path, "--region", "us-east", "--print-config")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("--print-config printed what is not YAML: %v\n%s", err, out)
	}
	want := map[string]any{
		"node-id": "n2", "region": "us-east", "retention-interval": "9s", "min-free-disk": "2GiB",
		"log-json": true, "join": []any{"10.0.0.1:7946", "10.0.0.3:7946"}, "bootstrap-expect": 1,
	}
	for k, v := range want {
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("%s = %#v, want %#v", k, got[k], v)
		}
	}
	for _, k := range notInConfig {
		if _, ok := got[k]; ok {
			t.Errorf("--print-config prints %s", k)
		}
	}
	again, err := printed(t, "--config", writeConfig(t, out), "--print-config")
	if err != nil {
		t.Fatalf("the printed config does not read back: %v\n%s", err, out)
	}
	if again != out {
		t.Fatalf("the printed config read back prints\n%s\nnot\n%s", again, out)
	}
}

// A config file's mistakes are errors naming the line, not ignored.
func TestConfigFileMistakes(t *testing.T) {
	for _, c := range []struct{ text, says string }{
		{"node-id: n1\nnode_id: n2\n", `line 2: unknown key "node_id"`},
		{"config: other.yaml\n", `unknown key "config"`},
		{"segment-bytes: lots\n", "line 1: segment-bytes"},
		{"region: [a, b]\n", "takes one value, not a list"},
		{"region: eu\nregion: us\n", `line 2: "region" given twice`},
		{"- node-id\n", "want a mapping"},
		{"region: eu\n  bad: indent\n", "fabriqd.yaml"},
	} {
		_, err := printed(t, "--config", writeConfig(t, c.text), "--print-config")
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("config %q: got %v, want an error saying %q", c.text, err, c.says)
		}
	}
	if _, err := printed(t, "--config", filepath.Join(t.TempDir(), "none.yaml"), "--print-config"); err == nil {
		t.Error("a missing config file is not an error")
	}
}

func TestGossipKeyFile(t *testing.T) {
	k16 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 16))
	k32 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))
	keys, err := readGossipKeys(writeConfig(t, "# rotation: the new key second\n"+k32+"\n\n  "+k16+"  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || len(keys[0]) != 32 || len(keys[1]) != 16 {
		t.Fatalf("read %d keys of %d and %d bytes", len(keys), len(keys[0]), len(keys[1]))
	}
	for text, says := range map[string]string{
		"# nothing\n":    "no key",
		"not base64!\n":  "line 1: not base64",
		k32 + "\nAAAA\n": "line 2: a key of 3 bytes",
	} {
		if _, err := readGossipKeys(writeConfig(t, text)); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("key file %q: got %v, want an error saying %q", text, err, says)
		}
	}
}

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestHelpExplainsFlags(t *testing.T) {
	var out bytes.Buffer
	cmd := newRootCommand(&out, new(bytes.Buffer))
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--node-id", "--data-dir", "--client-addr", "--raft-addr", "--gossip-addr", "--http-addr", "--region", "--join", "--bootstrap-expect",
		"--segment-bytes", "--retention-interval", "--raft-snapshot-threshold", "--raft-trailing-logs"} {
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
		cmd.SetArgs(args)
		if err := cmd.Execute(); err == nil {
			t.Errorf("fabriqd %v started", args)
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
		var s diskSize
		if err := s.Set(c.in); err != nil || int64(s) != c.want {
			t.Errorf("--min-free-disk %q = %d, %v; want %d", c.in, int64(s), err, c.want)
		}
	}
	for _, bad := range []string{"", "lots", "-1GiB", "1XiB", "1e30GiB"} {
		var s diskSize
		if err := s.Set(bad); err == nil {
			t.Errorf("--min-free-disk %q accepted as %d", bad, int64(s))
		}
	}
	cmd := newRootCommand(new(bytes.Buffer), new(bytes.Buffer))
	cmd.SetArgs([]string{"--min-free-disk", "100KiB", "--data-dir", t.TempDir()})
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

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

func TestSegmentBytesFlag(t *testing.T) {
	for in, want := range map[string]int64{"65536": 65536, "64KiB": 64 << 10, "64MiB": 64 << 20, "1GiB": 1 << 30, "2MB": 2e6} {
		var f sizeFlag
		if err := f.Set(in); err != nil || int64(f) != want {
			t.Errorf("--segment-bytes %s = %d, %v; want %d", in, f, err, want)
		}
	}
}

package main

import (
	"bytes"
	"strings"
	"testing"
)

// Until the node service exists, fabriqd must fail clearly rather than
// exit as if it were serving.
func TestRefusesToPretend(t *testing.T) {
	cmd := newRootCommand(new(bytes.Buffer), new(bytes.Buffer))
	cmd.SetArgs(nil)
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "not built yet") {
		t.Fatalf("fabriqd without the node service: %v", err)
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

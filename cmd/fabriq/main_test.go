package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestVersionAndHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	cmd := newRootCommand(nil, &out, &errOut)
	cmd.SetArgs([]string{"version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "fabriq "+version+"\n" {
		t.Fatalf("version printed %q", got)
	}
	out.Reset()
	cmd = newRootCommand(nil, &out, &errOut)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "--url") || !strings.Contains(out.String(), "FABRIQ_URL") {
		t.Fatalf("help does not explain --url:\n%s", out.String())
	}
}

func TestURLFromEnvironment(t *testing.T) {
	t.Setenv("FABRIQ_URL", "fabriq://10.0.0.1:6650")
	cmd := newRootCommand(nil, new(bytes.Buffer), new(bytes.Buffer))
	if got, _ := cmd.PersistentFlags().GetString("url"); got != "fabriq://10.0.0.1:6650" {
		t.Fatalf("--url default %q, want the environment's", got)
	}
}

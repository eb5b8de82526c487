package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestHCLogBridge(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l := newHCLogger(base, "raft").Named("net").With("peer", "n2")
	tests := []struct {
		name string
		log  func()
		want []string // substrings of the line; nil for no line
	}{
		{"info with fmt", func() { l.Info("entering state", "servers", hclog.Fmt("%d of %d", 2, 3)) },
			[]string{"level=INFO", `msg="entering state"`, "logger=raft.net", "peer=n2", `servers="2 of 3"`}},
		{"error", func() { l.Error("failed", "error", "boom") }, []string{"level=ERROR", "error=boom"}},
		{"warn", func() { l.Warn("slow") }, []string{"level=WARN"}},
		{"debug", func() { l.Debug("detail") }, []string{"level=DEBUG"}},
		{"trace is below the handler's level", func() { l.Trace("noise") }, nil},
		{"off", func() { l.Log(hclog.Off, "nothing") }, nil},
		{"standard logger", func() { l.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}).Print("std line") },
			[]string{"level=WARN", `msg="std line"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf.Reset()
			tt.log()
			out := buf.String()
			if tt.want == nil {
				if out != "" {
					t.Fatalf("logged %q", out)
				}
				return
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Fatalf("line %q lacks %q", out, w)
				}
			}
		})
	}
	if !l.IsDebug() || l.IsTrace() || l.GetLevel() != hclog.Debug {
		t.Fatalf("IsDebug %v IsTrace %v GetLevel %v", l.IsDebug(), l.IsTrace(), l.GetLevel())
	}
	if l.Name() != "raft.net" || l.ResetNamed("x").Name() != "x" {
		t.Fatalf("names %q", l.Name())
	}
}

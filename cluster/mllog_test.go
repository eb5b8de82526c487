package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestMemberlistLogBridge(t *testing.T) {
	tests := []struct {
		line  string
		level slog.Level
		msg   string
	}{
		{"[DEBUG] memberlist: Stream connection from=127.0.0.1:5000\n", slog.LevelDebug, "Stream connection from=127.0.0.1:5000"},
		{"[INFO] memberlist: Marking n2 as failed\n", slog.LevelInfo, "Marking n2 as failed"},
		{"[WARN] memberlist: Refuting a suspect message (from: n1)\n", slog.LevelWarn, "Refuting a suspect message (from: n1)"},
		{"[ERR] memberlist: Conflicting address for n2\n", slog.LevelError, "Conflicting address for n2"},
		{"[ERROR] memberlist: Failed to compress payload\n", slog.LevelError, "Failed to compress payload"},
		{"[ERR] Failed to shutdown transport: boom\n", slog.LevelError, "Failed to shutdown transport: boom"},
		{"[TRACE] memberlist: detail\n", LevelTrace, "detail"},
		{"Err: Could not set the deadline\n", slog.LevelInfo, "Err: Could not set the deadline"},
		{"[NOTICE] memberlist: odd\n", slog.LevelInfo, "[NOTICE] memberlist: odd"},
		{"[WARN unterminated\n", slog.LevelInfo, "[WARN unterminated"},
	}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			level, msg := parseMLLine(tt.line)
			if level != tt.level || msg != tt.msg {
				t.Fatalf("parse %q = %v %q, want %v %q", tt.line, level, msg, tt.level, tt.msg)
			}
		})
	}

	var buf bytes.Buffer
	l := newMLLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	l.Printf("[DEBUG] memberlist: %s", "hidden")
	l.Printf("[WARN] memberlist: %s", "shown")
	out := buf.String()
	if strings.Contains(out, "hidden") || !strings.Contains(out, `level=WARN msg=shown logger=memberlist`) {
		t.Fatalf("logged %q", out)
	}
}

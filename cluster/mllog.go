package cluster

import (
	"context"
	"log"
	"log/slog"
	"strings"
)

// mlWriter turns the lines hashicorp/memberlist writes to its *log.Logger,
// "[LEVEL] memberlist: message", into slog records with logger=memberlist.
// The level in brackets becomes the record's level (ERR and ERROR give
// slog.LevelError, TRACE gives LevelTrace); a line without one is logged at
// INFO as it is. log.Logger calls Write once per line.
type mlWriter struct {
	l *slog.Logger
}

// newMLLogger returns the *log.Logger to give memberlist.
func newMLLogger(l *slog.Logger) *log.Logger {
	return log.New(mlWriter{l: l}, "", 0)
}

func (w mlWriter) Write(p []byte) (int, error) {
	level, msg := parseMLLine(string(p))
	ctx := context.Background()
	if w.l.Enabled(ctx, level) {
		w.l.Log(ctx, level, msg, "logger", "memberlist")
	}
	return len(p), nil
}

// parseMLLine splits a memberlist log line into its level and message.
func parseMLLine(line string) (slog.Level, string) {
	line = strings.TrimRight(line, "\r\n")
	level := slog.LevelInfo
	if rest, ok := strings.CutPrefix(line, "["); ok {
		if tag, msg, ok := strings.Cut(rest, "]"); ok {
			if l, known := mlLevels[tag]; known {
				level = l
				line = strings.TrimSpace(msg)
			}
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	return level, line
}

var mlLevels = map[string]slog.Level{
	"TRACE": LevelTrace,
	"DEBUG": slog.LevelDebug,
	"INFO":  slog.LevelInfo,
	"WARN":  slog.LevelWarn,
	"ERR":   slog.LevelError,
	"ERROR": slog.LevelError,
}

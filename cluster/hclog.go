package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// LevelTrace is the slog level that hashicorp/raft's TRACE records get: one
// step below slog.LevelDebug.
const LevelTrace = slog.LevelDebug - 4

// hclogger forwards the records of hashicorp libraries, which log through
// go-hclog, to a *slog.Logger. The slog handler decides what is kept, so
// SetLevel does nothing and the Is* guards ask the handler.
type hclogger struct {
	l    *slog.Logger
	name string
	args []any // implied arguments from With
}

// newHCLogger returns an hclog.Logger that writes to l with the attribute
// logger=name.
func newHCLogger(l *slog.Logger, name string) hclog.Logger {
	return &hclogger{l: l, name: name}
}

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return LevelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default: // Info and NoLevel
		return slog.LevelInfo
	}
}

// Log implements hclog.Logger.
func (h *hclogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	lvl := slogLevel(level)
	ctx := context.Background()
	if !h.l.Enabled(ctx, lvl) {
		return
	}
	attrs := make([]any, 0, 2+len(h.args)+len(args))
	if h.name != "" {
		attrs = append(attrs, "logger", h.name)
	}
	attrs = append(attrs, h.args...)
	for _, a := range args {
		attrs = append(attrs, hclogValue(a))
	}
	h.l.Log(ctx, lvl, msg, attrs...)
}

// hclogValue renders hclog's formatting helpers the way hclog would.
func hclogValue(v any) any {
	switch v := v.(type) {
	case hclog.Format:
		if len(v) == 0 {
			return ""
		}
		if f, ok := v[0].(string); ok {
			return fmt.Sprintf(f, v[1:]...)
		}
		return fmt.Sprint(v...)
	case hclog.Hex:
		return fmt.Sprintf("0x%x", int(v))
	case hclog.Octal:
		return fmt.Sprintf("0%o", int(v))
	case hclog.Binary:
		return fmt.Sprintf("0b%b", int(v))
	case hclog.Quote:
		return fmt.Sprintf("%q", string(v))
	default:
		return v
	}
}

func (h *hclogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hclogger) enabled(l slog.Level) bool { return h.l.Enabled(context.Background(), l) }

func (h *hclogger) IsTrace() bool { return h.enabled(LevelTrace) }
func (h *hclogger) IsDebug() bool { return h.enabled(slog.LevelDebug) }
func (h *hclogger) IsInfo() bool  { return h.enabled(slog.LevelInfo) }
func (h *hclogger) IsWarn() bool  { return h.enabled(slog.LevelWarn) }
func (h *hclogger) IsError() bool { return h.enabled(slog.LevelError) }

// ImpliedArgs implements hclog.Logger.
func (h *hclogger) ImpliedArgs() []any { return h.args }

// With implements hclog.Logger.
func (h *hclogger) With(args ...any) hclog.Logger {
	c := *h
	c.args = append(append([]any(nil), h.args...), args...)
	return &c
}

// Name implements hclog.Logger.
func (h *hclogger) Name() string { return h.name }

// Named implements hclog.Logger.
func (h *hclogger) Named(name string) hclog.Logger {
	c := *h
	if c.name != "" {
		c.name += "." + name
	} else {
		c.name = name
	}
	return &c
}

// ResetNamed implements hclog.Logger.
func (h *hclogger) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

// SetLevel does nothing: the slog handler filters.
func (h *hclogger) SetLevel(hclog.Level) {}

// GetLevel reports the lowest level the slog handler keeps.
func (h *hclogger) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if h.enabled(slogLevel(l)) {
			return l
		}
	}
	return hclog.Off
}

// StandardLogger implements hclog.Logger.
func (h *hclogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

// StandardWriter returns a writer that logs each write as one record, at
// opts.ForceLevel if set and at INFO otherwise.
func (h *hclogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return &stdWriter{h: h, level: level}
}

type stdWriter struct {
	h     *hclogger
	level hclog.Level
}

func (w *stdWriter) Write(p []byte) (int, error) {
	w.h.Log(w.level, string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

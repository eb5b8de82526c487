package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"
)

// servePprof serves Go's profiles (/debug/pprof/) on addr until stop is
// called, and turns on the mutex and block profiles (a sample of
// contended locks and of waits over 10 µs). It is off unless
// --pprof-addr is given: the profiles show the node's internals and have
// no authentication, so bind it to loopback.
func servePprof(addr string, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr: %w", err)
	}
	runtime.SetMutexProfileFraction(100)
	runtime.SetBlockProfileRate(int((10 * time.Microsecond).Nanoseconds()))
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return serve(ln, srv, "profiles", logger), nil
}

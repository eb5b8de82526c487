package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fabriq-io/fabriq/broker"
	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/httpadmin"
	"github.com/fabriq-io/fabriq/tlsconfig"
)

// listenHTTP opens the HTTP port (--http-addr) before the node is made,
// so that the address advertised to the other nodes is the one bound
// (port 0 picks one).
func listenHTTP(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http-addr: %w", err)
	}
	return ln, nil
}

// serveHTTP serves on ln, from the node's start to its stop:
//   - /healthz: 200 while the process runs (liveness);
//   - /readyz: 200 when the node is ready (broker.Readiness: started, the
//     metadata group led, every partition of the node led), 503 when
//     not; the body is the readiness as JSON either way;
//   - /metrics: the node's metrics (broker.Node.Collector), Go's and the
//     process's, in Prometheus's text format;
//   - /admin/v1/...: the admin API (package httpadmin), whose requests
//     go to the cluster through a client of the node's own client port
//     (adminClient), with the caller's token.
//
// stop shuts the server down, waiting up to 5 s for requests in flight.
func serveHTTP(ln net.Listener, node *broker.Node, certs *tlsconfig.Node, logger *slog.Logger) (stop func()) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(node.Collector(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		r := node.Readiness()
		w.Header().Set("Content-Type", "application/json")
		if !r.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		body := struct {
			Ready bool `json:"ready"`
			broker.Readiness
		}{r.Ready(), r}
		json.NewEncoder(w).Encode(body)
	})
	httpadmin.Register(mux, httpadmin.Config{
		Dial:   func(token string) (*client.Client, error) { return adminClient(node, certs, token) },
		Logger: logger,
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	return serve(ln, srv, "health, metrics and admin", logger)
}

// adminClient returns a client of the cluster for one admin request: it
// enters through this node's client port and presents token. With TLS on
// it dials as the node dials its peers, checking their certificates
// against the cluster's CA.
func adminClient(node *broker.Node, certs *tlsconfig.Node, token string) (*client.Client, error) {
	opts := client.Options{URL: "fabriq://" + node.Addr(), Name: "http-admin", Token: token}
	if certs != nil {
		opts.URL = "fabriq+tls://" + node.Addr()
		opts.TLSConfig = certs.PeerClient()
	}
	return client.New(opts)
}

// serve runs srv on ln in a goroutine until the returned stop, which
// shuts it down, waiting up to 5 s for requests in flight, and returns
// once the goroutine has.
func serve(ln net.Listener, srv *http.Server, what string, logger *slog.Logger) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("HTTP server stopped", "serving", what, "err", err)
		}
	}()
	logger.Info("serving "+what, "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}
}

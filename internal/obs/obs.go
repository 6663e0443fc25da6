// Package obs is what every daemon serves for operators: /metrics
// (Prometheus text, with the go_* and process_* collectors beside the
// daemon's own corral_* metrics) and /healthz (200 "ok", or 503 with the
// reason), on a small HTTP listener that defaults to loopback.
//
// Each daemon owns its registry (no global one): tests run several daemons
// in one process, and a scrape shows only the daemon asked.
package obs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a registry holding the Go runtime and process
// collectors, to which a daemon adds its own.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// MetricsHandler serves r's metrics in the Prometheus exposition formats.
func MetricsHandler(r *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(r, promhttp.HandlerOpts{Registry: r, ErrorHandling: promhttp.ContinueOnError})
}

// Check tells whether a daemon can do its work; a non-nil error says why not.
type Check func(ctx context.Context) error

// CheckTimeout bounds one health check: a check that hangs is a failure,
// and the prober gets an answer instead of its own timeout.
const CheckTimeout = 3 * time.Second

// Healthz answers 200 "ok" when check passes and 503 with the reason when
// it does not (nil check: always ok).
func Healthz(check Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if check != nil {
			ctx, cancel := context.WithTimeout(r.Context(), CheckTimeout)
			err := check(ctx)
			if err == nil && ctx.Err() != nil {
				err = errors.New("health check timed out")
			}
			cancel()
			if err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "unhealthy: %v\n", err)
				return
			}
		}
		w.Write([]byte("ok\n"))
	})
}

// Mux returns a mux serving GET /metrics from r and GET /healthz from check.
func Mux(r *prometheus.Registry, check Check) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", MetricsHandler(r))
	mux.Handle("GET /healthz", Healthz(check))
	AddProfile(mux)
	return mux
}

// Off is the address value that turns a daemon's HTTP listener off.
const Off = "off"

// DefaultAddr derives a daemon's HTTP address from its service address:
// the same host, port + offset, so daemons on one host (meta 7400 -> 9400,
// iods 7410, 7411 -> 9410, 9411) and daemons on hosts of their own (corral
// up's 127.0.0.11-13:7410 -> :9410 each) do not collide. Port 0 stays 0 (a
// free port). The metrics go where the service is: a daemon listening on
// 10.0.0.5 serves them on 10.0.0.5 too, but one listening on every address
// (0.0.0.0, ::, no host) serves them on loopback only, so that they reach
// beyond the machine only where someone chose an address.
func DefaultAddr(listen string, offset int) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", listen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", fmt.Errorf("listen address %q: port %q is not a number", listen, port)
	}
	if p != 0 {
		p += offset
	}
	if p > 65535 {
		return "", fmt.Errorf("listen port %s + %d is over 65535", port, offset)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// Serve serves r's /metrics and check's /healthz on addr until ctx ends
// (ListenHTTP). An address that cannot be bound is an error, unless it was
// derived rather than asked for (derived): then the daemon serves on
// without it, logged, and Serve reports false: the service matters more
// than its metrics.
func Serve(ctx context.Context, addr string, derived bool, r *prometheus.Registry, check Check, log *slog.Logger) (bool, error) {
	if _, err := ListenHTTP(ctx, addr, Mux(r, check), log); err != nil {
		if !derived {
			return false, err
		}
		if log == nil {
			log = slog.Default()
		}
		log.Error("serving without /metrics and /healthz; give --http ADDR", "err", err)
		return false, nil
	}
	return true, nil
}

// ListenHTTP serves h on addr until ctx ends and returns the bound address
// at once (addr's port may be 0). An address without a host listens on
// loopback: exposing metrics beyond the machine is a choice made by
// giving a host. Read and write timeouts keep a stuck scraper from holding
// a connection.
func ListenHTTP(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (net.Addr, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("HTTP address %q: %w", addr, err)
	}
	if host == "" {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("HTTP listener (metrics, health): %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second}
	go srv.Serve(ln)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if log != nil {
		log.Info("metrics and health", "http", ln.Addr().String())
	}
	return ln.Addr(), nil
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-cluster/corral/internal/obs"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/fusefs"
	"github.com/spf13/pflag"
)

// HTTP port offsets from a daemon's --listen port (docs/metrics.md): meta
// 7400 -> 9400, iods 7410.. -> 9410..; distinct per host and per port.
const (
	metaHTTPOffset = 2000
	iodHTTPOffset  = 2000
)

// addHTTPFlag adds --http, the address of a daemon's /metrics and /healthz.
func addHTTPFlag(fs *pflag.FlagSet, p *string, def string) {
	fs.StringVar(p, "http", "", "address of /metrics and /healthz (default "+def+"; \"off\": none)")
}

// httpAddr resolves --http: empty derives it from listen (derived true),
// "off" turns it off.
func httpAddr(flag, listen string, offset int) (addr string, derived bool, err error) {
	switch flag {
	case obs.Off:
		return "", false, nil
	case "":
		a, err := obs.DefaultAddr(listen, offset)
		if err != nil {
			return "", false, fmt.Errorf("--http (derived from --listen): %w; give --http HOST:PORT or --http off", err)
		}
		return a, true, nil
	}
	return flag, false, nil
}

// mountObs starts a mount's /metrics and /healthz on addr ("" or "off":
// none) before the mount is made, so a bad address fails first. The health
// check fails until mounted() is called, then asks the mount (statfs).
func mountObs(ctx context.Context, addr, dir string, cl *client.Client, log *slog.Logger) (m *fusefs.Metrics, mounted func(bool), err error) {
	if addr == "" || addr == obs.Off {
		return nil, func(bool) {}, nil
	}
	// checks counts health checks in flight: each statfs(2)s the mount,
	// which this process serves. One still waiting when the process stops
	// serving would never be answered and keep the process from exiting
	// (a thread stuck in the kernel), so the mount is marked down first and
	// unmounting waits for the checks in flight.
	var up atomic.Bool
	var checks sync.WaitGroup
	var checksMu sync.Mutex
	check := func(ctx context.Context) error {
		checksMu.Lock()
		if !up.Load() {
			checksMu.Unlock()
			return errors.New("not mounted")
		}
		checks.Add(1)
		checksMu.Unlock()
		defer checks.Done()
		return fusefs.Healthy(ctx, dir)
	}
	reg := obs.NewRegistry()
	m = fusefs.NewMetrics(reg)
	m.Client(cl)
	if _, err := obs.Serve(ctx, addr, false, reg, check, log); err != nil {
		return nil, nil, err
	}
	return m, func(on bool) {
		checksMu.Lock()
		up.Store(on)
		checksMu.Unlock()
		if !on {
			checks.Wait()
			// The statfs(2) calls those checks started, also ones they
			// gave up on, must be answered while this process still serves.
			if !fusefs.HealthChecksDone(15 * time.Second) {
				log.Warn("a health check's statfs is still unanswered; unmounting anyway")
			}
		}
	}, nil
}

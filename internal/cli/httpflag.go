package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

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
func mountObs(ctx context.Context, addr, dir string, cl *client.Client, log *slog.Logger) (m *fusefs.Metrics, mounted func(), err error) {
	if addr == "" || addr == obs.Off {
		return nil, func() {}, nil
	}
	var up atomic.Bool
	check := func(ctx context.Context) error {
		if !up.Load() {
			return errors.New("not mounted yet")
		}
		return fusefs.Healthy(ctx, dir)
	}
	reg := obs.NewRegistry()
	m = fusefs.NewMetrics(reg)
	m.Client(cl)
	if _, err := obs.Serve(ctx, addr, false, reg, check, log); err != nil {
		return nil, nil, err
	}
	return m, func() { up.Store(true) }, nil
}

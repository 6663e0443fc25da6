package cli

import (
	"github.com/corral-cluster/corral/internal/obs"
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

// httpAddr resolves --http: empty derives it from listen, "off" turns it off.
func httpAddr(flag, listen string, offset int) (string, error) {
	switch flag {
	case obs.Off:
		return "", nil
	case "":
		return obs.DefaultAddr(listen, offset)
	}
	return flag, nil
}

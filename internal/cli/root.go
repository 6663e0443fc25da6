// Package cli wires the corral subcommands to the packages that do the work.
// One file per subcommand; no logic beyond flags, output and exit codes.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// exitError carries an exit status past cobra without another message.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// Main runs corral with args and returns the process exit status.
func Main(args []string) int {
	root := &cobra.Command{
		Use:   "corral",
		Short: "Corral: a cluster of commodity Linux machines serving as one",
		Long: `Corral turns commodity Linux machines into one network service: a director
spreads connections for a virtual IP over cluster nodes, which serve content
from a parallel file system striped over I/O servers.

Start everything on this machine with 'corral up', then try 'corral fs' and
'corral mount'. Each role is a subcommand; see 'corral ROLE --help'.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(metaCmd(), iodCmd(), fsCmd(), mountCmd(), directorCmd(), nodeCmd(), ctlCmd(), upCmd(), testbedCmd(), benchCmd(), fsxCmd())
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintf(os.Stderr, "corral: %s\n", errText(err))
	if strings.Contains(err.Error(), "unknown command") || strings.Contains(err.Error(), "flag") || strings.Contains(err.Error(), "arg") {
		return 2
	}
	return 1
}

// errText renders an error the way coreutils do: "PATH: reason".
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		var en syscall.Errno
		if errors.As(pe.Err, &en) && pe.Err == en {
			return pe.Path + ": " + en.Error()
		}
		return pe.Path + ": " + pe.Err.Error()
	}
	return err.Error()
}

// signalContext ends on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func daemonLog(role string) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("role", role)
}

// ready announces a daemon's address on stdout; internal/launch waits for it.
func ready(role, addr string) { fmt.Printf("corral %s: listening on %s\n", role, addr) }

// parseSize reads a byte count with an optional binary unit: 4096, 64K,
// 1M, 2G, 64KiB.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q (want a number with an optional unit: 4096, 64K, 1M, 1G)", s)
	}
	return v * mult, nil
}

// human renders a byte count with a binary unit.
func human(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%dB", n)
	}
	f := float64(n)
	i := -1
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d%ciB", int64(f), units[i])
	}
	return fmt.Sprintf("%.1f%ciB", f, units[i])
}

package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
)

// ProfileEnv names a directory: a corral process started with it set writes
// its CPU, block and mutex profiles there when it ends (bench pfs --profile
// sets it for the I/O servers and clients it starts).
const ProfileEnv = "CORRAL_PROFILE_DIR"

// startProfile starts profiling this process when ProfileEnv is set; the
// returned func writes the profiles. Files are named after the command,
// its --listen address when it has one, and the pid, so that each I/O
// server of a bed has its own.
func startProfile(args []string) func() {
	dir := os.Getenv(ProfileEnv)
	if dir == "" {
		return func() {}
	}
	var name []string
	for i, a := range args {
		switch {
		case a == "--listen" && i+1 < len(args):
			name = append(name, strings.ReplaceAll(args[i+1], ":", "_"))
		case !strings.HasPrefix(a, "-") && len(name) < 3 && (i == 0 || !strings.HasPrefix(args[i-1], "--")):
			name = append(name, a)
		}
	}
	base := filepath.Join(dir, fmt.Sprintf("%s-%d", strings.Join(name, "-"), os.Getpid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		fmt.Fprintf(os.Stderr, "profile: %v\n", err)
		return func() {}
	}
	cpu, err := os.OpenFile(base+".cpu.pprof", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		fmt.Fprintf(os.Stderr, "profile: %v\n", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		fmt.Fprintf(os.Stderr, "profile: %v\n", err)
	}
	// Blocking events of 100 µs and more are all sampled; shorter ones in
	// proportion: waits on the network and the disk are what matter here.
	runtime.SetBlockProfileRate(100_000)
	runtime.SetMutexProfileFraction(10)
	return func() {
		pprof.StopCPUProfile()
		cpu.Close()
		defer runtime.SetBlockProfileRate(0)
		defer runtime.SetMutexProfileFraction(0)
		for _, p := range []string{"block", "mutex", "goroutine"} {
			f, err := os.OpenFile(base+"."+p+".pprof", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				continue
			}
			pprof.Lookup(p).WriteTo(f, 0)
			f.Close()
		}
	}
}

package obs

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
)

// ProfileEnv, set to 1 in a daemon's environment, adds the profile
// endpoints to its metrics listener (corral bench meta --profile sets it).
// Off by default: a profile shows code paths and timings, and starting one
// costs CPU, so only a benchmark that asked for it gets them.
const ProfileEnv = "CORRAL_PROFILE"

// BlockProfileRate is the block profile's sampling rate while a profile
// runs: one event per 10 µs blocked (runtime.SetBlockProfileRate).
const BlockProfileRate = 10000

// profiler holds the one CPU profile a process may have running.
type profiler struct {
	mu  sync.Mutex
	cpu *bytes.Buffer // nil: none running
}

var prof profiler

// AddProfile registers POST /debug/profile/start and POST
// /debug/profile/stop on mux when ProfileEnv is set. Start begins a CPU
// profile and block profiling; stop ends both and answers with the CPU
// profile (pprof format); GET /debug/profile/block answers with the block
// profile gathered so far. Callers must be on loopback, whatever address
// the listener has.
func AddProfile(mux *http.ServeMux) {
	if os.Getenv(ProfileEnv) != "1" {
		return
	}
	mux.HandleFunc("POST /debug/profile/start", loopbackOnly(func(w http.ResponseWriter, r *http.Request) {
		prof.mu.Lock()
		defer prof.mu.Unlock()
		if prof.cpu != nil {
			http.Error(w, "a profile is already running", http.StatusConflict)
			return
		}
		b := new(bytes.Buffer)
		if err := pprof.StartCPUProfile(b); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		prof.cpu = b
		runtime.SetBlockProfileRate(BlockProfileRate)
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("POST /debug/profile/stop", loopbackOnly(func(w http.ResponseWriter, r *http.Request) {
		prof.mu.Lock()
		defer prof.mu.Unlock()
		if prof.cpu == nil {
			http.Error(w, "no profile running", http.StatusConflict)
			return
		}
		pprof.StopCPUProfile()
		runtime.SetBlockProfileRate(0)
		b := prof.cpu
		prof.cpu = nil
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(b.Bytes())
	}))
	mux.HandleFunc("GET /debug/profile/block", loopbackOnly(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		pprof.Lookup("block").WriteTo(w, 0)
	}))
}

func loopbackOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			http.Error(w, "profiles are served to loopback callers only", http.StatusForbidden)
			return
		}
		h(w, r)
	}
}

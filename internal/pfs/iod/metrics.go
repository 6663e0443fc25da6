package iod

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/obs"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/prometheus/client_golang/prometheus"
)

// iodOps are the requests an I/O server answers; their series exist from
// the start.
var iodOps = []proto.Op{proto.OpRead, proto.OpWrite, proto.OpTruncate, proto.OpSync, proto.OpRemove, proto.OpObjStat,
	proto.OpPunch, proto.OpAlloc, proto.OpList, proto.OpIdentify, proto.OpReplWrite, proto.OpHeal, proto.OpScrub}

// observed counts, times and measures every request of the store.
type observed struct {
	st       *Store
	m        *obs.OpMetrics
	in, out  prometheus.Counter
	identify string
}

func (o observed) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	start := time.Now()
	resp, err := o.st.Handle(ctx, req)
	o.m.Observe(proto.OpName(req.Op()), time.Since(start), proto.ResultLabel(err))
	if err == nil {
		switch m := req.(type) {
		case *proto.Write:
			o.in.Add(float64(len(m.Data)))
		case *proto.ReplWrite:
			o.in.Add(float64(len(m.Data)))
		case *proto.Read:
			if d, ok := resp.(*proto.DataReply); ok {
				o.out.Add(float64(len(d.Data)))
			}
		}
	}
	return resp, err
}

// Healthy reports whether the server can do its work: registered with the
// metadata server under an identity it accepted, and its data directory
// writable (a file is made there and removed). Its error's text is terse
// (it is served unauthenticated); healthDetail has the particulars.
func (s *Store) Healthy(ctx context.Context) error {
	if !s.registered.Load() {
		return &healthError{"not registered with the metadata server yet", ""}
	}
	if d := s.degraded(); d != "" {
		// It serves, but a disk is missing: an operator should know.
		return &healthError{"RAID-1 degraded", d}
	}
	// Every current data directory (RAID) must take a file.
	for _, m := range s.writers() {
		dir := s.members[m].dir
		done := make(chan error, 1)
		go func() {
			f, err := os.CreateTemp(filepath.Join(dir, "objects"), ".healthz-*")
			if err != nil {
				done <- &healthError{"data directory not writable", err.Error()}
				return
			}
			f.Close()
			if err := os.Remove(f.Name()); err != nil {
				done <- &healthError{"data directory not writable", err.Error()}
				return
			}
			done <- nil
		}()
		select {
		case err := <-done:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return &healthError{"data directory does not answer", dir}
		}
	}
	return nil
}

// healthError is a failed check: a short reason that names no path or
// address (anyone who reaches /healthz reads it), and the detail for the
// log.
type healthError struct{ reason, detail string }

func (e *healthError) Error() string { return e.reason }

// healthEvery: /healthz runs the real check (which creates a file) at most
// this often; the requests in between get the last answer, so a flood of
// probes costs the disk nothing.
const healthEvery = time.Second

// healthCache runs check at most once per healthEvery and logs a change of
// answer once, with the detail.
type healthCache struct {
	check func(context.Context) error
	log   *slog.Logger
	every time.Duration

	mu  sync.Mutex
	at  time.Time
	err error
}

func (h *healthCache) Check(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.at.IsZero() && time.Since(h.at) < h.every {
		return h.err
	}
	err := h.check(ctx)
	if err != nil {
		var he *healthError
		if errors.As(err, &he) {
			if he.detail != "" && (h.err == nil || h.err.Error() != he.reason) {
				h.log.Warn("health check failed", "reason", he.reason, "detail", he.detail)
			}
			err = errors.New(he.reason)
		} else {
			h.log.Warn("health check failed", "err", err)
			err = errors.New("check failed")
		}
	}
	h.at, h.err = time.Now(), err
	return err
}

// healthz is the cached check /healthz answers with.
func (s *Store) healthz(log *slog.Logger) obs.Check {
	if log == nil {
		log = s.log
	}
	h := &healthCache{check: s.Healthy, log: log, every: healthEvery}
	return h.Check
}

// serveHTTP starts /metrics and /healthz on addr ("": none) until ctx ends
// (optional: a failure to listen is logged, not returned),
// and returns the handler to serve requests with.
func (s *Store) serveHTTP(ctx context.Context, addr string, optional bool, log *slog.Logger) (proto.Handler, error) {
	if addr == "" {
		return s, nil
	}
	reg := obs.NewRegistry()
	m := obs.NewOpMetrics(reg, "corral_iod_requests", "I/O server requests answered, by operation and result (ok or the errno's name)",
		"corral_iod_request_duration_seconds", "time to answer an I/O server request (stripe I/O), by operation")
	for _, op := range iodOps {
		m.Init(proto.OpName(op))
	}
	reg.MustRegister(objectFsync)
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corral_iod_bytes_total",
		Help: "stripe data moved by the I/O server: in (written by clients and forwarded by head copies), out (read by clients)"}, []string{"direction"})
	capacity := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corral_iod_capacity_bytes",
		Help: "size of the file system holding the data directory"}, func() float64 { c, _ := s.usage(); return float64(c) })
	free := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corral_iod_free_bytes",
		Help: "space available to the I/O server in the file system holding the data directory"}, func() float64 { _, f := s.usage(); return float64(f) })
	healed := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "corral_iod_healed_bytes_total",
		Help: "replica bytes this I/O server copied from a current copy to heal its own (Heal)"}, func() float64 { return float64(s.r.healed.Load()) })
	fwdFailed := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "corral_iod_repl_forward_failures_total",
		Help: "writes this I/O server, as head of a replicated column, could not forward to a copy (that copy is then marked stale)"},
		func() float64 { return float64(s.r.fwdErr.Load()) })
	csErrors := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "corral_iod_checksum_errors_total",
		Help: "blocks whose CRC32C did not match, found by reads and scrubs"}, func() float64 { return float64(s.csErrors.Load()) })
	degraded := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corral_iod_raid_degraded",
		Help: "RAID-1 data directories missing, failed or being rebuilt"}, func() float64 { return float64(s.degradedCount()) })
	rebuilds := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "corral_iod_raid_rebuilds_total",
		Help: "RAID-1 data directories copied back after they returned"}, func() float64 { return float64(s.rebuilds.Load()) })
	missing := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "corral_iod_missing_object_reads_total",
		Help: "reads of an object the file's size says holds data but that this I/O server does not have (answered missing, never as a hole)"},
		func() float64 { return float64(s.missingReads.Load()) })
	reg.MustRegister(bytes, capacity, free, healed, fwdFailed, csErrors, degraded, rebuilds, missing)
	if served, err := obs.Serve(ctx, addr, optional, reg, s.healthz(log), log); !served {
		return s, err
	}
	return observed{st: s, m: m, in: bytes.WithLabelValues("in"), out: bytes.WithLabelValues("out")}, nil
}

// objectFsync times each fsync of an object (its data and checksums), one
// set per process: tests that run several I/O servers in one process see
// their sum.
var objectFsync = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "corral_iod_object_fsync_seconds",
	Help:    "time to make one object's data and checksums durable (fsync of both files)",
	Buckets: obs.LatencyBuckets})

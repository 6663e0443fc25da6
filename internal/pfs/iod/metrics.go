package iod

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
// writable (a file is made there and removed).
func (s *Store) Healthy(ctx context.Context) error {
	if !s.registered.Load() {
		return errors.New("not registered with the metadata server yet")
	}
	if d := s.degraded(); d != "" {
		// It serves, but a disk is missing: an operator should know.
		return fmt.Errorf("RAID-1 degraded: %s", d)
	}
	// Every current data directory (RAID) must take a file.
	for _, m := range s.writers() {
		dir := s.members[m].dir
		done := make(chan error, 1)
		go func() {
			f, err := os.CreateTemp(filepath.Join(dir, "objects"), ".healthz-*")
			if err != nil {
				done <- fmt.Errorf("data directory not writable: %w", err)
				return
			}
			f.Close()
			done <- os.Remove(f.Name())
		}()
		select {
		case err := <-done:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("data directory %s does not answer", dir)
		}
	}
	return nil
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
	if served, err := obs.Serve(ctx, addr, optional, reg, s.Healthy, log); !served {
		return s, err
	}
	return observed{st: s, m: m, in: bytes.WithLabelValues("in"), out: bytes.WithLabelValues("out")}, nil
}

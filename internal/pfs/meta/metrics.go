package meta

import (
	"context"
	"time"

	"github.com/corral-cluster/corral/internal/obs"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/replog"
	"github.com/prometheus/client_golang/prometheus"
)

// metaOps are the requests meta answers; their series exist from the start.
var metaOps = []proto.Op{proto.OpLookup, proto.OpWalk, proto.OpGetAttr, proto.OpSetAttr, proto.OpCreate, proto.OpMkdir,
	proto.OpSymlink, proto.OpLink, proto.OpUnlink, proto.OpRmdir, proto.OpRename, proto.OpReaddir, proto.OpReadlink,
	proto.OpSetLayout, proto.OpStatfs, proto.OpRegister, proto.OpServers, proto.OpMknod, proto.OpSetXattr, proto.OpGetXattr,
	proto.OpListXattr, proto.OpRemoveXattr, proto.OpUnlinkOpen, proto.OpReleaseOrphan, proto.OpRenewOrphans, proto.OpReplace,
	proto.OpRefCheck, proto.OpMarkStale, proto.OpGetStale, proto.OpLoseServer, proto.OpReserve}

// observed counts and times every request of the handler it wraps.
type observed struct {
	h proto.Handler
	m *obs.OpMetrics
}

func (o observed) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	start := time.Now()
	resp, err := o.h.Handle(ctx, req)
	op := req.Op()
	if id, ok := req.(*proto.Idem); ok {
		op = id.Req.Op() // a request ID is an envelope: count what it carries
	}
	o.m.Observe(proto.OpName(op), time.Since(start), proto.ResultLabel(err))
	return resp, err
}

// serversDesc: I/O servers by the state meta sees them in, read at scrape.
var serversDesc = prometheus.NewDesc("corral_meta_iod_servers", "I/O servers known to the metadata server, by state (up, down, full, lost, replacing)", []string{"state"}, nil)

type serversCollector struct{ s *Service }

func (c serversCollector) Describe(ch chan<- *prometheus.Desc) { ch <- serversDesc }
func (c serversCollector) Collect(ch chan<- prometheus.Metric) {
	n := map[string]float64{}
	for _, st := range []uint8{proto.ServerUp, proto.ServerDown, proto.ServerFull, proto.ServerLost, proto.ServerReplacing} {
		n[proto.StateName(st)] = 0
	}
	for _, si := range c.s.servers() {
		n[proto.StateName(si.State)]++
	}
	for st, v := range n {
		ch <- prometheus.MustNewConstMetric(serversDesc, prometheus.GaugeValue, v, st)
	}
}

var (
	watchersDesc     = prometheus.NewDesc("corral_meta_cache_watchers", "clients caching metadata registered with this member (Watch), by the kind of credential they proved (full, read-only)", []string{"credential"}, nil)
	watchRevokedDesc = prometheus.NewDesc("corral_meta_cache_watchers_revoked_total", "watchers writers stopped waiting for: they left a change unacknowledged for a whole lease", nil, nil)
	watchRefusedDesc = prometheus.NewDesc("corral_meta_cache_watches_refused_total", "Watch requests refused because a cap on watchers (in all, of read-only peers, per connection) was reached", nil, nil)
)

type watchCollector struct{ s *Service }

func (c watchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- watchersDesc
	ch <- watchRevokedDesc
	ch <- watchRefusedDesc
}

func (c watchCollector) Collect(ch chan<- prometheus.Metric) {
	full, ro, revoked, refused := c.s.watchCounts()
	ch <- prometheus.MustNewConstMetric(watchersDesc, prometheus.GaugeValue, float64(full), proto.KindFull.String())
	ch <- prometheus.MustNewConstMetric(watchersDesc, prometheus.GaugeValue, float64(ro), proto.KindReadOnly.String())
	ch <- prometheus.MustNewConstMetric(watchRevokedDesc, prometheus.CounterValue, float64(revoked))
	ch <- prometheus.MustNewConstMetric(watchRefusedDesc, prometheus.CounterValue, float64(refused))
}

// Healthy reports whether the store answers: a read transaction that finds
// the root directory.
func (s *Service) Healthy(ctx context.Context) error {
	done := make(chan error, 1)
	go func() {
		done <- s.view(func(t tx) error {
			_, err := t.inode(RootIno)
			return err
		})
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// serveHTTP starts /metrics and /healthz on addr ("": none) until ctx ends
// (optional: a failure to listen is logged, not returned),
// and returns the handler to serve requests with: s, observed when there
// are metrics to serve.
func (s *Service) serveHTTP(ctx context.Context, addr string, optional bool) (proto.Handler, error) {
	if addr == "" {
		return s, nil
	}
	reg := obs.NewRegistry()
	m := obs.NewOpMetrics(reg, "corral_meta_operations", "metadata requests answered, by operation and result (ok or the errno's name)",
		"corral_meta_operation_duration_seconds", "time to answer a metadata request, by operation")
	for _, op := range metaOps {
		m.Init(proto.OpName(op))
	}
	reg.MustRegister(serversCollector{s}, healCollector{s}, watchCollector{s})
	reg.MustRegister(replog.Collectors()...)
	if served, err := obs.Serve(ctx, addr, optional, reg, s.Healthy, s.log); !served {
		return s, err
	}
	return observed{s, m}, nil
}

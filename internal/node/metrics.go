package node

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/corral-cluster/corral/internal/obs"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/prometheus/client_golang/prometheus"
)

// nodeMetrics is the node's registry. Per request it costs one histogram
// observation and two counter adds; the counter of each status code is made
// once and kept.
type nodeMetrics struct {
	reg     *prometheus.Registry
	handler http.Handler
	byCode  *prometheus.CounterVec
	codes   [600]atomic.Pointer[prometheus.Counter]
	bytes   prometheus.Counter
	dur     prometheus.Histogram
}

func newNodeMetrics(s *Server) *nodeMetrics {
	m := &nodeMetrics{reg: obs.NewRegistry()}
	m.byCode = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corral_node_requests_total",
		Help: "HTTP requests answered by the node, by status code"}, []string{"code"})
	m.bytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "corral_node_response_bytes_total",
		Help: "response body bytes sent by the node"})
	m.dur = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "corral_node_request_duration_seconds",
		Help: "time from a request's arrival to the end of its response (body included)", Buckets: obs.LatencyBuckets})
	active := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corral_node_active_requests",
		Help: "requests in progress (what the node reports to the director as its load)"}, func() float64 { return float64(s.active.Load()) })
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corral_node_pending_bytes",
		Help: "response bytes of requests in progress still to be sent"}, func() float64 { return float64(s.inflight.Load()) })
	m.reg.MustRegister(m.byCode, m.bytes, m.dur, active, pending)
	registerQoSMetrics(m.reg, s.qos)
	registerCacheMetrics(m.reg, s.cache)
	// The node's side of the file system: metadata lookups and stripe
	// reads as the node waits for them (network included).
	fsOps := obs.NewOpMetrics(m.reg, "corral_node_fs_requests", "file-system requests the node made, by operation (walk, read, ...) and result",
		"corral_node_fs_request_duration_seconds", "time the node waited for a file-system request (metadata, stripe I/O), by operation")
	fsOps.Init(proto.OpName(proto.OpWalkBeneath), proto.OpName(proto.OpRead))
	s.fs.Pool().Observe = obs.Observer(fsOps, proto.OpName, proto.ResultLabel)
	for _, c := range []int{200, 206, 304, 400, 404, 503} { // seen from the start
		m.code(c)
	}
	m.handler = obs.MetricsHandler(m.reg)
	return m
}

func (m *nodeMetrics) code(c int) prometheus.Counter {
	if c < 100 || c >= len(m.codes) {
		c = 500 // not a status a server sends; never a new label
	}
	if p := m.codes[c].Load(); p != nil {
		return *p
	}
	ctr := m.byCode.WithLabelValues(strconv.Itoa(c))
	m.codes[c].Store(&ctr)
	return ctr
}

// observe records one finished request.
func (m *nodeMetrics) observe(status int, bytes int64, start time.Time) {
	if status == 0 {
		status = http.StatusOK // nothing written: net/http sends 200
	}
	m.code(status).Inc()
	m.bytes.Add(float64(bytes))
	m.dur.Observe(time.Since(start).Seconds())
}

// MetricsHandler serves the node's /metrics; it belongs on the node's
// admin listener, not on the addresses that serve content.
func (s *Server) MetricsHandler() http.Handler { return s.metrics.handler }

// registerCacheMetrics exposes the data cache's counters, read at scrape
// time (nothing per request beyond the cache's own atomic adds). With the
// cache off they stay 0, so dashboards see the same series either way.
func registerCacheMetrics(reg prometheus.Registerer, c *dataCache) {
	val := func(f func(*dataCache) float64) func() float64 {
		return func() float64 {
			if c == nil {
				return 0
			}
			return f(c)
		}
	}
	counter := func(name, help string, f func(*dataCache) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, val(f))
	}
	reg.MustRegister(
		counter("corral_node_cache_hits_total", "requests answered from the node's data cache (no I/O server asked)",
			func(c *dataCache) float64 { return float64(c.hits.Load()) }),
		counter("corral_node_cache_misses_total", "requests for a cacheable file not found in the data cache, in that version",
			func(c *dataCache) float64 { return float64(c.misses.Load()) }),
		counter("corral_node_cache_admissions_total", "files the data cache took in",
			func(c *dataCache) float64 { return float64(c.admissions.Load()) }),
		counter("corral_node_cache_evictions_total", "files the data cache pushed out to make room for more popular ones",
			func(c *dataCache) float64 { return float64(c.evictions.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corral_node_cache_bytes",
			Help: "memory the data cache holds (file bytes rounded up to their heap allocation size, plus a fixed charge per file), at most --data-cache"},
			val(func(c *dataCache) float64 { return float64(c.used.Load()) })),
	)
}

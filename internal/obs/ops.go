package obs

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LatencyBuckets (seconds) span what a daemon's operations take: a cached
// metadata read (~50 µs) to a stalled fsync or a large response (10 s).
var LatencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// OpMetrics counts operations by name and result and observes their
// latency: NAME_total{op,result} and NAME_duration_seconds{op}. The
// children of each (op, result) are made once and kept, so observing costs
// a map read and the histogram's own atomic adds, no allocation.
type OpMetrics struct {
	total *prometheus.CounterVec
	dur   *prometheus.HistogramVec
	kids  sync.Map // op -> *opKids
}

type opKids struct {
	ok      prometheus.Counter
	dur     prometheus.Observer
	results sync.Map // result -> prometheus.Counter
	op      string
}

// NewOpMetrics registers name_total (help: what is counted) and
// name_duration_seconds with r. name is the full prefix, e.g.
// "corral_meta_operations" gives corral_meta_operations_total and
// corral_meta_operation_duration_seconds when durName is
// "corral_meta_operation_duration_seconds".
func NewOpMetrics(r prometheus.Registerer, name, help, durName, durHelp string) *OpMetrics {
	m := &OpMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name + "_total", Help: help}, []string{"op", "result"}),
		dur:   prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: durName, Help: durHelp, Buckets: LatencyBuckets}, []string{"op"}),
	}
	r.MustRegister(m.total, m.dur)
	return m
}

func (m *OpMetrics) kidsOf(op string) *opKids {
	if k, ok := m.kids.Load(op); ok {
		return k.(*opKids)
	}
	k := &opKids{op: op, ok: m.total.WithLabelValues(op, "ok"), dur: m.dur.WithLabelValues(op)}
	got, _ := m.kids.LoadOrStore(op, k)
	return got.(*opKids)
}

// Observe records one operation op that took d and ended with result ("ok"
// or a short, bounded name such as an errno: "enoent").
func (m *OpMetrics) Observe(op string, d time.Duration, result string) {
	k := m.kidsOf(op)
	k.dur.Observe(d.Seconds())
	if result == "ok" {
		k.ok.Inc()
		return
	}
	c, ok := k.results.Load(result)
	if !ok {
		c, _ = k.results.LoadOrStore(result, m.total.WithLabelValues(op, result))
	}
	c.(prometheus.Counter).Inc()
}

// Observer adapts m to a proto.Pool's Observe hook (kept free of proto's
// types: name turns an operation code into its label, result an error into
// its result label).
func Observer[Op any](m *OpMetrics, name func(Op) string, result func(error) string) func(Op, time.Duration, error) {
	return func(op Op, d time.Duration, err error) { m.Observe(name(op), d, result(err)) }
}

// Init makes the series of ops visible at zero before their first use, so
// a scrape (and rate()) sees them from the start.
func (m *OpMetrics) Init(ops ...string) {
	for _, op := range ops {
		m.kidsOf(op)
	}
}

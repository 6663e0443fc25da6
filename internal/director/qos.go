package director

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/obs"
	"github.com/corral-cluster/corral/internal/qos"
	"github.com/prometheus/client_golang/prometheus"
)

// qosState is an l7 service's request classes and admission control
// (internal/qos, docs/qos.md), built from the configuration it was made
// for; a reload builds it again (Admission.Reconfigure keeps the counts).
type qosState struct {
	dcfg *config.Director
	scfg *config.Service
	cls  *qos.Classifier // nil: no classes, no admission control
	adm  *qos.Admission
}

// qosMu serialises rebuilding services' qosState (rare: after a reload).
var qosMu sync.Mutex

// qosFor is s's current qosState, rebuilt if the configuration changed.
func (s *service) qosFor() *qosState {
	dcfg, scfg := s.d.cfg.Load(), s.cfg.Load()
	if st := s.qos.Load(); st != nil && st.dcfg == dcfg && st.scfg == scfg {
		return st
	}
	qosMu.Lock()
	defer qosMu.Unlock()
	old := s.qos.Load()
	if old != nil && old.dcfg == dcfg && old.scfg == scfg {
		return old
	}
	st := &qosState{dcfg: dcfg, scfg: scfg}
	if dcfg != nil {
		if specs := dcfg.QoSClasses(scfg); specs != nil {
			cls, err := qos.Compile(specs)
			if err != nil {
				// Validate compiled them already: not reached.
				s.d.log.Error("qos classes do not compile; no admission control", "service", scfg.Name, "err", err)
			} else {
				st.cls = cls
				if old != nil && old.adm != nil {
					st.adm = old.adm
					st.adm.Reconfigure(cls, scfg.QoSLimit())
					st.adm.SetReserve(scfg.QoSReserveSlots())
				} else {
					st.adm = qos.NewAdmission(cls, scfg.QoSLimit(), nil, nil)
					st.adm.SetReserve(scfg.QoSReserveSlots())
					name := scfg.Name
					m := s.d.metrics
					st.adm.OnWait = func(class string, wait time.Duration, admitted bool) {
						m.qosWait.WithLabelValues(name, class).Observe(wait.Seconds())
					}
				}
			}
		}
	}
	if st.cls != nil {
		// Every class's histogram shows from the start, zero until a wait.
		for _, k := range st.cls.Classes() {
			s.d.metrics.qosWait.WithLabelValues(scfg.Name, k.Name)
		}
	}
	s.qos.Store(st)
	return st
}

// admit classifies req, tags it with its class for the node, and waits
// for admission. It returns the release to call when the request ends,
// or false after answering 503 with Retry-After.
func (s *service) admit(w http.ResponseWriter, req *http.Request, src netip.Addr) (func(), bool) {
	// Only the director says what class a request is.
	req.Header.Del(qos.Header)
	st := s.qosFor()
	if st.cls == nil {
		return func() {}, true
	}
	k := st.cls.Classify(req, src)
	req.Header.Set(qos.Header, k.Tag().String())
	t, err := st.adm.Acquire(req.Context(), k)
	if err != nil {
		var shed *qos.Shed
		ra := qos.DefaultRetryAfter
		if errors.As(err, &shed) {
			ra = shed.RetryAfter
		}
		if req.Context().Err() != nil && errors.Is(req.Context().Err(), context.Canceled) {
			return nil, false // the client is gone: nobody to answer
		}
		w.Header().Set("Retry-After", strconv.Itoa(ra))
		http.Error(w, "503 service overloaded, retry later", http.StatusServiceUnavailable)
		return nil, false
	}
	return t.Release, true
}

var (
	qosLabels         = []string{"service", "class"}
	descQoSAdmitted   = prometheus.NewDesc("corral_director_qos_admitted_total", "l7 requests admitted to the pool, by class", qosLabels, nil)
	descQoSQueued     = prometheus.NewDesc("corral_director_qos_queued_total", "l7 requests that waited in their class's queue (then admitted or shed)", qosLabels, nil)
	descQoSShed       = prometheus.NewDesc("corral_director_qos_shed_total", "l7 requests answered 503 with Retry-After, by class and reason (rate, busy, queue-full, deadline, gone)", append(qosLabels, "reason"), nil)
	descQoSInFlight   = prometheus.NewDesc("corral_director_qos_in_flight", "l7 requests admitted and not yet finished, by class", qosLabels, nil)
	descQoSWaiting    = prometheus.NewDesc("corral_director_qos_waiting", "l7 requests waiting in their class's queue", qosLabels, nil)
	descQoSLimit      = prometheus.NewDesc("corral_director_qos_limit", "the service's limit of l7 requests in flight to its pool", []string{"service"}, nil)
	descQoSReserve    = prometheus.NewDesc("corral_director_qos_reserve", "of the limit, the slots only the service's top class may take (qos-reserve x servers)", []string{"service"}, nil)
	descQoSPoolFlight = prometheus.NewDesc("corral_director_qos_pool_in_flight", "l7 requests in flight to the service's pool, every class", []string{"service"}, nil)
)

var qosDescs = []*prometheus.Desc{descQoSAdmitted, descQoSQueued, descQoSShed, descQoSInFlight, descQoSWaiting, descQoSLimit, descQoSReserve, descQoSPoolFlight}

func newQoSWait() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "corral_director_qos_queue_wait_seconds",
		Help: "time l7 requests waited in their class's queue, admitted or shed", Buckets: obs.LatencyBuckets}, qosLabels)
}

// collectQoS reads every service's admission counts at scrape time.
func collectQoS(services map[string]*service, gauge, counter func(*prometheus.Desc, float64, ...string)) {
	for name, s := range services {
		st := s.qos.Load()
		if st == nil || st.adm == nil {
			continue
		}
		classes, limit, inflight := st.adm.Stats()
		gauge(descQoSLimit, float64(limit), name)
		gauge(descQoSReserve, float64(st.adm.Reserve()), name)
		gauge(descQoSPoolFlight, float64(inflight), name)
		for _, c := range classes {
			counter(descQoSAdmitted, float64(c.Admitted), name, c.Name)
			counter(descQoSQueued, float64(c.Queued), name, c.Name)
			gauge(descQoSInFlight, float64(c.InFlight), name, c.Name)
			gauge(descQoSWaiting, float64(c.Waiting), name, c.Name)
			for _, r := range qos.ShedReasons {
				counter(descQoSShed, float64(c.Shed[r]), name, c.Name, r)
			}
		}
	}
}

package director

import (
	"net/http"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/dataplane/xdp"
	"github.com/corral-cluster/corral/internal/ha"
	"github.com/corral-cluster/corral/internal/obs"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics is the director's registry. The per-server and per-service
// values are the atomics the dataplanes already keep (what `corral ctl`
// shows), read at scrape time: nothing is counted twice and the hot paths
// pay nothing for them. Only the l7 request latency is observed as it
// happens.
type metrics struct {
	reg     *prometheus.Registry
	handler http.Handler
	reqDur  *prometheus.HistogramVec
	qosWait *prometheus.HistogramVec
	byServ  sync.Map // *service -> prometheus.Observer
}

func newMetrics(d *Director) *metrics {
	m := &metrics{reg: obs.NewRegistry()}
	m.reqDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "corral_director_request_duration_seconds",
		Help: "time from an l7 request's arrival to the end of its response (body included), by service", Buckets: obs.LatencyBuckets},
		[]string{"service"})
	m.qosWait = newQoSWait()
	m.reg.MustRegister(m.reqDur, m.qosWait, collector{d})
	m.handler = obs.MetricsHandler(m.reg)
	return m
}

// observeRequest records one l7 request of s that started at start.
func (m *metrics) observeRequest(s *service, start time.Time) {
	o, ok := m.byServ.Load(s)
	if !ok {
		o, _ = m.byServ.LoadOrStore(s, m.reqDur.WithLabelValues(s.cfg.Load().Name))
	}
	o.(prometheus.Observer).Observe(time.Since(start).Seconds())
}

// forgetRemoved drops the latency series of services no longer running,
// so the histogram follows the configuration as the other metrics do.
func (m *metrics) forgetRemoved(live map[string]*service) {
	m.byServ.Range(func(k, _ any) bool {
		s := k.(*service)
		name := s.cfg.Load().Name
		if live[name] != s {
			m.byServ.Delete(s)
			if live[name] == nil {
				m.reqDur.DeleteLabelValues(name)
				m.qosWait.DeletePartialMatch(prometheus.Labels{"service": name})
			}
		}
		return true
	})
}

var (
	serverLabels = []string{"service", "server"}

	descUp       = prometheus.NewDesc("corral_director_server_up", "1 if the real server passes its health check", serverLabels, nil)
	descWeight   = prometheus.NewDesc("corral_director_server_weight", "effective scheduling weight (0 while down or drained)", serverLabels, nil)
	descActive   = prometheus.NewDesc("corral_director_active_connections", "established connections to the real server (l7: requests in progress)", serverLabels, nil)
	descInactive = prometheus.NewDesc("corral_director_inactive_connections", "half-closed or recently closed connections counted by the scheduler", serverLabels, nil)
	descPending  = prometheus.NewDesc("corral_director_pending_bytes", "response bytes still to be sent by the real server (mwlc)", serverLabels, nil)
	descConns    = prometheus.NewDesc("corral_director_connections_total", "connections (l7: responses) sent to the real server", serverLabels, nil)
	descRequests = prometheus.NewDesc("corral_director_requests_total", "HTTP requests answered by the real server (l7)", serverLabels, nil)
	descFailures = prometheus.NewDesc("corral_director_failures_total", "connects or requests to the real server that failed", serverLabels, nil)
	descBytes    = prometheus.NewDesc("corral_director_bytes_total", "bytes relayed through the director: in (client to real server), out (real server to client)", append(serverLabels, "direction"), nil)
	descPackets  = prometheus.NewDesc("corral_director_packets_total", "frames the XDP dataplane forwarded to the real server", serverLabels, nil)

	descFlows         = prometheus.NewDesc("corral_director_flows_total", "new flows (connections; l7: requests) scheduled by the service", []string{"service"}, nil)
	descDrops         = prometheus.NewDesc("corral_director_drops_total", "new flows with no real server available", []string{"service"}, nil)
	descXDPPkts       = prometheus.NewDesc("corral_director_xdp_packets_total", "frames of the service seen by the XDP dataplane", []string{"service"}, nil)
	descXDPDrops      = prometheus.NewDesc("corral_director_xdp_drops_total", "frames the XDP dataplane dropped, by reason", []string{"service", "reason"}, nil)
	descReloadOK      = prometheus.NewDesc("corral_director_config_last_reload_successful", "1 if the last load of the configuration file was applied, 0 if it was rejected (the running one stayed)", nil, nil)
	descReloadAt      = prometheus.NewDesc("corral_director_config_last_reload_timestamp_seconds", "when the configuration file was last loaded (applied or rejected), Unix time", nil, nil)
	descHAState       = prometheus.NewDesc("corral_director_ha_state", "1 for this director's current HA state (starting, syncing, standby, active, fenced), 0 for the others", []string{"state"}, nil)
	descHATransitions = prometheus.NewDesc("corral_director_ha_transitions_total", "HA state changes of this director", nil, nil)
	descHAFence       = prometheus.NewDesc("corral_director_ha_fence_seconds", "how long this director may still forward without another etcd lease renewal (0: fenced or not active)", nil, nil)
	descHALag         = prometheus.NewDesc("corral_director_ha_sync_lag_seconds", "age of the oldest connection change sent to the peer and not yet acknowledged", []string{"peer"}, nil)
	descHASyncErrors  = prometheus.NewDesc("corral_director_ha_sync_errors_total", "connection-sync streams that failed (refused, broken, undecodable)", nil, nil)
	descHAResyncs     = prometheus.NewDesc("corral_director_ha_resyncs_total", "full connection-table snapshots sent again to a peer (it fell behind or the kernel lost changes)", nil, nil)
	descHAInSync      = prometheus.NewDesc("corral_director_ha_peer_in_sync", "1 if the peer holds the connection table (active-standby: it is standby or active; active-active: both streams up and a full table received)", []string{"peer"}, nil)
	descFBWeight      = prometheus.NewDesc("corral_director_feedback_weight", "weight the feedback controller gave the real server (before health, drain or a ctl weight)", serverLabels, nil)
	descFBLoad        = prometheus.NewDesc("corral_director_feedback_load", "the real server's aggregate load as the controller used it (Total_load / load scale; 1 = target by default)", serverLabels, nil)
	descFBTerm        = prometheus.NewDesc("corral_director_feedback_term_percent", "one term of paper 003's equations 1-8 for the real server, in percent (term: total, ethernet, sys, mem_swap, mem_real, la_load, cpu_busy, dsk)", append(serverLabels, "term"), nil)
	descFBMissed      = prometheus.NewDesc("corral_director_feedback_missed_polls", "polls in a row the real server's load did not come back (its weight decays towards the floor)", serverLabels, nil)
	descFBPolled      = prometheus.NewDesc("corral_director_feedback_last_poll_timestamp_seconds", "when the service's last feedback round ended, Unix time", []string{"service"}, nil)
	descL4Flows       = prometheus.NewDesc("corral_director_l4_flows", "live flows of an l4 service (TCP connections, UDP flows)", []string{"service"}, nil)
	descL4Limit       = prometheus.NewDesc("corral_director_l4_flow_limit", "an l4 service's cap on live flows, by scope (service: max-conns; source: max-conns-per-source)", []string{"service", "scope"}, nil)
	descL4Busiest     = prometheus.NewDesc("corral_director_l4_busiest_source_flows", "live flows of the l4 service's busiest client address", []string{"service"}, nil)
	descL4Refused     = prometheus.NewDesc("corral_director_l4_refused_total", "new l4 flows refused (TCP: reset; UDP: datagram dropped), by reason (service_limit, source_limit)", []string{"service", "reason"}, nil)
	descL4Idle        = prometheus.NewDesc("corral_director_l4_idle_closed_total", "l4 TCP connections ended after tcp-timeout (tcp-fin-timeout once half-closed) without a byte either way", []string{"service"}, nil)
	descXDPPass       = prometheus.NewDesc("corral_director_xdp_passed_total", "frames the XDP dataplane left to the kernel, by why (not_a_service, malformed, fragment)", []string{"why"}, nil)
)

// collector reads the live table at scrape time.
type collector struct{ d *Director }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descWeight, descActive, descInactive, descPending, descConns, descRequests,
		descFailures, descBytes, descPackets, descFlows, descDrops, descXDPPkts, descXDPDrops, descXDPPass, descReloadOK, descReloadAt,
		descHAState, descHATransitions, descHAFence, descHALag, descHASyncErrors, descHAResyncs, descHAInSync,
		descFBWeight, descFBLoad, descFBTerm, descFBMissed, descFBPolled,
		descL4Flows, descL4Limit, descL4Busiest, descL4Refused, descL4Idle} {
		ch <- d
	}
	for _, d := range qosDescs {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	c.d.metrics.forgetRemoved(*c.d.services.Load())
	for _, s := range c.d.Status() {
		for _, r := range s.Servers {
			up := 0.0
			if r.Healthy {
				up = 1
			}
			gauge(descUp, up, s.Name, r.Addr)
			gauge(descWeight, float64(r.Weight), s.Name, r.Addr)
			gauge(descActive, float64(r.Active), s.Name, r.Addr)
			gauge(descInactive, float64(r.Inactive), s.Name, r.Addr)
			gauge(descPending, float64(r.Pending), s.Name, r.Addr)
			counter(descConns, float64(r.Connections), s.Name, r.Addr)
			counter(descRequests, float64(r.Requests), s.Name, r.Addr)
			counter(descFailures, float64(r.Failed), s.Name, r.Addr)
			counter(descBytes, float64(r.BytesIn), s.Name, r.Addr, "in")
			counter(descBytes, float64(r.BytesOut), s.Name, r.Addr, "out")
			if s.XDP != nil {
				counter(descPackets, float64(r.Packets), s.Name, r.Addr)
			}
		}
		counter(descFlows, float64(s.NewConns), s.Name)
		counter(descDrops, float64(s.Drops), s.Name)
		if l := s.L4; l != nil {
			gauge(descL4Flows, float64(l.Flows), s.Name)
			gauge(descL4Limit, float64(l.MaxConns), s.Name, "service")
			gauge(descL4Limit, float64(l.MaxPerSource), s.Name, "source")
			gauge(descL4Busiest, float64(l.Busiest), s.Name)
			counter(descL4Refused, float64(l.RefusedService), s.Name, "service_limit")
			counter(descL4Refused, float64(l.RefusedSource), s.Name, "source_limit")
			if s.Protocol == "tcp" {
				counter(descL4Idle, float64(l.IdleClosed), s.Name)
			}
		}
		if s.XDP != nil {
			counter(descXDPPkts, float64(s.XDP.Packets), s.Name)
			for _, reason := range xdp.DropReasons {
				counter(descXDPDrops, float64(s.XDP.Drops[reason]), s.Name, reason)
			}
		}
	}
	collectQoS(*c.d.services.Load(), gauge, counter)
	if rs := c.d.ReloadStatus(); rs != nil {
		ok := 0.0
		if rs.OK {
			ok = 1
		}
		gauge(descReloadOK, ok)
		gauge(descReloadAt, float64(rs.Time.UnixNano())/1e9)
	}
	if st, err := c.d.FeedbackStatus(); err == nil {
		CollectFeedback(st, directorFBDescs, gauge)
	}
	if n := c.d.haNode(); n != nil {
		collectHA(n.Status(), gauge, counter)
	}
	if p := c.d.xdp.Load(); p != nil {
		if g, err := p.dp.Global(); err == nil {
			for _, x := range []struct {
				why string
				n   uint64
			}{{"not_a_service", g.Passed}, {"malformed", g.Malformed}, {"fragment", g.Fragments}} {
				counter(descXDPPass, float64(x.n), x.why)
			}
		}
	}
}

// MetricsHandler serves the director's /metrics (the admin API mounts it).
func (d *Director) MetricsHandler() http.Handler { return d.metrics.handler }

// haStates are the values of corral_director_ha_state's label.
var haStates = []string{ha.StateStarting, ha.StateSyncing, ha.StateStandby, ha.StateActive, ha.StateFenced}

// collectHA turns the HA status into its metrics.
func collectHA(st ha.Status, gauge, counter func(*prometheus.Desc, float64, ...string)) {
	for _, s := range haStates {
		v := 0.0
		if st.State == s {
			v = 1
		}
		gauge(descHAState, v, s)
	}
	counter(descHATransitions, float64(st.Transitions))
	gauge(descHAFence, max(st.FenceLeft, 0).Seconds())
	counter(descHASyncErrors, float64(st.SyncErrors))
	counter(descHAResyncs, float64(st.Resyncs))
	for _, p := range st.Peers {
		gauge(descHALag, p.Lag.Seconds(), p.Name)
		gauge(descHAInSync, b2f(peerInSync(st.Mode, p)), p.Name)
	}
}

// peerInSync: whether a peer holds the connection table, as this director
// can tell.
func peerInSync(mode string, p ha.PeerStatus) bool {
	if mode == ha.ActiveActive {
		return p.OutConnected && p.InConnected && p.InSynced
	}
	return p.State == ha.StateStandby || p.State == ha.StateActive
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// FeedbackDescs are the metrics a feedback monitor's decisions become:
// the director's own (corral_director_feedback_*) or the station's
// (corral_mgmt_feedback_*), one shape.
type FeedbackDescs struct {
	Polled, Weight, Missed, Load, Term *prometheus.Desc
}

var directorFBDescs = FeedbackDescs{Polled: descFBPolled, Weight: descFBWeight, Missed: descFBMissed, Load: descFBLoad, Term: descFBTerm}

// CollectFeedback turns a monitor's latest decisions into metrics.
func CollectFeedback(st FeedbackStatus, ds FeedbackDescs, gauge func(*prometheus.Desc, float64, ...string)) {
	for _, s := range st.Services {
		if !s.Polled.IsZero() {
			gauge(ds.Polled, float64(s.Polled.UnixNano())/1e9, s.Name)
		}
		for _, d := range s.Nodes {
			gauge(ds.Weight, float64(d.Weight), s.Name, d.Node)
			gauge(ds.Missed, float64(d.Missed), s.Name, d.Node)
			t := d.Terms
			if t == nil {
				continue // no fresh load this round: no terms to show
			}
			gauge(ds.Load, d.Aggregate, s.Name, d.Node)
			for _, x := range []struct {
				term string
				v    float64
			}{{"total", t.TotalLoad}, {"ethernet", t.EthernetUtil}, {"sys", t.SysUtil}, {"mem_swap", t.MemSwapLoad},
				{"mem_real", t.MemRealLoad}, {"la_load", t.LaLoad}, {"cpu_busy", t.CPUBusy}, {"dsk", t.DskLoad}} {
				gauge(ds.Term, x.v, s.Name, d.Node, x.term)
			}
		}
	}
}

package mgmt

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/feedback"
	"github.com/prometheus/client_golang/prometheus"
)

// The station's feedback monitor (issue 17: "runs in the management
// station when there is one"): when the current version has a feedback
// section, it polls the servers of every service with weights feedback
// (the round the director's own monitor runs: feedback.Pools) and
// publishes every decision at GET /v1/feedback with a sequence number and
// the time. Directors' agents long-poll it and apply the weights
// (director.ApplyStationFeedback); a weight changes every poll, so it
// travels apart from the versioned configuration.

// fbIdle is how often the loop looks for a feedback section while the
// current version has none.
var fbIdle = 2 * time.Second

type stationFB struct {
	mu      sync.Mutex
	version int64              // the version the monitor runs
	parsed  *clustercfg.Config // that version
	cfg     *config.Feedback   // its section as the director's block; nil: none
	pools   *feedback.Pools
	pub     *director.FeedbackStatus // latest publication; nil: none
	seq     uint64
	wake    chan struct{} // closed (and replaced) at each publication
	err     string        // why the monitor does not run (bad secrets file)
}

func newStationFB() *stationFB { return &stationFB{wake: make(chan struct{})} }

// feedbackLoop runs the monitor until ctx ends. Each round re-reads the
// current version and drains (one etcd read), so a changed pool or a
// drain counts from the next round.
func (s *Station) feedbackLoop(ctx context.Context) {
	f := s.fb
	defer func() {
		f.mu.Lock()
		if f.pools != nil {
			f.pools.Close()
			f.pools = nil
		}
		f.mu.Unlock()
	}()
	for ctx.Err() == nil {
		wait := s.feedbackRound(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// feedbackRound is one round; it returns how long to wait for the next.
func (s *Station) feedbackRound(ctx context.Context) time.Duration {
	f := s.fb
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	d, _, err := s.desired(rctx, "")
	cancel()
	if err != nil || d.Version == 0 {
		return fbIdle
	}
	f.mu.Lock()
	c, retry := f.parsed, f.version != d.Version || f.err != ""
	f.mu.Unlock()
	if retry {
		// A new version, or one whose section could not run (a secrets
		// file missing: it may be there now).
		if c, err = clustercfg.Parse(fmt.Sprintf("version %d", d.Version), []byte(d.YAML)); err != nil {
			s.log.Warn("feedback: current version does not parse", "version", d.Version, "err", err)
			return fbIdle
		}
		s.syncFeedback(c, d.Version)
	}
	f.mu.Lock()
	fc, pools := f.cfg, f.pools
	f.mu.Unlock()
	if fc == nil || pools == nil {
		return fbIdle
	}
	want, err := clustercfg.FeedbackPools(c, d.Drained)
	if err != nil {
		s.log.Warn("feedback: pools", "version", d.Version, "err", err)
	}
	var wg sync.WaitGroup
	for name, servers := range want {
		addrs, loadAt := make([]string, len(servers)), map[string]string{}
		for i, sv := range servers {
			addrs[i] = sv.Addr
			if sv.Load != "" {
				loadAt[sv.Addr] = sv.Load
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := pools.PollAt(ctx, name, addrs, loadAt); err != nil {
				s.log.Error("feedback", "service", name, "err", err)
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return 0
	}
	pools.Retain(func(name string) bool { _, ok := want[name]; return ok })
	s.publishFeedback(fc, pools.Status())
	// Rounds do not overlap; one that outlasts the interval delays the next.
	return max(fc.Interval-time.Since(start), 0)
}

// syncFeedback starts, restarts or stops the monitor for version v of c.
// A changed section restarts it (controllers start afresh); a changed
// pool does not.
func (s *Station) syncFeedback(c *clustercfg.Config, v int64) {
	f := s.fb
	fc, err := clustercfg.FeedbackView(c)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.version, f.parsed = v, c
	prevErr := f.err // retried every round: logged once until it changes
	if err == nil && fc != nil && f.cfg != nil && f.pools != nil && sameFB(f.cfg, fc) {
		return
	}
	if f.pools != nil {
		f.pools.Close()
		f.pools = nil
	}
	f.cfg, f.err = fc, ""
	if err != nil {
		f.cfg, f.err = nil, err.Error()
		return
	}
	if fc == nil {
		if f.pub != nil {
			// No section any more: the directors go back to their
			// configured weights on this empty publication.
			f.publishLocked(&director.FeedbackStatus{Source: "none", Interval: config.DefaultFeedbackInterval.String(), Services: []director.FeedbackService{}})
		}
		return
	}
	comm, auth, priv, err := director.FeedbackSecrets(fmt.Sprintf("configuration version %d", v), fc)
	var ce *config.Error
	if errors.As(err, &ce) {
		// The section has no line of the director's file: say the version.
		err = fmt.Errorf("configuration version %d: %s: %s", v, ce.Field, ce.Msg)
	}
	if err != nil {
		f.cfg, f.err = nil, err.Error()
		if f.err != prevErr {
			s.log.Error("feedback: the station cannot poll", "err", err)
		}
		return
	}
	f.pools = feedback.NewPools(director.FeedbackRoundConfig(fc, comm, auth, priv))
	s.log.Info("feedback monitor", "version", v, "source", fc.Source, "interval", fc.Interval)
}

func sameFB(a, b *config.Feedback) bool { return reflect.DeepEqual(*a, *b) }

// publishFeedback makes st the latest publication.
func (s *Station) publishFeedback(fc *config.Feedback, services []director.FeedbackService) {
	f := s.fb
	f.mu.Lock()
	defer f.mu.Unlock()
	f.publishLocked(&director.FeedbackStatus{Source: fc.Source, Interval: fc.Interval.String(), Timeout: fc.Timeout.String(), Floor: fc.Floor, Services: services})
}

func (f *stationFB) publishLocked(st *director.FeedbackStatus) {
	f.seq++
	st.Seq, st.Time = f.seq, time.Now()
	f.pub = st
	close(f.wake)
	f.wake = make(chan struct{})
}

// waitFeedback is the latest publication once its Seq is above after,
// or nil after wait (nil at once with no monitor and wait 0).
func (f *stationFB) waitFeedback(ctx context.Context, after uint64, wait time.Duration) *director.FeedbackStatus {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		pub, wake := f.pub, f.wake
		f.mu.Unlock()
		// A Seq below after: this station restarted, or the member moved
		// from another station; its latest is the one to apply.
		if pub != nil && (pub.Seq > after || pub.Seq < after) {
			return pub
		}
		if wait <= 0 {
			return nil
		}
		select {
		case <-wake:
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// hFeedback serves GET /v1/feedback?after=SEQ&wait=30s: the latest
// publication (every term of equations 1-8, the load and the weight of
// each server of each feedback service) once its seq is not after's, or
// 204 No Content when wait passes first or no monitor runs.
func (s *Station) hFeedback(w http.ResponseWriter, r *http.Request, p *Principal) {
	q := r.URL.Query()
	var after uint64
	if a := q.Get("after"); a != "" {
		n, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			s.fail(w, &inputError{fmt.Sprintf("after %q: want a sequence number", a)})
			return
		}
		after = n
	}
	var wait time.Duration
	if ws := q.Get("wait"); ws != "" {
		d, err := time.ParseDuration(ws)
		if err != nil || d < 0 {
			s.fail(w, &inputError{fmt.Sprintf("wait %q: want a duration (30s)", ws)})
			return
		}
		wait = min(d, maxWait)
	}
	if wait > 0 {
		release, ok := s.startWait(p.Name)
		if !ok {
			s.fail(w, &tooManyError{fmt.Sprintf("%s already has %d long polls waiting", p.Name, maxWaitsPerMember)})
			return
		}
		defer release()
	}
	if after == 0 && wait == 0 {
		// A plain look (corral mgmt feedback): the latest, or why none.
		s.fb.mu.Lock()
		pub, why := s.fb.pub, s.fb.err
		s.fb.mu.Unlock()
		if pub == nil {
			if why == "" {
				why = "no feedback section in the current version, or no round yet"
			}
			s.fail(w, &notFoundError{"feedback: " + why})
			return
		}
		writeJSON(w, http.StatusOK, pub)
		return
	}
	pub := s.fb.waitFeedback(r.Context(), after, wait)
	if pub == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, pub)
}

// The station's feedback metrics: the director's corral_director_feedback_*
// as the station's monitor has them.
var (
	fbServerLabels  = []string{"service", "server"}
	descMFBWeight   = prometheus.NewDesc("corral_mgmt_feedback_weight", "weight the station's feedback controller gave the real server (before health, drain or a ctl weight at the directors)", fbServerLabels, nil)
	descMFBLoad     = prometheus.NewDesc("corral_mgmt_feedback_load", "the real server's aggregate load as the station's controller used it (Total_load / load scale; 1 = target by default)", fbServerLabels, nil)
	descMFBTerm     = prometheus.NewDesc("corral_mgmt_feedback_term_percent", "one term of paper 003's equations 1-8 for the real server, in percent (term: total, ethernet, sys, mem_swap, mem_real, la_load, cpu_busy, dsk)", append(fbServerLabels, "term"), nil)
	descMFBMissed   = prometheus.NewDesc("corral_mgmt_feedback_missed_polls", "polls in a row the real server's load did not come back (its weight decays towards the floor)", fbServerLabels, nil)
	descMFBPolled   = prometheus.NewDesc("corral_mgmt_feedback_last_poll_timestamp_seconds", "when the service's last feedback round at the station ended, Unix time", []string{"service"}, nil)
	descMFBSeq      = prometheus.NewDesc("corral_mgmt_feedback_publications_total", "feedback publications (rounds) since the station started", nil, nil)
	descMFBLastPubl = prometheus.NewDesc("corral_mgmt_feedback_last_publication_timestamp_seconds", "when the station last published feedback weights, Unix time", nil, nil)
)

// fbCollector reads the latest publication at scrape time.
type fbCollector struct{ f *stationFB }

func (c fbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMFBWeight, descMFBLoad, descMFBTerm, descMFBMissed, descMFBPolled, descMFBSeq, descMFBLastPubl} {
		ch <- d
	}
}

func (c fbCollector) Collect(ch chan<- prometheus.Metric) {
	c.f.mu.Lock()
	pub := c.f.pub
	c.f.mu.Unlock()
	if pub == nil {
		return // publications are never changed once made: no copy needed
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	ch <- prometheus.MustNewConstMetric(descMFBSeq, prometheus.CounterValue, float64(pub.Seq))
	gauge(descMFBLastPubl, float64(pub.Time.UnixNano())/1e9)
	for _, s := range pub.Services {
		if !s.Polled.IsZero() {
			gauge(descMFBPolled, float64(s.Polled.UnixNano())/1e9, s.Name)
		}
		for _, d := range s.Nodes {
			gauge(descMFBWeight, float64(d.Weight), s.Name, d.Node)
			gauge(descMFBMissed, float64(d.Missed), s.Name, d.Node)
			t := d.Terms
			if t == nil {
				continue
			}
			gauge(descMFBLoad, d.Aggregate, s.Name, d.Node)
			for _, x := range []struct {
				term string
				v    float64
			}{{"total", t.TotalLoad}, {"ethernet", t.EthernetUtil}, {"sys", t.SysUtil}, {"mem_swap", t.MemSwapLoad},
				{"mem_real", t.MemRealLoad}, {"la_load", t.LaLoad}, {"cpu_busy", t.CPUBusy}, {"dsk", t.DskLoad}} {
				gauge(descMFBTerm, x.v, s.Name, d.Node, x.term)
			}
		}
	}
}

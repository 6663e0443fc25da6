package mgmt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/feedback"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// The station's feedback monitor (issue 17: "runs in the management
// station when there is one"): when the current version has a feedback
// section, it polls the servers of every service with weights feedback
// (the round the director's own monitor runs: feedback.Pools) and
// publishes every decision at GET /v1/feedback with a sequence number and
// the time. Directors' agents long-poll it and apply the weights
// (director.ApplyStationFeedback); a weight changes every poll, so it
// travels apart from the versioned configuration.
//
// With several stations one polls: they elect a poller through etcd (a
// lease-backed election on keyFBPoller), only it steps the controllers,
// and it writes each publication to keyFBPub. Every station (the poller
// too) serves the publication its watch of that key last saw, so a
// director sees one series whichever station it talks to; the new
// poller carries the sequence number on from the key.

const (
	keyFBPoller = "/corral/feedback/poller"
	keyFBPub    = "/corral/feedback/publication"
	// maxFBPub bounds one publication in etcd (and in every station's
	// and director's memory); a larger one is refused with an error.
	maxFBPub = 1 << 20
)

// fbIdle is how often the loop looks for a feedback section while the
// current version has none (and how often a station waiting to poll
// re-reads the section).
var fbIdle = 2 * time.Second

// fbMinTTL is the shortest poller lease: a poller that stops answering is
// replaced after max(2 intervals, fbMinTTL).
var fbMinTTL = 5 * time.Second

type stationFB struct {
	mu      sync.Mutex
	version int64              // the version the monitor runs
	parsed  *clustercfg.Config // that version
	cfg     *config.Feedback   // its section as the director's block; nil: none
	pools   *feedback.Pools
	pub     *director.FeedbackStatus // latest publication in etcd; nil: none
	pubRev  int64                    // its key's mod revision
	wake    chan struct{}            // closed (and replaced) at each publication
	err     string                   // why the monitor does not run (bad secrets file)
	poller  bool                     // this station is the elected poller
	seq     uint64                   // the poller's last sequence number
}

func newStationFB() *stationFB { return &stationFB{wake: make(chan struct{})} }

// feedbackLoop runs the monitor until ctx ends: it follows the
// publication in etcd and, while the current version has a section this
// station can run, stands for poller.
func (s *Station) feedbackLoop(ctx context.Context) {
	f := s.fb
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); s.watchFeedback(ctx) }()
	defer func() {
		<-watchDone
		f.mu.Lock()
		if f.pools != nil {
			f.pools.Close()
			f.pools = nil
		}
		f.mu.Unlock()
	}()
	for ctx.Err() == nil {
		if fc, _, _ := s.feedbackSync(ctx); fc != nil {
			s.campaignFeedback(ctx, fc)
			continue
		}
		s.retractFeedback(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(fbIdle):
		}
	}
}

// feedbackSync re-reads the current version and drains (one etcd read)
// and follows a new version; it returns the section this station can run
// (nil: none, or it cannot: a secrets file missing), its version and the
// drained servers.
func (s *Station) feedbackSync(ctx context.Context) (*config.Feedback, *clustercfg.Config, []string) {
	f := s.fb
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	d, _, err := s.desired(rctx, "")
	cancel()
	if err != nil || d.Version == 0 {
		return nil, nil, nil
	}
	f.mu.Lock()
	c, retry := f.parsed, f.version != d.Version || f.err != ""
	f.mu.Unlock()
	if retry {
		// A new version, or one whose section could not run (a secrets
		// file missing: it may be there now).
		if c, err = clustercfg.Parse(fmt.Sprintf("version %d", d.Version), []byte(d.YAML)); err != nil {
			s.log.Warn("feedback: current version does not parse", "version", d.Version, "err", err)
			return nil, nil, nil
		}
		s.syncFeedback(c, d.Version)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cfg == nil || f.pools == nil {
		return nil, nil, nil
	}
	return f.cfg, c, d.Drained
}

// campaignFeedback stands for poller with section fc and polls once
// elected; it returns when ctx ends, the lease is lost, or the section
// changes or goes (the caller stands again with the new one).
func (s *Station) campaignFeedback(ctx context.Context, fc *config.Feedback) {
	ttl := int((max(2*fc.Interval, fbMinTTL) + time.Second - 1) / time.Second)
	// The session outlives ctx so that Close can still revoke the lease
	// (a stopped station hands over at once, not after the TTL).
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		s.log.Warn("feedback: poller lease", "err", err)
		sleepCtx(ctx, fbIdle)
		return
	}
	defer func() {
		// Revoke the lease (resign) within 2 s: without a quorum the
		// stop should not wait the whole TTL; the lease ends anyway.
		sess.Orphan()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		s.cli.Revoke(rctx, sess.Lease())
		cancel()
	}()
	el := concurrency.NewElection(sess, keyFBPoller)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	won := make(chan error, 1)
	go func() { won <- el.Campaign(cctx, s.name) }()
	for {
		select {
		case err := <-won:
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("feedback: poller election", "err", err)
					sleepCtx(ctx, fbIdle)
				}
				return
			}
			s.leadFeedback(ctx, sess, el, fc)
			return
		case <-sess.Done():
			cancel()
			<-won
			return
		case <-ctx.Done():
			cancel()
			<-won
			return
		case <-time.After(fbIdle):
			// Another station polls; follow the configuration meanwhile.
			if nfc, _, _ := s.feedbackSync(ctx); nfc == nil || !sameFB(nfc, fc) {
				cancel()
				<-won
				return
			}
		}
	}
}

// leadFeedback polls as the elected poller until ctx ends, the lease is
// lost or the section changes. The controllers carry on from the last
// publication's weights (Pools.Seed), whichever station made it.
func (s *Station) leadFeedback(ctx context.Context, sess *concurrency.Session, el *concurrency.Election, fc *config.Feedback) {
	f := s.fb
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := s.cli.Get(rctx, keyFBPub)
	cancel()
	if err != nil {
		s.log.Warn("feedback: reading the last publication", "err", err)
		return
	}
	var last director.FeedbackStatus
	if len(resp.Kvs) > 0 && len(resp.Kvs[0].Value) <= maxFBPub {
		// A key that does not decode starts the series at 1 again; the
		// agents take a lower seq as a restarted series.
		if json.Unmarshal(resp.Kvs[0].Value, &last) != nil {
			last = director.FeedbackStatus{}
		}
	}
	f.mu.Lock()
	f.poller, f.seq = true, last.Seq
	pools := f.pools
	f.mu.Unlock()
	if pools != nil && len(last.Services) > 0 {
		// Carry on from the last poller's weights, not from the initial
		// ones (TestFeedbackOnePoller).
		if err := pools.Seed(last.Services, fmt.Sprintf("seeded from publication %d (a new poller carries on from the last one's weights)", last.Seq)); err != nil {
			s.log.Warn("feedback: seeding the controllers from the last publication", "err", err)
		}
	}
	defer func() {
		f.mu.Lock()
		f.poller = false
		f.mu.Unlock()
	}()
	s.log.Info("feedback: this station polls", "station", s.name, "seq", last.Seq, "interval", fc.Interval)
	for {
		start := time.Now()
		nfc, c, drained := s.feedbackSync(ctx)
		if nfc == nil || !sameFB(nfc, fc) {
			return
		}
		if !s.feedbackRound(ctx, fc, c, drained, el) {
			return
		}
		// Rounds do not overlap; one that outlasts the interval delays the next.
		select {
		case <-ctx.Done():
			return
		case <-sess.Done():
			s.log.Warn("feedback: the poller lease ended; standing again")
			return
		case <-time.After(max(fc.Interval-time.Since(start), 0)):
		}
	}
}

// feedbackRound is one round of the poller; false: it is no longer the
// poller (or ctx ended).
func (s *Station) feedbackRound(ctx context.Context, fc *config.Feedback, c *clustercfg.Config, drained []string, el *concurrency.Election) bool {
	f := s.fb
	f.mu.Lock()
	pools := f.pools
	f.mu.Unlock()
	if pools == nil {
		return false
	}
	want, err := clustercfg.FeedbackPools(c, drained)
	if err != nil {
		s.log.Warn("feedback: pools", "err", err)
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
		return false
	}
	pools.Retain(func(name string) bool { _, ok := want[name]; return ok })
	return s.publishFeedback(ctx, el, &director.FeedbackStatus{Source: fc.Source, Interval: fc.Interval.String(),
		Timeout: fc.Timeout.String(), Floor: fc.Floor, Services: pools.Status()})
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

// errFBSize refuses a publication larger than maxFBPub.
var errFBSize = errors.New("feedback publication larger than 1 MiB")

// publishFeedback writes st as the next publication if this station is
// still the poller (el's key in place); false: it is not.
func (s *Station) publishFeedback(ctx context.Context, el *concurrency.Election, st *director.FeedbackStatus) bool {
	f := s.fb
	f.mu.Lock()
	f.seq++
	st.Seq = f.seq
	f.mu.Unlock()
	st.Time = time.Now()
	b, err := json.Marshal(st)
	if err == nil && len(b) > maxFBPub {
		err = fmt.Errorf("%w (%d bytes, %d services)", errFBSize, len(b), len(st.Services))
	}
	if err != nil {
		// The directors keep the last weights and decay them; say why.
		s.log.Error("feedback: not published", "seq", st.Seq, "err", err)
		return true
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := s.cli.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())).
		Then(clientv3.OpPut(keyFBPub, string(b))).Commit()
	if err != nil {
		s.log.Warn("feedback: publishing", "seq", st.Seq, "err", err)
		return true
	}
	if !resp.Succeeded {
		s.log.Warn("feedback: no longer the poller; publication dropped", "seq", st.Seq)
		return false
	}
	return true
}

// retractFeedback publishes an empty publication when the current
// version has no feedback section and the last publication still has
// weights: the directors go back to their configured weights. Any station
// may; the compare on the key's revision lets one through.
func (s *Station) retractFeedback(ctx context.Context) {
	f := s.fb
	f.mu.Lock()
	none := f.parsed != nil && f.cfg == nil && f.err == ""
	pub, rev := f.pub, f.pubRev
	f.mu.Unlock()
	if !none || pub == nil || pub.Source == "none" {
		return
	}
	st := &director.FeedbackStatus{Source: "none", Interval: config.DefaultFeedbackInterval.String(),
		Services: []director.FeedbackService{}, Seq: pub.Seq + 1, Time: time.Now()}
	b, err := json.Marshal(st)
	if err != nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.cli.Txn(rctx).If(clientv3.Compare(clientv3.ModRevision(keyFBPub), "=", rev)).
		Then(clientv3.OpPut(keyFBPub, string(b))).Commit(); err != nil && ctx.Err() == nil {
		s.log.Warn("feedback: retracting the weights", "err", err)
	}
}

// watchFeedback keeps f.pub the publication in etcd until ctx ends.
func (s *Station) watchFeedback(ctx context.Context) {
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := s.cli.Get(rctx, keyFBPub)
		cancel()
		if err == nil {
			if len(resp.Kvs) > 0 {
				s.takeFeedback(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
			}
			wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for wr := range s.cli.Watch(wctx, keyFBPub, clientv3.WithRev(resp.Header.Revision+1)) {
				if wr.Err() != nil {
					break // compacted, or no leader: read again
				}
				for _, ev := range wr.Events {
					if ev.Type == clientv3.EventTypePut {
						s.takeFeedback(ev.Kv.Value, ev.Kv.ModRevision)
					}
				}
			}
			wcancel()
		}
		sleepCtx(ctx, time.Second)
	}
}

// takeFeedback makes the bytes at rev the latest publication.
func (s *Station) takeFeedback(b []byte, rev int64) {
	if len(b) > maxFBPub {
		s.log.Error("feedback: publication in etcd refused", "err", errFBSize, "bytes", len(b))
		return
	}
	st, err := director.DecodeStationFeedback(b)
	if err != nil {
		s.log.Error("feedback: publication in etcd refused", "err", err)
		return
	}
	f := s.fb
	f.mu.Lock()
	defer f.mu.Unlock()
	if rev <= f.pubRev {
		return
	}
	f.pub, f.pubRev = &st, rev
	close(f.wake)
	f.wake = make(chan struct{})
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// feedbackPub is the latest publication this station has seen (nil:
// none): the dashboard shows its weights beside each pool.
func (s *Station) feedbackPub() *director.FeedbackStatus {
	if s.fb == nil {
		return nil
	}
	s.fb.mu.Lock()
	defer s.fb.mu.Unlock()
	return s.fb.pub
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
	a, wait, release, ok := s.longPoll(w, r, p, "a sequence number")
	if !ok {
		return
	}
	defer release()
	if a < 0 {
		s.fail(w, &inputError{fmt.Sprintf("after %d: want a sequence number (0 or more)", a)})
		return
	}
	after := uint64(a)
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
	descMFBSeq      = prometheus.NewDesc("corral_mgmt_feedback_publications_total", "sequence number of the latest feedback publication (one a round of the elected poller; carried on across pollers)", nil, nil)
	descMFBLastPubl = prometheus.NewDesc("corral_mgmt_feedback_last_publication_timestamp_seconds", "when the poller last published feedback weights, Unix time", nil, nil)
	descMFBPoller   = prometheus.NewDesc("corral_mgmt_feedback_poller", "1 on the station elected to poll the servers' load and publish the feedback weights, 0 on the others", nil, nil)
)

// fbCollector reads the latest publication at scrape time.
type fbCollector struct{ f *stationFB }

func (c fbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMFBWeight, descMFBLoad, descMFBTerm, descMFBMissed, descMFBPolled, descMFBSeq, descMFBLastPubl, descMFBPoller} {
		ch <- d
	}
}

func (c fbCollector) Collect(ch chan<- prometheus.Metric) {
	c.f.mu.Lock()
	pub, poller := c.f.pub, c.f.poller
	c.f.mu.Unlock()
	p := 0.0
	if poller {
		p = 1
	}
	ch <- prometheus.MustNewConstMetric(descMFBPoller, prometheus.GaugeValue, p)
	if pub == nil {
		return // publications are never changed once made: no copy needed
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	ch <- prometheus.MustNewConstMetric(descMFBSeq, prometheus.CounterValue, float64(pub.Seq))
	gauge(descMFBLastPubl, float64(pub.Time.UnixNano())/1e9)
	director.CollectFeedback(*pub, director.FeedbackDescs{Polled: descMFBPolled, Weight: descMFBWeight, Missed: descMFBMissed, Load: descMFBLoad, Term: descMFBTerm}, gauge)
}

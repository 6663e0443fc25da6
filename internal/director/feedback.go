package director

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/feedback"
)

// The feedback monitor (issue 17, paper 003): for each service with
// `weights feedback` it polls every real server's load (its snmpd, or its
// node's admin /load), steps one feedback.Controller per service pool, and
// sets each server's feedback weight, which replaces the configured one.
// A ctl weight/drain still wins over it (an operator's word is final), and
// health checks still decide removal: weight() is 0 while a server is down.
// The weight is applied exactly as ctl weight is (an atomic the l4/l7
// pickers read, then pokeXDP for the kernel), so all dataplanes follow.

// fbSecrets are the feedback block's credentials, read from their files.
type fbSecrets struct {
	community, authPass, privPass string
}

// readFeedbackSecrets reads the files the block names; an error names the
// file and the block's line, as a configuration error.
func readFeedbackSecrets(cfg *config.Director) (fbSecrets, error) {
	f := cfg.Feedback
	var s fbSecrets
	if f == nil {
		return s, nil
	}
	read := func(field, path string) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", &config.Error{File: cfg.File, Line: f.Line, Field: "feedback: " + field, Msg: err.Error()}
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", &config.Error{File: cfg.File, Line: f.Line, Field: "feedback: " + field, Msg: path + " is empty"}
		}
		return v, nil
	}
	var err error
	s.community = f.Community
	if f.CommFile != "" {
		if s.community, err = read("community", f.CommFile); err != nil {
			return s, err
		}
	}
	if f.Version == "3" {
		if s.authPass, err = read("v3 auth", f.AuthFile); err != nil {
			return s, err
		}
		if s.privPass, err = read("v3 priv", f.PrivFile); err != nil {
			return s, err
		}
		if len(s.authPass) < 8 || len(s.privPass) < 8 {
			return s, &config.Error{File: cfg.File, Line: f.Line, Field: "feedback: v3", Msg: "passphrases must be at least 8 characters (net-snmp refuses shorter ones)"}
		}
	}
	return s, nil
}

// fbMonitor is the running monitor of one feedback block.
type fbMonitor struct {
	d       *Director
	cfg     config.Feedback
	sec     fbSecrets
	ccfg    feedback.ControllerConfig
	cancel  context.CancelFunc
	done    chan struct{}
	client  *http.Client // agent source
	mu      sync.Mutex   // guards pools
	pools   map[string]*fbPool
	started time.Time
}

// fbPool is one service's controller and, for snmp, its poller.
type fbPool struct {
	ctrl    *feedback.Controller
	poller  *feedback.Poller // snmp; rebuilt when the pool changes
	targets []string         // the poller's servers, in order
	polled  time.Time        // when the last round ended
	took    time.Duration    // how long it took
	// terms keeps each server's latest terms: a round that holds (snmpd's
	// caches not refreshed yet) has none, and ctl and metrics should still
	// show the figures the weight stands on.
	terms map[string]fbTerms
}

type fbTerms struct {
	terms *feedback.Terms
	load  float64
	at    time.Time
}

func feedbackControllerConfig(f *config.Feedback) feedback.ControllerConfig {
	return feedback.ControllerConfig{Interval: f.Interval,
		Options: feedback.Options{BandwidthOverride: f.Bandwidth, CPU: f.CPU},
		Target:  f.Target, Floor: f.Floor, Max: f.Max, Initial: f.Max,
		Smoothing: f.Smoothing, DeadBand: f.DeadBand}
}

// syncFeedback starts, restarts or stops the monitor for cfg (d.mu held,
// cfg applied). A changed block restarts it (controllers start afresh); a
// changed pool does not: each round reads the live pools.
func (d *Director) syncFeedback(cfg *config.Director, sec fbSecrets) {
	old := d.fb.Load()
	if old != nil && cfg.Feedback != nil && sameFeedback(&old.cfg, cfg.Feedback) && old.sec == sec {
		return
	}
	if old != nil {
		old.stop()
		d.fb.Store(nil)
	}
	if cfg.Feedback == nil {
		d.clearFeedbackWeights()
		return
	}
	m := &fbMonitor{d: d, cfg: *cfg.Feedback, sec: sec, ccfg: feedbackControllerConfig(cfg.Feedback),
		done: make(chan struct{}), pools: map[string]*fbPool{}, started: time.Now()}
	m.client = agentClient(cfg.Feedback)
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	d.fb.Store(m)
	go m.run(ctx)
}

func sameFeedback(a, b *config.Feedback) bool {
	x, y := *a, *b
	x.Line, y.Line = 0, 0
	return reflect.DeepEqual(x, y)
}

// agentClient is the agent source's HTTP client: bounded in time, from
// source-addr if set, no proxies (the nodes are on our own networks).
func agentClient(f *config.Feedback) *http.Client {
	dialer := &net.Dialer{Timeout: f.Timeout}
	if f.SourceAddr != "" {
		if a, err := netip.ParseAddr(f.SourceAddr); err == nil {
			dialer.LocalAddr = &net.TCPAddr{IP: a.AsSlice()}
		}
	}
	tr := &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 1, IdleConnTimeout: 3 * f.Interval,
		ResponseHeaderTimeout: f.Timeout, DisableCompression: true}
	return &http.Client{Transport: tr, Timeout: f.Timeout}
}

func (m *fbMonitor) stop() {
	m.cancel()
	<-m.done
	m.mu.Lock()
	for _, p := range m.pools {
		if p.poller != nil {
			p.poller.Close()
		}
	}
	m.mu.Unlock()
	m.client.CloseIdleConnections()
}

// run polls every interval until ctx ends. Rounds do not overlap: a round
// that outlasts the interval delays the next (each poll is bounded by the
// block's timeout).
func (m *fbMonitor) run(ctx context.Context) {
	defer close(m.done)
	tk := time.NewTicker(m.cfg.Interval)
	defer tk.Stop()
	for {
		m.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// round polls every feedback service once, services in parallel.
func (m *fbMonitor) round(ctx context.Context) {
	live := *m.d.services.Load()
	var wg sync.WaitGroup
	seen := map[string]bool{}
	for name, s := range live {
		sc := s.cfg.Load()
		if sc.Weights != "feedback" {
			s.clearFeedback()
			continue
		}
		seen[name] = true
		p := m.pool(name)
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.poll(ctx, s, p)
		}()
	}
	wg.Wait()
	m.mu.Lock()
	for name, p := range m.pools {
		if !seen[name] {
			if p.poller != nil {
				p.poller.Close()
			}
			delete(m.pools, name)
		}
	}
	m.mu.Unlock()
}

func (m *fbMonitor) pool(name string) *fbPool {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pools[name]
	if p == nil {
		ctrl, err := feedback.NewController(m.ccfg, nil)
		if err != nil { // the configuration was validated: cannot happen
			m.d.log.Error("feedback controller", "service", name, "err", err)
			return nil
		}
		p = &fbPool{ctrl: ctrl}
		m.pools[name] = p
	}
	return p
}

// poll reads one pool's servers, steps its controller and applies the
// weights.
func (m *fbMonitor) poll(ctx context.Context, s *service, p *fbPool) {
	start := time.Now()
	s.mu.Lock()
	reals := slices.Clone(s.reals)
	s.mu.Unlock()
	addrs := make([]string, len(reals))
	for i, r := range reals {
		addrs[i] = r.addr
	}
	var readings []feedback.Reading
	if m.cfg.Source == "agent" {
		readings = m.pollAgents(ctx, addrs)
	} else {
		readings = m.pollSNMP(ctx, p, addrs)
	}
	if ctx.Err() != nil {
		return // stopping: a cancelled round is not the servers' silence
	}
	// Servers that left the pool leave the controller.
	for _, d := range p.ctrl.Last() {
		if !slices.Contains(addrs, d.Node) {
			p.ctrl.Forget(d.Node)
		}
	}
	ds := p.ctrl.Step(readings)
	changed := false
	for _, d := range ds {
		for _, r := range reals {
			if r.addr == d.Node && r.fb.Swap(int64(d.Weight)) != int64(d.Weight) {
				changed = true
			}
		}
	}
	m.mu.Lock()
	p.polled, p.took = time.Now(), time.Since(start)
	if p.terms == nil {
		p.terms = map[string]fbTerms{}
	}
	for _, d := range ds {
		if d.Terms != nil {
			p.terms[d.Node] = fbTerms{d.Terms, d.Aggregate, d.At}
		}
	}
	for n := range p.terms {
		if !slices.Contains(addrs, n) {
			delete(p.terms, n)
		}
	}
	m.mu.Unlock()
	if changed {
		m.d.pokeXDP()
	}
}

// pollSNMP reads every server's snmpd (at its address, the block's port).
func (m *fbMonitor) pollSNMP(ctx context.Context, p *fbPool, addrs []string) []feedback.Reading {
	if p.poller == nil || !slices.Equal(p.targets, addrs) {
		if p.poller != nil {
			p.poller.Close()
			p.poller = nil
		}
		var ts []feedback.Target
		for _, a := range addrs {
			ap, err := netip.ParseAddrPort(a)
			if err != nil {
				continue
			}
			ts = append(ts, feedback.Target{Node: a, Addr: net.JoinHostPort(ap.Addr().String(), strconv.Itoa(m.cfg.Port)),
				LocalAddr: m.cfg.SourceAddr, Version: m.cfg.Version, Community: m.sec.community,
				User: m.cfg.User, AuthProto: m.cfg.AuthProto, AuthPass: m.sec.authPass, PrivProto: m.cfg.PrivProto, PrivPass: m.sec.privPass,
				IfName: m.cfg.IfName, LoadMinutes: m.cfg.LoadMin})
		}
		pl, err := feedback.NewPoller(feedback.PollerConfig{Interval: m.cfg.Interval, Timeout: m.cfg.Timeout}, ts)
		if err != nil {
			out := make([]feedback.Reading, len(addrs))
			for i, a := range addrs {
				out[i] = feedback.Reading{Node: a, Err: err}
			}
			return out
		}
		p.poller, p.targets = pl, addrs
	}
	return p.poller.Poll(ctx)
}

// pollAgents fetches every server's node /load (its address, the block's
// agent port), at most 8 at a time.
func (m *fbMonitor) pollAgents(ctx context.Context, addrs []string) []feedback.Reading {
	out := make([]feedback.Reading, len(addrs))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ap, err := netip.ParseAddrPort(a)
			if err != nil {
				out[i] = feedback.Reading{Node: a, Err: err}
				return
			}
			url := "http://" + net.JoinHostPort(ap.Addr().String(), strconv.Itoa(m.cfg.AgentPort)) + "/load"
			cctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
			defer cancel()
			s, err := feedback.FetchSample(cctx, m.client, url)
			out[i] = feedback.Reading{Node: a, Sample: s, Err: err}
		}()
	}
	wg.Wait()
	return out
}

// clearFeedback drops a service's feedback weights (it went back to its
// configured ones).
func (s *service) clearFeedback() {
	s.mu.Lock()
	changed := false
	for _, r := range s.reals {
		if r.fb.Swap(-1) != -1 {
			changed = true
		}
	}
	s.mu.Unlock()
	if changed {
		s.d.pokeXDP()
	}
}

// clearFeedbackWeights clears every service's feedback weights (the block
// is gone).
func (d *Director) clearFeedbackWeights() {
	for _, s := range *d.services.Load() {
		s.clearFeedback()
	}
}

// FeedbackStatus is the monitor in the admin API (`corral ctl feedback`).
type FeedbackStatus struct {
	Source   string            `json:"source"`
	Interval string            `json:"interval"`
	Services []FeedbackService `json:"services"`
}

// FeedbackService is one pool's latest decisions: for each server every
// term of equations 1-8, the load and the weight it produced, and when.
type FeedbackService struct {
	Name    string         `json:"name"`
	Polled  time.Time      `json:"polled"`  // when the last round ended (zero: none yet)
	TookSec float64        `json:"took_s"`  // how long that round took
	Nodes   []FeedbackNode `json:"servers"` // by server address
}

// FeedbackNode is one server's latest decision. When that round had no
// fresh load (a first sample, an agent that had not refreshed, no answer),
// Terms and Aggregate are the latest ones there were, taken at TermsAt.
type FeedbackNode struct {
	feedback.Decision
	TermsAt time.Time `json:"terms_at"`
}

// FeedbackStatus returns the monitor's latest decisions, or an error if
// no feedback block runs.
func (d *Director) FeedbackStatus() (FeedbackStatus, error) {
	m := d.fb.Load()
	if m == nil {
		return FeedbackStatus{}, fmt.Errorf("no feedback block in the configuration")
	}
	st := FeedbackStatus{Source: m.cfg.Source, Interval: m.cfg.Interval.String(), Services: []FeedbackService{}}
	m.mu.Lock()
	for name, p := range m.pools {
		fs := FeedbackService{Name: name, Polled: p.polled, TookSec: p.took.Seconds()}
		for _, d := range p.ctrl.Last() {
			n := FeedbackNode{Decision: d}
			if d.Terms != nil {
				n.TermsAt = d.At
			} else if t, ok := p.terms[d.Node]; ok {
				n.Terms, n.Aggregate, n.TermsAt = t.terms, t.load, t.at
			}
			fs.Nodes = append(fs.Nodes, n)
		}
		st.Services = append(st.Services, fs)
	}
	m.mu.Unlock()
	sort.Slice(st.Services, func(i, j int) bool { return st.Services[i].Name < st.Services[j].Name })
	return st, nil
}

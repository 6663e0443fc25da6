package director

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/feedback"
	"github.com/corral-cluster/corral/internal/safefile"
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
		// Secrets: refused when others may read them, as ssh does.
		b, err := safefile.ReadSecret(path)
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

// fbMonitor is the running monitor of one feedback block: the shared
// polling round (feedback.Pools) over the live pools, each decision
// applied to the server's fb atomic.
type fbMonitor struct {
	d       *Director
	cfg     config.Feedback
	sec     fbSecrets
	pools   *feedback.Pools
	cancel  context.CancelFunc
	done    chan struct{}
	started time.Time
}

// FeedbackRoundConfig is how the monitor of block f polls, with the
// secrets its files hold (FeedbackSecrets): the director's monitor and the
// station's (internal/mgmt) run the same round from the same block.
func FeedbackRoundConfig(f *config.Feedback, community, authPass, privPass string) feedback.RoundConfig {
	return feedback.RoundConfig{Source: f.Source, Interval: f.Interval, Timeout: f.Timeout, Port: f.Port,
		AgentPort: f.AgentPort, SourceAddr: f.SourceAddr, Version: f.Version, Community: community,
		User: f.User, AuthProto: f.AuthProto, AuthPass: authPass, PrivProto: f.PrivProto, PrivPass: privPass,
		IfName: f.IfName, LoadMinutes: f.LoadMin, Controller: feedbackControllerConfig(f)}
}

// FeedbackSecrets reads the files block f names (community, v3
// passphrases); an error names the file and the block's line in file.
func FeedbackSecrets(file string, f *config.Feedback) (community, authPass, privPass string, err error) {
	s, err := readFeedbackSecrets(&config.Director{File: file, Feedback: f})
	return s.community, s.authPass, s.privPass, err
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
		// A director fed by the station keeps the station's weights (a
		// new version's new servers get theirs at once, not a poll later).
		if !d.reapplyStationFeedback() {
			d.clearFeedbackWeights()
		}
		return
	}
	m := &fbMonitor{d: d, cfg: *cfg.Feedback, sec: sec, done: make(chan struct{}), started: time.Now(),
		pools: feedback.NewPools(FeedbackRoundConfig(cfg.Feedback, sec.community, sec.authPass, sec.privPass))}
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

func (m *fbMonitor) stop() {
	m.cancel()
	<-m.done
	m.pools.Close()
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.poll(ctx, name, s)
		}()
	}
	wg.Wait()
	m.pools.Retain(func(name string) bool { return seen[name] })
}

// poll reads one pool's servers, steps its controller and applies the
// weights.
func (m *fbMonitor) poll(ctx context.Context, name string, s *service) {
	s.mu.Lock()
	reals := slices.Clone(s.reals)
	s.mu.Unlock()
	addrs := make([]string, len(reals))
	for i, r := range reals {
		addrs[i] = r.addr
	}
	ds, ok, err := m.pools.Poll(ctx, name, addrs)
	if err != nil { // the configuration was validated: cannot happen
		m.d.log.Error("feedback", "service", name, "err", err)
	}
	if !ok {
		return
	}
	changed := false
	for _, d := range ds {
		for _, r := range reals {
			if r.addr == d.Node && r.fb.Swap(int64(d.Weight)) != int64(d.Weight) {
				changed = true
			}
		}
	}
	if changed {
		m.d.pokeXDP()
	}
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

// FeedbackStatus is the monitor in the admin API (`corral ctl feedback`)
// and at the station's GET /v1/feedback. A director fed by the station
// shows Source "station" (Poll is how the station polls), the station's
// Seq and Time, and Stale once the station has gone silent.
type FeedbackStatus struct {
	Source   string            `json:"source"`
	Interval string            `json:"interval"`
	Services []FeedbackService `json:"services"`
	// The station's publication (zero for a director's own monitor).
	Poll    string    `json:"poll,omitempty"`    // the station's source: snmp or agent
	Seq     uint64    `json:"seq,omitempty"`     // publication number, 1 up
	Time    time.Time `json:"time,omitzero"`     // when the station published it
	Timeout string    `json:"timeout,omitempty"` // the station's request timeout (a round may last that long)
	Floor   int       `json:"floor,omitempty"`   // the weight a silent station's weights decay to
	Stale   string    `json:"stale,omitempty"`   // why the weights are no longer the station's latest
}

// FeedbackService is one pool's latest decisions: for each server every
// term of equations 1-8, the load and the weight it produced, and when.
type FeedbackService = feedback.PoolStatus

// FeedbackNode is one server's latest decision. When that round had no
// fresh load (a first sample, an agent that had not refreshed, no answer),
// Terms and Aggregate are the latest ones there were, taken at TermsAt.
type FeedbackNode = feedback.NodeStatus

// FeedbackStatus returns the monitor's latest decisions (the station's,
// for a director the station feeds), or an error if none runs.
func (d *Director) FeedbackStatus() (FeedbackStatus, error) {
	m := d.fb.Load()
	if m == nil {
		if st, ok := d.stationFeedbackStatus(); ok {
			return st, nil
		}
		return FeedbackStatus{}, fmt.Errorf("no feedback block in the configuration")
	}
	return FeedbackStatus{Source: m.cfg.Source, Interval: m.cfg.Interval.String(), Services: m.pools.Status()}, nil
}

package feedback

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"
)

// The polling round the director's monitor and the management station's
// share: one Controller per pool (a service's servers), each round reads
// every server of the pool (its snmpd, or its node's admin /load) and
// steps the controller. What becomes of the weights (the director's
// atomics, the station's publication) is the caller's.

// RoundConfig is how a Pools polls (the feedback block, secrets read).
type RoundConfig struct {
	Source     string        // "snmp" or "agent"
	Interval   time.Duration // between rounds
	Timeout    time.Duration // per request
	Port       int           // snmpd's port on each server's address
	AgentPort  int           // the node's admin port (/load)
	SourceAddr string        // "": the kernel's choice
	// SNMP: version "2c" (Community) or "3" (authPriv).
	Version, Community                             string
	User, AuthProto, AuthPass, PrivProto, PrivPass string
	IfName                                         string
	LoadMinutes                                    int
	Controller                                     ControllerConfig
}

// Pools polls pools of servers, each with its controller.
type Pools struct {
	cfg    RoundConfig
	client *http.Client // agent source
	mu     sync.Mutex   // guards pools
	pools  map[string]*pool
}

// pool is one service's controller and, for snmp, its poller.
type pool struct {
	ctrl    *Controller
	poller  *Poller  // snmp; rebuilt when the pool changes
	targets []string // the poller's servers, in order
	polled  time.Time
	took    time.Duration
	// terms keeps each server's latest terms: a round that holds (snmpd's
	// caches not refreshed yet) has none, and status and metrics should
	// still show the figures the weight stands on.
	terms map[string]heldTerms
}

type heldTerms struct {
	terms *Terms
	load  float64
	at    time.Time
}

// NewPools is an empty set of pools polling as cfg says.
func NewPools(cfg RoundConfig) *Pools {
	return &Pools{cfg: cfg, client: agentClient(cfg), pools: map[string]*pool{}}
}

// Config is what p polls with.
func (p *Pools) Config() RoundConfig { return p.cfg }

// agentClient is the agent source's HTTP client: bounded in time, from
// SourceAddr if set, no proxies (the nodes are on our own networks).
func agentClient(c RoundConfig) *http.Client {
	dialer := &net.Dialer{Timeout: c.Timeout}
	if c.SourceAddr != "" {
		if a, err := netip.ParseAddr(c.SourceAddr); err == nil {
			dialer.LocalAddr = &net.TCPAddr{IP: a.AsSlice()}
		}
	}
	tr := &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 1, IdleConnTimeout: 3 * c.Interval,
		ResponseHeaderTimeout: c.Timeout, DisableCompression: true}
	return &http.Client{Transport: tr, Timeout: c.Timeout}
}

// Poll reads the pool name's servers (addrs, ip:port) once, steps its
// controller and returns the decisions; ok is false when ctx ended during
// the round (a cancelled round is not the servers' silence) or the
// controller could not be made.
func (p *Pools) Poll(ctx context.Context, name string, addrs []string) (ds []Decision, ok bool, err error) {
	return p.PollAt(ctx, name, addrs, nil)
}

// PollAt is Poll where loadAt maps a server to its node's admin address
// (ip:port) for the agent source; a server not in it is polled at its IP
// and the agent port.
func (p *Pools) PollAt(ctx context.Context, name string, addrs []string, loadAt map[string]string) (ds []Decision, ok bool, err error) {
	pl, err := p.pool(name)
	if err != nil {
		return nil, false, err
	}
	start := time.Now()
	var readings []Reading
	if p.cfg.Source == "agent" {
		readings = p.pollAgents(ctx, addrs, loadAt)
	} else {
		readings = p.pollSNMP(ctx, pl, addrs)
	}
	if ctx.Err() != nil {
		return nil, false, nil
	}
	// Servers that left the pool leave the controller.
	for _, d := range pl.ctrl.Last() {
		if !slices.Contains(addrs, d.Node) {
			pl.ctrl.Forget(d.Node)
		}
	}
	ds = pl.ctrl.Step(readings)
	p.mu.Lock()
	pl.polled, pl.took = time.Now(), time.Since(start)
	for _, d := range ds {
		if d.Terms != nil {
			pl.terms[d.Node] = heldTerms{d.Terms, d.Aggregate, d.At}
		}
	}
	for n := range pl.terms {
		if !slices.Contains(addrs, n) {
			delete(pl.terms, n)
		}
	}
	p.mu.Unlock()
	return ds, true, nil
}

func (p *Pools) pool(name string) (*pool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.pools[name]
	if pl == nil {
		ctrl, err := NewController(p.cfg.Controller, nil)
		if err != nil {
			return nil, fmt.Errorf("feedback controller of %s: %w", name, err)
		}
		pl = &pool{ctrl: ctrl, terms: map[string]heldTerms{}}
		p.pools[name] = pl
	}
	return pl, nil
}

// Seed starts each listed pool's controller from its decisions in st (see
// Controller.Seed): a station taking over polling from the last
// publication.
func (p *Pools) Seed(st []PoolStatus, why string) error {
	for _, ps := range st {
		pl, err := p.pool(ps.Name)
		if err != nil {
			return err
		}
		ds := make([]Decision, len(ps.Nodes))
		for i, n := range ps.Nodes {
			ds[i] = n.Decision
		}
		pl.ctrl.Seed(ds, why)
	}
	return nil
}

// Retain drops the pools not in keep (services that left feedback).
func (p *Pools) Retain(keep func(name string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, pl := range p.pools {
		if !keep(name) {
			if pl.poller != nil {
				pl.poller.Close()
			}
			delete(p.pools, name)
		}
	}
}

// Close ends the pollers and idle connections; p is not used after.
func (p *Pools) Close() {
	p.Retain(func(string) bool { return false })
	p.client.CloseIdleConnections()
}

// pollSNMP reads every server's snmpd (at its address, the block's port).
func (p *Pools) pollSNMP(ctx context.Context, pl *pool, addrs []string) []Reading {
	c := p.cfg
	if pl.poller == nil || !slices.Equal(pl.targets, addrs) {
		if pl.poller != nil {
			pl.poller.Close()
			pl.poller = nil
		}
		var ts []Target
		for _, a := range addrs {
			ap, err := netip.ParseAddrPort(a)
			if err != nil {
				continue
			}
			ts = append(ts, Target{Node: a, Addr: net.JoinHostPort(ap.Addr().String(), strconv.Itoa(c.Port)),
				LocalAddr: c.SourceAddr, Version: c.Version, Community: c.Community,
				User: c.User, AuthProto: c.AuthProto, AuthPass: c.AuthPass, PrivProto: c.PrivProto, PrivPass: c.PrivPass,
				IfName: c.IfName, LoadMinutes: c.LoadMinutes})
		}
		pp, err := NewPoller(PollerConfig{Interval: c.Interval, Timeout: c.Timeout}, ts)
		if err != nil {
			out := make([]Reading, len(addrs))
			for i, a := range addrs {
				out[i] = Reading{Node: a, Err: err}
			}
			return out
		}
		pl.poller, pl.targets = pp, addrs
	}
	return pl.poller.Poll(ctx)
}

// pollAgents fetches every server's node /load (loadAt's address, else
// its IP at the agent port), at most 8 at a time.
func (p *Pools) pollAgents(ctx context.Context, addrs []string, loadAt map[string]string) []Reading {
	out := make([]Reading, len(addrs))
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
				out[i] = Reading{Node: a, Err: err}
				return
			}
			host := net.JoinHostPort(ap.Addr().String(), strconv.Itoa(p.cfg.AgentPort))
			if at := loadAt[a]; at != "" {
				host = at
			}
			url := "http://" + host + "/load"
			cctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
			defer cancel()
			s, err := FetchSample(cctx, p.client, url)
			out[i] = Reading{Node: a, Sample: s, Err: err}
		}()
	}
	wg.Wait()
	return out
}

// PoolStatus is one pool's latest decisions: for each server every term
// of equations 1-8, the load and the weight it produced, and when.
type PoolStatus struct {
	Name    string       `json:"name"`
	Polled  time.Time    `json:"polled"`  // when the last round ended (zero: none yet)
	TookSec float64      `json:"took_s"`  // how long that round took
	Nodes   []NodeStatus `json:"servers"` // by server address
}

// NodeStatus is one server's latest decision. When that round had no
// fresh load (a first sample, an agent that had not refreshed, no answer),
// Terms and Aggregate are the latest ones there were, taken at TermsAt.
type NodeStatus struct {
	Decision
	TermsAt time.Time `json:"terms_at"`
}

// Status is every pool's latest decisions, by name.
func (p *Pools) Status() []PoolStatus {
	out := []PoolStatus{}
	p.mu.Lock()
	for name, pl := range p.pools {
		fs := PoolStatus{Name: name, Polled: pl.polled, TookSec: pl.took.Seconds()}
		for _, d := range pl.ctrl.Last() {
			n := NodeStatus{Decision: d}
			if d.Terms != nil {
				n.TermsAt = d.At
			} else if t, ok := pl.terms[d.Node]; ok {
				n.Terms, n.Aggregate, n.TermsAt = t.terms, t.load, t.at
			}
			fs.Nodes = append(fs.Nodes, n)
		}
		out = append(out, fs)
	}
	p.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

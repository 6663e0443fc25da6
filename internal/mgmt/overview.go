package mgmt

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"go.yaml.in/yaml/v3"
)

// dashStatus is what RouteStatus answers and the event stream's
// "overview" carries: api.Overview (its fields at the top level, so a
// client decoding api.Overview reads it as is) plus the dashboard's view
// of it: services grouped by logical cluster with their pools, and the
// errors met while gathering it (shown, not fatal).
type dashStatus struct {
	api.Overview
	HA       string        `json:"ha"` // director HA state: "single director" until HA exists
	Clusters []dashCluster `json:"clusters"`
	Errors   []string      `json:"errors,omitempty"`
}

// dashCluster is one logical cluster ("" holds the services of none).
type dashCluster struct {
	Name        string        `json:"name"`
	Description string        `json:"description,omitempty"`
	Nodes       []string      `json:"nodes,omitempty"`
	Services    []dashService `json:"services"`
}

// dashService is one service's pool as a director reports it (Director
// names which; "" when no director reports it: the configured pool, no
// numbers).
type dashService struct {
	Name      string        `json:"name"`
	VIP       string        `json:"vip"`
	Protocol  string        `json:"protocol"`
	Dataplane string        `json:"dataplane"`
	Scheduler string        `json:"scheduler"`
	Director  string        `json:"director,omitempty"`
	NewConns  int64         `json:"new_connections"`
	Drops     int64         `json:"drops"`
	Rate      director.Rate `json:"rate"`
	// ReqPS is requests per second (l7) and P99 the 99th percentile of
	// request latency in seconds (l7, from the director's /metrics), both
	// over the last interval: absent when not known.
	ReqPS   *float64     `json:"requests_per_sec,omitempty"`
	P99     *float64     `json:"p99_seconds,omitempty"`
	Servers []dashServer `json:"servers"`
	// Feedback is the station's load feedback publication for this
	// service (weights: feedback), absent when it has none.
	Feedback *dashFeedback `json:"feedback,omitempty"`
}

// dashFeedback says which publication a service's feedback weights are.
type dashFeedback struct {
	Seq    uint64    `json:"seq"`
	Time   time.Time `json:"time"`
	Source string    `json:"source"` // snmp or agent
	Stale  string    `json:"stale,omitempty"`
}

// dashServerFB is one server's latest feedback decision.
type dashServerFB struct {
	Weight int     `json:"weight"`
	Load   float64 `json:"load"` // the smoothed aggregate load (Total_load/100)
	Reason string  `json:"reason"`
}

// dashServer is one real server of a pool.
type dashServer struct {
	Addr         string        `json:"addr"`
	Node         string        `json:"node,omitempty"` // the configured node at this address
	Drained      bool          `json:"drained,omitempty"`
	Healthy      bool          `json:"healthy"`
	LastError    string        `json:"last_error,omitempty"`
	Weight       int           `json:"weight"`
	ConfigWeight int           `json:"config_weight"`
	Active       int64         `json:"active"`
	Inactive     int64         `json:"inactive"`
	Requests     int64         `json:"requests"`
	Rate         director.Rate `json:"rate"`
	Feedback     *dashServerFB `json:"feedback,omitempty"`
}

// overview is the station's picture of the cluster (what `corral ctl
// status` and the dashboard show), computed now; the dashboard caches it.
func (s *Station) overview(ctx context.Context) (api.Overview, error) {
	probe := &pfsProbe{secret: s.opt.Secret}
	defer probe.close()
	st := buildStatus(ctx, s, probe.status, s.opt.Meta, s.stationAddrs)
	var err error
	if len(st.Errors) > 0 {
		err = errors.New(strings.Join(st.Errors, "; "))
	}
	return st.Overview, err
}

// stationAddrs is every station's API address (HOST:PORT) registered in
// the store; this one's alone if the store does not answer.
func (s *Station) stationAddrs() []string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var out []string
	for _, u := range s.stations(ctx) {
		if p, err := url.Parse(u); err == nil && p.Host != "" {
			out = append(out, p.Host)
		}
	}
	if len(out) == 0 {
		out = []string{s.opt.Listen}
	}
	return out
}

// buildStatus gathers the overview from src and the file system; each
// part that fails is an error in Errors, the rest is still shown.
func buildStatus(ctx context.Context, src dashSource, fsf fsStatusFunc, meta []string, stations func() []string) *dashStatus {
	st := &dashStatus{Overview: api.Overview{Time: time.Now().UTC(), Members: []api.MemberStatus{}, Servers: []api.IOServer{},
		Meta: []api.MetaMember{}, Events: []api.Event{}, Stations: []string{}}, Clusters: []dashCluster{}}
	fail := func(what string, err error) { st.Errors = append(st.Errors, what+": "+err.Error()) }

	var cfg *clustercfg.Config
	if v, err := src.current(ctx); err != nil {
		fail("configuration", err)
	} else {
		st.Version = v.Version
		if cfg, err = dashConfig(v); err != nil {
			fail("configuration", err)
		}
	}
	if cfg == nil {
		cfg = &clustercfg.Config{}
	}
	if ms, err := src.members(ctx); err != nil {
		fail("members", err)
	} else if ms != nil {
		sort.Slice(ms, func(i, j int) bool {
			if ms[i].Role != ms[j].Role {
				return ms[i].Role < ms[j].Role
			}
			return ms[i].Name < ms[j].Name
		})
		st.Members = ms
	}
	if dr, err := src.drained(ctx); err != nil {
		fail("drained nodes", err)
	} else {
		st.Drained = slices.Sorted(slices.Values(dr))
	}
	if ev := src.recentEvents(50); ev != nil {
		st.Events = ev
	}
	if stations != nil {
		st.Stations = stations()
	}
	if len(meta) == 0 {
		meta = cfg.FileSystem.Meta
	}
	if fsf != nil {
		if len(meta) == 0 {
			fail("file system", errors.New("no metadata members (neither the station's --meta nor the configuration's filesystem.meta)"))
		} else if srv, mm, err := fsf(ctx, meta); err != nil {
			fail("file system", err)
			st.Meta = mm
			if st.Meta == nil {
				st.Meta = []api.MetaMember{}
			}
		} else {
			st.Servers, st.Meta = srv, mm
		}
	}
	st.HA, st.Clusters = dashPools(cfg, st.Members, st.Drained, fail)
	dashFeedbackOn(st.Clusters, src.feedbackPub())
	return st
}

// dashFeedbackOn adds the publication's decisions to the pools it covers.
func dashFeedbackOn(cs []dashCluster, pub *director.FeedbackStatus) {
	if pub == nil || pub.Seq == 0 {
		return
	}
	for ci := range cs {
		for si := range cs[ci].Services {
			sv := &cs[ci].Services[si]
			i := slices.IndexFunc(pub.Services, func(p director.FeedbackService) bool { return p.Name == sv.Name })
			if i < 0 {
				continue
			}
			source := pub.Poll
			if source == "" {
				source = pub.Source
			}
			sv.Feedback = &dashFeedback{Seq: pub.Seq, Time: pub.Time, Source: source, Stale: pub.Stale}
			for xi := range sv.Servers {
				x := &sv.Servers[xi]
				for _, n := range pub.Services[i].Nodes {
					if n.Node == x.Addr {
						x.Feedback = &dashServerFB{Weight: n.Weight, Load: n.Smoothed, Reason: n.Reason}
					}
				}
			}
		}
	}
}

// dashConfig reads a version's YAML for display. The station validated it
// when it was stored, so plain decoding is enough here.
func dashConfig(v api.Version) (*clustercfg.Config, error) {
	cfg := &clustercfg.Config{}
	if strings.TrimSpace(v.YAML) == "" {
		return cfg, nil
	}
	if err := yaml.Unmarshal([]byte(v.YAML), cfg); err != nil {
		return nil, fmt.Errorf("version %d: %v", v.Version, err)
	}
	return cfg, nil
}

// dashPools groups the services by logical cluster, each with its pool as
// the first director (by name) that is up and reports it sees it.
func dashPools(cfg *clustercfg.Config, members []api.MemberStatus, drained []string, fail func(string, error)) (string, []dashCluster) {
	reports := map[string]director.ServiceStatus{}
	from := map[string]string{}
	directors := 0
	for _, m := range members { // sorted by role, name
		if m.Role != api.RoleDirector {
			continue
		}
		directors++
		if !m.Up || len(m.Report) == 0 {
			continue
		}
		var ss []director.ServiceStatus
		if err := json.Unmarshal(m.Report, &ss); err != nil {
			fail("director "+m.Name+"'s report", err)
			continue
		}
		for _, s := range ss {
			if _, ok := reports[s.Name]; !ok {
				reports[s.Name], from[s.Name] = s, m.Name
			}
		}
	}
	ha := "single director"
	switch {
	case directors == 0 && len(cfg.Directors) == 0:
		ha = "no director"
	case directors > 1 || len(cfg.Directors) > 1:
		ha = fmt.Sprintf("%d directors, each alone (no HA yet)", max(directors, len(cfg.Directors)))
	}

	// Which node serves at an address: by its address, or its host at a
	// service's port.
	nodeAt := map[string]string{}
	for _, n := range cfg.Nodes {
		nodeAt[n.Address] = n.Name
	}
	nodeAtPort := func(addr string, port int) string {
		if n, ok := nodeAt[addr]; ok {
			return n
		}
		host, p, err := net.SplitHostPort(addr)
		if err != nil {
			return ""
		}
		for _, n := range cfg.Nodes {
			if h, _, err := net.SplitHostPort(n.Address); err == nil && h == host && (port == 0 || strconv.Itoa(port) == p) {
				return n.Name
			}
		}
		return ""
	}

	byName := map[string]*dashCluster{}
	var order []string
	cluster := func(name string) *dashCluster {
		if c, ok := byName[name]; ok {
			return c
		}
		c := &dashCluster{Name: name, Services: []dashService{}}
		byName[name] = c
		order = append(order, name)
		return c
	}
	for _, c := range cfg.Clusters {
		cluster(c.Name).Description = c.Description
	}
	for _, n := range cfg.Nodes {
		if n.Cluster != "" {
			c := cluster(n.Cluster)
			c.Nodes = append(c.Nodes, n.Name)
		}
	}
	seen := map[string]bool{}
	add := func(c *dashCluster, sv dashService) {
		seen[sv.Name] = true
		c.Services = append(c.Services, sv)
	}
	for _, s := range cfg.Services {
		sv := dashService{Name: s.Name, VIP: s.VIP, Protocol: s.Protocol, Dataplane: s.Dataplane, Scheduler: s.Scheduler, Servers: []dashServer{}}
		if r, ok := reports[s.Name]; ok {
			fillReport(&sv, r, from[s.Name])
		} else {
			// No report: the configured pool, without numbers.
			for _, rs := range s.Servers {
				sv.Servers = append(sv.Servers, dashServer{Addr: rs.Address, ConfigWeight: weightOr1(rs.Weight)})
			}
			if len(s.Servers) == 0 {
				for _, n := range cfg.Nodes {
					if n.Cluster == s.Cluster && s.Cluster != "" {
						addr := n.Address
						if s.Port != 0 {
							if h, _, err := net.SplitHostPort(n.Address); err == nil {
								addr = net.JoinHostPort(h, strconv.Itoa(s.Port))
							}
						}
						sv.Servers = append(sv.Servers, dashServer{Addr: addr, Node: n.Name, ConfigWeight: weightOr1(n.Weight)})
					}
				}
			}
		}
		for i := range sv.Servers {
			ds := &sv.Servers[i]
			if ds.Node == "" {
				ds.Node = nodeAtPort(ds.Addr, s.Port)
			}
			ds.Drained = ds.Node != "" && slices.Contains(drained, ds.Node)
		}
		add(cluster(s.Cluster), sv)
	}
	// Services a director runs that the configuration does not name (a
	// director not yet on the current version): shown under no cluster.
	for name, r := range reports {
		if seen[name] {
			continue
		}
		sv := dashService{Servers: []dashServer{}}
		fillReport(&sv, r, from[name])
		for i := range sv.Servers {
			ds := &sv.Servers[i]
			ds.Node = nodeAtPort(ds.Addr, 0)
			ds.Drained = ds.Node != "" && slices.Contains(drained, ds.Node)
		}
		add(cluster(""), sv)
	}
	out := make([]dashCluster, 0, len(order))
	for _, name := range order {
		c := byName[name]
		sort.SliceStable(c.Services, func(i, j int) bool { return c.Services[i].Name < c.Services[j].Name })
		out = append(out, *c)
	}
	// Named clusters in configuration order, the unnamed group last.
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name != "" && out[j].Name == "" })
	return ha, out
}

func fillReport(sv *dashService, r director.ServiceStatus, from string) {
	sv.Name, sv.Director, sv.NewConns, sv.Drops, sv.Rate = r.Name, from, r.NewConns, r.Drops, r.Rate
	// What the director runs wins over the configuration's (possibly
	// defaulted, possibly newer than it applied) values.
	for _, f := range []struct {
		dst *string
		src string
	}{{&sv.VIP, r.VIP}, {&sv.Protocol, r.Protocol}, {&sv.Dataplane, r.Dataplane}, {&sv.Scheduler, r.Scheduler}} {
		if f.src != "" {
			*f.dst = f.src
		}
	}
	for _, x := range r.Servers {
		sv.Servers = append(sv.Servers, dashServer{Addr: x.Addr, Healthy: x.Healthy, LastError: x.LastError, Weight: x.Weight,
			ConfigWeight: x.ConfigWeight, Active: x.Active, Inactive: x.Inactive, Requests: x.Requests, Rate: x.Rate})
	}
}

func weightOr1(w *int) int {
	if w == nil {
		return 1
	}
	return *w
}

// pfsProbe asks the metadata members about the file system, keeping one
// client while the member list stays the same.
type pfsProbe struct {
	secret []byte

	mu   sync.Mutex
	list string
	cl   *client.Client
}

func (p *pfsProbe) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cl != nil {
		p.cl.Close()
		p.cl = nil
	}
}

// status lists the I/O servers (space, state, heal progress) and the
// metadata members (leader, up) as the leader sees them.
func (p *pfsProbe) status(ctx context.Context, meta []string) ([]api.IOServer, []api.MetaMember, error) {
	if len(p.secret) == 0 {
		return nil, nil, errors.New("off: the station has no cluster secret")
	}
	cred, err := proto.ParseCredential(p.secret)
	if err != nil {
		return nil, nil, fmt.Errorf("the station's cluster secret: %w", err)
	}
	list := strings.Join(meta, ",")
	p.mu.Lock()
	if p.cl == nil || p.list != list {
		if p.cl != nil {
			p.cl.Close()
		}
		p.cl, p.list = client.New(list, client.WithSecurity(proto.Security{Cred: cred}), client.WithTimeout(2*time.Second)), list
	}
	cl := p.cl
	p.mu.Unlock()

	mm, merr := metaMembers(ctx, cl, meta)
	ss, err := cl.Servers(ctx)
	if err != nil {
		return nil, mm, fmt.Errorf("I/O servers from meta %s: %w", list, err)
	}
	out := make([]api.IOServer, 0, len(ss))
	for _, s := range ss {
		out = append(out, api.IOServer{ID: s.ID, Addr: s.Addr, State: proto.StateName(s.State), Zone: s.Zone,
			Total: int64(s.Capacity), Free: int64(s.Free), Stale: int64(s.Stale), Healed: int64(s.Healed)})
	}
	return out, mm, merr
}

// metaMembers is the group as its leader sees it; without a leader every
// configured member is shown down with the reason.
func metaMembers(ctx context.Context, cl *client.Client, meta []string) ([]api.MetaMember, error) {
	r, err := cl.Call(ctx, &proto.Members{})
	if err != nil {
		out := make([]api.MetaMember, 0, len(meta))
		for _, a := range meta {
			out = append(out, api.MetaMember{Addr: a, Error: err.Error()})
		}
		return out, fmt.Errorf("metadata members: %w", err)
	}
	mr, ok := r.(*proto.MembersReply)
	if !ok {
		return nil, fmt.Errorf("metadata members: unexpected answer %T", r)
	}
	out := make([]api.MetaMember, 0, len(mr.Members))
	for _, m := range mr.Members {
		mm := api.MetaMember{Addr: m.Addr, Leader: m.ID == mr.Leader && mr.Leader != 0}
		switch {
		case mr.Leader == 0:
			mm.Error = "no leader (election, or no quorum)"
		case mr.Leader == mr.ID: // the leader's view: it knows who is active
			mm.Up = mm.Leader || m.Active
			if !mm.Up {
				mm.Error = "the leader has not heard from it lately"
			}
		default:
			mm.Up = mm.Leader || m.ID == mr.ID
			if !mm.Up {
				mm.Error = "unknown: only the leader knows"
			}
		}
		out = append(out, mm)
	}
	return out, nil
}

// dashLive adds what takes two samples to know: requests per second (from
// the director's request counters, l7) and the p99 request latency over
// the last interval (from the director's request-duration histogram on its
// /metrics, l7 only). The previous samples are kept per director and
// service; the first overview has neither.
type dashLive struct {
	http     *http.Client
	prevReq  map[string]dashCount
	prevHist map[string]dashHist
}

type dashCount struct {
	n  int64
	at time.Time
}

// dashHist is one service's histogram: cumulative counts per upper bound
// (ascending, +Inf excluded) and the total.
type dashHist struct {
	bounds []float64
	cum    []uint64
	count  uint64
}

// dashMetricsMax bounds one scrape of a director's /metrics.
const dashMetricsMax = 8 << 20

func (l *dashLive) apply(ctx context.Context, st *dashStatus, now time.Time) {
	if l.http == nil {
		l.http = &http.Client{Timeout: time.Second}
	}
	req, hist := map[string]dashCount{}, map[string]dashHist{}
	scraped := map[string]map[string]dashHist{}
	for _, m := range st.Members {
		if m.Role != api.RoleDirector || !m.Up || m.Metrics == "" {
			continue
		}
		h, err := l.scrape(ctx, m.Metrics)
		if err != nil {
			st.Errors = append(st.Errors, fmt.Sprintf("director %s's metrics (p99): %v", m.Name, err))
			continue
		}
		scraped[m.Name] = h
	}
	for ci := range st.Clusters {
		for si := range st.Clusters[ci].Services {
			sv := &st.Clusters[ci].Services[si]
			if sv.Director == "" || sv.Dataplane != "l7" { // only l7 counts requests and their latency
				continue
			}
			key := sv.Director + "\x00" + sv.Name
			var n int64
			for _, x := range sv.Servers {
				n += x.Requests
			}
			req[key] = dashCount{n, now}
			if p, ok := l.prevReq[key]; ok && n >= p.n && now.After(p.at) {
				r := float64(n-p.n) / now.Sub(p.at).Seconds()
				sv.ReqPS = &r
			}
			if h, ok := scraped[sv.Director][sv.Name]; ok {
				hist[key] = h
				if p, ok := l.prevHist[key]; ok {
					sv.P99 = dashQuantile(0.99, p, h)
				}
			}
		}
	}
	l.prevReq, l.prevHist = req, hist
}

// scrape reads the request-duration histograms of a director's /metrics.
func (l *dashLive) scrape(ctx context.Context, url string) (map[string]dashHist, error) {
	rq, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	rq.Header.Set("Accept", "text/plain;version=0.0.4")
	res, err := l.http.Do(rq)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, res.Status)
	}
	return parseDurations(io.LimitReader(res.Body, dashMetricsMax))
}

// parseDurations picks corral_director_request_duration_seconds per
// service out of Prometheus text: its _bucket and _count lines, everything
// else skipped. A malformed line of that histogram is an error naming it.
func parseDurations(r io.Reader) (map[string]dashHist, error) {
	const name = "corral_director_request_duration_seconds"
	type acc struct {
		le    map[float64]uint64
		count uint64
	}
	by := map[string]*acc{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		kind, rest, ok := strings.Cut(rest, "{")
		if !ok || (kind != "_bucket" && kind != "_count") {
			continue // _sum, or a series without labels: not needed
		}
		labels, value, err := promLabels(rest)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		f := strings.Fields(value)
		if len(f) == 0 {
			return nil, fmt.Errorf("line %d: no value", n)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil || v < 0 || v > 1<<62 || v != math.Trunc(v) {
			return nil, fmt.Errorf("line %d: value %q is not a count", n, f[0])
		}
		a := by[labels["service"]]
		if a == nil {
			a = &acc{le: map[float64]uint64{}}
			by[labels["service"]] = a
		}
		if kind == "_count" {
			a.count = uint64(v)
			continue
		}
		le, err := strconv.ParseFloat(labels["le"], 64)
		if err != nil || math.IsNaN(le) {
			return nil, fmt.Errorf("line %d: le %q is not a number", n, labels["le"])
		}
		if !math.IsInf(le, +1) {
			a.le[le] = uint64(v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := map[string]dashHist{}
	for svc, a := range by {
		var h dashHist
		h.bounds = slices.Sorted(maps.Keys(a.le))
		for _, b := range h.bounds {
			h.cum = append(h.cum, a.le[b])
		}
		h.count = a.count
		out[svc] = h
	}
	return out, nil
}

// promLabels reads `name="value",...}` (the part after "{") and returns
// the labels and what follows the "}".
func promLabels(s string) (map[string]string, string, error) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,")
		if rest, ok := strings.CutPrefix(s, "}"); ok {
			return labels, rest, nil
		}
		name, rest, ok := strings.Cut(s, "=")
		if !ok || name == "" || !strings.HasPrefix(rest, `"`) {
			return nil, "", fmt.Errorf("bad label near %.30q", s)
		}
		// The quoted value ends at the first unescaped quote.
		end := 1
		for ; end < len(rest) && rest[end] != '"'; end++ {
			if rest[end] == '\\' {
				end++
			}
		}
		if end >= len(rest) {
			return nil, "", fmt.Errorf("unterminated value of label %q", name)
		}
		v, err := strconv.Unquote(rest[:end+1])
		if err != nil {
			return nil, "", fmt.Errorf("label %q: bad value %.30q", name, rest[:end+1])
		}
		labels[strings.TrimSpace(name)] = v
		s = rest[end+1:]
	}
}

// dashQuantile estimates the q-quantile of the observations made between
// two samples of a histogram, interpolating linearly inside the bucket it
// falls in (as Prometheus's histogram_quantile does). nil: no observation
// between them, or the histogram was reset or changed its buckets. In the
// +Inf bucket the answer is the highest finite bound (a lower bound).
func dashQuantile(q float64, prev, cur dashHist) *float64 {
	if cur.count <= prev.count || !slices.Equal(prev.bounds, cur.bounds) || len(cur.bounds) == 0 {
		return nil
	}
	total := float64(cur.count - prev.count)
	rank := q * total
	var below float64
	lower := 0.0
	for i, ub := range cur.bounds {
		if cur.cum[i] < prev.cum[i] {
			return nil
		}
		c := float64(cur.cum[i] - prev.cum[i])
		if c >= rank {
			in := c - below
			v := ub
			if in > 0 {
				v = lower + (ub-lower)*(rank-below)/in
			}
			return &v
		}
		below, lower = c, ub
	}
	v := cur.bounds[len(cur.bounds)-1]
	return &v
}

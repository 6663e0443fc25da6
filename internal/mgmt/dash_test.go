package mgmt

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// dashTestYAML is the configuration the test source serves: two logical
// clusters, three nodes, two services and one director.
const dashTestYAML = `clusters:
  - name: web
    description: the public web site
  - name: static
nodes:
  - {name: n1, address: "127.0.55.11:8080", cluster: web}
  - {name: n2, address: "127.0.55.12:8080", cluster: web}
  - {name: n3, address: "127.0.55.13:8080", cluster: static}
directors:
  - {name: d1}
services:
  - {name: www, cluster: web, vip: "127.0.55.1:80", scheduler: wlc}
  - {name: assets, cluster: static, vip: "127.0.55.2:80", scheduler: rr}
filesystem:
  meta: ["127.0.55.21:7400", "127.0.55.22:7400", "127.0.55.23:7400"]
`

// fakeSource is a dashSource with a cluster in memory: a director that
// applies a drain at once (weight 0), members on two versions.
type fakeSource struct {
	mu       sync.Mutex
	version  api.Version
	drained_ []string
	events   []api.Event
	subs     map[int]chan api.Event
	nextSub  int
	drains   []string // "node drain who" per setDrain
	calls    atomic.Int32
	fail     error        // members() fails with it
	vary     atomic.Bool  // rates change with the clock (screenshots)
	clock    atomic.Int64 // unix ns of the simulated clock
	extra    int          // members padded with this many (big overviews)
	weights  map[string]int
	metrics  string // d1's /metrics URL
	varyFrom atomic.Int64
	fb       *director.FeedbackStatus // the feedback publication
}

// startVarying makes the rates change with the simulated clock, which goes
// on from now; l7 requests count from then.
func (f *fakeSource) startVarying() {
	now := time.Now().UnixNano()
	f.clock.Store(now)
	f.varyFrom.Store(now)
	f.vary.Store(true)
}

func newFakeSource() *fakeSource {
	f := &fakeSource{version: api.Version{Version: 3, YAML: dashTestYAML, Author: "alice"}, subs: map[int]chan api.Event{},
		weights: map[string]int{"127.0.55.11:8080": 3, "127.0.55.12:8080": 1, "127.0.55.13:8080": 2}}
	f.clock.Store(time.Date(2026, 11, 25, 18, 0, 0, 0, time.UTC).UnixNano())
	t0 := time.Date(2026, 11, 25, 17, 59, 0, 0, time.UTC)
	f.events = []api.Event{
		{Time: t0, Kind: "apply", Version: 3, Msg: "alice applied version 3"},
		{Time: t0.Add(time.Second), Kind: "apply-error", Member: "n2", Version: 3, Msg: "listen 127.0.55.12:8080: address in use"},
	}
	return f
}

// report is the director's status JSON, as a director would send it.
func (f *fakeSource) report() json.RawMessage {
	t := float64(f.clock.Load()) / 1e9
	wave := func(base, amp, phase float64) float64 {
		if !f.vary.Load() {
			return base
		}
		return math.Round((base+amp*math.Sin(t/40+phase)+amp/3*math.Sin(t/9))*10) / 10
	}
	reqs := func(perSec float64) int64 { // l7 requests counted since the start of the simulated clock
		if !f.vary.Load() {
			return 0
		}
		return int64((t - float64(f.varyFrom.Load())/1e9) * perSec * 1.3)
	}
	srv := func(addr string, active, inactive int64, cps, bps float64, l7 bool) director.ServerStatus {
		w := f.weights[addr]
		for _, n := range f.drained_ {
			if addr == map[string]string{"n1": "127.0.55.11:8080", "n2": "127.0.55.12:8080", "n3": "127.0.55.13:8080"}[n] {
				w = 0
			}
		}
		return director.ServerStatus{Addr: addr, Weight: w, ConfigWeight: f.weights[addr], Override: -1, Healthy: true,
			Active: active, Inactive: inactive, Connections: active * 40, Requests: map[bool]int64{true: active*300 + reqs(cps)}[l7],
			Rate: director.Rate{CPS: wave(cps, cps/2, 0), InBPS: wave(bps/8, bps/16, 1), OutBPS: wave(bps, bps/2, 1)}}
	}
	ss := []director.ServiceStatus{
		{Name: "assets", VIP: "127.0.55.2:80", Protocol: "tcp", Dataplane: "l4", Scheduler: "rr", NewConns: 9120, Drops: 0,
			Rate:    director.Rate{CPS: wave(41.5, 20, 2), InBPS: wave(5000, 2000, 3), OutBPS: wave(2.5e6, 1e6, 3)},
			Servers: []director.ServerStatus{srv("127.0.55.13:8080", 7, 31, 41.5, 2.5e6, false)}},
		{Name: "www", VIP: "127.0.55.1:80", Protocol: "tcp", Dataplane: "l7", Scheduler: "wlc", NewConns: 48213, Drops: 2,
			Rate:    director.Rate{CPS: wave(123.4, 60, 0), InBPS: wave(20000, 9000, 1), OutBPS: wave(8.75e6, 4e6, 1)},
			Servers: []director.ServerStatus{srv("127.0.55.11:8080", 12, 140, 92.6, 6.5e6, true), srv("127.0.55.12:8080", 4, 45, 30.8, 2.25e6, true)}},
	}
	b, _ := json.Marshal(ss)
	return b
}

func (f *fakeSource) current(ctx context.Context) (api.Version, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.version, nil
}

func (f *fakeSource) members(ctx context.Context) ([]api.MemberStatus, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	seen := time.Unix(0, f.clock.Load()).UTC()
	ms := []api.MemberStatus{
		{Name: "d1", Role: api.RoleDirector, Addr: "127.0.55.1:9443", Version: 3, Healthy: true, Up: true, Seen: seen, Report: f.report(), Metrics: f.metrics},
		{Name: "n1", Role: api.RoleNode, Addr: "127.0.55.11:8080", Version: 3, Healthy: true, Up: true, Seen: seen},
		{Name: "n2", Role: api.RoleNode, Addr: "127.0.55.12:8080", Version: 2, Healthy: true, Up: true, Seen: seen,
			Error: "version 3: listen 127.0.55.12:8080: address in use"},
		{Name: "n3", Role: api.RoleNode, Addr: "127.0.55.13:8080", Version: 3, Healthy: true, Up: true, Seen: seen},
		{Name: "meta1", Role: api.RoleMeta, Addr: "127.0.55.21:7400", Version: 3, Healthy: true, Up: true, Seen: seen},
	}
	for i := range f.extra {
		ms = append(ms, api.MemberStatus{Name: fmt.Sprintf("pad-%05d-%s", i, strings.Repeat("x", 200)), Role: api.RoleNode})
	}
	return ms, nil
}

func (f *fakeSource) drained(ctx context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.drained_), nil
}

func (f *fakeSource) setDrain(ctx context.Context, node string, drain bool, who string) error {
	f.mu.Lock()
	f.drains = append(f.drains, fmt.Sprintf("%s %v %s", node, drain, who))
	f.drained_ = slices.DeleteFunc(f.drained_, func(n string) bool { return n == node })
	if drain {
		f.drained_ = append(f.drained_, node)
	}
	f.mu.Unlock()
	f.publish(api.Event{Time: time.Unix(0, f.clock.Load()), Kind: "drain", Member: node, Msg: fmt.Sprintf("%s drained=%v by %s", node, drain, who)})
	return nil
}

func (f *fakeSource) recentEvents(n int) []api.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events[max(0, len(f.events)-n):])
}

func (f *fakeSource) feedbackPub() *director.FeedbackStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fb
}

func (f *fakeSource) subscribe() (<-chan api.Event, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.nextSub
	f.nextSub++
	ch := make(chan api.Event, 16)
	f.subs[id] = ch
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.subs, id)
	}
}

func (f *fakeSource) subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

func (f *fakeSource) publish(e api.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e)
	for _, ch := range f.subs {
		select {
		case ch <- e:
		default: // a slow subscriber misses it, as the store's would
		}
	}
}

// fakeFS is the file system's status: three I/O servers (one healing)
// and three metadata members.
func fakeFS(ctx context.Context, meta []string) ([]api.IOServer, []api.MetaMember, error) {
	const gib = 1 << 30
	srv := []api.IOServer{
		{ID: 1, Addr: "127.0.55.31:7500", State: "up", Total: 100 * gib, Free: 61 * gib},
		{ID: 2, Addr: "127.0.55.32:7500", State: "up", Total: 100 * gib, Free: 58 * gib, Stale: 3 * gib, Healed: 9 * gib},
		{ID: 3, Addr: "127.0.55.33:7500", State: "up", Total: 200 * gib, Free: 9 * gib},
	}
	mm := make([]api.MetaMember, 0, len(meta))
	for i, a := range meta {
		mm = append(mm, api.MetaMember{Addr: a, Leader: i == 0, Up: true})
	}
	return srv, mm, nil
}

// fakeMetrics serves a director's /metrics whose request-duration
// histogram of www gains 100 requests per scrape: 50 under 5 ms, 45 more
// under 10 ms, 4 more under 50 ms, 1 under 100 ms; the p99 of each
// interval is 50 ms.
func fakeMetrics(t testing.TB) string {
	var n atomic.Int64
	ln, err := net.Listen("tcp", "127.0.55.2:0")
	if err != nil {
		lab.Need(t, lab.Err("listen on 127.0.55.2", err))
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := uint64(n.Add(1))
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# HELP corral_director_request_duration_seconds time\n# TYPE corral_director_request_duration_seconds histogram\n")
		for _, b := range []struct {
			le string
			c  uint64
		}{{"0.005", 50}, {"0.01", 95}, {"0.05", 99}, {"0.1", 100}, {"+Inf", 100}} {
			fmt.Fprintf(w, "corral_director_request_duration_seconds_bucket{service=\"www\",le=%q} %d\n", b.le, k*b.c)
		}
		fmt.Fprintf(w, "corral_director_request_duration_seconds_sum{service=\"www\"} %g\ncorral_director_request_duration_seconds_count{service=\"www\"} %d\n", float64(k)*0.9, k*100)
		fmt.Fprintf(w, "# TYPE corral_director_drops_total counter\ncorral_director_drops_total{service=\"www\"} 2\n")
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// Test tokens: alice is an admin, bob reads only.
const (
	dashAdminToken = "admin-token-for-tests"
	dashReadToken  = "read-token-for-tests"
)

// fakeAuth stands for Station.auth: bearer tokens of two users.
func fakeAuth(need string, h func(w http.ResponseWriter, r *http.Request, p *Principal)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var p *Principal
		switch strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") {
		case dashAdminToken:
			p = &Principal{Name: "alice", Role: api.RoleAdmin}
		case dashReadToken:
			p = &Principal{Name: "bob", Role: api.RoleReadOnly}
		default:
			dashError(w, http.StatusUnauthorized, "no or bad token")
			return
		}
		if need == permAdmin && p.Role != api.RoleAdmin {
			dashError(w, http.StatusForbidden, "admin only")
			return
		}
		h(w, r, p)
	}
}

// startDash serves a dashboard over the fake source on 127.0.55.1, with a
// /v1/login that trades alice/wonderland for the admin token. It returns
// the dashboard (to turn knobs before the first request) and base URL.
func startDash(t testing.TB, f *fakeSource, tune func(d *dash)) (*dash, string) {
	t.Helper()
	d := &dash{src: f, auth: fakeAuth, fs: fakeFS, stations: func() []string { return []string{"127.0.55.1:7600"} }}
	if tune != nil {
		tune(d)
	}
	mux := http.NewServeMux()
	d.routes(mux)
	mux.HandleFunc(api.RouteLogin, func(w http.ResponseWriter, r *http.Request) {
		var req api.LoginRequest
		if json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req) != nil || req.User != "alice" || req.Password != "wonderland" {
			dashError(w, http.StatusUnauthorized, "bad user or password")
			return
		}
		json.NewEncoder(w).Encode(api.LoginReply{Token: dashAdminToken, Expires: time.Now().Add(time.Hour)})
	})
	ln, err := net.Listen("tcp", "127.0.55.1:0")
	if err != nil {
		lab.Need(t, lab.Err("listen on 127.0.55.1 (loopback aliases)", err))
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return d, srv.URL
}

func dashDo(t testing.TB, method, url, token string, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

func getStatus(t testing.TB, base string) dashStatus {
	t.Helper()
	res, b := dashDo(t, "GET", base+api.RouteStatus, dashReadToken, "")
	if res.StatusCode != 200 {
		t.Fatalf("status: %d %s", res.StatusCode, b)
	}
	var st dashStatus
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("status JSON: %v\n%s", err, b)
	}
	return st
}

func TestDashAuth(t *testing.T) {
	_, base := startDash(t, newFakeSource(), nil)
	for _, c := range []struct {
		method, route, token, body string
		want                       int
	}{
		{"GET", api.RouteStatus, "", "", 401},
		{"GET", api.RouteStatus, "wrong", "", 401},
		{"GET", api.RouteEvents, "", "", 401},
		{"POST", api.RouteDrain, "", `{"node":"n1","drain":true}`, 401},
		{"POST", api.RouteDrain, dashReadToken, `{"node":"n1","drain":true}`, 403},
		{"GET", api.RouteStatus, dashReadToken, "", 200},
		{"POST", api.RouteStatus, dashReadToken, "", 405},
		{"GET", api.RouteDrain, dashAdminToken, "", 405},
	} {
		res, b := dashDo(t, c.method, base+c.route, c.token, c.body)
		if res.StatusCode != c.want {
			t.Errorf("%s %s token %q: %d %s, want %d", c.method, c.route, c.token, res.StatusCode, b, c.want)
		}
	}
}

func TestDashStatusJSON(t *testing.T) {
	_, base := startDash(t, newFakeSource(), nil)
	st := getStatus(t, base)
	if st.Version != 3 || st.HA != "single director" || len(st.Errors) != 0 {
		t.Fatalf("version %d, ha %q, errors %q", st.Version, st.HA, st.Errors)
	}
	var names []string
	for _, c := range st.Clusters {
		for _, s := range c.Services {
			names = append(names, c.Name+"/"+s.Name)
		}
	}
	if fmt.Sprint(names) != "[web/www static/assets]" {
		t.Fatalf("services by cluster: %v", names)
	}
	www := st.Clusters[0].Services[0]
	if www.Director != "d1" || www.Rate.CPS != 123.4 || len(www.Servers) != 2 {
		t.Fatalf("www: %+v", www)
	}
	if s := www.Servers[0]; s.Node != "n1" || s.Weight != 3 || s.Active != 12 || s.Inactive != 140 || !s.Healthy {
		t.Fatalf("www's first server: %+v", s)
	}
	if len(st.Servers) != 3 || st.Servers[1].Stale == 0 || len(st.Meta) != 3 || !st.Meta[0].Leader {
		t.Fatalf("file system: %+v %+v", st.Servers, st.Meta)
	}
	if len(st.Members) != 5 || st.Members[0].Role != api.RoleDirector || len(st.Events) != 2 || st.Stations[0] != "127.0.55.1:7600" {
		t.Fatalf("members %+v events %+v stations %v", st.Members, st.Events, st.Stations)
	}
	// A client of the API reads it as an api.Overview.
	res, b := dashDo(t, "GET", base+api.RouteStatus, dashReadToken, "")
	var ov api.Overview
	if err := json.Unmarshal(b, &ov); err != nil || res.StatusCode != 200 || ov.Version != 3 || len(ov.Members) != 5 {
		t.Fatalf("as api.Overview: %v %+v", err, ov)
	}
}

func TestDashStatusShowsErrors(t *testing.T) {
	f := newFakeSource()
	f.fail = errors.New("etcd: context deadline exceeded")
	_, base := startDash(t, f, func(d *dash) {
		d.fs = func(context.Context, []string) ([]api.IOServer, []api.MetaMember, error) {
			return nil, []api.MetaMember{{Addr: "127.0.55.21:7400", Error: "connection refused"}}, errors.New("meta 127.0.55.21:7400: connection refused")
		}
	})
	st := getStatus(t, base)
	joined := strings.Join(st.Errors, "\n")
	if !strings.Contains(joined, "members: etcd: context deadline exceeded") || !strings.Contains(joined, "file system: meta 127.0.55.21:7400: connection refused") {
		t.Fatalf("errors: %q", st.Errors)
	}
	// The rest is still there: the version, the clusters (no report: the
	// configured pools), the meta member with its error.
	if st.Version != 3 || len(st.Clusters) != 2 || len(st.Clusters[0].Services[0].Servers) != 2 || st.Clusters[0].Services[0].Director != "" ||
		len(st.Meta) != 1 || st.Meta[0].Error == "" {
		t.Fatalf("status beside the errors: %+v", st)
	}
}

func TestDashStatusCached(t *testing.T) {
	f := newFakeSource()
	_, base := startDash(t, f, nil)
	getStatus(t, base)
	getStatus(t, base)
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("two status calls within a second read the members %d times, want 1", n)
	}
	// A drain makes the next one fresh.
	res, b := dashDo(t, "POST", base+api.RouteDrain, dashAdminToken, `{"node":"n3","drain":true}`)
	if res.StatusCode != 200 {
		t.Fatalf("drain: %d %s", res.StatusCode, b)
	}
	f.calls.Store(0)
	if st := getStatus(t, base); !slices.Contains(st.Drained, "n3") {
		t.Fatalf("drained after drain: %v", st.Drained)
	}
}

func TestDashDrain(t *testing.T) {
	f := newFakeSource()
	_, base := startDash(t, f, nil)
	res, b := dashDo(t, "POST", base+api.RouteDrain, dashAdminToken, `{"node":"n1","drain":true}`)
	if res.StatusCode != 200 {
		t.Fatalf("drain: %d %s", res.StatusCode, b)
	}
	if fmt.Sprint(f.drains) != "[n1 true alice]" {
		t.Fatalf("setDrain calls: %q", f.drains)
	}
	st := getStatus(t, base)
	www := st.Clusters[0].Services[0]
	if s := www.Servers[0]; s.Node != "n1" || !s.Drained || s.Weight != 0 || !slices.Equal(st.Drained, []string{"n1"}) {
		t.Fatalf("n1 after drain: %+v, drained %v", s, st.Drained)
	}
	res, b = dashDo(t, "POST", base+api.RouteDrain, dashAdminToken, `{"node":"n1","drain":false}`)
	if res.StatusCode != 200 || fmt.Sprint(f.drains) != "[n1 true alice n1 false alice]" {
		t.Fatalf("undrain: %d %s %q", res.StatusCode, b, f.drains)
	}

	for _, c := range []struct {
		body, want string
		code       int
	}{
		{``, "empty body", 400},
		{`{"node":"n1","drain":true,"force":1}`, "unknown field", 400},
		{`{"node":"","drain":true}`, "node: empty", 400},
		{`{"node":"a b","drain":true}`, "space", 400},
		{`{"node":"n9","drain":true}`, `no node named "n9"`, 404},
		{`{"node":"` + strings.Repeat("x", dashMaxBody) + `"}`, "over 4096 bytes", 413},
		{`[1,2]`, "bad DrainRequest JSON", 400},
	} {
		res, b := dashDo(t, "POST", base+api.RouteDrain, dashAdminToken, c.body)
		var e api.Error
		json.Unmarshal(b, &e)
		if res.StatusCode != c.code || !strings.Contains(e.Error, c.want) {
			t.Errorf("body %.40q: %d %q, want %d with %q", c.body, res.StatusCode, e.Error, c.code, c.want)
		}
	}
	if len(f.drains) != 2 {
		t.Fatalf("bad requests reached setDrain: %q", f.drains)
	}
}

func TestDashPage(t *testing.T) {
	_, base := startDash(t, newFakeSource(), nil)
	res, b := dashDo(t, "GET", base+"/", "", "")
	if res.StatusCode != 200 || !bytes.Contains(b, []byte(`src="/ui/dash.js"`)) || !strings.Contains(res.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("page: %d %s %q", res.StatusCode, b, res.Header)
	}
	for path, ctype := range map[string]string{"/ui/dash.js": "javascript", "/ui/dash.css": "text/css"} {
		res, b := dashDo(t, "GET", base+path, "", "")
		if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Type"), ctype) || len(b) < 100 {
			t.Errorf("%s: %d %q", path, res.StatusCode, res.Header.Get("Content-Type"))
		}
	}
	if res, _ := dashDo(t, "POST", base+"/", "", ""); res.StatusCode != 405 {
		t.Errorf("POST /: %d", res.StatusCode)
	}
	if res, _ := dashDo(t, "GET", base+"/ui/nothing.js", "", ""); res.StatusCode != 404 {
		t.Errorf("missing asset: %d", res.StatusCode)
	}
}

// sseReader reads Server-Sent Event frames.
type sseReader struct{ r *bufio.Reader }

// next is the next frame: its event name ("" for a comment-only frame),
// data, and comment lines.
func (s sseReader) next() (name, data string, comments []string, err error) {
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return "", "", nil, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			return name, data, comments, nil
		case strings.HasPrefix(line, ":"):
			comments = append(comments, line)
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data += line[len("data: "):]
		case strings.HasPrefix(line, "retry: "):
			name = "retry"
		default:
			return "", "", nil, fmt.Errorf("not an SSE line: %q", line)
		}
	}
}

func TestDashEvents(t *testing.T) {
	f := newFakeSource()
	d, base := startDash(t, f, func(d *dash) {
		d.tick, d.heartbeat, d.cacheFor = 20*time.Millisecond, 30*time.Millisecond, time.Nanosecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+api.RouteEvents, nil)
	req.Header.Set("Authorization", "Bearer "+dashReadToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	rd := sseReader{bufio.NewReader(res.Body)}
	if name, _, _, err := rd.next(); err != nil || name != "retry" {
		t.Fatalf("first frame: %q %v", name, err)
	}
	name, data, _, err := rd.next()
	var st dashStatus
	if err != nil || name != "overview" || json.Unmarshal([]byte(data), &st) != nil || st.Version != 3 || len(st.Clusters) != 2 {
		t.Fatalf("second frame: %q %.200s %v", name, data, err)
	}
	// Each event, a later overview and a heartbeat come, in bounded reads.
	for f.subscribers() == 0 {
		time.Sleep(time.Millisecond)
	}
	f.publish(api.Event{Kind: "join", Member: "n4", Msg: "n4 joined"})
	var gotEvent, gotOverview, gotBeat bool
	for i := 0; i < 1000 && !(gotEvent && gotOverview && gotBeat); i++ {
		name, data, comments, err := rd.next()
		if err != nil {
			t.Fatal(err)
		}
		switch name {
		case "event":
			var e api.Event
			if json.Unmarshal([]byte(data), &e) != nil || e.Kind != "join" || e.Member != "n4" {
				t.Fatalf("event: %s", data)
			}
			gotEvent = true
		case "overview":
			gotOverview = true
		case "":
			gotBeat = slices.Contains(comments, ": heartbeat")
		}
	}
	if !(gotEvent && gotOverview && gotBeat) {
		t.Fatalf("event %v, overview %v, heartbeat %v", gotEvent, gotOverview, gotBeat)
	}
	if n := d.streams.Load(); n != 1 {
		t.Fatalf("%d streams open, want 1", n)
	}
	// The client goes: the stream ends and its subscription is cancelled.
	cancel()
	res.Body.Close()
	waitFor(t, "the stream to end", func() bool { return d.streams.Load() == 0 && f.subscribers() == 0 })
}

// A client that stops reading is dropped once a frame cannot be written
// within the write timeout; nothing piles up for it.
func TestDashEventsDropsSlowClient(t *testing.T) {
	f := newFakeSource()
	f.extra = 1000 // ~250 KB per overview: the socket buffers fill in a few ticks
	d, base := startDash(t, f, func(d *dash) {
		d.tick, d.cacheFor, d.writeTimeout = 5*time.Millisecond, time.Nanosecond, 200*time.Millisecond
	})
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", api.RouteEvents, dashReadToken)
	waitFor(t, "the stream to open", func() bool { return d.streams.Load() == 1 })
	// Never read: the handler must give up by itself.
	waitFor(t, "the slow client to be dropped", func() bool { return d.streams.Load() == 0 && f.subscribers() == 0 })
}

func TestDashEventsBounded(t *testing.T) {
	f := newFakeSource()
	d, base := startDash(t, f, nil)
	d.streams.Store(dashMaxStreams)
	res, b := dashDo(t, "GET", base+api.RouteEvents, dashReadToken, "")
	if res.StatusCode != 503 || !bytes.Contains(b, []byte("event streams open")) {
		t.Fatalf("stream over the limit: %d %s", res.StatusCode, b)
	}
	if d.streams.Load() != dashMaxStreams {
		t.Fatalf("the refused stream was counted: %d", d.streams.Load())
	}
}

func TestDashPoolsWithoutReport(t *testing.T) {
	// A service with an explicit pool and one on a cluster with a port:
	// no director reports them, the configured pools show.
	var cfg dashStatus
	v := api.Version{Version: 1, YAML: `nodes:
  - {name: a, address: "127.0.55.41:80", cluster: c}
services:
  - {name: s1, cluster: c, vip: "127.0.55.40:80", port: 8080}
  - {name: s2, vip: "127.0.55.40:81", servers: [{address: "127.0.55.41:9000", weight: 5}]}
`}
	c, err := dashConfig(v)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HA, cfg.Clusters = dashPools(c, nil, []string{"a"}, func(w string, err error) { t.Errorf("%s: %v", w, err) })
	if cfg.HA != "no director" || len(cfg.Clusters) != 2 || cfg.Clusters[0].Name != "c" || cfg.Clusters[1].Name != "" {
		t.Fatalf("%+v", cfg)
	}
	s1, s2 := cfg.Clusters[0].Services[0].Servers[0], cfg.Clusters[1].Services[0].Servers[0]
	if s1.Addr != "127.0.55.41:8080" || s1.Node != "a" || !s1.Drained || s2.Node != "a" || s2.ConfigWeight != 5 {
		t.Fatalf("s1 %+v s2 %+v", s1, s2)
	}
	if _, err := dashConfig(api.Version{Version: 7, YAML: "services: [\n"}); err == nil || !strings.Contains(err.Error(), "version 7") {
		t.Fatalf("bad YAML: %v", err)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// A drain request's body is untrusted: any bytes get an answer, never a panic.
func FuzzDashDrainBody(f *testing.F) {
	for _, s := range []string{`{"node":"n1","drain":true}`, `{}`, ``, `{"node":"\u0000"}`, `null`, `{"node":"n1","drain":"yes"}`} {
		f.Add([]byte(s))
	}
	src := newFakeSource()
	d := &dash{src: src, auth: fakeAuth, fs: fakeFS}
	mux := http.NewServeMux()
	d.routes(mux)
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", api.RouteDrain, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+dashAdminToken)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		switch w.Code {
		case 200, 400, 404, 413:
		default:
			t.Fatalf("%q: %d %s", body, w.Code, w.Body)
		}
	})
}

// A director's report comes from a member: any bytes are an error shown,
// never a panic.
func FuzzDashReport(f *testing.F) {
	src := newFakeSource()
	f.Add([]byte(src.report()))
	f.Add([]byte(`[{"name":"www","servers":[{"addr":"x"}]}]`))
	f.Add([]byte(`{}`))
	cfg, err := dashConfig(src.version)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, report []byte) {
		ms := []api.MemberStatus{{Name: "d1", Role: api.RoleDirector, Up: true, Report: report}}
		dashPools(cfg, ms, []string{"n1"}, func(string, error) {})
	})
}

// Requests per second and p99 come from two samples: the director's
// request counters and its /metrics histogram.
func TestDashLive(t *testing.T) {
	f := newFakeSource()
	f.metrics = fakeMetrics(t)
	var clock atomic.Int64
	clock.Store(time.Date(2026, 11, 25, 18, 0, 0, 0, time.UTC).UnixNano())
	_, base := startDash(t, f, func(d *dash) {
		d.cacheFor = time.Nanosecond
		d.clock = func() time.Time { return time.Unix(0, clock.Add(int64(2*time.Second))) }
	})
	st := getStatus(t, base)
	if www := st.Clusters[0].Services[0]; www.P99 != nil || www.ReqPS != nil || len(st.Errors) != 0 {
		t.Fatalf("first overview: p99 %v req/s %v errors %q: want neither yet", www.P99, www.ReqPS, st.Errors)
	}
	f.startVarying() // requests start counting
	getStatus(t, base)
	f.clock.Add(int64(10 * time.Second)) // 10 s later the servers answered 1.3*(92.6+30.8)*10 requests more
	st = getStatus(t, base)
	www, assets := st.Clusters[0].Services[0], st.Clusters[1].Services[0]
	if www.P99 == nil || math.Abs(*www.P99-0.05) > 1e-9 {
		t.Fatalf("www p99: %v, want 0.05 s", www.P99)
	}
	if www.ReqPS == nil || math.Abs(*www.ReqPS-1.3*(92.6+30.8)*10/2) > 1 {
		t.Fatalf("www requests/s: %v, want about %v", www.ReqPS, 1.3*(92.6+30.8)*10/2)
	}
	if assets.P99 != nil {
		t.Fatalf("assets has no histogram, yet p99 %v", *assets.P99)
	}
	// A director whose /metrics cannot be read: an error shown, no p99.
	f.mu.Lock()
	f.metrics = "http://127.0.55.2:1/metrics"
	f.mu.Unlock()
	st = getStatus(t, base)
	if www := st.Clusters[0].Services[0]; www.P99 != nil || !strings.Contains(strings.Join(st.Errors, "\n"), "director d1's metrics (p99)") {
		t.Fatalf("unreadable metrics: p99 %v, errors %q", www.P99, st.Errors)
	}
}

func TestDashQuantile(t *testing.T) {
	h := func(count uint64, cum ...uint64) dashHist {
		return dashHist{bounds: []float64{0.01, 0.1, 1}, cum: cum, count: count}
	}
	for _, c := range []struct {
		prev, cur dashHist
		q         float64
		want      float64 // -1: nil
	}{
		{h(0, 0, 0, 0), h(100, 50, 100, 100), 0.99, 0.01 + 0.09*49/50},
		{h(100, 50, 100, 100), h(200, 150, 200, 200), 0.5, 0.005},                             // only the interval counts
		{h(0, 0, 0, 0), h(100, 0, 0, 90), 0.99, 1},                                            // in +Inf: the highest bound
		{h(100, 50, 100, 100), h(100, 50, 100, 100), 0.99, -1},                                // nothing new
		{h(100, 50, 100, 100), h(10, 5, 10, 10), 0.99, -1},                                    // reset
		{h(0, 0, 0, 0), dashHist{bounds: []float64{1}, cum: []uint64{5}, count: 5}, 0.99, -1}, // other buckets
	} {
		got := dashQuantile(c.q, c.prev, c.cur)
		if (got == nil) != (c.want < 0) || (got != nil && math.Abs(*got-c.want) > 1e-12) {
			t.Errorf("q%v of %+v..%+v: %v, want %v", c.q, c.prev, c.cur, got, c.want)
		}
	}
}

// A director's /metrics is read by the station: any bytes are an error or
// histograms, never a panic.
func FuzzDashMetrics(f *testing.F) {
	f.Add([]byte("corral_director_request_duration_seconds_bucket{service=\"www\",le=\"0.1\"} 3\ncorral_director_request_duration_seconds_bucket{service=\"www\",le=\"+Inf\"} 4\ncorral_director_request_duration_seconds_count{service=\"www\"} 4\n"))
	f.Add([]byte("# TYPE corral_director_request_duration_seconds histogram\ncorral_director_request_duration_seconds_bucket{le=\"x\"} 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseDurations(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, x := range h {
			dashQuantile(0.99, dashHist{bounds: x.bounds, cum: make([]uint64, len(x.cum))}, x)
		}
	})
}

func TestDashParseDurations(t *testing.T) {
	text := `# HELP corral_director_request_duration_seconds x
# TYPE corral_director_request_duration_seconds histogram
corral_director_request_duration_seconds_bucket{service="w\"x",le="0.1"} 3
corral_director_request_duration_seconds_bucket{le="0.01",service="w\"x"} 1 1764000000000
corral_director_request_duration_seconds_bucket{service="w\"x",le="+Inf"} 4
corral_director_request_duration_seconds_sum{service="w\"x"} 0.2
corral_director_request_duration_seconds_count{service="w\"x"} 4
corral_director_requests_total{service="w\"x",server="a"} 9
`
	h, err := parseDurations(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	got := h[`w"x`]
	if fmt.Sprint(got.bounds, got.cum, got.count) != "[0.01 0.1] [1 3] 4" {
		t.Fatalf("%+v", h)
	}
	for _, bad := range []string{
		"corral_director_request_duration_seconds_bucket{service=\"w\",le=\"0.1\"} x\n",
		"corral_director_request_duration_seconds_bucket{service=\"w\",le=\"zz\"} 1\n",
		"corral_director_request_duration_seconds_bucket{service=\"w,le=\"0.1\"} 1\n",
		"corral_director_request_duration_seconds_count{service=\"w\"} -1\n",
	} {
		if _, err := parseDurations(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// The station's own routesDash serves the page and registers the API
// routes (behind the station's auth, which is the core's and not called
// here: a bare Station has no store).
func TestDashStationRoutes(t *testing.T) {
	s := &Station{log: slog.Default()}
	mux := http.NewServeMux()
	s.routesDash(mux)
	for _, path := range []string{"/", "/ui/dash.js"} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != 200 {
			t.Errorf("GET %s: %d", path, w.Code)
		}
	}
	for _, route := range []string{api.RouteStatus, api.RouteEvents, api.RouteDrain} {
		if _, pattern := mux.Handler(httptest.NewRequest("GET", route, nil)); pattern != route {
			t.Errorf("%s: served by pattern %q", route, pattern)
		}
	}
}

// Browsers reach the station over TLS with HTTP/2: the stream's per-frame
// deadline and flush work there too.
func TestDashEventsHTTP2(t *testing.T) {
	f := newFakeSource()
	d := &dash{src: f, auth: fakeAuth, fs: fakeFS, tick: 20 * time.Millisecond, cacheFor: time.Nanosecond}
	mux := http.NewServeMux()
	d.routes(mux)
	ln, err := net.Listen("tcp", "127.0.55.3:0")
	if err != nil {
		lab.Need(t, lab.Err("listen on 127.0.55.3", err))
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+api.RouteEvents, nil)
	req.Header.Set("Authorization", "Bearer "+dashReadToken)
	cl := srv.Client()
	cl.Transport.(*http.Transport).TLSClientConfig.ServerName = "127.0.0.1" // the test certificate's name
	res, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.ProtoMajor != 2 || res.StatusCode != 200 {
		t.Fatalf("%s %d", res.Proto, res.StatusCode)
	}
	rd := sseReader{bufio.NewReader(res.Body)}
	overviews := 0
	for i := 0; i < 10 && overviews < 3; i++ {
		name, data, _, err := rd.next()
		if err != nil {
			t.Fatal(err)
		}
		if name == "overview" && strings.Contains(data, `"version":3`) {
			overviews++
		}
	}
	if overviews < 3 {
		t.Fatalf("%d overviews over HTTP/2", overviews)
	}
	cancel()
	waitFor(t, "the stream to end", func() bool { return d.streams.Load() == 0 })
}

// One user's streams are bounded so they cannot take every stream from
// the others; another user still gets one.
func TestDashEventsPerUser(t *testing.T) {
	f := newFakeSource()
	d, base := startDash(t, f, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range dashMaxPerUser {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+api.RouteEvents, nil)
		req.Header.Set("Authorization", "Bearer "+dashReadToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("stream: %v %v", res, err)
		}
		defer res.Body.Close()
	}
	waitFor(t, "the streams open", func() bool { return d.streams.Load() == dashMaxPerUser })
	res, b := dashDo(t, "GET", base+api.RouteEvents, dashReadToken, "")
	if res.StatusCode != http.StatusTooManyRequests || !bytes.Contains(b, []byte("user bob already has")) {
		t.Fatalf("bob's stream over the per-user limit: %d %s", res.StatusCode, b)
	}
	actx, acancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(actx, "GET", base+api.RouteEvents, nil)
	req.Header.Set("Authorization", "Bearer "+dashAdminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("alice's stream while bob has %d: %v %v", dashMaxPerUser, res, err)
	}
	res.Body.Close()
	acancel()
	cancel()
	waitFor(t, "every stream gone", func() bool {
		d.perMu.Lock()
		defer d.perMu.Unlock()
		return len(d.per) == 0 && d.streams.Load() == 0
	})
}

// slowMembers is a source whose members() takes a while and honours its
// context, as the store's does.
type slowMembers struct{ *fakeSource }

func (s slowMembers) members(ctx context.Context) ([]api.MemberStatus, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(300 * time.Millisecond):
	}
	return s.fakeSource.members(ctx)
}

// The overview every caller shares is not computed under the context of
// the first caller: one that goes away must not leave "context canceled"
// for everyone else for the cache's lifetime.
func TestDashStatusOutlivesCaller(t *testing.T) {
	d, base := startDash(t, newFakeSource(), func(d *dash) { d.cacheFor = 10 * time.Second })
	d.src = slowMembers{d.src.(*fakeSource)}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+api.RouteStatus, nil)
	req.Header.Set("Authorization", "Bearer "+dashReadToken)
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
	}
	time.Sleep(10 * time.Millisecond)
	st := getStatus(t, base)
	if len(st.Errors) > 0 || len(st.Members) == 0 {
		t.Fatalf("overview after an impatient caller: errors %q, %d members", st.Errors, len(st.Members))
	}
}

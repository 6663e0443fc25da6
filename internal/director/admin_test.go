package director

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/config"
)

// runDirector runs a real director (Run, as `corral director` does) on a
// configuration of one l4 rr service over backends, in a temp dir; it
// returns the admin address, the VIP and the config path.
func runDirector(t *testing.T, backends ...string) (admin, vip, conf string) {
	t.Helper()
	admin, vip = freeAddr(t, "tcp"), freeAddr(t, "tcp")
	var b strings.Builder
	fmt.Fprintf(&b, "admin %s\nservice www {\n  vip %s\n  scheduler rr\n  check none\n", admin, vip)
	for _, be := range backends {
		fmt.Fprintf(&b, "  server %s\n", be)
	}
	b.WriteString("}\n")
	conf = filepath.Join(t.TempDir(), "director.conf")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, conf, slog.New(slog.NewTextHandler(io.Discard, nil)), func(a string) { ready <- a })
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("director: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("director never became ready")
	}
	return admin, vip, conf
}

// backend is an HTTP server on loopback that answers its name.
func backend(t *testing.T, name string) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

// call sends one request to the admin API with the given headers.
func call(t *testing.T, method, url string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAdminAPISafety: issue 12 §4. On the old main every request below
// answered 200/204: no token, any Origin, any Host.
func TestAdminAPISafety(t *testing.T) {
	be := backend(t, "a")
	admin, _, conf := runDirector(t, be)
	tf := filepath.Join(filepath.Dir(conf), "admin.token")
	fi, err := os.Stat(tf)
	if err != nil {
		t.Fatalf("the director made no token beside its configuration: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %#o, want 0600", tf, fi.Mode().Perm())
	}
	raw, _ := os.ReadFile(tf)
	tok := strings.TrimSpace(string(raw))
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(tok) {
		t.Fatalf("token %q: want 32 random bytes in hex", tok)
	}
	drain := "http://" + admin + "/api/services/www/servers/" + be + "?action=drain"
	enable := "http://" + admin + "/api/services/www/servers/" + be + "?action=enable"
	bearer := "Bearer " + tok
	for _, c := range []struct {
		name   string
		method string
		url    string
		hdr    map[string]string
		want   int
	}{
		{"drain without a token", "POST", drain, nil, 401},
		{"drain with a wrong token", "POST", drain, map[string]string{"Authorization": "Bearer " + strings.Repeat("0", 64)}, 401},
		{"remove without a token", "DELETE", "http://" + admin + "/api/services/www/servers/" + be, nil, 401},
		{"add without a token", "PUT", "http://" + admin + "/api/services/www/servers/127.0.0.1:9", nil, 401},
		{"cross-origin drain with the token", "POST", drain, map[string]string{"Authorization": bearer, "Origin": "http://evil.example"}, 403},
		{"cross-site fetch with the token", "POST", drain, map[string]string{"Authorization": bearer, "Sec-Fetch-Site": "cross-site"}, 403},
		{"same-site (another local port) with the token", "POST", drain, map[string]string{"Authorization": bearer, "Sec-Fetch-Site": "same-site"}, 403},
		{"foreign Host read (DNS rebinding)", "GET", "http://" + admin + "/api/services", map[string]string{"Host": "evil.example"}, 421},
		{"foreign Host with port", "GET", "http://" + admin + "/metrics", map[string]string{"Host": "evil.example:7500"}, 421},
		{"foreign Host drain with the token", "POST", drain, map[string]string{"Authorization": bearer, "Host": "evil.example"}, 421},
		{"read on loopback without a token", "GET", "http://" + admin + "/api/services", nil, 200},
		{"read as localhost", "GET", "http://" + admin + "/api/services", map[string]string{"Host": "localhost:7500"}, 200},
		{"drain with the token", "POST", drain, map[string]string{"Authorization": bearer}, 204},
		{"same-origin drain with the token", "POST", drain, map[string]string{"Authorization": bearer, "Origin": "http://" + admin}, 204},
		{"enable with the token", "POST", enable, map[string]string{"Authorization": bearer}, 204},
	} {
		got, body := call(t, c.method, c.url, c.hdr)
		if got != c.want {
			t.Errorf("%s: %d %q, want %d", c.name, got, body, c.want)
		}
	}
	// The client says what to do about a 401.
	err = Client{Base: "http://" + admin, TokenFile: "/nonexistent/admin.token"}.SetServer(context.Background(), "www", be, "drain", 0)
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "--token-file") {
		t.Errorf("drain without a token: %v, want a 401 naming --token-file", err)
	}
	if err := (Client{Base: "http://" + admin, Token: tok}).SetServer(context.Background(), "www", be, "drain", 0); err != nil {
		t.Errorf("drain with the token: %v", err)
	}
}

// TestAdminTokenKept: a restart reuses the token (ctl keeps working); a
// token file others can read is refused.
func TestAdminTokenKept(t *testing.T) {
	p := filepath.Join(t.TempDir(), "admin.token")
	a, err := EnsureToken(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := EnsureToken(p)
	if err != nil || a != b {
		t.Fatalf("second start: %q %v, want the first token %q", b, err, a)
	}
	os.Chmod(p, 0o644)
	if _, err := EnsureToken(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable token: %v, want a refusal saying chmod 600", err)
	}
	if _, err := EnsureToken(filepath.Join(t.TempDir(), "no", "such", "dir", "admin.token")); err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Errorf("token in a missing directory: %v, want an error naming --token-file", err)
	}
}

func TestHostCheck(t *testing.T) {
	for h, want := range map[string]bool{
		"127.0.0.1:7500": true, "127.0.0.1": true, "[::1]:7500": true, "localhost:7500": true, "LOCALHOST": true,
		"10.1.2.3:7500": true, "": false, "evil.example": false, "evil.example:7500": false,
		"localhost.evil.example:7500": false, "127.0.0.1.nip.io:7500": false,
	} {
		if got := localHost(h); got != want {
			t.Errorf("Host %q: allowed %v, want %v", h, got, want)
		}
	}
}

// TestRuntimeAddRemove: ctl add/remove through the admin API change the
// running pool; traffic through the VIP follows.
func TestRuntimeAddRemove(t *testing.T) {
	a, b := backend(t, "a"), backend(t, "b")
	admin, vip, conf := runDirector(t, a)
	tok, err := LoadToken(DefaultTokenFile(conf))
	if err != nil {
		t.Fatal(err)
	}
	cl := Client{Base: "http://" + admin, Token: tok}
	ctx := context.Background()
	servers := func() map[string]int {
		st, err := cl.Services(ctx)
		if err != nil || len(st) != 1 {
			t.Fatalf("services: %v %v", st, err)
		}
		m := map[string]int{}
		for _, s := range st[0].Servers {
			m[s.Addr] = s.ConfigWeight
		}
		return m
	}
	seen := func(n int) map[string]int {
		m := map[string]int{}
		for range n {
			body, _, err := get(vip, "/")
			if err != nil {
				t.Fatalf("through the VIP: %v", err)
			}
			m[body]++
		}
		return m
	}
	if got := seen(4); got["a"] != 4 {
		t.Fatalf("before add: %v, want all on a", got)
	}
	if err := cl.AddServer(ctx, "www", b, 3); err != nil {
		t.Fatalf("add: %v", err)
	}
	if got := servers(); got[a] != 1 || got[b] != 3 {
		t.Fatalf("after add: %v, want %s weight 1 and %s weight 3", got, a, b)
	}
	if got := seen(4); got["a"] == 0 || got["b"] == 0 {
		t.Fatalf("after add: %v, want both servers", got)
	}
	for _, c := range []struct {
		name string
		err  error
		want int
	}{
		{"add twice", cl.AddServer(ctx, "www", b, 1), 400},
		{"add to a missing service", cl.AddServer(ctx, "nope", b, 1), 404},
		{"add a bad address", cl.AddServer(ctx, "www", "127.0.0.1", 1), 400},
		{"add a bad weight", cl.AddServer(ctx, "www", "127.0.0.1:9", 70000), 400},
		{"remove a missing server", cl.RemoveServer(ctx, "www", "127.0.0.1:9"), 404},
	} {
		var ae *APIError
		if !asAPIError(c.err, &ae) || ae.Status != c.want {
			t.Errorf("%s: %v, want status %d", c.name, c.err, c.want)
		}
	}
	if err := cl.RemoveServer(ctx, "www", a); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if got := servers(); len(got) != 1 || got[b] != 3 {
		t.Fatalf("after remove: %v, want only %s", got, b)
	}
	if got := seen(4); got["b"] != 4 {
		t.Fatalf("after remove: %v, want all on b", got)
	}
	// A reload of the file replaces run-time changes (documented).
	if err := os.WriteFile(conf, append(mustRead(t, conf), []byte("# touched\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload to bring back the file's pool", 15*time.Second, func() bool {
		got := servers()
		return len(got) == 1 && got[a] == 1
	})
}

func asAPIError(err error, target **APIError) bool {
	e, ok := err.(*APIError)
	if ok {
		*target = e
	}
	return ok
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRates: the rates are the counters' change over the last sample
// interval, per service and per server, and reach the admin API's JSON.
// The clock is the test's: no sleeping.
func TestRates(t *testing.T) {
	d := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer d.Close()
	be := backend(t, "a")
	cfg, err := config.Parse("test.conf", []byte(fmt.Sprintf("service www {\n vip %s\n check none\n server %s\n}\n", freeAddr(t, "tcp"), be)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	s := (*d.services.Load())["www"]
	r := s.reals[0]
	t0 := time.Unix(1000, 0)
	d.rates.sample(d, t0)
	if got := d.Status()[0].Rate; got != (Rate{}) {
		t.Errorf("after one sample: %+v, want zero (no interval yet)", got)
	}
	s.newConns.Add(10)
	r.conns.Add(10)
	r.bytesIn.Add(4000)
	r.bytesOut.Add(1 << 20)
	r.packets.Add(30)
	d.rates.sample(d, t0.Add(2*time.Second))
	want := Rate{CPS: 5, InBPS: 2000, OutBPS: 1 << 19, InPPS: 15}
	st := d.Status()[0]
	if st.Rate != want || st.Servers[0].Rate != want {
		t.Errorf("rates: service %+v, server %+v, want %+v", st.Rate, st.Servers[0].Rate, want)
	}
	// Quiet interval: back to zero.
	d.rates.sample(d, t0.Add(4*time.Second))
	if got := d.Status()[0].Rate; got != (Rate{}) {
		t.Errorf("quiet interval: %+v, want zero", got)
	}
	// And in the admin API's JSON.
	r.conns.Add(3)
	s.newConns.Add(3)
	d.rates.sample(d, t0.Add(5*time.Second))
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/services")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw []map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	if rt, _ := raw[0]["rate"].(map[string]any); rt["conns_per_sec"] != 3.0 {
		t.Errorf("JSON rate: %v, want conns_per_sec 3", raw[0]["rate"])
	}
}

// TestConnsAPI: GET /api/conns answers the director's connection table as
// a JSON list (empty, not null, with no connections).
func TestConnsAPI(t *testing.T) {
	admin, _, _ := runDirector(t, backend(t, "a"))
	code, body := call(t, "GET", "http://"+admin+"/api/conns", nil)
	if code != 200 || strings.TrimSpace(body) != "[]" && !strings.HasPrefix(body, "[{") {
		t.Fatalf("GET /api/conns: %d %q, want a JSON list", code, body)
	}
	if _, err := (Client{Base: "http://" + admin}).Conns(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestGuardClosedReads: off loopback (openReads false) reads need the
// token too; /healthz stays open for probes.
func TestGuardClosedReads(t *testing.T) {
	d := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer d.Close()
	tok := strings.Repeat("c", 64)
	srv := httptest.NewServer(Guard(tok, false, d.Handler()))
	defer srv.Close()
	for _, c := range []struct {
		path string
		hdr  map[string]string
		want int
	}{
		{"/api/services", nil, 401},
		{"/metrics", nil, 401},
		{"/debug/pprof/", nil, 401},
		{"/healthz", nil, 200},
		{"/api/services", map[string]string{"Authorization": "Bearer " + tok}, 200},
	} {
		if got, body := call(t, "GET", srv.URL+c.path, c.hdr); got != c.want {
			t.Errorf("GET %s %v: %d %q, want %d", c.path, c.hdr, got, body, c.want)
		}
	}
}

// TestGuardDebugNeedsToken: the Go profiles want the token even on
// loopback, where other reads are open; the Bearer scheme is matched
// whatever its case (RFC 9110 11.1). Before the fix /debug/pprof/ was open
// on loopback and "bearer TOKEN" was refused.
func TestGuardDebugNeedsToken(t *testing.T) {
	d := New(quiet)
	defer d.Close()
	tok := strings.Repeat("d", 64)
	srv := httptest.NewServer(Guard(tok, true, d.Handler()))
	defer srv.Close()
	for _, c := range []struct {
		path string
		hdr  map[string]string
		want int
	}{
		{"/debug/pprof/", nil, 401},
		{"/debug/pprof/goroutine?debug=1", nil, 401},
		{"/debug/pprof/", map[string]string{"Authorization": "Bearer " + tok}, 200},
		{"/api/services", nil, 200},
		{"/api/services", map[string]string{"Authorization": "bearer " + tok}, 200},
		{"/debug/pprof/", map[string]string{"Authorization": "bearer " + tok}, 200},
		{"/debug/pprof/", map[string]string{"Authorization": "BEARER " + tok}, 200},
		{"/debug/pprof/", map[string]string{"Authorization": "Bearer " + strings.ToUpper(tok)}, 401},
		{"/debug/pprof/", map[string]string{"Authorization": "Basic " + tok}, 401},
	} {
		if got, body := call(t, "GET", srv.URL+c.path, c.hdr); got != c.want {
			t.Errorf("GET %s %v: %d %.60q, want %d", c.path, c.hdr, got, body, c.want)
		}
	}
	// A mutating call with a lower-case scheme goes through too.
	d.Apply(mustParse(t, fmt.Sprintf("service s {\n vip %s\n check none\n server 127.0.0.1:9\n}\n", freeAddr(t, "tcp"))))
	if got, body := call(t, "POST", srv.URL+"/api/services/s/servers/127.0.0.1:9?action=drain", map[string]string{"Authorization": "bearer " + tok}); got != 204 {
		t.Errorf("drain with \"bearer TOKEN\": %d %q, want 204", got, body)
	}
}

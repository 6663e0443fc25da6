package mgmt

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/prometheus/client_golang/prometheus"
)

// sourceClient is an HTTP client of ts whose connections come from the
// local address src (any 127/8 address is this machine's), as a client
// on another host would.
func sourceClient(t *testing.T, caPEM []byte, src string) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("station CA: no certificate")
	}
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, DialContext: d.DialContext, MaxIdleConnsPerHost: 64}}
}

// postLogin sends one login and returns its status and Retry-After.
func postLogin(c *http.Client, url, user, pw string) (int, string, error) {
	b, _ := json.Marshal(api.LoginRequest{User: user, Password: pw})
	resp, err := c.Post(url+api.RouteLogin, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, "", err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}

// A flood of bad logins from many addresses does not starve the API: an
// authenticated call's p99 stays under 100 ms (floodP99Ms) while 500 bad
// logins run at once (three times over), and the flood is told 429 with a
// Retry-After (the product's bcrypt cost: password checks are bounded,
// not cheapened). The flood comes from another process, as an attacker's
// would: its own TLS and goroutines are not the station's.
func TestLoginFloodKeepsAPIResponsive(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.126.1", t.TempDir()))
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, accountsYAML)
	login(t, ts, "rob")
	ctx := ctxT(t)
	// The same calls without a flood, for the log: the machine's own
	// noise.
	var base []time.Duration
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		t0 := time.Now()
		if err := admin.Do(ctx, "GET", api.RouteConfig, nil, nil); err != nil {
			t.Fatal(err)
		}
		base = append(base, time.Since(t0))
	}
	slices.Sort(base)
	t.Logf("without a flood: %d calls, p50 %v p99 %v", len(base), base[len(base)/2], base[len(base)*99/100])

	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ts.s.CA(), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLoginFloodChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envFloodURL+"="+ts.url, envFloodCA+"="+caFile)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	// The child opens its 500 connections first, then says READY and
	// floods: the measurement covers the logins, not the handshakes.
	for sc.Scan() && sc.Text() != "READY" {
	}
	var lats []time.Duration
	stop := make(chan struct{})
	latDone := make(chan struct{})
	go func() {
		defer close(latDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			if err := admin.Do(ctx, "GET", api.RouteConfig, nil, nil); err != nil {
				t.Errorf("authenticated call during the flood: %v", err)
				return
			}
			lats = append(lats, time.Since(t0))
			time.Sleep(5 * time.Millisecond)
		}
	}()
	var res floodResult
	for sc.Scan() {
		if r, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
			json.Unmarshal([]byte(r), &res)
		}
	}
	close(stop)
	<-latDone
	if err := cmd.Wait(); err != nil {
		t.Fatalf("flood process: %v", err)
	}
	slices.Sort(lats)
	if len(lats) < 20 {
		t.Fatalf("only %d authenticated calls measured", len(lats))
	}
	p99 := lats[len(lats)*99/100]
	t.Logf("flood answers %v in %v; %d authenticated calls, p50 %v p99 %v max %v", res.Codes, res.Took, len(lats), lats[len(lats)/2], p99, lats[len(lats)-1])
	if p99 > floodP99Ms*time.Millisecond {
		t.Errorf("authenticated call p99 %v during 500 parallel bad logins, want < %d ms", p99, floodP99Ms)
	}
	if res.Codes[http.StatusTooManyRequests] == 0 {
		t.Errorf("no 429 in the flood: %v", res.Codes)
	}
	if res.NoRetry > 0 {
		t.Errorf("%d answers 429 without Retry-After", res.NoRetry)
	}
	if res.Codes[-1] > 0 || res.Codes[http.StatusInternalServerError] > 0 || res.Codes[http.StatusUnauthorized] == 0 {
		t.Errorf("flood: transport errors, 500s, or no password checked at all: %v", res.Codes)
	}
}

const (
	envFloodURL = "CORRAL_TEST_FLOOD_URL" // the station TestLoginFloodChild floods
	envFloodCA  = "CORRAL_TEST_FLOOD_CA"  // its CA file
)

// floodResult is what the flood process reports.
type floodResult struct {
	Codes   map[int]int   // answers by status; -1: transport errors
	NoRetry int           // 429s without Retry-After
	Took    time.Duration // the flood, from READY
}

// TestLoginFloodChild is the attacker of TestLoginFloodKeepsAPIResponsive,
// run as a child process; on its own it has nothing to do.
func TestLoginFloodChild(t *testing.T) {
	url := os.Getenv(envFloodURL)
	if url == "" {
		t.Skip("the flood process of TestLoginFloodKeepsAPIResponsive")
	}
	ca, err := os.ReadFile(os.Getenv(envFloodCA))
	if err != nil {
		t.Fatal(err)
	}
	const flood, rounds = 500, 3
	// One client (one connection) per login, from 50 addresses.
	clients := make([]*http.Client, flood)
	for i := range clients {
		clients[i] = sourceClient(t, ca, fmt.Sprintf("127.0.127.%d", i%50+1))
	}
	var warm sync.WaitGroup
	gate := make(chan struct{}, 20)
	for i := range clients {
		warm.Add(1)
		go func() {
			defer warm.Done()
			gate <- struct{}{}
			defer func() { <-gate }()
			resp, err := clients[i].Get(url + api.RouteHealthz)
			if err != nil {
				t.Errorf("warm-up: %v", err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	warm.Wait()
	fmt.Println("READY")
	res := floodResult{Codes: map[int]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each tries again after a while, as a client told 429 that
			// does not give up would.
			for round := 0; round < rounds; round++ {
				user := "rob"
				if i%2 == 1 {
					user = fmt.Sprintf("junk-%d-%d", i, round)
				}
				code, ra, err := postLogin(clients[i], url, user, "wrong-password")
				mu.Lock()
				if err != nil {
					res.Codes[-1]++
				} else {
					res.Codes[code]++
					if code == http.StatusTooManyRequests && ra == "" {
						res.NoRetry++
					}
				}
				mu.Unlock()
				time.Sleep(300 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	res.Took = time.Since(t0)
	b, _ := json.Marshal(res)
	fmt.Printf("RESULT %s\n", b)
}

// Deleting a user revokes every one of their tokens, not the first 99.
func TestDeleteUserRevokesAllTokens(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.126.2", t.TempDir()))
	ctx := ctxT(t)
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, accountsYAML)
	const n = 250
	var ids []string
	for i := 0; i < n; i++ {
		tok := mkToken(t, ts, api.TokenRequest{User: "rob"})
		ids = append(ids, tok.ID)
	}
	keep := mkToken(t, ts, api.TokenRequest{User: "ann"})
	if err := admin.Do(ctx, "DELETE", api.RouteUser+"rob", nil, nil); err != nil {
		t.Fatalf("delete rob: %v", err)
	}
	var toks []api.Token
	if err := admin.Do(ctx, "GET", api.RouteTokens, nil, &toks); err != nil {
		t.Fatal(err)
	}
	live := 0
	for _, tk := range toks {
		if tk.User == "rob" && !tk.Revoked {
			live++
		}
		if tk.ID == keep.ID && tk.Revoked {
			t.Errorf("ann's token revoked by deleting rob")
		}
	}
	if live > 0 {
		t.Errorf("%d of rob's %d tokens still live after deleting rob", live, n)
	}
	// Once only: the audit log has one user-delete entry.
	a, err := ts.s.auditLog(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) == 0 || a[0].Action != "user-delete" || !strings.Contains(a[0].Detail, "rob") {
		t.Errorf("audit log's newest entry: %+v, want user-delete rob", a[:min(1, len(a))])
	}
	// Nothing left: a second delete finds nothing.
	if err := admin.Do(ctx, "DELETE", api.RouteUser+"rob", nil, nil); status(err) != 404 {
		t.Errorf("second delete of rob: want 404, got %v", err)
	}
}

// etcdRanges is how many range (read) requests the etcd members of this
// process have served.
func etcdRanges(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "etcd_mvcc_range_total" {
			sum := 0.0
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	t.Fatal("no etcd_mvcc_range_total metric")
	return 0
}

// The unauthenticated /healthz is cached (1000 calls cost a few etcd
// reads, not 1000) and terse (an unhealthy answer names no address);
// the reason goes to the station's log.
func TestHealthzCachedAndTerse(t *testing.T) {
	opt := stationOpts("127.0.126.3", t.TempDir())
	ts := startStation(t, opt)
	hc := sourceClient(t, ts.s.CA(), "127.0.126.3")
	get := func(token string) (int, string) {
		req, _ := http.NewRequest("GET", ts.url+api.RouteHealthz, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(""); code != 200 || body != "ok\n" {
		t.Fatalf("healthy station: %d %q", code, body)
	}
	before := etcdRanges(t)
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < 10; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if code, _ := get(""); code != 200 {
					t.Errorf("healthz: %d", code)
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0)
	reads := etcdRanges(t) - before
	t.Logf("1000 /healthz in %v: %v etcd reads", el, reads)
	// At most one check a second, and the station's own background
	// reads (member watch, feedback) besides.
	if limit := 2*el.Seconds() + 10; reads > limit {
		t.Errorf("1000 /healthz calls in %v cost %v etcd reads, want at most %.0f", el, reads, limit)
	}

	// Unhealthy: etcd is stopped. The reason (it names the etcd
	// endpoint) is not for whoever asks.
	ts.s.closeEtcd()
	var code int
	var body string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if code, body = get(""); code != 200 {
			break
		}
	}
	if code != http.StatusServiceUnavailable {
		t.Fatalf("with etcd stopped: %d %q, want 503", code, body)
	}
	if strings.Contains(body, "127.0.") || strings.Contains(body, ":7601") || strings.Contains(body, "etcd") {
		t.Errorf("unauthenticated unhealthy answer names internals: %q", body)
	}
	if len(body) > 64 {
		t.Errorf("unauthenticated unhealthy answer is %d bytes: %q", len(body), body)
	}
}

// loginAs is one login through the station's login path from src, with
// the compare counted.
func loginAs(ts *tstation, user, pw, src string) error {
	_, err := ts.s.login(context.Background(), api.LoginRequest{User: user, Password: pw}, src)
	return err
}

// Repeated failures lock a user out: further guesses are refused with
// 429 and a Retry-After before any bcrypt compare, even the right
// password, and the lockout is in the audit log.
func TestLoginLockoutAudited(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.126.4", t.TempDir()))
	ctx := ctxT(t)
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, accountsYAML)
	login(t, ts, "rob")
	var calls atomic.Int32
	orig := comparePassword
	comparePassword = func(h, p []byte) error { calls.Add(1); return orig(h, p) }
	t.Cleanup(func() { comparePassword = orig })

	c := sourceClient(t, ts.s.CA(), "127.0.126.4")
	for i := 0; i < loginUserFree+1; i++ {
		code, _, err := postLogin(c, ts.url, "rob", "wrong-password")
		if err != nil || code != http.StatusUnauthorized {
			t.Fatalf("bad login %d: %d %v, want 401", i+1, code, err)
		}
	}
	before := calls.Load()
	for _, pw := range []string{"wrong-password", "pw-rob-123"} {
		code, ra, err := postLogin(c, ts.url, "rob", pw)
		if err != nil || code != http.StatusTooManyRequests || ra == "" {
			t.Errorf("login while locked out: %d Retry-After %q %v, want 429 with Retry-After", code, ra, err)
		}
	}
	if n := calls.Load() - before; n != 0 {
		t.Errorf("%d bcrypt compares while locked out, want 0", n)
	}
	a, err := ts.s.auditLog(ctx, 20)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range a {
		if e.Action == "login-lockout" && strings.Contains(e.Detail, `user "rob"`) && strings.Contains(e.User, "127.0.126.4") {
			found = true
		}
	}
	if !found {
		t.Errorf("no login-lockout entry for rob in the audit log: %+v", a)
	}
	// Another user is not affected.
	if _, _, err := postLogin(c, ts.url, "ann", "wrong-password"); err != nil {
		t.Fatal(err)
	}
}

// 10,001 junk names, from as many sources, do not reset the failure
// count of a real user: the next failure still locks them out.
func TestLoginJunkNamesKeepUserCount(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.126.5", t.TempDir()))
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, accountsYAML)
	login(t, ts, "rob")
	orig := comparePassword
	// A cheap compare: the guard's bookkeeping is what is tested here.
	comparePassword = func(h, p []byte) error {
		if string(p) == "pw-rob-123" {
			return orig(h, p)
		}
		return errors.New("mismatch")
	}
	t.Cleanup(func() { comparePassword = orig })
	for i := 0; i < loginUserFree-1; i++ {
		if err := loginAs(ts, "rob", "wrong", "192.0.2.1"); status2(err) != 401 {
			t.Fatalf("rob's bad login %d: %v", i+1, err)
		}
	}
	for i := 0; i <= 10001; i++ {
		if err := loginAs(ts, fmt.Sprintf("junk-%d", i), "wrong", fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)); status2(err) != 401 {
			t.Fatalf("junk login %d: %v", i, err)
		}
	}
	u, n, src := ts.s.logins.sizes()
	if n > loginTableMax || src > loginTableMax {
		t.Errorf("failure tables hold %d names and %d sources, want at most %d each", n, src, loginTableMax)
	}
	if u != 1 {
		t.Errorf("users table holds %d entries, want 1 (rob)", u)
	}
	// rob's last free failure, then the lockout.
	if err := loginAs(ts, "rob", "wrong", "192.0.2.2"); status2(err) != 401 {
		t.Fatalf("rob's bad login %d: %v", loginUserFree, err)
	}
	if err := loginAs(ts, "rob", "wrong", "192.0.2.3"); status2(err) != 401 {
		t.Fatalf("rob's bad login %d: %v", loginUserFree+1, err)
	}
	if err := loginAs(ts, "rob", "pw-rob-123", "192.0.2.4"); status2(err) != 429 {
		t.Errorf("rob after %d failures and a flood of junk names: %v, want 429 (locked out)", loginUserFree+1, err)
	}
}

// status2 is the HTTP status the station answers err with.
func status2(err error) int {
	var tm *tooManyError
	var ae *authError
	switch {
	case err == nil:
		return 200
	case errors.As(err, &tm):
		return 429
	case errors.As(err, &ae):
		return 401
	}
	return 500
}

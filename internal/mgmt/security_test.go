package mgmt

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// Two (or more) joins at once with one single-use token: exactly one
// wins, the others are told the token is used, and only one credential
// exists.
func TestJoinSingleUseRace(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.10", t.TempDir()))
	ctx := ctxT(t)
	for round := 0; round < 3; round++ {
		once := mkToken(t, ts, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour, SingleUse: true})
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				var jr api.JoinReply
				errs[i] = ts.client(t, once.Secret).Do(ctx, "POST", api.RouteJoin,
					api.JoinRequest{Role: api.RoleNode, Name: "race" + itoa(int64(round*n+i))}, &jr)
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case status(err) == 401 && strings.Contains(err.Error(), "token already used"):
			default:
				t.Errorf("round %d join %d: want ok or 401 token already used, got %v", round, i, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d joins won with one single-use token, want 1", round, won)
		}
	}
	var toks []api.Token
	if err := ts.client(t, ts.admin).Do(ctx, "GET", api.RouteTokens, nil, &toks); err != nil {
		t.Fatal(err)
	}
	creds := 0
	for _, tk := range toks {
		if strings.HasPrefix(tk.User, "race") {
			creds++
		}
	}
	if creds != 3 {
		t.Fatalf("%d member credentials after 3 single-use tokens, want 3", creds)
	}
}

// Every route that changes something refuses a member credential, a
// read-only user and a webmaster; member routes refuse users; a join
// token is good for nothing but join.
func TestRoutePermissions(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.11", t.TempDir()))
	ctx := ctxT(t)
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, accountsYAML)
	mem := join(t, ts, api.RoleDirector, "d1")
	joinTok := mkToken(t, ts, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour})
	who := map[string]string{
		"member":    mem.Credential,
		"read-only": login(t, ts, "rob"),
		"webmaster": login(t, ts, "alice"),
	}
	adminRoutes := []struct{ method, path string }{
		{"PUT", api.RouteConfig}, {"POST", api.RouteRollback}, {"POST", api.RouteTx},
		{"GET", api.RouteBackup}, {"POST", api.RouteUsers}, {"DELETE", api.RouteUser + "rob"},
		{"GET", api.RouteTokens}, {"POST", api.RouteTokens}, {"DELETE", api.RouteToken + "abc"},
		{"POST", api.RouteDrain},
	}
	for name, tok := range who {
		for _, r := range adminRoutes {
			err := ts.client(t, tok).Do(ctx, r.method, r.path, map[string]any{}, nil)
			if status(err) != http.StatusForbidden {
				t.Errorf("%s %s %s: want 403, got %v", name, r.method, r.path, err)
			}
		}
	}
	for _, name := range []string{"read-only", "webmaster"} {
		for _, r := range []struct{ method, path string }{{"GET", api.RouteDesired}, {"POST", api.RouteReport}} {
			err := ts.client(t, who[name]).Do(ctx, r.method, r.path, api.MemberStatus{Name: "d1"}, nil)
			if status(err) != http.StatusForbidden {
				t.Errorf("%s %s %s: want 403, got %v", name, r.method, r.path, err)
			}
		}
	}
	for _, r := range append(adminRoutes, struct{ method, path string }{"GET", api.RouteConfig}, struct{ method, path string }{"GET", api.RouteDesired}) {
		err := ts.client(t, joinTok.Secret).Do(ctx, r.method, r.path, map[string]any{}, nil)
		if status(err) != http.StatusUnauthorized {
			t.Errorf("join token on %s %s: want 401, got %v", r.method, r.path, err)
		}
	}
}

// The embedded etcd logs at warn only what is worth a warning: not every
// request (etcd's embed config leaves the slow-request threshold at 0, so
// each member report and long poll would add a line to DATA/etcd.log
// forever).
func TestEtcdLogQuiet(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.12", t.TempDir()))
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, "x: 1\n")
	for range 20 {
		if err := admin.Do(ctxT(t), "GET", api.RouteConfig, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(ts.dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"request stats"`); n > 0 {
		t.Fatalf("etcd.log has %d \"request stats\" warnings after 21 fast requests:\n%s", n, lastLines(string(b), 3))
	}
}

// A second station on a data directory in use fails at once, saying so,
// instead of waiting forever on etcd's database lock.
func TestDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	startStation(t, stationOpts("127.0.61.13", dir))
	opt := stationOpts("127.0.61.14", dir)
	done := make(chan error, 1)
	go func() {
		s, err := New(opt)
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), dir) {
			t.Fatalf("second station on %s: want an error naming the directory in use, got %v", dir, err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a second station on a data directory in use still starting after 15 s")
	}
}

// Secret files are 0600 even where a stale temporary file with another
// mode lies, and two writers at once leave one whole file.
func TestWriteFile0600(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "secret")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp", []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFile0600(path, []byte("s3cret")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: mode %v (%v), want 0600", path, st.Mode().Perm(), err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := writeFile0600(path, []byte(strings.Repeat(string(rune('a'+i)), 1<<16))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	b, _ := os.ReadFile(path)
	if len(b) != 1<<16 || strings.Count(string(b), string(b[:1])) != len(b) {
		t.Fatalf("after 8 concurrent writes: %d bytes, mixed content", len(b))
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range ents {
		if e.Name() != "secret" && e.Name() != "secret.tmp" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// A join token of one role cannot take the name of a member of another
// role: that would revoke, say, a director's credential with a node's
// join token.
func TestJoinCannotTakeAnotherRolesName(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.15", t.TempDir()))
	ctx := ctxT(t)
	d := join(t, ts, api.RoleDirector, "lb1")
	tok := mkToken(t, ts, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour})
	err := ts.client(t, tok.Secret).Do(ctx, "POST", api.RouteJoin, api.JoinRequest{Role: api.RoleNode, Name: "lb1"}, nil)
	if status(err) != http.StatusConflict || !strings.Contains(err.Error(), "director") {
		t.Fatalf("node joining as director lb1's name: want 409 naming the director, got %v", err)
	}
	if err := ts.client(t, d.Credential).Do(ctx, "GET", api.RouteDesired, nil, nil); err != nil {
		t.Fatalf("director's credential after a node tried its name: %v", err)
	}
	// The same role replaces (a replaced machine), as before.
	join(t, ts, api.RoleDirector, "lb1")
	if err := ts.client(t, d.Credential).Do(ctx, "GET", api.RouteDesired, nil, nil); status(err) != 401 {
		t.Fatalf("old director credential after a director rejoined: %v", err)
	}
}

// An open event stream ends once its token is revoked (here: its user
// deleted), rather than showing the cluster live for ever.
func TestEventStreamEndsWhenRevoked(t *testing.T) {
	old := dashRecheck
	dashRecheck = 100 * time.Millisecond
	t.Cleanup(func() { dashRecheck = old })
	ts := startStation(t, stationOpts("127.0.61.16", t.TempDir()))
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, accountsYAML)
	tok := login(t, ts, "rob")

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ts.s.CA())
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.url+api.RouteEvents, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := hc.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("events: %v %v", resp, err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if l, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(l, "retry:") {
		t.Fatalf("first line %q %v", l, err)
	}
	if err := admin.Do(ctxT(t), "DELETE", api.RouteUser+"rob", nil, nil); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	sawError := false
	for {
		l, err := br.ReadString('\n')
		if strings.HasPrefix(l, "event: error") {
			sawError = true
		}
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("stream still open %v after the token was revoked", time.Since(revoked))
			}
			break
		}
	}
	if !sawError {
		t.Error("the stream ended without an error frame saying why")
	}
}

// A login as someone not in the accounts costs a bcrypt compare like a
// wrong password does, so timing does not tell which users exist.
func TestLoginUnknownUserComparesToo(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.17", t.TempDir()))
	mustApply(t, ts.client(t, ts.admin), 0, accountsYAML)
	var calls atomic.Int32
	orig := comparePassword
	comparePassword = func(h, p []byte) error { calls.Add(1); return orig(h, p) }
	t.Cleanup(func() { comparePassword = orig })
	for _, user := range []string{"rob", "nobody-here"} {
		calls.Store(0)
		err := ts.client(t, "").Do(ctxT(t), "POST", api.RouteLogin, api.LoginRequest{User: user, Password: "wrong-password"}, nil)
		if status(err) != 401 || calls.Load() != 1 {
			t.Errorf("login as %s with a wrong password: %v, %d bcrypt compares (want 401, 1)", user, err, calls.Load())
		}
	}
}

// Expired API and join tokens are deleted (a day later in production);
// member credentials, the bootstrap token and live tokens stay.
func TestPruneTokens(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.18", t.TempDir()))
	ctx := ctxT(t)
	mustApply(t, ts.client(t, ts.admin), 0, accountsYAML)
	mem := join(t, ts, api.RoleNode, "n1") // its join token lives an hour
	short := mkToken(t, ts, api.TokenRequest{Role: api.RoleNode, TTL: time.Millisecond})
	shortAPI := mkToken(t, ts, api.TokenRequest{Role: api.RoleReadOnly, User: "rob", TTL: time.Millisecond})
	live := mkToken(t, ts, api.TokenRequest{Role: api.RoleReadOnly, User: "rob", TTL: time.Hour})
	time.Sleep(10 * time.Millisecond)
	n, err := ts.s.pruneTokens(ctx, time.Now())
	if err != nil || n != 2 {
		t.Fatalf("pruned %d (%v), want the 2 expired", n, err)
	}
	var toks []api.Token
	if err := ts.client(t, ts.admin).Do(ctx, "GET", api.RouteTokens, nil, &toks); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, tk := range toks {
		ids[tk.ID] = true
	}
	if ids[short.ID] || ids[shortAPI.ID] || !ids[live.ID] || !ids[strings.Split(mem.Credential, ".")[0]] || !ids[strings.Split(ts.admin, ".")[0]] {
		t.Fatalf("after pruning: %v", ids)
	}
	if err := ts.client(t, mem.Credential).Do(ctx, "GET", api.RouteDesired, nil, nil); err != nil {
		t.Fatalf("member credential after pruning: %v", err)
	}
}

// One member's long polls are bounded: the fifth at once gets 429, and
// once they end the member may wait again.
func TestLongPollsPerMemberBounded(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.19", t.TempDir()))
	mustApply(t, ts.client(t, ts.admin), 0, "x: 1\n")
	mem := join(t, ts, api.RoleNode, "n1")
	mc := ts.client(t, mem.Credential)
	var d api.Desired
	if err := mc.Do(ctxT(t), "GET", api.RouteDesired, nil, &d); err != nil {
		t.Fatal(err)
	}
	path := api.RouteDesired + "?after=" + itoa(d.Rev) + "&wait=20s"
	ctx, cancel := context.WithCancel(ctxT(t))
	var wg sync.WaitGroup
	for range maxWaitsPerMember {
		wg.Add(1)
		go func() { defer wg.Done(); mc.Do(ctx, "GET", path, nil, nil) }()
	}
	waitFor(t, "the polls waiting", func() bool {
		ts.s.waitMu.Lock()
		defer ts.s.waitMu.Unlock()
		return ts.s.waits["n1"] == maxWaitsPerMember
	})
	err := mc.Do(ctxT(t), "GET", path, nil, nil)
	if status(err) != http.StatusTooManyRequests {
		t.Errorf("poll %d: want 429, got %v", maxWaitsPerMember+1, err)
	}
	// A poll without wait is still answered.
	if err := mc.Do(ctxT(t), "GET", api.RouteDesired, nil, nil); err != nil {
		t.Errorf("desired without wait while polls wait: %v", err)
	}
	cancel()
	wg.Wait()
	waitFor(t, "the polls gone", func() bool {
		ts.s.waitMu.Lock()
		defer ts.s.waitMu.Unlock()
		return len(ts.s.waits) == 0
	})
	if err := mc.Do(ctxT(t), "GET", api.RouteDesired+"?after="+itoa(d.Rev-1)+"&wait=5s", nil, nil); err != nil {
		t.Errorf("poll after the others ended: %v", err)
	}
}

// A join's address is bounded: it lands in the audit log and in the events
// every dashboard is sent each second.
func TestJoinAddrBounded(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.20", t.TempDir()))
	tok := mkToken(t, ts, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour})
	for _, addr := range []string{strings.Repeat("a", 512<<10), "10.0.0.1:80\n[fake] admin did it"} {
		err := ts.client(t, tok.Secret).Do(ctxT(t), "POST", api.RouteJoin, api.JoinRequest{Role: api.RoleNode, Name: "n1", Addr: addr}, nil)
		if status(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "bad address") {
			t.Errorf("join with address %.30q: want 400 bad address, got %.200v", addr, err)
		}
	}
	if err := ts.client(t, tok.Secret).Do(ctxT(t), "POST", api.RouteJoin, api.JoinRequest{Role: api.RoleNode, Name: "n1", Addr: "[::1]:8080"}, nil); err != nil {
		t.Fatal(err)
	}
}

// A backup streams etcd's snapshot through a temporary file it removes;
// a snapshot over the limit is an error, not a silently cut section.
func TestBackupSnapshotLimit(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.21", t.TempDir()))
	ctx := ctxT(t)
	mustApply(t, ts.client(t, ts.admin), 0, "x: 1\n")
	var buf bytes.Buffer
	if err := ts.s.Backup(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	c, err := parseBackup(buf.Bytes())
	if err != nil || len(c.snapshot) == 0 {
		t.Fatalf("backup: %v (snapshot %d bytes)", err, len(c.snapshot))
	}
	old := maxSnapshot
	maxSnapshot = int64(len(c.snapshot) / 2)
	t.Cleanup(func() { maxSnapshot = old })
	buf.Reset()
	if err := ts.s.Backup(ctx, &buf); err == nil || !strings.Contains(err.Error(), "snapshot over") {
		t.Fatalf("backup with a snapshot over the limit: %v (%d bytes written)", err, buf.Len())
	}
	ents, _ := os.ReadDir(ts.dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), "snapshot") {
			t.Errorf("left behind in the data directory: %s", e.Name())
		}
	}
}

// A JSON body is one value: trailing junk is refused, not ignored.
func TestBodyTrailingJunk(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.22", t.TempDir()))
	for _, body := range []string{`{"base":0,"yaml":"x: 1\n"} garbage`, `{"base":0,"yaml":"x: 1\n"}{"base":0}`} {
		req, _ := http.NewRequest("PUT", ts.url+api.RouteConfig, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+ts.admin)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ts.s.CA())
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("PUT %q: %s, want 400", body, resp.Status)
		}
	}
	var v api.Version
	if err := ts.client(t, ts.admin).Do(ctxT(t), "GET", api.RouteConfig, nil, &v); err != nil || v.Version != 0 {
		t.Fatalf("a refused body made version %d (%v)", v.Version, err)
	}
}

// Deleting a user who has nothing to delete, or a bad name, says so
// (it used to answer 204 and write "user-delete" to the audit log).
func TestDeleteUnknownUser(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.23", t.TempDir()))
	admin := ts.client(t, ts.admin)
	if err := admin.Do(ctxT(t), "DELETE", api.RouteUser+"nobody", nil, nil); status(err) != http.StatusNotFound {
		t.Errorf("delete unknown user: want 404, got %v", err)
	}
	if err := admin.Do(ctxT(t), "DELETE", api.RouteUser+"a%2Fb", nil, nil); status(err) != http.StatusBadRequest {
		t.Errorf("delete user a/b: want 400, got %v", err)
	}
	var audit []api.AuditEntry
	if err := admin.Do(ctxT(t), "GET", api.RouteAudit, nil, &audit); err != nil {
		t.Fatal(err)
	}
	for _, e := range audit {
		if e.Action == "user-delete" {
			t.Errorf("audit log has %+v for a delete that did nothing", e)
		}
	}
	mustApply(t, admin, 0, accountsYAML)
	login(t, ts, "rob")
	if err := admin.Do(ctxT(t), "DELETE", api.RouteUser+"rob", nil, nil); err != nil {
		t.Errorf("delete rob: %v", err)
	}
}

// The dashboard names every station registered, not only itself.
func TestDashShowsEveryStation(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.24", t.TempDir()))
	if _, err := ts.s.cli.Put(ctxT(t), keyStations+"other", "https://127.0.61.25:7600"); err != nil {
		t.Fatal(err)
	}
	var st dashStatus
	if err := ts.client(t, ts.admin).Do(ctxT(t), "GET", api.RouteStatus, nil, &st); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(st.Stations, ","); got != "127.0.61.25:7600,127.0.61.24:7600" && got != "127.0.61.24:7600,127.0.61.25:7600" {
		t.Fatalf("stations %q, want both", got)
	}
}

// Revoking a member's credential removes the member from the members list
// (a decommissioned machine used to show as down for ever); a rejoin keeps
// it.
func TestRevokeMemberForgetsIt(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.26", t.TempDir()))
	ctx := ctxT(t)
	admin := ts.client(t, ts.admin)
	report := func(jr api.JoinReply) {
		t.Helper()
		if err := ts.client(t, jr.Credential).Do(ctx, "POST", api.RouteReport, api.MemberStatus{Name: jr.Member, Healthy: true}, nil); err != nil {
			t.Fatal(err)
		}
	}
	members := func() string {
		var ms []api.MemberStatus
		if err := admin.Do(ctx, "GET", api.RouteMembers, nil, &ms); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range ms {
			names = append(names, m.Name)
		}
		return strings.Join(names, ",")
	}
	a, b := join(t, ts, api.RoleNode, "a"), join(t, ts, api.RoleNode, "b")
	report(a)
	report(b)
	report(join(t, ts, api.RoleNode, "b")) // a replaced machine
	if got := members(); got != "a,b" {
		t.Fatalf("members %q", got)
	}
	if err := admin.Do(ctx, "DELETE", api.RouteToken+strings.Split(a.Credential, ".")[0], nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := members(); got != "b" {
		t.Fatalf("members after revoking a's credential: %q, want b", got)
	}
	_ = b
}

// Revoking an old (already revoked) credential of a rejoined member leaves
// the member listed.
func TestRevokeOldCredentialKeepsMember(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.27", t.TempDir()))
	ctx := ctxT(t)
	admin := ts.client(t, ts.admin)
	old := join(t, ts, api.RoleNode, "b")
	cur := join(t, ts, api.RoleNode, "b")
	if err := ts.client(t, cur.Credential).Do(ctx, "POST", api.RouteReport, api.MemberStatus{Name: "b"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "DELETE", api.RouteToken+strings.Split(old.Credential, ".")[0], nil, nil); err != nil {
		t.Fatal(err)
	}
	var ms []api.MemberStatus
	if err := admin.Do(ctx, "GET", api.RouteMembers, nil, &ms); err != nil || len(ms) != 1 {
		t.Fatalf("members after revoking b's old credential: %+v %v", ms, err)
	}
}

// A station waiting for the other members of its etcd cluster stops when
// its context ends (Ctrl-C), instead of only after etcdStartTimeout.
func TestNewContextStops(t *testing.T) {
	opt := stationOpts("127.0.61.28", t.TempDir())
	opt.EtcdInitialCluster = opt.EtcdName + "=https://127.0.61.28:7602,other=https://127.0.61.29:7602"
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		s, err := NewContext(ctx, opt)
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "stopped") {
			t.Fatalf("NewContext cancelled: %v", err)
		}
		t.Logf("stopped after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(20 * time.Second):
		t.Fatal("NewContext still waiting 19 s after its context ended")
	}
}

// A station stopped on purpose leaves the stations list the others give
// out (join replies, the dashboard, SD).
func TestStoppedStationUnregisters(t *testing.T) {
	a := startStation(t, stationOpts("127.0.61.32", t.TempDir()))
	opt := stationOpts("127.0.61.33", t.TempDir())
	opt.Etcd = []string{"https://127.0.61.32:7601"}
	rootEtcdClient(t, a, &opt)
	b := startStation(t, opt)
	if got := a.s.stations(ctxT(t)); len(got) != 2 {
		t.Fatalf("stations with both up: %v", got)
	}
	b.stop()
	if got := a.s.stations(ctxT(t)); len(got) != 1 || got[0] != a.url {
		t.Fatalf("stations after b stopped: %v, want only %s", got, a.url)
	}
}

// A restore puts big keys back in transactions etcd accepts: four 12 MiB
// versions used to go in one transaction, over etcd's request limit, and
// the restore failed.
func TestRestoreBigVersions(t *testing.T) {
	dir := t.TempDir()
	var kvs []kvPair
	for v := int64(1); v <= 4; v++ {
		b, _ := json.Marshal(api.Version{Version: v, YAML: "# " + strings.Repeat(string(rune('a'+v)), 12<<20) + "\n"})
		kvs = append(kvs, kvPair{K: verKey(v), V: b})
	}
	b, _ := json.Marshal(kvs)
	kvs = nil
	if err := writeFile0600(filepath.Join(dir, restorePend), b); err != nil {
		t.Fatal(err)
	}
	b = nil
	s, err := New(stationOpts("127.0.61.34", dir))
	if err != nil {
		t.Fatalf("restore of four 12 MiB versions: %v", err)
	}
	defer s.Close()
	v, err := s.version(ctxT(t), 4)
	if err != nil || len(v.YAML) < 12<<20 {
		t.Fatalf("version 4 after the restore: %d bytes, %v", len(v.YAML), err)
	}
}

// With its own certificate and no --tls-ca, the station pins the last
// certificate of the chain: join tokens end in a 32-digit CA hash a member
// accepts (they used to end in "." and no member could join).
func TestOwnCertificateWithoutCA(t *testing.T) {
	work := t.TempDir()
	ca, _ := newCA()
	cp, kp, err := ca.serverCert("127.0.61.35")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(work, "chain.pem"), append(cp, ca.Cert...), 0o600)
	os.WriteFile(filepath.Join(work, "s.key"), kp, 0o600)
	opt := stationOpts("127.0.61.35", filepath.Join(work, "data"))
	opt.TLSCert, opt.TLSKey = filepath.Join(work, "chain.pem"), filepath.Join(work, "s.key")
	ts := startStation(t, opt)
	if CAHash(ts.s.CA()) != CAHash(ca.Cert) {
		t.Fatalf("station hands out CA %q, want the chain's CA", CAHash(ts.s.CA()))
	}
	tok := mkToken(t, ts, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour})
	if p := strings.Split(tok.Secret, "."); len(p) != 3 || p[2] != CAHash(ca.Cert) {
		t.Fatalf("join token %q: want ID.SECRET.CAHASH of the chain's CA", tok.Secret)
	}
	join(t, ts, api.RoleNode, "n1")
}

// ?limit=0 is the largest page, not the whole (ever growing) audit log.
func TestLimitParamBounded(t *testing.T) {
	for q, want := range map[string]int{"": 100, "limit=0": maxLimit, "limit=5": 5, "limit=99999999": maxLimit} {
		r, _ := http.NewRequest("GET", "/v1/audit?"+q, nil)
		if n, err := limitParam(r, 100); err != nil || n != want {
			t.Errorf("%q: %d %v, want %d", q, n, err, want)
		}
	}
}

// An account removed from the configuration and added again later does
// not get the old tokens nor the old password back.
func TestRemovedAccountStartsAfresh(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.36", t.TempDir()))
	ctx := ctxT(t)
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, accountsYAML)
	tok := login(t, ts, "rob")
	mustApply(t, admin, 1, "accounts:\n  - name: ann\n    role: admin\n")
	mustApply(t, admin, 2, accountsYAML)
	if err := ts.client(t, tok).Do(ctx, "GET", api.RouteConfig, nil, nil); status(err) != 401 {
		t.Errorf("rob's token from before his account was removed: want 401, got %v", err)
	}
	err := ts.client(t, "").Do(ctx, "POST", api.RouteLogin, api.LoginRequest{User: "rob", Password: "pw-rob-123"}, nil)
	if status(err) != 401 {
		t.Errorf("rob's old password after his account was removed and added again: want 401, got %v", err)
	}
	// ann stayed: her token and password work.
	ann := login(t, ts, "ann")
	mustApply(t, admin, 3, accountsYAML+"# again\n")
	if err := ts.client(t, ann).Do(ctx, "GET", api.RouteConfig, nil, nil); err != nil {
		t.Errorf("ann's token after a change that kept her: %v", err)
	}
}

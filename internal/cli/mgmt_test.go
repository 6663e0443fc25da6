package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// cfgStation is the least of the station's API these commands need,
// over TLS on 127.0.53.0/24; the real one is internal/mgmt's (see
// TestMgmtRealStation). It keeps versions in memory and checks the bearer.
type cfgStation struct {
	t      *testing.T
	srv    *httptest.Server
	caFile string // the server's self-signed certificate: its own CA
	caDER  []byte
	tokens map[string]bool // accepted bearers

	mu       sync.Mutex
	versions []api.Version // versions[i].Version == i+1
	users    map[string]api.UserRequest
	revoked  []string
	members  []api.MemberStatus
	backup   []byte
	failBack bool
}

func newCfgStation(t *testing.T, ip string) *cfgStation {
	t.Helper()
	f := &cfgStation{t: t, tokens: map[string]bool{"admintok": true}, users: map[string]api.UserRequest{},
		versions: []api.Version{{Version: 1, Author: "admin", Comment: "first", Time: time.Unix(1700000000, 0), YAML: "nodes:\n  - name: web1\n"}}}
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		lab.Need(t, lab.Err("listen on "+ip+" (loopback /8 not routed here?)", err))
	}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.srv.Listener.Close()
	f.srv.Listener = l
	cert, der := selfSigned(t, ip)
	f.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	f.caDER = der
	f.caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(f.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// selfSigned is a CA certificate that is also the server's, for ip.
func selfSigned(t *testing.T, ip string) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fake station CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP(ip)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, der
}

func (f *cfgStation) fail(w http.ResponseWriter, status int, body api.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}

func (f *cfgStation) reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (f *cfgStation) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path == api.RouteLogin {
		var in api.LoginRequest
		json.NewDecoder(r.Body).Decode(&in)
		if u, ok := f.users[in.User]; !ok || u.Password != in.Password {
			f.fail(w, 401, api.Error{Error: "bad user or password"})
			return
		}
		tok := "login-" + in.User
		f.tokens[tok] = true
		f.reply(w, api.LoginReply{Token: tok, Expires: time.Now().Add(time.Hour)})
		return
	}
	if !f.tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")] {
		f.fail(w, 401, api.Error{Error: "no or bad token"})
		return
	}
	cur := f.versions[len(f.versions)-1]
	diff := func(a, b string) string {
		// The real station diffs canonical YAML: comments go.
		a, b = stripComments(a), stripComments(b)
		if a == b {
			return ""
		}
		return "--- a\n+++ b\n@@ -1 +1 @@\n-" + strings.TrimSpace(a) + "\n+" + strings.TrimSpace(b) + "\n"
	}
	store := func(base int64, y, comment string, dry bool) {
		if base != -1 && base != cur.Version {
			f.fail(w, 409, api.Error{Error: "stale base version", Current: cur.Version})
			return
		}
		if strings.Contains(y, "bad:") {
			f.fail(w, 400, api.Error{Error: "invalid configuration", Errors: []api.FieldError{
				{Path: "services[0].vip", Line: 3, Msg: "not an IP address"}, {Path: "nodes[1].name", Line: 7, Msg: "duplicate name"}}})
			return
		}
		rep := api.ApplyReply{Version: cur.Version, Diff: diff(cur.YAML, y)}
		switch {
		case y == cur.YAML:
			rep.Unchanged = true
		case !dry:
			rep.Version = cur.Version + 1
			f.versions = append(f.versions, api.Version{Version: rep.Version, Parent: cur.Version, Author: "admin", Comment: comment, Time: time.Now(), YAML: y})
		}
		f.reply(w, rep)
	}
	p := r.URL.Path
	switch {
	case p == api.RouteConfig && r.Method == http.MethodGet:
		f.reply(w, cur)
	case p == api.RouteConfig && r.Method == http.MethodPut:
		var in api.ApplyRequest
		json.NewDecoder(r.Body).Decode(&in)
		store(in.Base, in.YAML, in.Comment, in.DryRun)
	case strings.HasPrefix(p, api.RouteVersion):
		n, _ := strconv.Atoi(strings.TrimPrefix(p, api.RouteVersion))
		if n < 1 || n > len(f.versions) {
			f.fail(w, 404, api.Error{Error: fmt.Sprintf("no version %d", n)})
			return
		}
		f.reply(w, f.versions[n-1])
	case p == api.RouteHistory:
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		var out []api.Version
		for i := len(f.versions) - 1; i >= 0 && len(out) < limit; i-- {
			v := f.versions[i]
			v.YAML = ""
			out = append(out, v)
		}
		f.reply(w, out)
	case p == api.RouteDiff && r.Method == http.MethodPost:
		var in api.ApplyRequest
		json.NewDecoder(r.Body).Decode(&in)
		f.reply(w, api.ApplyReply{Version: cur.Version, Diff: diff(cur.YAML, in.YAML)})
	case p == api.RouteDiff:
		a, _ := strconv.Atoi(r.URL.Query().Get("from"))
		b, _ := strconv.Atoi(r.URL.Query().Get("to"))
		f.reply(w, api.ApplyReply{Version: cur.Version, Diff: diff(f.versions[a-1].YAML, f.versions[b-1].YAML)})
	case p == api.RouteRollback:
		var in api.RollbackRequest
		json.NewDecoder(r.Body).Decode(&in)
		store(in.Base, f.versions[in.To-1].YAML, in.Comment, false)
	case p == api.RouteTx:
		var in api.TxRequest
		json.NewDecoder(r.Body).Decode(&in)
		y := cur.YAML
		for _, op := range in.Ops {
			y += fmt.Sprintf("# %s %s %s\n", op.Op, op.Kind, op.Name)
		}
		store(in.Base, y+fmt.Sprintf("ops: %d\n", len(in.Ops)), in.Comment, false)
	case p == api.RouteTokens && r.Method == http.MethodPost:
		var in api.TokenRequest
		json.NewDecoder(r.Body).Decode(&in)
		f.reply(w, api.Token{ID: "abc123", Secret: "s3cr3t", Role: in.Role, SingleUse: !in.MultiUse, Expires: time.Now().Add(in.TTL)})
	case p == api.RouteTokens:
		f.reply(w, []api.Token{{ID: "abc123", Role: "node", CreatedBy: "admin", Expires: time.Now().Add(time.Hour)},
			{ID: "old", Role: "iod", CreatedBy: "admin", Expires: time.Now().Add(-time.Hour)},
			{ID: "once", Role: "node", CreatedBy: "admin", Expires: time.Now().Add(time.Hour), SingleUse: true, Used: true},
			{ID: "boot", Role: "admin", User: "admin", CreatedBy: "station"}})
	case strings.HasPrefix(p, api.RouteToken) && r.Method == http.MethodDelete:
		f.revoked = append(f.revoked, strings.TrimPrefix(p, api.RouteToken))
	case p == api.RouteUsers && r.Method == http.MethodPost:
		var in api.UserRequest
		json.NewDecoder(r.Body).Decode(&in)
		f.users[in.Name] = in
	case p == api.RouteUsers:
		var out []api.User
		for _, u := range f.users {
			out = append(out, u.User)
		}
		f.reply(w, out)
	case strings.HasPrefix(p, api.RouteUser) && r.Method == http.MethodDelete:
		delete(f.users, strings.TrimPrefix(p, api.RouteUser))
	case p == api.RouteMembers:
		f.reply(w, f.members)
	case p == api.RouteBackup:
		if f.failBack {
			// Half a backup, then a broken connection.
			w.Header().Set("Content-Length", strconv.Itoa(len(f.backup)))
			w.Write(f.backup[:len(f.backup)/2])
			panic(http.ErrAbortHandler)
		}
		w.Write(f.backup)
	default:
		f.fail(w, 404, api.Error{Error: "no route " + p})
	}
}

func stripComments(y string) string {
	var out []string
	for _, l := range strings.Split(y, "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// mgmtRun runs corral with the fake's --station and --ca, in a fresh
// working directory (so no ./corral-data defaults apply) and
// configuration home.
func (f *cfgStation) run(args ...string) (int, string, string) {
	f.t.Helper()
	return runMain(f.t, append(args, "--station", f.srv.URL, "--ca", f.caFile)...)
}

func mgmtTestEnv(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	for _, k := range []string{envStation, envMgmtTokenFile, envStationCA} {
		t.Setenv(k, "")
	}
	tf := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(tf, []byte("admintok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tf
}

// TestCfgApplyStale: get writes "# version N"; apply on it stores the next
// version and prints the diff; applying the same file again is refused
// with exit status 3 and what to do; --force applies anyway.
func TestCfgApplyStale(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.53.1")
	code, out, errs := f.run("cfg", "get", "--token-file", tf)
	if code != 0 || out != "# version 1\nnodes:\n  - name: web1\n" {
		t.Fatalf("cfg get: %d %q %q", code, out, errs)
	}
	if code, _, errs := f.run("cfg", "get", "--token-file", tf, "-o", "c.yaml"); code != 0 {
		t.Fatalf("cfg get -o: %d %s", code, errs)
	}
	os.WriteFile("c.yaml", []byte("# version 1\nnodes:\n  - name: web2\n"), 0o644)
	code, out, errs = f.run("cfg", "apply", "c.yaml", "--token-file", tf, "--comment", "web2")
	if code != 0 || !strings.Contains(out, "+nodes:\n  - name: web2") || !strings.HasSuffix(out, "applied: version 2\n") {
		t.Fatalf("cfg apply: %d %q %q", code, out, errs)
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("colour in a diff that is not going to a terminal: %q", out)
	}
	code, _, errs = f.run("cfg", "apply", "c.yaml", "--token-file", tf)
	want := "corral cfg apply: the configuration changed since version 1 (now 2): corral cfg get, merge your change, apply again\n"
	if code != exitConflict || errs != want {
		t.Fatalf("stale apply: exit %d %q, want %d %q", code, errs, exitConflict, want)
	}
	if code, _, errs = f.run("cfg", "apply", "c.yaml", "--token-file", tf, "--base", "1"); code != exitConflict {
		t.Fatalf("stale --base: exit %d %q", code, errs)
	}
	os.WriteFile("c.yaml", []byte("# version 1\nnodes:\n  - name: web3\n"), 0o644)
	if code, out, errs = f.run("cfg", "apply", "c.yaml", "--token-file", tf, "--force"); code != 0 || !strings.HasSuffix(out, "applied: version 3\n") {
		t.Fatalf("--force: %d %q %q", code, out, errs)
	}
	// No header: the current version, said on stderr.
	os.WriteFile("n.yaml", []byte("nodes:\n  - name: web4\n"), 0o644)
	code, out, errs = f.run("cfg", "apply", "n.yaml", "--token-file", tf, "--dry-run")
	if code != 0 || !strings.Contains(errs, "applying on the current version 3") || !strings.Contains(out, "dry run: nothing stored") {
		t.Fatalf("apply without a header: %d %q %q", code, out, errs)
	}
	code, out, _ = f.run("cfg", "history", "--token-file", tf, "--limit", "2")
	if code != 0 || !regexp.MustCompile(`(?m)^VERSION +TIME +AUTHOR +COMMENT\n3 .*\n2 .* admin +web2$`).MatchString(out) {
		t.Errorf("history: %d %q", code, out)
	}
	code, out, errs = f.run("cfg", "diff", "1", "2", "--token-file", tf)
	if code != 0 || !strings.Contains(out, "-nodes:\n  - name: web1\n+nodes:\n  - name: web2") {
		t.Errorf("diff 1 2: %d %q %q", code, out, errs)
	}
	code, out, errs = f.run("cfg", "rollback", "1", "--token-file", tf)
	if code != 0 || !strings.HasSuffix(out, "applied: version 4 (the content of version 1)\n") {
		t.Errorf("rollback: %d %q %q", code, out, errs)
	}
	if code, out, _ = f.run("cfg", "get", "--version", "2", "--token-file", tf); code != 0 || !strings.HasPrefix(out, "# version 2\n") {
		t.Errorf("get --version 2: %d %q", code, out)
	}
}

// TestCfgApplyErrors: the station's validation errors are printed one per
// line as FILE:LINE: PATH: msg, exit status 1.
func TestCfgApplyErrors(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.53.2")
	os.WriteFile("bad.yaml", []byte("# version 1\nbad: 1\n"), 0o644)
	code, out, errs := f.run("cfg", "apply", "bad.yaml", "--token-file", tf)
	want := "bad.yaml:3: services[0].vip: not an IP address\nbad.yaml:7: nodes[1].name: duplicate name\n"
	if code != 1 || out != "" || !strings.HasSuffix(errs, want) {
		t.Fatalf("apply of a bad file: exit %d %q %q, want 1 and stderr ending %q", code, out, errs, want)
	}
}

// TestMgmtNoToken: without a token the commands say where to get one;
// a token the station refuses is said so too.
func TestMgmtNoToken(t *testing.T) {
	mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.53.3")
	code, _, errs := f.run("cfg", "get")
	if code != 1 || !strings.Contains(errs, "no API token") || !strings.Contains(errs, "--token-file") {
		t.Errorf("no token: %d %q", code, errs)
	}
	os.WriteFile("wrong.token", []byte("nope\n"), 0o600)
	code, _, errs = f.run("cfg", "get", "--token-file", "wrong.token")
	if code != 1 || !strings.Contains(errs, "the API token was refused") {
		t.Errorf("refused token: %d %q", code, errs)
	}
	// The bootstrap admin token under ./corral-data/mgmt is the default.
	os.MkdirAll("corral-data/mgmt", 0o700)
	os.WriteFile("corral-data/mgmt/admin.token", []byte("admintok\n"), 0o600)
	if code, _, errs = f.run("cfg", "get"); code != 0 {
		t.Errorf("default admin token: %d %q", code, errs)
	}
}

// TestMgmtTokens: create prints the token string alone on stdout,
// ID.SECRET.CAHASH with the CA's pin; list shows states; revoke.
func TestMgmtTokens(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.53.4")
	code, out, errs := f.run("mgmt", "token", "create", "--role", "node", "--ttl", "1h", "--single-use", "--token-file", tf)
	h := sha256.Sum256(f.caDER)
	want := "abc123.s3cr3t." + hex.EncodeToString(h[:])[:32] + "\n"
	if code != 0 || out != want || !strings.Contains(errs, "join token abc123 for role node") || !strings.Contains(errs, "single-use") {
		t.Fatalf("token create: %d %q %q, want %q", code, out, errs, want)
	}
	code, out, _ = f.run("mgmt", "token", "list", "--token-file", tf)
	for _, re := range []string{`(?m)^abc123 +node .* valid$`, `(?m)^old +iod .* expired$`, `(?m)^once +node .* once +used$`, `(?m)^boot +admin +admin +station +never +many +valid$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("token list: %d %q lacks %s", code, out, re)
		}
	}
	if code, _, errs = f.run("mgmt", "token", "revoke", strings.TrimSpace(want), "--token-file", tf); code != 0 || len(f.revoked) != 1 || f.revoked[0] != "abc123" {
		t.Errorf("revoke by the whole string: %d %q %v", code, errs, f.revoked)
	}
}

// TestMgmtUsersLogin: a user added with a password file logs in; the saved
// token (0600) is what the next command sends.
func TestMgmtUsersLogin(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.53.5")
	os.WriteFile("pw", []byte("hunter22\n"), 0o600)
	code, _, errs := f.run("mgmt", "user", "add", "alice", "--role", "webmaster", "--domain", "a.example", "--domain", "b.example", "--password-file", "pw", "--token-file", tf)
	if u := f.users["alice"]; code != 0 || u.Password != "hunter22" || u.Role != "webmaster" || len(u.Domains) != 2 {
		t.Fatalf("user add: %d %q %+v", code, errs, u)
	}
	code, out, _ := f.run("mgmt", "user", "list", "--token-file", tf)
	if code != 0 || !regexp.MustCompile(`(?m)^alice +webmaster +a.example,b.example$`).MatchString(out) {
		t.Errorf("user list: %d %q", code, out)
	}
	os.WriteFile("badpw", []byte("wrong\n"), 0o600)
	if code, _, errs = f.run("mgmt", "login", "--user", "alice", "--password-file", "badpw"); code != 1 || !strings.Contains(errs, "login as alice refused") {
		t.Errorf("bad password: %d %q", code, errs)
	}
	if code, _, errs = f.run("mgmt", "login", "--user", "alice", "--password-file", "pw"); code != 0 {
		t.Fatalf("login: %d %q", code, errs)
	}
	saved := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "corral", "token")
	fi, err := os.Stat(saved)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("login token %s: %v %v, want mode 0600", saved, err, fi)
	}
	f.mu.Lock()
	delete(f.tokens, "admintok") // only the login token works now
	f.mu.Unlock()
	if code, _, errs = f.run("cfg", "get"); code != 0 {
		t.Errorf("cfg get with the saved login token: %d %q", code, errs)
	}
	f.mu.Lock()
	f.tokens["admintok"] = true
	f.mu.Unlock()
	if code, _, errs = f.run("mgmt", "user", "rm", "alice", "--token-file", tf); code != 0 || len(f.users) != 0 {
		t.Errorf("user rm: %d %q", code, errs)
	}
}

// TestMgmtBackup: the backup lands whole in FILE, mode 0600; a broken
// download leaves neither FILE nor FILE.tmp.
func TestMgmtBackup(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.53.6")
	f.backup = bytes.Repeat([]byte("snapshot"), 100000)
	code, _, errs := f.run("mgmt", "backup", "s.bak", "--token-file", tf)
	got, err := os.ReadFile("s.bak")
	if code != 0 || err != nil || !bytes.Equal(got, f.backup) || !strings.Contains(errs, "backup: 800000 bytes") {
		t.Fatalf("backup: %d %q %v, %d bytes of %d", code, errs, err, len(got), len(f.backup))
	}
	if fi, _ := os.Stat("s.bak"); fi.Mode().Perm() != 0o600 {
		t.Errorf("backup mode %v, want 0600 (it holds secrets)", fi.Mode().Perm())
	}
	f.failBack = true
	if code, _, errs = f.run("mgmt", "backup", "t.bak", "--token-file", tf); code != 1 {
		t.Errorf("broken backup: exit %d %q", code, errs)
	}
	for _, p := range []string{"t.bak", "t.bak.tmp"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("a broken backup left %s", p)
		}
	}
}

// TestCfgStatus: the members table says who is behind and why.
func TestCfgStatus(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.53.7")
	f.members = []api.MemberStatus{
		{Name: "web1", Role: "node", Addr: "127.0.0.21:8080", Version: 1, Healthy: true, Up: true},
		{Name: "dir1", Role: "director", Addr: "127.0.0.1:7500", Version: 0, Error: "services[0].vip: in use", Health: "no backends"},
	}
	code, out, errs := f.run("cfg", "status", "--token-file", tf)
	if code != 0 || !regexp.MustCompile(`(?m)^dir1 +director +127.0.0.1:7500 +no +0/1 \(behind\) +failing: no backends +services\[0\].vip: in use$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^web1 +node +127.0.0.21:8080 +yes +1/1 +ok +-$`).MatchString(out) {
		t.Errorf("cfg status: %d %q %q", code, out, errs)
	}
	var buf bytes.Buffer
	sf := stationFlags{station: f.srv.URL, tokenFile: tf, ca: f.caFile}
	appendStationMembers(&buf, &sf)
	if !strings.Contains(buf.String(), "configuration version 1") || !strings.Contains(buf.String(), "web1") {
		t.Errorf("ctl status members: %q", buf.String())
	}
	// No station there: nothing appended.
	buf.Reset()
	sf.station = "https://127.0.53.7:1"
	appendStationMembers(&buf, &sf)
	if buf.Len() != 0 {
		t.Errorf("ctl status without a station appended %q", buf.String())
	}
}

// TestMgmtUsage: wrong command lines exit 2 before any call, naming
// what is wrong.
func TestMgmtUsage(t *testing.T) {
	mgmtTestEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mgmt", "token", "create", "--role", "king"}, `--role "king": want one of node, director, meta, iod`},
		{[]string{"mgmt", "token", "create", "--role", "node", "--ttl", "0s"}, "--ttl 0s: want a positive duration"},
		{[]string{"mgmt", "token", "revoke"}, "accepts 1 arg(s)"},
		{[]string{"mgmt", "user", "add", "bob", "--role", "root"}, `--role "root": want one of admin, webmaster, read-only`},
		{[]string{"mgmt", "user", "add", "bob", "--role", "webmaster"}, "--role webmaster needs at least one --domain"},
		{[]string{"mgmt", "user", "add", "bob", "--role", "admin", "--domain", "x"}, "--domain goes with --role webmaster only"},
		{[]string{"mgmt", "login"}, "--user is required"},
		{[]string{"mgmt", "restore", "x.bak"}, "--data is required"},
		{[]string{"mgmt", "--etcd", "http://127.0.0.1:2379", "--etcd-name", "s1"}, "--etcd (an external cluster) excludes"},
		{[]string{"mgmt", "--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"mgmt", "--etcd", "::"}, `--etcd "::": want endpoint URLs`},
		{[]string{"mgmt", "--etcd-ca", "ca.pem"}, "are for an external cluster (--etcd)"},
		{[]string{"mgmt", "--etcd", "https://127.0.0.1:2379", "--etcd-cert", "c.pem"}, "--etcd-cert and --etcd-key go together"},
		{[]string{"mgmt", "--etcd", "https://127.0.0.1:2379", "--etcd-user", "u"}, "--etcd-user and --etcd-password-file go together"},
		{[]string{"mgmt", "token", "create", "--role", "node", "--single-use", "--multi-use"}, "--single-use and --multi-use exclude each other"},
		{[]string{"mgmt", "tokn"}, "did you mean token?"},
		{[]string{"cfg", "aply"}, "did you mean apply?"},
		{[]string{"cfg", "apply", "x.yaml", "--force", "--base", "2"}, "--force and --base exclude each other"},
		{[]string{"cfg", "history", "--limit", "0"}, "--limit 0: want a count > 0"},
		{[]string{"cfg", "get", "--version", "0"}, "--version 0: want a version number > 0"},
		{[]string{"cfg", "rollback", "zero"}, `version "zero": want a number > 0`},
		{[]string{"cfg", "diff", "1", "x"}, `version "x": want a number > 0`},
		{[]string{"cfg", "get", "--station", "ftp://x"}, `--station "ftp://x": want a URL`},
	} {
		code, _, errs := runMain(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("corral %s: exit %d %q, want 2 and %q", strings.Join(c.args, " "), code, errs, c.want)
		}
	}
}

// TestMgmtEtcdPasswordFileMode: a password file others may read is
// refused, as ssh refuses such keys; an empty one too.
func TestMgmtEtcdPasswordFileMode(t *testing.T) {
	dir := mgmtTestEnv(t)
	pw := filepath.Join(filepath.Dir(dir), "etcd.pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runMain(t, "mgmt", "--etcd", "https://127.0.63.90:2379", "--etcd-user", "u", "--etcd-password-file", pw)
	if code != 1 || !strings.Contains(errs, "--etcd-password-file") || !strings.Contains(errs, "chmod 600 "+pw) {
		t.Fatalf("world-readable password file: exit %d %q", code, errs)
	}
	os.WriteFile(pw, nil, 0o600)
	os.Chmod(pw, 0o600)
	code, _, errs = runMain(t, "mgmt", "--etcd", "https://127.0.63.90:2379", "--etcd-user", "u", "--etcd-password-file", pw)
	if code != 1 || !strings.Contains(errs, "empty") {
		t.Fatalf("empty password file: exit %d %q", code, errs)
	}
}

// TestMgmtInitCA: init-ca writes one CA into each directory (0600 files
// in a 0700 tls directory) and refuses a directory that has one.
func TestMgmtInitCA(t *testing.T) {
	mgmtTestEnv(t)
	a, b := filepath.Join(t.TempDir(), "s1"), filepath.Join(t.TempDir(), "s2")
	code, out, errs := runMain(t, "mgmt", "init-ca", a, b)
	if code != 0 || !strings.Contains(out, filepath.Join(a, "tls", "ca.pem")) {
		t.Fatalf("init-ca: %d %q %q", code, out, errs)
	}
	ka, _ := os.ReadFile(filepath.Join(a, "tls", "ca.key"))
	kb, _ := os.ReadFile(filepath.Join(b, "tls", "ca.key"))
	if len(ka) == 0 || string(ka) != string(kb) {
		t.Fatal("init-ca: the directories have different CAs")
	}
	for _, p := range []string{filepath.Join(a, "tls"), filepath.Join(a, "tls", "ca.key"), filepath.Join(a, "tls", "ca.pem")} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: %v %v", p, fi.Mode(), err)
		}
	}
	if code, _, errs := runMain(t, "mgmt", "init-ca", b); code != 1 || !strings.Contains(errs, "already has a CA") {
		t.Fatalf("init-ca over a CA: %d %q", code, errs)
	}
}

// TestMgmtHelp: the help says what exit status 3 means, where login keeps
// its token, and how a join token is used.
func TestMgmtHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"cfg", "--help"}, []string{"Exit status: 0 done, 1 failed", "3 the configuration changed", "corral cfg apply cluster.yaml"}},
		{[]string{"cfg", "apply", "--help"}, []string{`"# version N"`, "--force", "exit status is 3"}},
		{[]string{"mgmt", "--help"}, []string{"DATA/admin.token", "--etcd-initial-cluster", "corral node --join https://127.0.0.1:7600 --token"}},
		{[]string{"mgmt", "login", "--help"}, []string{"~/.config/corral/token", "mode 0600"}},
		{[]string{"mgmt", "token", "--help"}, []string{"ID.SECRET.CAHASH"}},
		{[]string{"ctl", "status", "--help"}, []string{"--station", "--station-token-file"}},
	} {
		code, out, _ := runMain(t, c.args...)
		for _, w := range c.want {
			if code != 0 || !strings.Contains(out, w) {
				t.Errorf("corral %s: exit %d, no %q in\n%s", strings.Join(c.args, " "), code, w, out)
			}
		}
	}
}

// TestVersionHeader: apply takes its base from get's first line.
func TestVersionHeader(t *testing.T) {
	for doc, want := range map[string]int64{
		"# version 12\nnodes: []\n":           12,
		"\n#   version 3  \n":                 3,
		"# cluster\n# version 7\nservices:\n": 7,
		"---\n# version 9\n":                  9,
		"nodes: []\n# version 4\n":            -1,
		"# version x\n":                       -1,
		"":                                    -1,
		"# version 99999999999999999999\n":    -1,
	} {
		got, ok := versionHeader([]byte(doc))
		if !ok {
			got = -1
		}
		if got != want {
			t.Errorf("versionHeader(%q) = %d, want %d", doc, got, want)
		}
	}
	if got := withVersionHeader(api.Version{Version: 5, YAML: "a: 1"}); got != "# version 5\na: 1\n" {
		t.Errorf("withVersionHeader: %q", got)
	}
}

func FuzzVersionHeader(f *testing.F) {
	f.Add([]byte("# version 12\nnodes: []\n"))
	f.Add([]byte("---\n#version 1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok := versionHeader(b)
		if ok && n < 0 {
			t.Fatalf("negative version %d from %q", n, b)
		}
	})
}

// TestValidationOutput: local errors print one per line, FILE:LINE: PATH:
// msg, then a count; exit status 1.
func TestValidationOutput(t *testing.T) {
	var buf bytes.Buffer
	err := validationError(&buf, "corral cfg validate", clustercfg.Errors{
		{File: "c.yaml", Path: "services[1].vip", Line: 12, Msg: "not an IP address"},
		{File: "c.yaml", Path: "nodes[0].weight", Line: 20, Msg: "out of range 0..65535"},
	})
	want := "c.yaml:12: services[1].vip: not an IP address\nc.yaml:20: nodes[0].weight: out of range 0..65535\ncorral cfg validate: 2 error(s)\n"
	if ee, ok := err.(exitError); !ok || ee.code != 1 || buf.String() != want {
		t.Errorf("validationError: %v %q, want exit 1 and %q", err, buf.String(), want)
	}
}

// TestCfgValidate runs `corral cfg validate` on a wrong file: each error
// with its line. It needs clustercfg.Parse (helper A's).
func TestCfgValidate(t *testing.T) {
	mgmtTestEnv(t)
	os.WriteFile("bad.yaml", []byte("nodes:\n  - name: web1\n    address: nowhere\n    weight: -5\n"), 0o644)
	code, out, errs := runMain(t, "cfg", "validate", "bad.yaml")
	if code != 1 || out != "" || !regexp.MustCompile(`(?m)^bad\.yaml:[34]: nodes\[0\]\.\S+: .+$`).MatchString(errs) {
		t.Errorf("validate: exit %d %q %q", code, out, errs)
	}
	os.WriteFile("good.yaml", []byte("nodes:\n  - name: web1\n    address: 127.0.0.21:8080\n"), 0o644)
	if code, out, errs = runMain(t, "cfg", "validate", "good.yaml"); code != 0 || out != "good.yaml: valid\n" {
		t.Errorf("validate a good file: %d %q %q", code, out, errs)
	}
}

// freeAddr is a free port on ip.
func freeAddr(t *testing.T, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		lab.Need(t, lab.Err("listen on "+ip, err))
	}
	defer l.Close()
	return l.Addr().String()
}

// startStation runs the real `corral mgmt` on data.
func startStation(t *testing.T, bin, data, ip string) (*launch.Proc, string) {
	t.Helper()
	listen := freeAddr(t, ip)
	logf := filepath.Join(t.TempDir(), "mgmt.log")
	p, err := launch.Start(context.Background(), "mgmt", bin, logf, "mgmt", "--data", data, "--listen", listen,
		"--etcd-client", freeAddr(t, ip), "--etcd-peer", freeAddr(t, ip))
	if err != nil {
		b, _ := os.ReadFile(logf)
		t.Fatalf("corral mgmt: %v\n%s", err, b)
	}
	t.Cleanup(func() { p.Stop() })
	return p, "https://" + listen
}

// TestMgmtRealStation drives the real station with the real binary: the
// ready line's files, get/apply/stale apply, a join token, backup, and
// restore into a second station that serves the same version.
func TestMgmtRealStation(t *testing.T) {
	bin := pfstest.Binary(t)
	mgmtTestEnv(t)
	data := filepath.Join(t.TempDir(), "mgmt")
	p, url := startStation(t, bin, data, "127.0.53.10")
	if p.Addr == "" {
		t.Fatal("no ready line")
	}
	flags := []string{"--station", url, "--ca", filepath.Join(data, "tls", "ca.pem"), "--token-file", filepath.Join(data, "admin.token")}
	run := func(args ...string) (string, string, bool) {
		return ctlRun(t, bin, ".", nil, append(args, flags...)...)
	}
	os.WriteFile("c.yaml", []byte("nodes:\n  - name: web1\n    address: 127.0.0.21:8080\n"), 0o644)
	if out, errs, ok := run("cfg", "apply", "c.yaml", "--comment", "first"); !ok || !strings.Contains(out, "applied: version") {
		t.Fatalf("apply: %q %q", out, errs)
	}
	out, errs, ok := run("cfg", "get", "-o", "got.yaml")
	got, _ := os.ReadFile("got.yaml")
	v, hasV := versionHeader(got)
	if !ok || !hasV || v < 1 {
		t.Fatalf("get: %q %q %q", out, errs, got)
	}
	os.WriteFile("c2.yaml", []byte(fmt.Sprintf("# version %d\nnodes:\n  - name: web2\n    address: 127.0.0.22:8080\n", v)), 0o644)
	if out, errs, ok := run("cfg", "apply", "c2.yaml"); !ok {
		t.Fatalf("apply on the current version: %q %q", out, errs)
	}
	cmd := exec.Command(bin, append([]string{"cfg", "apply", "c2.yaml"}, flags...)...)
	var eb strings.Builder
	cmd.Stderr = &eb
	if err := cmd.Run(); cmd.ProcessState.ExitCode() != exitConflict || !strings.Contains(eb.String(), "the configuration changed since version") {
		t.Errorf("stale apply: %v %q, want exit 3", err, eb.String())
	}
	tok, errs, ok := run("mgmt", "token", "create", "--role", "node", "--ttl", "1h")
	if !ok || strings.Count(strings.TrimSpace(tok), ".") != 2 {
		t.Errorf("token create: %q %q", tok, errs)
	}
	if out, errs, ok := run("mgmt", "backup", "s.bak"); !ok {
		t.Fatalf("backup: %q %q", out, errs)
	}
	cur, _, _ := run("cfg", "get")
	data2 := filepath.Join(t.TempDir(), "mgmt2")
	out, errs, ok = ctlRun(t, bin, ".", nil, "mgmt", "restore", "s.bak", "--data", data2)
	if !ok || !strings.Contains(out, "corral mgmt --data "+data2) {
		t.Fatalf("restore: %q %q", out, errs)
	}
	p.Stop()
	_, url2 := startStation(t, bin, data2, "127.0.53.11")
	flags = []string{"--station", url2, "--ca", filepath.Join(data2, "tls", "ca.pem"), "--token-file", filepath.Join(data2, "admin.token")}
	if got, errs, ok := run("cfg", "get"); !ok || got != cur {
		t.Errorf("the restored station serves %q (%s), the first served %q", got, errs, cur)
	}
}

// TestCfgTx: a list of operations goes as one version; a bad one is
// refused before any call, naming which.
func TestCfgTx(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.53.8")
	os.WriteFile("ops.json", []byte(`[{"op":"put","kind":"node","value":{"name":"web5","address":"127.0.0.25:8080"}},{"op":"delete","kind":"node","name":"web1"}]`), 0o644)
	code, out, errs := f.run("cfg", "tx", "ops.json", "--token-file", tf)
	if code != 0 || !strings.Contains(out, "ops: 2") || !strings.HasSuffix(out, "applied: version 2\n") {
		t.Fatalf("tx: %d %q %q", code, out, errs)
	}
	if code, _, errs = f.run("cfg", "tx", "ops.json", "--token-file", tf, "--base", "1"); code != exitConflict {
		t.Errorf("stale tx: %d %q", code, errs)
	}
	os.WriteFile("bad.json", []byte(`{"ops":[{"op":"put","kind":"node","value":{}},{"op":"drop","kind":"node","name":"x"}]}`), 0o644)
	if code, _, errs = f.run("cfg", "tx", "bad.json", "--token-file", tf); code != 1 || !strings.Contains(errs, `bad.json: operation 2: op "drop": want put or delete`) {
		t.Errorf("bad tx: %d %q", code, errs)
	}
}

func FuzzTxOps(f *testing.F) {
	f.Add([]byte(`[{"op":"delete","kind":"node","name":"web1"}]`))
	f.Add([]byte(`{"ops":[{"op":"put","kind":"service","value":{"name":"www"}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ops, err := parseTxOps(b)
		if err == nil && len(ops) == 0 {
			t.Fatalf("no error and no operations from %q", b)
		}
	})
}

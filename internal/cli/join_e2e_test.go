package cli

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// miniStation is the least of a station a member needs: join, desired
// (answered at once), report.
type miniStation struct {
	*httptest.Server
	token string

	mu      sync.Mutex
	secret  []byte
	meta    []string
	yaml    string
	version int64
	joins   int
	reports []api.MemberStatus
}

func newMiniStation(t *testing.T) *miniStation {
	m := &miniStation{}
	m.Server = httptest.NewTLSServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.Close)
	// Under the lock serve takes: a request reaches serve through a
	// socket, which the race detector does not see as ordering.
	m.mu.Lock()
	m.token = "tok1.secret." + api.CAHash(m.Certificate().Raw)
	m.mu.Unlock()
	return m
}

func (m *miniStation) serve(w http.ResponseWriter, r *http.Request) {
	bearer := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case r.URL.Path == api.RouteJoin && bearer == m.token:
		m.joins++
		json.NewEncoder(w).Encode(api.JoinReply{Member: "node1", Credential: "cred1", Secret: m.secret, Meta: m.meta,
			CA: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.Certificate().Raw}))})
	case bearer != "cred1":
		w.WriteHeader(http.StatusUnauthorized)
		json.NewEncoder(w).Encode(api.Error{Error: "no such credential"})
	case r.URL.Path == api.RouteDesired:
		if r.URL.Query().Get("after") == "1" {
			m.mu.Unlock()
			time.Sleep(200 * time.Millisecond) // nothing new: a short long-poll
			m.mu.Lock()
		}
		json.NewEncoder(w).Encode(api.Desired{Rev: 1, Version: m.version, YAML: m.yaml})
	case r.URL.Path == api.RouteReport:
		var st api.MemberStatus
		json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&st)
		m.reports = append(m.reports, st)
	}
}

func (m *miniStation) last() (api.MemberStatus, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.reports) == 0 {
		return api.MemberStatus{}, false
	}
	return m.reports[len(m.reports)-1], true
}

// corral node --join: the file-system credential and meta list come from
// the join, the node reports, applies its sites, and a restart needs no
// token.
func TestNodeJoinsStation(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cred, err := proto.DefaultCredential()
	if err != nil {
		t.Fatal(err)
	}
	cl := client.New(fsys.Meta.Addr, client.WithSecurity(proto.Security{Cred: cred}))
	defer cl.Close()
	ctx := context.Background()
	for p, body := range map[string]string{"/www/a.test/index.html": "A", "/site2/a.test/index.html": "B"} {
		if err := cl.MkdirAll(ctx, filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := cl.CreatePath(ctx, p, 0o644, client.CreateOpts{})
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte(body), 0)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	st := newMiniStation(t)
	st.mu.Lock()
	st.secret, st.meta = cred.ReadOnly().Marshal(), []string{fsys.Meta.Addr}
	st.version, st.yaml = 1, "filesystem:\n  docroot: /site2\nnodes:\n  - name: node1\n    address: 127.0.0.1:8080\n"
	st.mu.Unlock()
	// The node must not fall back on the environment's credential.
	t.Setenv(proto.SecretEnv, filepath.Join(t.TempDir(), "none"))
	dir := t.TempDir()
	start := func(args ...string) *launch.Proc {
		args = append([]string{"node", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--join", st.URL, "--name", "node1",
			"--state", filepath.Join(dir, "state"), "--access-log=false"}, args...)
		p, err := launch.Start(ctx, "node", pfstest.Binary(t), filepath.Join(dir, "node.log"), args...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop() })
		return p
	}
	get := func(p *launch.Proc) string {
		req, _ := http.NewRequest("GET", "http://"+p.Addr+"/", nil)
		req.Host = "a.test"
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			return err.Error()
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return string(b)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for i := 0; !cond(); i++ {
			if i > 500 {
				t.Fatalf("timed out waiting for %s; log: %s", what, launch.Tail(filepath.Join(dir, "node.log"), 10))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	p := start("--token", st.token)
	waitFor("a healthy report", func() bool { r, ok := st.last(); return ok && r.Healthy && r.Name == "node1" && r.Role == api.RoleNode })
	waitFor("version 1 applied", func() bool { r, _ := st.last(); return r.Version == 1 && r.Error == "" })
	if b := get(p); b != "B" {
		t.Fatalf("after version 1 (docroot /site2): %q", b)
	}
	p.Stop()
	// Restart without a token: the saved credential.
	restarted := time.Now()
	p = start()
	waitFor("a report after the restart", func() bool { r, ok := st.last(); return ok && r.Started.After(restarted) && r.Healthy })
	if b := get(p); b != "B" {
		t.Fatalf("after restart: %q, want B", b)
	}
	st.mu.Lock()
	joins := st.joins
	st.mu.Unlock()
	if joins != 1 {
		t.Fatalf("%d joins, want 1 (the restart uses the saved credential)", joins)
	}
}

// corral director --join: no file, the admin API up, each version applied
// (or its error shown by ctl status) and the director's table reported.
func TestDirectorJoinsStation(t *testing.T) {
	st := newMiniStation(t)
	dir := t.TempDir()
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	vl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	vip := vl.Addr().String()
	vl.Close()
	st.mu.Lock()
	st.version = 1
	st.yaml = "clusters:\n  - name: web\nnodes:\n  - name: n1\n    address: " + backend.Addr().String() + "\n    cluster: web\n" +
		"directors:\n  - name: d1\nservices:\n  - name: www\n    cluster: web\n    vip: " + vip + "\n    check:\n      type: none\n"
	st.mu.Unlock()
	// A credential file named by the environment (inherited from corral
	// up or a test) and gone since: a joined director uses the join's.
	t.Setenv(proto.SecretEnv, filepath.Join(dir, "gone", "cluster.secret"))
	p, err := launch.Start(context.Background(), "director", pfstest.Binary(t), filepath.Join(dir, "director.log"),
		"director", "--join", st.URL, "--token", st.token, "--name", "d1", "--admin", "127.0.0.1:0",
		"--token-file", filepath.Join(dir, "admin.token"), "--state", filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	var rep api.MemberStatus
	for i := 0; rep.Role != api.RoleDirector || rep.Version == 0 && rep.Error == ""; i++ {
		if i > 500 {
			t.Fatalf("no report of version 1 from the director: %+v; log: %s", rep, launch.Tail(p.Log, 10))
		}
		time.Sleep(20 * time.Millisecond)
		rep, _ = st.last()
	}
	if rep.Name != "d1" || rep.Addr == "" || !rep.Healthy {
		t.Fatalf("report: %+v", rep)
	}
	r, err := http.Get("http://" + p.Addr + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	var status director.DirectorStatus
	json.NewDecoder(r.Body).Decode(&status)
	r.Body.Close()
	if rep.Version != 1 || rep.Error != "" || !strings.Contains(string(rep.Report), `"name":"www"`) {
		t.Fatalf("version 1: report %+v", rep)
	}
	if status.Reload == nil || !status.Reload.OK || status.Reload.File != "station version 1" {
		t.Fatalf("ctl status: %+v", status.Reload)
	}
}

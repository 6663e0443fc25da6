package managed

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// fakeStation answers what prepare asks: health, the current version,
// applies (recorded) and join tokens.
type fakeStation struct {
	mu      sync.Mutex
	version int64
	applies []api.ApplyRequest
	tokens  []api.TokenRequest
	users   []api.UserRequest
}

func (f *fakeStation) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer admintoken" {
		http.Error(w, `{"error":"no"}`, http.StatusUnauthorized)
		return
	}
	switch {
	case r.URL.Path == api.RouteHealthz:
		w.Write([]byte("ok"))
	case r.URL.Path == api.RouteConfig && r.Method == http.MethodGet:
		if f.version == 0 {
			http.Error(w, `{"error":"no configuration yet"}`, http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(api.Version{Version: f.version, YAML: "x"})
	case r.URL.Path == api.RouteConfig && r.Method == http.MethodPut:
		var req api.ApplyRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.applies = append(f.applies, req)
		f.version++
		json.NewEncoder(w).Encode(api.ApplyReply{Version: f.version})
	case r.URL.Path == api.RouteTokens && r.Method == http.MethodPost:
		var req api.TokenRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.tokens = append(f.tokens, req)
		json.NewEncoder(w).Encode(api.Token{ID: "id" + req.Role, Secret: "secret", Role: req.Role})
	case r.URL.Path == api.RouteUsers && r.Method == http.MethodPost:
		var req api.UserRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.users = append(f.users, req)
		json.NewEncoder(w).Encode(req.User)
	default:
		http.NotFound(w, r)
	}
}

// TestPrepare: against a fake station, the first start applies the
// flags' configuration on base 0, a later one applies nothing, --reset a
// new version; every start writes a join token per role kind, formatted
// ID.SECRET.CAHASH. Needs clustercfg's Marshal.
func TestPrepare(t *testing.T) {
	f := &fakeStation{}
	srv := httptest.NewTLSServer(f)
	defer srv.Close()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "mgmt", "tls"), 0o700)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	os.WriteFile(filepath.Join(dir, "mgmt", "tls", "ca.pem"), ca, 0o600)
	os.WriteFile(filepath.Join(dir, "mgmt", "admin.token"), []byte("admintoken\n"), 0o600)
	cfg := launch.ClusterConfig{Data: dir, MetaListen: "127.0.57.1:7400", NodeListen: []string{"127.0.57.21:8080", "127.0.57.22:8080"},
		VIP: "127.0.57.100:8080", L7VIP: "127.0.57.100:8081", Admin: "127.0.57.1:7500", Dataplane: "l4", Scheduler: "wlc",
		Station: &launch.StationConfig{Listen: strings.TrimPrefix(srv.URL, "https://")}}
	c := &launch.Cluster{FS: &launch.FS{Data: dir}, Cfg: cfg}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hash, err := CAHash(ca)
	if err != nil {
		t.Fatal(err)
	}
	run := func(reset bool) *Started {
		st := &Started{}
		if err := prepare(ctx, c, Options{Reset: reset, TokenTTL: time.Hour, Log: t.Logf}, st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := run(false)
	if !st.Applied || st.Version != 1 || len(f.applies) != 1 || f.applies[0].Base != 0 {
		t.Fatalf("first start: %+v, applies %+v", st, f.applies)
	}
	got, err := clustercfg.Parse("applied", []byte(f.applies[0].YAML))
	if err != nil {
		t.Fatalf("the first configuration does not parse: %v\n%s", err, f.applies[0].YAML)
	}
	if len(got.Nodes) != 2 || got.Nodes[1].Name != "node2" || len(got.Services) != 2 || got.Services[1].Dataplane != "l7" ||
		len(got.Domains) != 1 || got.Domains[0].Name != launch.SampleDomain || got.FileSystem.Meta[0] != "127.0.57.1:7400" {
		t.Errorf("first configuration:\n%s", f.applies[0].YAML)
	}
	for _, kind := range []string{"director", "node", "meta", "iod"} {
		b, err := os.ReadFile(c.TokenFile(kind))
		if err != nil {
			t.Fatal(err)
		}
		if want := "id" + kind + ".secret." + hash; strings.TrimSpace(string(b)) != want {
			t.Errorf("%s token %q, want %q", kind, b, want)
		}
		if fi, _ := os.Stat(c.TokenFile(kind)); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s token file mode %v", kind, fi.Mode())
		}
	}
	if f.tokens[0].TTL != time.Hour || f.tokens[0].SingleUse || !f.tokens[0].MultiUse {
		t.Errorf("token request %+v: want 1 h, multi-use", f.tokens[0])
	}
	// The new station's admin gets a password, kept 0600 where the
	// banner says.
	if len(f.users) != 1 || f.users[0].Name != "admin" || len(f.users[0].Password) < 20 {
		t.Fatalf("admin password: users %+v", f.users)
	}
	if b, err := os.ReadFile(st.AdminPassword); err != nil || strings.TrimSpace(string(b)) != f.users[0].Password {
		t.Errorf("admin password file %s: %q, %v", st.AdminPassword, b, err)
	} else if fi, _ := os.Stat(st.AdminPassword); fi.Mode().Perm() != 0o600 {
		t.Errorf("admin password file mode %v", fi.Mode())
	}
	if st := run(false); st.Applied || len(f.applies) != 1 || st.Version != 1 || len(f.users) != 1 {
		t.Fatalf("second start applied something or set the password again: %+v, users %d", st, len(f.users))
	}
	if st := run(true); !st.Applied || len(f.applies) != 2 || f.applies[1].Base != 1 || st.Version != 2 {
		t.Fatalf("--reset: %+v, applies %d", st, len(f.applies))
	}
}

func TestJoinToken(t *testing.T) {
	if got := JoinToken(api.Token{ID: "a", Secret: "b"}, "c"); got != "a.b.c" {
		t.Errorf("JoinToken = %q", got)
	}
	if got := JoinToken(api.Token{ID: "a", Secret: "a.b.c"}, "d"); got != "a.b.c" {
		t.Errorf("a whole token string is kept: %q", got)
	}
	if _, err := CAHash([]byte("not pem")); err == nil {
		t.Error("CAHash of no PEM")
	}
}

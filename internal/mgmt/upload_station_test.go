package mgmt

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

const uploadTestConfig = `services:
  - name: web
    vip: 127.0.56.100:80
    check:
      type: none
    servers:
      - address: 127.0.56.21:80
domains:
  - name: a.test
    service: web
    webmaster: wa
  - name: b.test
    service: web
    docroot: /sites/b
accounts:
  - name: wa
    role: webmaster
    domains:
      - a.test
  - name: wb
    role: webmaster
    domains:
      - b.test
  - name: ro
    role: read-only
filesystem:
  docroot: /www
`

// Uploads through a whole station: its TLS API, tokens, the accounts and
// domains of its configuration, and the file system with its secret.
func TestUploadThroughStation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a file system and a station")
	}
	dir := t.TempDir()
	fsys := pfstest.Start(t, 2)
	st, err := New(Options{Data: filepath.Join(dir, "station"), Listen: "127.0.56.2:27610",
		EtcdClient: "127.0.56.2:27611", EtcdPeer: "127.0.56.2:27612",
		Secret: fsys.Cred.Marshal(), Meta: []string{fsys.MetaAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	stopped := make(chan struct{})
	var runErr error
	go func() { runErr = st.Run(ctx, func(a string) { ready <- a }); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped; st.Close() })
	var addr string
	select {
	case addr = <-ready:
	case <-stopped:
		t.Fatalf("station: %v", runErr)
	case <-time.After(60 * time.Second):
		t.Fatal("station not ready within 60 s")
	}
	url := "https://" + addr
	caFile := filepath.Join(dir, "station", "tls", "ca.pem")
	adm, err := os.ReadFile(filepath.Join(dir, "station", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	clientAs := func(token string) *api.Client {
		c, err := api.NewClientCAFile([]string{url}, token, caFile)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	admin := clientAs(strings.TrimSpace(string(adm)))
	if err := admin.Do(ctx, "PUT", api.RouteConfig, api.ApplyRequest{Base: -1, YAML: uploadTestConfig}, nil); err != nil {
		t.Fatal(err)
	}
	userClient := func(user, role string) *api.Client {
		var tok api.Token
		if err := admin.Do(ctx, "POST", api.RouteTokens, api.TokenRequest{Role: role, User: user, TTL: time.Hour}, &tok); err != nil {
			t.Fatal(err)
		}
		return clientAs(tok.Secret)
	}
	wa, ro := userClient("wa", api.RoleWebmaster), userClient("ro", api.RoleReadOnly)
	local := filepath.Join(dir, "index.html")
	os.WriteFile(local, []byte("<h1>A</h1>"), 0o644)

	var fr api.FileReply
	if err := wa.DoFile(ctx, "PUT", api.RouteFiles+"a.test/docs/index.html", local, &fr); err != nil || fr.Size != 10 {
		t.Fatalf("webmaster of a.test writes a.test: %+v %v", fr, err)
	}
	for who, c := range map[string]*api.Client{"wa": wa, "ro": ro} {
		err := c.DoFile(ctx, "PUT", api.RouteFiles+"b.test/index.html", local, nil)
		if se, ok := err.(*api.StatusError); !ok || se.Status != 403 {
			t.Errorf("%s writes b.test: %v, want 403", who, err)
		}
	}
	if err := admin.DoFile(ctx, "PUT", api.RouteFiles+"b.test/index.html", local, nil); err != nil {
		t.Errorf("admin writes b.test: %v", err)
	}
	err = admin.DoFile(ctx, "PUT", api.RouteFiles+"nope.test/index.html", local, nil)
	if se, ok := err.(*api.StatusError); !ok || se.Status != 404 {
		t.Errorf("unknown domain: %v, want 404", err)
	}
	cl := client.New(fsys.MetaAddr(), client.WithSecurity(proto.Security{Cred: fsys.Cred}))
	defer cl.Close()
	for _, p := range []string{"/www/a.test/docs/index.html", "/sites/b/index.html"} {
		f, err := cl.Open(ctx, p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		buf := make([]byte, 64)
		n, _ := f.ReadAt(buf, 0)
		f.Close()
		if string(buf[:n]) != "<h1>A</h1>" {
			t.Errorf("%s: %q", p, buf[:n])
		}
	}
	var audit []api.AuditEntry
	if err := admin.Do(ctx, "GET", api.RouteAudit+"?limit=50", nil, &audit); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range audit {
		if e.Action == "upload" && e.User == "wa" && strings.Contains(e.Detail, "a.test/docs/index.html") {
			found = true
		}
	}
	if !found {
		t.Errorf("no audit entry for wa's upload: %+v", audit)
	}
}

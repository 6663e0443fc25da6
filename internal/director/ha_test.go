package director

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/ha"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// fakeNode stands for an ha.Node: the admin API, /healthz and the metrics
// read its Status, the handover moves "active" to the target.
type fakeNode struct {
	mu     sync.Mutex
	st     ha.Status
	closed bool
	vips   []netip.Addr
}

func (f *fakeNode) Status() ha.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.st
	st.Peers = append([]ha.PeerStatus(nil), f.st.Peers...)
	return st
}

func (f *fakeNode) Handover(ctx context.Context, to string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if to == "" {
		to = f.st.Peers[0].Name
	}
	for _, p := range f.st.Peers {
		if p.Name == to {
			f.st.Active, f.st.State = to, ha.StateStandby
			f.st.Transitions++
			return nil
		}
	}
	return errors.New("no in-sync peer " + to)
}

func (f *fakeNode) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	return nil
}

func (f *fakeNode) SetVIPs(v []netip.Addr) {
	f.mu.Lock()
	f.vips = v
	f.mu.Unlock()
}

func activeStatus() ha.Status {
	return ha.Status{Name: "d1", Group: "web", Mode: ha.ActiveStandby, State: ha.StateActive, Priority: 150, Active: "d1",
		LeaseTTL: 2 * time.Second, FenceLeft: 1200 * time.Millisecond, LastTransition: time.Now().Add(-90 * time.Second),
		LastReason: "elected: no active", Transitions: 3, SyncErrors: 1, Resyncs: 2,
		Peers: []ha.PeerStatus{{Name: "d2", Sync: "127.0.82.12:7700", State: ha.StateStandby, Priority: 100,
			OutConnected: true, OutSent: 1200, OutAcked: 1190, Lag: 3 * time.Millisecond, InConnected: true, InSynced: true}}}
}

func withFake(t *testing.T, st ha.Status) (*Director, *fakeNode) {
	d := New(nil)
	t.Cleanup(d.Close)
	f := &fakeNode{st: st}
	var n haNode = f
	d.haTest.Store(&n)
	return d, f
}

// adminServer serves d's admin API behind Guard with token "tok...".
func adminServer(t *testing.T, d *Director) (*httptest.Server, string) {
	tok := "0123456789abcdef0123"
	srv := httptest.NewServer(Guard(tok, true, d.Handler()))
	t.Cleanup(srv.Close)
	return srv, tok
}

func TestHAAdminAPI(t *testing.T) {
	ctx := context.Background()

	// HA off: a clear 404.
	off := New(nil)
	defer off.Close()
	srv, _ := adminServer(t, off)
	_, err := Client{Base: srv.URL}.HA(ctx)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || !strings.Contains(ae.Msg, "no ha { } block") {
		t.Fatalf("GET /api/ha with HA off: %v", err)
	}

	d, f := withFake(t, activeStatus())
	srv, tok := adminServer(t, d)
	st, err := Client{Base: srv.URL}.HA(ctx)
	if err != nil || st.Name != "d1" || st.State != ha.StateActive || len(st.Peers) != 1 || st.Peers[0].OutSent != 1200 {
		t.Fatalf("GET /api/ha: %+v %v", st, err)
	}

	// The handover is a change: refused without the token.
	_, err = Client{Base: srv.URL}.Handover(ctx, "d2")
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
		t.Fatalf("handover without a token: %v", err)
	}
	_, err = Client{Base: srv.URL, Token: "wrong-token-wrong-token"}.Handover(ctx, "d2")
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
		t.Fatalf("handover with a wrong token: %v", err)
	}
	if f.Status().Active != "d1" {
		t.Fatal("a refused handover moved the VIPs")
	}
	res, err := Client{Base: srv.URL, Token: tok}.Handover(ctx, "d2")
	if err != nil || res.From != "d1" || res.To != "d2" || res.Took <= 0 || res.Took > time.Second {
		t.Fatalf("handover: %+v %v", res, err)
	}
	// Now a standby: a second handover is refused, naming the active.
	_, err = Client{Base: srv.URL, Token: tok}.Handover(ctx, "d2")
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Msg, "ask the active director (d2)") {
		t.Fatalf("handover from a standby: %v", err)
	}
}

func TestHAHealthz(t *testing.T) {
	d, f := withFake(t, activeStatus())
	srv, _ := adminServer(t, d)
	get := func() (int, string) {
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != 200 || !strings.Contains(body, "ha: group web, d1 is active") {
		t.Fatalf("active: %d %q", code, body)
	}
	f.mu.Lock()
	f.st.State, f.st.Active = ha.StateStandby, "d2"
	f.mu.Unlock()
	if code, body := get(); code != 200 || !strings.Contains(body, "d1 is standby, active d2") {
		t.Fatalf("standby: %d %q", code, body)
	}
	f.mu.Lock()
	f.st.State, f.st.Active, f.st.LastReason = ha.StateFenced, "", "etcd unreachable: context deadline exceeded"
	f.mu.Unlock()
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "not forwarding: etcd unreachable") {
		t.Fatalf("fenced: %d %q", code, body)
	}
}

// The HA metrics are there, lint clean, and say what Status says.
func TestHAMetrics(t *testing.T) {
	d, _ := withFake(t, activeStatus())
	rec := httptest.NewRecorder()
	d.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	problems, err := promlint.New(bytes.NewReader(rec.Body.Bytes())).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	for _, want := range []string{
		`corral_director_ha_state{state="active"} 1`,
		`corral_director_ha_state{state="standby"} 0`,
		`corral_director_ha_transitions_total 3`,
		`corral_director_ha_fence_seconds 1.2`,
		`corral_director_ha_sync_lag_seconds{peer="d2"} 0.003`,
		`corral_director_ha_sync_errors_total 1`,
		`corral_director_ha_resyncs_total 2`,
		`corral_director_ha_peer_in_sync{peer="d2"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics has no %s", want)
		}
	}
	// Without HA, none of them.
	off := New(nil)
	defer off.Close()
	rec = httptest.NewRecorder()
	off.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if strings.Contains(rec.Body.String(), "corral_director_ha_") {
		t.Error("HA metrics without HA")
	}
}

const haConf = `admin 127.0.82.1:0
interface lo
ha {
    group web
    name d1
    etcd http://127.0.82.5:2379
    sync 127.0.82.11:7700
    key-file /etc/corral/ha.key
}
`

// A reload may change the services but not the ha block.
func TestHAReloadRefused(t *testing.T) {
	d := New(nil)
	defer d.Close()
	running, err := config.Parse("director.conf", []byte(haConf))
	if err != nil {
		t.Fatal(err)
	}
	// As if running (starting HA needs etcd and the XDP program).
	d.cfg.Store(running)
	d.applied = true
	path := filepath.Join(t.TempDir(), "director.conf")
	for _, c := range []struct{ conf, want string }{
		{strings.Replace(haConf, "name d1", "name d2", 1), path + ":3: ha: changing ha needs a restart"},
		{strings.Replace(haConf, "    sync", "    priority 200\n    sync", 1), path + ":3: ha: changing ha needs a restart"},
		{"admin 127.0.82.1:0\n", path + ": ha: removing the ha block needs a restart (the running director stays in group web)"},
	} {
		if err := os.WriteFile(path, []byte(c.conf), 0o644); err != nil {
			t.Fatal(err)
		}
		err := d.reloadFrom(path, "")
		if err == nil || err.Error() != c.want {
			t.Errorf("reload of\n%s\n got %v\nwant %s", c.conf, err, c.want)
		}
		if rs := d.ReloadStatus(); rs == nil || rs.OK {
			t.Errorf("the refusal is not in the reload status: %+v", rs)
		}
	}
	// Adding one to a director running without is refused too.
	plain := New(nil)
	defer plain.Close()
	plain.applied = true
	if err := os.WriteFile(path, []byte(haConf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := plain.reloadFrom(path, ""); err == nil || !strings.Contains(err.Error(), ":3: ha: adding an ha block needs a restart") {
		t.Errorf("adding ha on reload: %v", err)
	}
}

func TestReadHAKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	good := write("good", []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	if k, err := ReadHAKey(good); err != nil || string(k) != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("good key: %q %v", k, err)
	}
	for _, c := range []struct {
		path, want string
	}{
		{write("open", []byte("0123456789abcdef0123"), 0o644), "others can read it: chmod 600"},
		{write("group", []byte("0123456789abcdef0123"), 0o640), "others can read it"},
		{write("short", []byte("short\n"), 0o600), "5 bytes; want at least 16"},
		{write("long", bytes.Repeat([]byte("k"), maxHAKey+1), 0o600), "longer than 4096 bytes"},
		{filepath.Join(dir, "missing"), "no such file"},
		{dir, "not a regular file"},
	} {
		if _, err := ReadHAKey(c.path); err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "ha: key-file") {
			t.Errorf("%s: got %v, want an error with %q", c.path, err, c.want)
		}
	}
}

// Without the ha package built (or with etcd away) a director with an ha
// block says what failed and where: the config is complete, the error
// names the group and the director.
func TestHAConfigFiles(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "ha.key")
	os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef"), 0o600)
	h := config.NewHA()
	h.Group, h.Name, h.Etcd, h.Sync, h.KeyFile = "web", "d1", []string{"http://127.0.82.5:2379"}, "127.0.82.11:7700", key
	c, err := haConfig(h, "eth9")
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "d1" || c.Group != "web" || c.Mode != ha.ActiveStandby || c.Priority != 100 || c.LeaseTTL != 2*time.Second ||
		c.SyncListen != "127.0.82.11:7700" || len(c.Key) != 32 || c.Interface != "eth9" || c.EtcdTLS != nil {
		t.Fatalf("%+v", c)
	}
	h.Name = ""
	if c, err := haConfig(h, "eth9"); err != nil || c.Name == "" {
		t.Fatalf("no name: want the host name, got %q %v", c.Name, err)
	}
	h.EtcdCA, h.EtcdCert, h.EtcdKey = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "c.pem"), filepath.Join(dir, "c.key")
	if _, err := haConfig(h, "eth9"); err == nil || !strings.HasPrefix(err.Error(), "ha: etcd-ca: ") {
		t.Fatalf("missing CA: %v", err)
	}
	os.WriteFile(h.EtcdCA, []byte("not a certificate"), 0o644)
	if _, err := haConfig(h, "eth9"); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("bad CA: %v", err)
	}
}

// TestEtcdKeyOpenToOthersRefused: a director's etcd client key that
// others may read is refused before it is used.
func TestEtcdKeyOpenToOthersRefused(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "etcd.key")
	for _, f := range []string{"etcd.pem", "etcd.key"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A real CA certificate, so that the key is the first thing refused.
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = etcdTLS(&config.HA{EtcdCA: filepath.Join(dir, "ca.pem"), EtcdCert: filepath.Join(dir, "etcd.pem"), EtcdKey: key})
	if err == nil || !strings.Contains(err.Error(), "chmod 600 "+key) {
		t.Fatalf("etcd-key others may read: %v, want a refusal naming chmod 600", err)
	}
}

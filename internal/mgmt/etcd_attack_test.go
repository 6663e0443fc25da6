package mgmt

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"

	"go.etcd.io/etcd/server/v3/embed"
)

// rawHTTP is one request with a bounded client; the body ("" on error).
func rawHTTP(c *http.Client, method, url, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), nil
}

func tlsClient(tc *tls.Config) *http.Client {
	return &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
}

// TestEtcdLoopbackAttacker looks at a station started as corral up starts
// it (embedded etcd, client 7601 and peer 7602 on loopback) the way
// another local user would: etcd's JSON gateway and gRPC over plain http,
// TLS without a client certificate, a certificate of another CA with
// common name root, and the peer port with plain http, without a
// certificate and with a director's certificate of the right CA. None of
// them reads the CA's key, the sync key or the tokens, or writes a token
// record; the station keeps serving; the keys in DATA/tls are 0600.
func TestEtcdLoopbackAttacker(t *testing.T) {
	const ip = "127.0.85.21"
	ts := startStation(t, stationOpts(ip, t.TempDir()))
	dj := join(t, ts, api.RoleDirector, "d1").HA
	client, peer := "127.0.85.21:7601", "127.0.85.21:7602"
	secrets := []string{keyCA, keyHAKey, keyTokens}

	// A local user's probe: curl -X POST http://127.0.0.1:7601/v3/kv/range.
	plain := &http.Client{Timeout: 3 * time.Second}
	for _, k := range secrets {
		body := fmt.Sprintf(`{"key":%q,"range_end":%q}`, base64.StdEncoding.EncodeToString([]byte(k)),
			base64.StdEncoding.EncodeToString([]byte(k+"\xff")))
		code, out, err := rawHTTP(plain, "POST", "http://"+client+"/v3/kv/range", body)
		if err == nil && (code == 200 || strings.Contains(out, `"kvs"`)) {
			t.Errorf("plain http range of %s: %d %.200s", k, code, out)
		}
		put := fmt.Sprintf(`{"key":%q,"value":%q}`, base64.StdEncoding.EncodeToString([]byte(keyTokens+"evil")),
			base64.StdEncoding.EncodeToString([]byte(`{"kind":"api","role":"admin"}`)))
		if code, out, err := rawHTTP(plain, "POST", "http://"+client+"/v3/kv/put", put); err == nil && code == 200 {
			t.Errorf("plain http put of a token record: %d %.200s", code, out)
		}
		// TLS, trusting anything, but no client certificate.
		noCert := tlsClient(&tls.Config{InsecureSkipVerify: true})
		if code, out, err := rawHTTP(noCert, "POST", "https://"+client+"/v3/kv/range", body); err == nil {
			t.Errorf("TLS without a client certificate, range of %s: %d %.200s", k, code, out)
		}
	}
	if err := etcdGet([]string{"http://" + client}, nil, keyCA); err == nil {
		t.Error("gRPC over plain http read the CA")
	}
	if err := etcdTry([]string{"http://" + client}, nil, keyTokens+"evil"); err == nil {
		t.Error("gRPC over plain http wrote a token record")
	}
	if err := etcdGet([]string{"https://" + client}, &tls.Config{InsecureSkipVerify: true}, keyCA); err == nil {
		t.Error("gRPC over TLS without a client certificate read the CA")
	}
	other, err := newCA()
	if err != nil {
		t.Fatal(err)
	}
	forged, err := etcdClientTLS(other, etcdRootUser)
	if err != nil {
		t.Fatal(err)
	}
	forged.RootCAs, forged.InsecureSkipVerify = nil, true
	if err := etcdGet([]string{"https://" + client}, forged, keyCA); err == nil {
		t.Error("a root certificate of another CA read the CA")
	}
	// A director's own certificate (the right CA) opens none of them.
	for _, k := range secrets {
		if err := etcdGet(dj.Etcd, haTLS(t, dj), k); err == nil {
			t.Errorf("a director's certificate read %s", k)
		}
	}

	// The peer port: raft and the members list, never in plain text nor
	// to a certificate that is not a peer's.
	for _, path := range []string{"/members", "/raft", "/version"} {
		if code, out, err := rawHTTP(plain, "GET", "http://"+peer+path, ""); err == nil && code == 200 {
			t.Errorf("plain http on the peer port %s: %d %.200s", path, code, out)
		}
	}
	if code, _, err := rawHTTP(tlsClient(&tls.Config{InsecureSkipVerify: true}), "GET", "https://"+peer+"/members", ""); err == nil {
		t.Errorf("peer port without a client certificate: %d", code)
	}
	if code, _, err := rawHTTP(tlsClient(haTLS(t, dj)), "GET", "https://"+peer+"/members", ""); err == nil {
		t.Errorf("peer port with a director's certificate: %d", code)
	}
	// Control: a peer certificate of the station's CA is let in, so the
	// refusals above are the listener's checks, not a dead port.
	ca, err := loadLocalCA(filepath.Join(ts.dir, "tls"))
	if err != nil || ca == nil {
		t.Fatal(err)
	}
	pc, pk, err := ca.issue(etcdPeerCN, "127.0.85.22", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	if err != nil {
		t.Fatal(err)
	}
	pcert, err := tls.X509KeyPair(pc, pk)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.Cert)
	code, out, err := rawHTTP(tlsClient(&tls.Config{Certificates: []tls.Certificate{pcert}, RootCAs: pool, MinVersion: tls.VersionTLS13}), "GET", "https://"+peer+"/members", "")
	if err != nil || code != 200 || !strings.Contains(out, "https://"+peer) {
		t.Fatalf("control: a peer certificate on the peer port: %d %.200s %v", code, out, err)
	}
	// TLS 1.2 is refused on both ports.
	tls12 := &tls.Config{Certificates: []tls.Certificate{pcert}, RootCAs: pool, MaxVersion: tls.VersionTLS12}
	for _, a := range []string{client, peer} {
		if _, _, err := rawHTTP(tlsClient(tls12), "GET", "https://"+a+"/version", ""); err == nil {
			t.Errorf("%s: TLS 1.2 accepted", a)
		}
	}

	// Nothing was written, and the station serves.
	if r, err := ts.s.cli.Get(ctxT(t), keyTokens+"evil"); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("token record written by an attacker: %v %v", r, err)
	}
	var v api.Version
	if err := ts.client(t, ts.admin).Do(ctxT(t), "GET", api.RouteConfig, nil, &v); err != nil {
		t.Fatalf("the station after the probes: %v", err)
	}
	// The keys on disk are the station's alone.
	for _, f := range []string{"ca.key", "etcd.key", "etcd-peer.key", "server.key"} {
		p := filepath.Join(ts.dir, "tls", f)
		fi, err := os.Stat(p)
		if err != nil {
			if f == "server.key" && os.IsNotExist(err) {
				continue
			}
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v", p, fi.Mode().Perm())
		}
	}
}

// TestEtcdDirectorGroupRole: a director's etcd user reads and writes its
// own HA group's keys and nothing else: not another group's, not the sync
// key, the CA or the tokens. Moved to another group by a new version, it
// has the new group's keys as soon as the version is stored and loses the
// old group's; the all-groups role of earlier versions is deleted when
// the station starts.
func TestEtcdDirectorGroupRole(t *testing.T) {
	opt := stationOpts("127.0.85.31", t.TempDir())
	ts := startStation(t, opt)
	haGroups(t, ts, map[string]string{"d1": "a", "d2": "b"})
	d1, d2 := join(t, ts, api.RoleDirector, "d1").HA, join(t, ts, api.RoleDirector, "d2").HA
	t1, t2 := haTLS(t, d1), haTLS(t, d2)
	if err := etcdTry(d1.Etcd, t1, "/corral/ha/a/members/d1"); err != nil {
		t.Fatalf("d1 writing its own group's key: %v", err)
	}
	if err := etcdTry(d2.Etcd, t2, "/corral/ha/b/members/d2"); err != nil {
		t.Fatalf("d2 writing its own group's key: %v", err)
	}
	denied := func(who string, tc *tls.Config, eps []string, write, read []string) {
		t.Helper()
		for _, k := range write {
			if err := etcdTry(eps, tc, k); err == nil {
				t.Errorf("%s wrote %s", who, k)
			} else if !strings.Contains(err.Error(), "permission denied") {
				t.Errorf("%s writing %s: %v (want permission denied)", who, k, err)
			}
		}
		for _, k := range read {
			if err := etcdGet(eps, tc, k); err == nil {
				t.Errorf("%s read %s", who, k)
			}
		}
	}
	denied("d1", t1, d1.Etcd, []string{"/corral/ha/b/active", "/corral/ha/b/members/d1", keyHAKey, "/corral/ha/x", keyTokens + "x"},
		[]string{"/corral/ha/b/active", keyHAKey, keyCA})
	denied("d2", t2, d2.Etcd, []string{"/corral/ha/a/active", keyHAKey}, []string{"/corral/ha/a/members/d1", keyHAKey})

	// d1 moves to group b: open at once, a closed within seconds.
	haGroups(t, ts, map[string]string{"d1": "b", "d2": "b"})
	if err := etcdTry(d1.Etcd, t1, "/corral/ha/b/members/d1"); err != nil {
		t.Fatalf("d1 in group b right after the version: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for etcdTry(d1.Etcd, t1, "/corral/ha/a/members/d1") == nil {
		if time.Now().After(deadline) {
			t.Fatal("d1 still writes group a's keys 10 s after leaving it")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Out of every group: nothing.
	haGroups(t, ts, map[string]string{"d2": "b"})
	deadline = time.Now().Add(10 * time.Second)
	for etcdTry(d1.Etcd, t1, "/corral/ha/b/members/d1") == nil {
		if time.Now().After(deadline) {
			t.Fatal("d1 still writes group b's keys 10 s after leaving every group")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// An earlier version's role that opened all of /corral/ha/ to d1:
	// gone on the next start.
	ctx := ctxT(t)
	if _, err := ts.s.cli.RoleAdd(ctx, etcdHARole); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.s.cli.RoleGrantPermission(ctx, etcdHARole, keyHA, "/corral/ha0", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.s.cli.UserGrantRole(ctx, "d1", etcdHARole); err != nil {
		t.Fatal(err)
	}
	if err := etcdTry(d1.Etcd, t1, "/corral/ha/b/x"); err != nil {
		t.Fatalf("the old role did not open group b (the test's premise): %v", err)
	}
	ts.stop()
	ts = startStation(t, opt)
	denied("d1 after a restart", t1, d1.Etcd, []string{"/corral/ha/b/x", keyHAKey}, nil)
	if err := etcdTry(d2.Etcd, t2, "/corral/ha/b/members/d2"); err != nil {
		t.Fatalf("d2 after the restart: %v", err)
	}
}

// TestEtcdPeerURLUpgrade: a data directory an earlier version left (a
// member with plain-http peer and client URLs, no auth) starts as a TLS
// member: its keys are there, its advertised peer URL is moved to https,
// and auth is on.
func TestEtcdPeerURLUpgrade(t *testing.T) {
	opt := stationOpts("127.0.85.41", t.TempDir())
	cfg := embed.NewConfig()
	cfg.Name = opt.EtcdName
	cfg.Dir = filepath.Join(opt.Data, "etcd")
	cfg.Logger, cfg.LogLevel, cfg.LogOutputs = "zap", "error", []string{filepath.Join(opt.Data, "old-etcd.log")}
	pu, _ := url.Parse("http://" + opt.EtcdPeer)
	cu, _ := url.Parse("http://" + opt.EtcdClient)
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.InitialCluster = opt.EtcdName + "=" + pu.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("old-style etcd not ready")
	}
	if err := etcdTry([]string{cu.String()}, nil, "/old/key"); err != nil {
		t.Fatal(err)
	}
	e.Close()

	ts := startStation(t, opt)
	ctx := ctxT(t)
	r, err := ts.s.cli.Get(ctx, "/old/key")
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the old member's key: %v %v", r, err)
	}
	ml, err := ts.s.cli.MemberList(ctx)
	if err != nil || len(ml.Members) != 1 || len(ml.Members[0].PeerURLs) != 1 || ml.Members[0].PeerURLs[0] != "https://"+opt.EtcdPeer {
		t.Fatalf("peer URLs after the upgrade: %+v %v", ml, err)
	}
	if st, err := ts.s.cli.AuthStatus(ctx); err != nil || !st.Enabled {
		t.Fatalf("auth after the upgrade: %+v %v", st, err)
	}
	if err := etcdGet([]string{cu.String()}, nil, "/old/key"); err == nil {
		t.Fatal("plain http still reads after the upgrade")
	}
}

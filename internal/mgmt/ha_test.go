package mgmt

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/mgmt/agent"
	"github.com/corral-cluster/corral/internal/mgmt/api"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdTry is one Put through a fresh client of eps with tc (nil: plain),
// bounded to a few seconds.
func etcdTry(eps []string, tc *tls.Config, key string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, TLS: tc, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = cli.Put(ctx, key, "x")
	return err
}

// etcdGet is one Get like etcdTry.
func etcdGet(eps []string, tc *tls.Config, key string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, TLS: tc, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = cli.Get(ctx, key)
	return err
}

// haGroups applies a configuration (on the current version) that puts
// each director of groups in its HA group.
func haGroups(t *testing.T, ts *tstation, groups map[string]string) {
	t.Helper()
	names := slices.Sorted(maps.Keys(groups))
	var b strings.Builder
	b.WriteString("directors:\n")
	for i, n := range names {
		fmt.Fprintf(&b, "  - name: %s\n    interface: eth1\n    ha:\n      group: %s\n      sync: 10.0.0.%d:7700\n", n, groups[n], i+1)
	}
	b.WriteString("services:\n  - name: www\n    vip: 10.0.0.100:80\n    dataplane: xdp\n    servers:\n      - address: 10.0.1.1:80\n")
	c := ts.client(t, ts.admin)
	var v api.Version
	if err := c.Do(ctxT(t), "GET", api.RouteConfig, nil, &v); err != nil {
		t.Fatal(err)
	}
	mustApply(t, c, v.Version, b.String())
}

// haTLS is the client TLS of a director's join reply.
func haTLS(t *testing.T, h *api.HAJoin) *tls.Config {
	t.Helper()
	cert, err := tls.X509KeyPair([]byte(h.Cert), []byte(h.Key))
	if err != nil {
		t.Fatalf("HA client certificate: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(h.CA)) {
		t.Fatal("HA CA unreadable")
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// rootEtcdClient points opt (a station on an external etcd) at ts's
// embedded etcd with a root client certificate of ts's CA, as an
// operator would with --etcd-ca, --etcd-cert and --etcd-key.
func rootEtcdClient(t *testing.T, ts *tstation, opt *Options) {
	t.Helper()
	etcdClientFiles(t, ts, opt, etcdRootUser)
}

// etcdClientFiles is rootEtcdClient with a certificate for cn.
func etcdClientFiles(t *testing.T, ts *tstation, opt *Options, cn string) {
	t.Helper()
	ca, err := loadLocalCA(filepath.Join(ts.dir, "tls"))
	if err != nil || ca == nil {
		t.Fatalf("CA of %s: %v", ts.dir, err)
	}
	cert, key, err := ca.clientCert(cn)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	opt.EtcdCA, opt.EtcdCert, opt.EtcdKey = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "root.pem"), filepath.Join(dir, "root.key")
	for f, b := range map[string][]byte{opt.EtcdCA: ca.Cert, opt.EtcdCert: cert, opt.EtcdKey: key} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEtcdClientTLS: a client without a certificate (or with one of
// another CA) is refused; the one a director's join hands out works; the
// sync key is made once.
func TestEtcdClientTLS(t *testing.T) {
	opt := stationOpts("127.0.85.1", t.TempDir())
	ts := startStation(t, opt)
	haGroups(t, ts, map[string]string{"d1": "g", "d2": "g"})

	jr := join(t, ts, api.RoleDirector, "d1")
	h := jr.HA
	if h == nil {
		t.Fatal("director's join reply has no HA part")
	}
	if len(h.Etcd) != 1 || h.Etcd[0] != "https://127.0.85.1:7601" {
		t.Fatalf("HA etcd URLs: %v", h.Etcd)
	}
	if len(h.SyncKey) != haKeyLen {
		t.Fatalf("sync key: %d bytes", len(h.SyncKey))
	}
	good := haTLS(t, h)
	if err := etcdTry(h.Etcd, good, "/corral/ha/g/probe"); err != nil {
		t.Fatalf("the director's certificate is refused: %v", err)
	}
	if c := good.Certificates[0]; c.Leaf == nil {
		if leaf, err := x509.ParseCertificate(c.Certificate[0]); err != nil || leaf.Subject.CommonName != "d1" {
			t.Fatalf("certificate's common name: %v %v", leaf, err)
		}
	}

	// etcd's auth: a director reads and writes under its group's prefix
	// only (TestEtcdDirectorGroupRole has the rest).
	if err := etcdTry(h.Etcd, good, "/corral/cfg/current"); err == nil {
		t.Fatal("a director's certificate wrote the configuration")
	}
	if err := etcdGet(h.Etcd, good, keyCA); err == nil {
		t.Fatal("a director's certificate read the CA's key")
	}
	if err := etcdTry([]string{"http://127.0.85.1:7601"}, nil, "/corral/ha/g/probe"); err == nil {
		t.Fatal("plain http to the TLS listener worked")
	}
	noCert := &tls.Config{RootCAs: good.RootCAs, MinVersion: tls.VersionTLS12}
	if err := etcdTry(h.Etcd, noCert, "/corral/ha/g/probe"); err == nil {
		t.Fatal("a client without a certificate was let in")
	}
	other, err := newCA()
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := etcdClientTLS(other, "d1")
	if err != nil {
		t.Fatal(err)
	}
	foreign.RootCAs = good.RootCAs // it trusts the station; the station does not trust it
	if err := etcdTry(h.Etcd, foreign, "/corral/ha/g/probe"); err == nil {
		t.Fatal("a certificate of another CA was let in")
	}

	// The key is the group's: the same for every director.
	jr2 := join(t, ts, api.RoleDirector, "d2")
	if jr2.HA == nil || !bytes.Equal(jr2.HA.SyncKey, h.SyncKey) {
		t.Fatal("second director got another sync key")
	}
	// Revoking d1's credential takes its etcd user away.
	id, _, _ := strings.Cut(jr.Credential, ".")
	if err := ts.client(t, ts.admin).Do(ctxT(t), "DELETE", api.RouteToken+id, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := etcdTry(h.Etcd, good, "/corral/ha/g/probe"); err == nil {
		t.Fatal("a revoked director's certificate still writes")
	}
	if err := etcdTry(jr2.HA.Etcd, haTLS(t, jr2.HA), "/corral/ha/g/probe"); err != nil {
		t.Fatalf("d2 lost its access with d1's revocation: %v", err)
	}
	if nr := join(t, ts, api.RoleNode, "n1"); nr.HA != nil {
		t.Fatal("a node got an HA part")
	}
	tok := mkToken(t, ts, api.TokenRequest{Role: api.RoleDirector, TTL: time.Hour})
	err = ts.client(t, tok.Secret).Do(ctxT(t), "POST", api.RouteJoin, api.JoinRequest{Role: api.RoleDirector, Name: etcdRootUser}, nil)
	if status(err) != 400 || !strings.Contains(err.Error(), "root") {
		t.Fatalf("director named root: %v", err)
	}
}

// TestThreeStationsEtcdTLS: three stations started with one CA (InitCA)
// form their etcd cluster over TLS peers; one director certificate works
// with every station's etcd.
func TestThreeStationsEtcdTLS(t *testing.T) {
	ips := []string{"127.0.85.11", "127.0.85.12", "127.0.85.13"}
	ts := threeStations(t, ips, nil)
	ml, err := ts[0].s.cli.MemberList(ctxT(t))
	if err != nil || len(ml.Members) != 3 {
		t.Fatalf("members: %v %v", ml, err)
	}
	for _, m := range ml.Members {
		if len(m.PeerURLs) != 1 || !strings.HasPrefix(m.PeerURLs[0], "https://") {
			t.Errorf("member %s's peer URLs %v: want https", m.Name, m.PeerURLs)
		}
	}
	haGroups(t, ts[0], map[string]string{"d1": "g"})
	h := join(t, ts[1], api.RoleDirector, "d1").HA
	if h == nil || len(h.Etcd) != 3 {
		t.Fatalf("HA part: %+v", h)
	}
	tc := haTLS(t, h)
	for _, ep := range h.Etcd {
		if err := etcdTry([]string{ep}, tc, "/corral/ha/g/probe"); err != nil {
			t.Errorf("etcd %s refuses the director: %v", ep, err)
		}
	}
}

// TestAgentDirectorHA: a director's agent saves its join's HA part
// (0600) in the state directory; DirectorViewHA turns it and the ha
// entry into the director's ha block, whose files open the station's
// etcd. A restart on the saved credential finds it again.
func TestAgentDirectorHA(t *testing.T) {
	ts := startStation(t, func() Options {
		o := stationOpts("127.0.85.3", t.TempDir())
		return o
	}())
	tok := mkToken(t, ts, api.TokenRequest{Role: api.RoleDirector, TTL: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	state := t.TempDir()
	opt := agent.Options{Stations: []string{ts.url}, Token: tok.Secret, State: state, Role: api.RoleDirector, Name: "dir-a"}
	if _, _, err := agent.Join(ctx, opt); err != nil {
		t.Fatal(err)
	}
	check := func() *clustercfg.HAState {
		t.Helper()
		st, err := agent.LoadHAState(state)
		if err != nil || st == nil {
			t.Fatalf("LoadHAState: %+v %v", st, err)
		}
		for _, f := range []string{st.EtcdCA, st.EtcdCert, st.EtcdKey, st.KeyFile} {
			fi, err := os.Stat(f)
			if err != nil || fi.Mode().Perm() != 0o600 || filepath.Dir(f) != state {
				t.Fatalf("%s: %v %v", f, fi, err)
			}
		}
		return st
	}
	st := check()
	if len(st.Etcd) != 1 || st.Etcd[0] != "https://127.0.85.3:7601" {
		t.Fatalf("etcd URLs: %v", st.Etcd)
	}
	key, _ := os.ReadFile(st.KeyFile)
	if len(key) != 2*haKeyLen+1 || key[len(key)-1] != '\n' {
		t.Fatalf("sync key file: %q", key)
	}

	const doc = `directors:
  - name: dir-a
    interface: eth1
    ha:
      group: web
      priority: 200
      sync: 10.0.0.11:7700
      lease-ttl: 3s
services:
  - name: www
    vip: 10.0.0.100:80
    dataplane: xdp
    servers:
      - address: 10.0.1.1:80
`
	c, err := clustercfg.Parse("ha.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, ts.client(t, ts.admin), 0, doc) // dir-a's group opens to it
	d, err := clustercfg.DirectorViewHA(c, "dir-a", nil, st)
	if err != nil {
		t.Fatal(err)
	}
	h := d.HA
	if h == nil || h.Group != "web" || h.Name != "dir-a" || h.Mode != "active-standby" || h.Priority != 200 ||
		h.Sync != "10.0.0.11:7700" || h.LeaseTTL != 3*time.Second || h.KeyFile != st.KeyFile ||
		h.EtcdCA != st.EtcdCA || h.EtcdCert != st.EtcdCert || h.EtcdKey != st.EtcdKey || len(h.Etcd) != 1 {
		t.Fatalf("director's ha block: %+v", h)
	}
	cert, err := tls.LoadX509KeyPair(h.EtcdCert, h.EtcdKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(h.EtcdCA)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	if err := etcdTry(h.Etcd, &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, "/corral/ha/web/probe"); err != nil {
		t.Fatalf("the saved files do not open the station's etcd: %v", err)
	}

	// A restart: the saved credential, no token; the HA part stays.
	opt.Token = ""
	if _, _, err := agent.Join(ctx, opt); err != nil {
		t.Fatal(err)
	}
	check()
}

// TestEtcdUsersRemade: a station makes the etcd users of the directors
// whose credentials stand on every start (a restored backup has the
// credentials, not etcd's users).
func TestEtcdUsersRemade(t *testing.T) {
	opt := stationOpts("127.0.85.4", t.TempDir())
	ts := startStation(t, opt)
	haGroups(t, ts, map[string]string{"d1": "g"})
	h := join(t, ts, api.RoleDirector, "d1").HA
	if _, err := ts.s.cli.UserDelete(ctxT(t), "d1"); err != nil {
		t.Fatal(err)
	}
	if err := etcdTry(h.Etcd, haTLS(t, h), "/corral/ha/g/probe"); err == nil {
		t.Fatal("d1 without its user still writes")
	}
	ts.stop()
	startStation(t, opt)
	if err := etcdTry(h.Etcd, haTLS(t, h), "/corral/ha/g/probe"); err != nil {
		t.Fatalf("d1's user not made again on start: %v", err)
	}
}

// TestEtcdCRL: a director that joins again under its name (a replaced
// machine) gets a new certificate; the old one, of the same common name,
// is refused by the CRL on its next connection.
func TestEtcdCRL(t *testing.T) {
	opt := stationOpts("127.0.85.5", t.TempDir())
	ts := startStation(t, opt)
	haGroups(t, ts, map[string]string{"d1": "g"})
	old := join(t, ts, api.RoleDirector, "d1").HA
	oldTLS := haTLS(t, old)
	if err := etcdTry(old.Etcd, oldTLS, "/corral/ha/g/probe"); err != nil {
		t.Fatal(err)
	}
	cur := join(t, ts, api.RoleDirector, "d1").HA
	deadline := time.Now().Add(10 * time.Second)
	for etcdTry(old.Etcd, oldTLS, "/corral/ha/g/probe") == nil {
		if time.Now().After(deadline) {
			t.Fatal("the replaced certificate still works after 10 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := etcdTry(cur.Etcd, haTLS(t, cur), "/corral/ha/g/probe"); err != nil {
		t.Fatalf("the new certificate: %v", err)
	}
}

// TestEtcdHARolePermits: what the election does (internal/ha, docs/ha.md)
// is allowed to a director's etcd user under auth: a session's lease and
// its keep-alive, the active key taken in a transaction on the lease, a
// watch on the group's prefix, and another director revoking the dead
// active's lease (its keys are under /corral/ha/) and taking over.
func TestEtcdHARolePermits(t *testing.T) {
	opt := stationOpts("127.0.85.6", t.TempDir())
	ts := startStation(t, opt)
	haGroups(t, ts, map[string]string{"dir-a": "web", "dir-b": "web"})
	client := func(name string) *clientv3.Client {
		h := join(t, ts, api.RoleDirector, name).HA
		cli, err := clientv3.New(clientv3.Config{Endpoints: h.Etcd, DialTimeout: 2 * time.Second, TLS: haTLS(t, h), Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	a, b := client("dir-a"), client("dir-b")
	ctx := ctxT(t)
	const active = "/corral/ha/web/active"
	take := func(cli *clientv3.Client, me string) (clientv3.LeaseID, bool) {
		t.Helper()
		l, err := cli.Grant(ctx, 2)
		if err != nil {
			t.Fatalf("%s: lease: %v", me, err)
		}
		if _, err := cli.KeepAliveOnce(ctx, l.ID); err != nil {
			t.Fatalf("%s: keep-alive: %v", me, err)
		}
		if _, err := cli.Put(ctx, "/corral/ha/web/members/"+me, `{}`, clientv3.WithLease(l.ID)); err != nil {
			t.Fatalf("%s: member key: %v", me, err)
		}
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(active), "=", 0)).
			Then(clientv3.OpPut(active, me, clientv3.WithLease(l.ID))).Commit()
		if err != nil {
			t.Fatalf("%s: take: %v", me, err)
		}
		return l.ID, r.Succeeded
	}
	la, ok := take(a, "dir-a")
	if !ok {
		t.Fatal("dir-a did not take the group")
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wc := b.Watch(wctx, "/corral/ha/web/", clientv3.WithPrefix())
	if _, ok := take(b, "dir-b"); ok {
		t.Fatal("dir-b took a group dir-a holds")
	}
	// dir-a is gone (its stream ended without Bye): dir-b revokes its lease.
	if _, err := b.Revoke(ctx, la); err != nil {
		t.Fatalf("dir-b revoking dir-a's lease: %v", err)
	}
	select {
	case wr := <-wc:
		if err := wr.Err(); err != nil {
			t.Fatalf("watch: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("dir-b's watch saw nothing")
	}
	if _, ok := take(b, "dir-b"); !ok {
		t.Fatal("dir-b could not take the group after revoking dir-a's lease")
	}
	r, err := a.Get(ctx, active)
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "dir-b" {
		t.Fatalf("active: %v %v", r, err)
	}
	// Still nothing outside /corral/ha/.
	if _, err := b.Get(ctx, keyTokens, clientv3.WithPrefix()); err == nil {
		t.Fatal("a director read the tokens")
	}
}

// TestStationsNeedOneCA: two stations forming one cluster, each with a
// CA of its own, cannot trust each other's peers: the start fails in
// bounded time, naming init-ca and etcd's log; an http:// peer URL in the
// initial cluster is refused at once.
func TestStationsNeedOneCA(t *testing.T) {
	old := etcdStartTimeout
	etcdStartTimeout = 5 * time.Second
	defer func() { etcdStartTimeout = old }()
	ips := []string{"127.0.85.51", "127.0.85.52"}
	var ic []string
	for _, ip := range ips {
		ic = append(ic, "st-"+strings.ReplaceAll(ip, ".", "-")+"=https://"+ip+":7602")
	}
	errs := make([]error, len(ips))
	var wg sync.WaitGroup
	for i, ip := range ips {
		opt := stationOpts(ip, t.TempDir())
		opt.EtcdInitialCluster = strings.Join(ic, ",")
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := New(opt)
			if s != nil {
				s.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "init-ca") || !strings.Contains(err.Error(), "etcd.log") {
			t.Errorf("station %d with its own CA: %v", i, err)
		}
	}
	opt := stationOpts("127.0.85.53", t.TempDir())
	opt.EtcdInitialCluster = opt.EtcdName + "=http://127.0.85.53:7602"
	if _, err := New(opt); err == nil || !strings.Contains(err.Error(), "want https://HOST:PORT") {
		t.Fatalf("http:// peer URL: %v", err)
	}
}

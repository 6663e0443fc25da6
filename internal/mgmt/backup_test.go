package mgmt

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

func TestBackupRestore(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.52.8", t.TempDir()))
	ctx := ctxT(t)
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, "v: 1")
	mustApply(t, admin, 1, "v: 2")
	jr := join(t, ts, api.RoleNode, "n1")
	spare := mkToken(t, ts, api.TokenRequest{Role: api.RoleIOD, TTL: time.Hour})
	var d api.Desired
	if err := ts.client(t, jr.Credential).Do(ctx, "GET", api.RouteDesired, nil, &d); err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	if err := admin.Do(ctx, "GET", api.RouteBackup, nil, &buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(buf.Bytes(), []byte("corral-mgmt-backup v1\n")) {
		t.Fatalf("backup header: %q", buf.Bytes()[:40])
	}
	work := t.TempDir()
	file := filepath.Join(work, "st.backup")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	oldCA := ts.s.CA()
	ts.stop() // the old station is gone for good

	// A cut file, a corrupt one, a non-empty directory: refused, and
	// nothing left behind.
	b := buf.Bytes()
	corrupt := append([]byte(nil), b...)
	corrupt[len(corrupt)/2] ^= 1
	for name, data := range map[string][]byte{"cut": b[:len(b)-100], "cut-mid": b[:len(b)/2], "corrupt": corrupt, "empty": nil, "junk": []byte("hello\n")} {
		f := filepath.Join(work, name)
		os.WriteFile(f, data, 0o600)
		err := Restore(f, filepath.Join(work, "data-"+name))
		if err == nil {
			t.Errorf("%s backup restored", name)
		}
		if _, serr := os.Stat(filepath.Join(work, "data-"+name)); serr == nil {
			t.Errorf("%s: restore left a directory behind", name)
		}
	}
	full := filepath.Join(work, "full")
	os.MkdirAll(full, 0o700)
	os.WriteFile(filepath.Join(full, "x"), nil, 0o600)
	if err := Restore(file, full); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("restore into a non-empty dir: %v", err)
	}
	ents, _ := os.ReadDir(work)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".corral-restore") {
			t.Fatalf("left behind: %s", e.Name())
		}
	}

	dir := filepath.Join(work, "restored")
	if err := Restore(file, dir); err != nil {
		t.Fatal(err)
	}
	// A station on another address over the restored directory.
	ts2 := startStation(t, stationOpts("127.0.52.9", dir))
	if CAHash(ts2.s.CA()) != CAHash(oldCA) || ts2.admin != ts.admin {
		t.Fatal("restored station has another CA or bootstrap token")
	}
	admin2 := ts2.client(t, ts2.admin)
	var hist []api.Version
	if err := admin2.Do(ctx, "GET", api.RouteHistory, nil, &hist); err != nil || len(hist) != 2 || hist[0].Version != 2 {
		t.Fatalf("restored history: %+v %v", hist, err)
	}
	// The member's credential still works, and its old Rev gets an answer.
	var d2 api.Desired
	if err := ts2.client(t, jr.Credential).Do(ctx, "GET", api.RouteDesired+"?wait=20s&after="+itoa(d.Rev), nil, &d2); err != nil || d2.Version != 2 {
		t.Fatalf("member after restore: %+v %v", d2, err)
	}
	var jr2 api.JoinReply
	if err := ts2.client(t, spare.Secret).Do(ctx, "POST", api.RouteJoin, api.JoinRequest{Role: api.RoleIOD, Name: "i1"}, &jr2); err != nil {
		t.Fatalf("join with a token made before the backup: %v", err)
	}
	var audit []api.AuditEntry
	admin2.Do(ctx, "GET", api.RouteAudit+"?limit=3", nil, &audit)
	found := false
	for _, a := range audit {
		found = found || a.Action == "restore"
	}
	if !found {
		t.Fatalf("no restore in the audit log: %+v", audit)
	}
	if _, err := os.Stat(filepath.Join(dir, restorePend)); err == nil {
		t.Fatal("restore.pending still there")
	}
	if st, err := os.Stat(filepath.Join(dir, "admin.token")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("admin.token: %v %v", st, err)
	}
}

func TestRestartLosesNothing(t *testing.T) {
	opt := stationOpts("127.0.52.11", t.TempDir())
	ts := startStation(t, opt)
	ctx := ctxT(t)
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, "v: 1")
	jr := join(t, ts, api.RoleNode, "n1")
	ts.s.setDrain(ctx, "n1", true, "admin")
	ts.stop()

	ts2 := startStation(t, opt)
	if ts2.admin != ts.admin {
		t.Fatal("bootstrap token changed over a restart")
	}
	var d api.Desired
	if err := ts2.client(t, jr.Credential).Do(ctx, "GET", api.RouteDesired, nil, &d); err != nil || d.Version != 1 || len(d.Drained) != 1 {
		t.Fatalf("after restart: %+v %v", d, err)
	}
	if r := mustApply(t, ts2.client(t, ts2.admin), 1, "v: 2"); r.Version != 2 {
		t.Fatalf("apply after restart: %+v", r)
	}
}

func TestHealthzMetrics(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.52.12", t.TempDir()))
	c := ts.client(t, "")
	var b bytes.Buffer
	if err := c.Do(ctxT(t), "GET", api.RouteHealthz, nil, &b); err != nil || !strings.HasPrefix(b.String(), "ok") {
		t.Fatalf("healthz: %q %v", b.String(), err)
	}
	ts.client(t, "bad.token").Do(ctxT(t), "GET", api.RouteConfig, nil, nil)
	mustApply(t, ts.client(t, ts.admin), 0, "v: 1")
	b.Reset()
	if err := c.Do(ctxT(t), "GET", api.RouteMetrics, nil, &b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"corral_mgmt_applies_total 1", "corral_mgmt_auth_failures_total 1", "corral_mgmt_members_up"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Stopping etcd makes healthz say so (once its cached answer, at
	// most healthEvery old, has expired).
	ts.s.closeEtcd()
	var code int
	var body []byte
	for end := time.Now().Add(5 * healthEvery); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest("GET", ts.url+api.RouteHealthz, nil)
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if code = resp.StatusCode; code == 503 {
			break
		}
	}
	if code != 503 {
		t.Fatalf("healthz with etcd down: %d %s", code, body)
	}
}

func TestThreeStations(t *testing.T) {
	ips := []string{"127.0.52.21", "127.0.52.22", "127.0.52.23"}
	var ic []string
	for _, ip := range ips {
		ic = append(ic, "st-"+strings.ReplaceAll(ip, ".", "-")+"=https://"+ip+":7602")
	}
	opts := make([]Options, 3)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	if err := InitCA(dirs...); err != nil {
		t.Fatal(err)
	}
	sts := make([]*Station, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, ip := range ips {
		opts[i] = stationOpts(ip, dirs[i])
		opts[i].EtcdInitialCluster = strings.Join(ic, ",")
		wg.Add(1)
		go func() {
			defer wg.Done()
			sts[i], errs[i] = New(opts[i])
		}()
	}
	wg.Wait()
	var ts []*tstation
	for i := range sts {
		if errs[i] != nil {
			for _, s := range sts {
				if s != nil {
					s.Close()
				}
			}
			t.Fatalf("station %d: %v", i, errs[i])
		}
	}
	for i := range sts {
		ts = append(ts, serve(t, sts[i], opts[i]))
	}
	for _, x := range ts[1:] {
		if !bytes.Equal(x.s.CA(), ts[0].s.CA()) {
			t.Fatal("the three stations have different CAs")
		}
	}
	ctx := ctxT(t)
	// A member of station 2 long-polls; an apply on station 0 wakes it.
	mc := ts[2].client(t, join(t, ts[1], api.RoleNode, "n1").Credential)
	var d api.Desired
	if err := mc.Do(ctx, "GET", api.RouteDesired, nil, &d); err != nil {
		t.Fatal(err)
	}
	ch := make(chan api.Desired, 1)
	go func() {
		var nd api.Desired
		mc.Do(ctx, "GET", api.RouteDesired+"?wait=30s&after="+itoa(d.Rev), nil, &nd)
		ch <- nd
	}()
	time.Sleep(100 * time.Millisecond)
	mustApply(t, ts[0].client(t, ts[0].admin), 0, "v: 1")
	var v api.Version
	if err := ts[1].client(t, ts[1].admin).Do(ctx, "GET", api.RouteConfig, nil, &v); err != nil || v.Version != 1 {
		t.Fatalf("station 1 reads: %+v %v", v, err)
	}
	select {
	case nd := <-ch:
		if nd.Version != 1 {
			t.Fatalf("woken: %+v", nd)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("apply on station 0 did not wake a poll on station 2")
	}
	// Station 2's events show the version made on station 0, once.
	n := 0
	for i := 0; i < 50 && n == 0; i++ {
		time.Sleep(50 * time.Millisecond)
		for _, e := range ts[2].s.recentEvents(0) {
			if e.Version == 1 {
				n++
			}
		}
	}
	if n != 1 {
		t.Fatalf("station 2 announced version 1 %d times: %+v", n, ts[2].s.recentEvents(0))
	}
	var jr api.JoinReply
	tok := mkToken(t, ts[0], api.TokenRequest{Role: api.RoleNode, TTL: time.Hour})
	if err := ts[2].client(t, tok.Secret).Do(ctx, "POST", api.RouteJoin, api.JoinRequest{Role: "node", Name: "n2"}, &jr); err != nil || len(jr.Stations) != 3 {
		t.Fatalf("join lists every station: %+v %v", jr.Stations, err)
	}
	// One station down: the other two still apply.
	ts[0].stop()
	if r := mustApply(t, ts[1].client(t, ts[1].admin), 1, "v: 2"); r.Version != 2 {
		t.Fatal(r)
	}
	_ = context.Background
}

func FuzzParseBackup(f *testing.F) {
	f.Add([]byte(backupHeader + "section kv 2\n[]\nend sha256 00\n"))
	f.Add([]byte(backupHeader + "section kv 99999\n[]\n"))
	f.Add([]byte("junk"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseBackup(b)
		if err == nil && c.kv == nil {
			t.Fatal("accepted without kv")
		}
	})
}

func TestExternalEtcdInsecure(t *testing.T) {
	a := startStation(t, stationOpts("127.0.52.31", t.TempDir()))
	opt := stationOpts("127.0.52.32", t.TempDir())
	opt.Etcd = []string{"https://127.0.52.31:7601"}
	rootEtcdClient(t, a, &opt)
	opt.Insecure = true
	b := startStation(t, opt)
	if b.s.etcd != nil || b.s.CA() != nil || !strings.HasPrefix(b.url, "http://") {
		t.Fatalf("external/insecure station: etcd %v, CA %d bytes, url %s", b.s.etcd, len(b.s.CA()), b.url)
	}
	mustApply(t, b.client(t, b.admin), 0, "v: 1")
	var v api.Version
	if err := a.client(t, a.admin).Do(ctxT(t), "GET", api.RouteConfig, nil, &v); err != nil || v.Version != 1 || v.YAML != "v: 1\n" {
		t.Fatalf("read through the other station: %+v %v", v, err)
	}
	// An external etcd that is not there: a clear error, in bounded time.
	old := etcdStartTimeout
	etcdStartTimeout = 2 * time.Second
	defer func() { etcdStartTimeout = old }()
	opt2 := stationOpts("127.0.52.33", t.TempDir())
	opt2.Etcd = []string{"https://127.0.52.33:7601"}
	rootEtcdClient(t, a, &opt2)
	if _, err := New(opt2); err == nil || !strings.Contains(err.Error(), "did not answer within") {
		t.Fatalf("no etcd: %v", err)
	}
}

// TestExternalEtcdUserPassword: a station on an external etcd with auth
// on logs in with --etcd-user and its password (its client certificate's
// common name is no user there); a wrong password is refused by name; a
// key file others may read is refused before any connection.
func TestExternalEtcdUserPassword(t *testing.T) {
	a := startStation(t, stationOpts("127.0.52.41", t.TempDir()))
	ctx := ctxT(t)
	if _, err := a.s.cli.UserAdd(ctx, "mgmt-b", "pw-of-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.s.cli.UserGrantRole(ctx, "mgmt-b", "root"); err != nil {
		t.Fatal(err)
	}
	opt := stationOpts("127.0.52.42", t.TempDir())
	opt.Etcd = []string{"https://127.0.52.41:7601"}
	etcdClientFiles(t, a, &opt, "no-such-user")
	old := etcdStartTimeout
	etcdStartTimeout = 3 * time.Second
	defer func() { etcdStartTimeout = old }()
	opt.EtcdUser, opt.EtcdPassword = "mgmt-b", "wrong"
	if _, err := New(opt); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("wrong etcd password: %v", err)
	}
	os.Chmod(opt.EtcdKey, 0o644)
	if _, err := New(opt); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("etcd key readable by others: %v", err)
	}
	os.Chmod(opt.EtcdKey, 0o600)
	opt.EtcdPassword = "pw-of-b"
	b := startStation(t, opt)
	mustApply(t, b.client(t, b.admin), 0, "v: 1")
	var v api.Version
	if err := a.client(t, a.admin).Do(ctx, "GET", api.RouteConfig, nil, &v); err != nil || v.Version != 1 {
		t.Fatalf("read through the other station: %+v %v", v, err)
	}
}

func TestRestoreRefusesUsedEtcd(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.52.14", t.TempDir()))
	var buf bytes.Buffer
	if err := ts.s.Backup(ctxT(t), &buf); err != nil {
		t.Fatal(err)
	}
	ts.stop()
	work := t.TempDir()
	file := filepath.Join(work, "b")
	os.WriteFile(file, buf.Bytes(), 0o600)
	dir := filepath.Join(work, "d")
	if err := Restore(file, dir); err != nil {
		t.Fatal(err)
	}
	// Another station's etcd, holding its own keys: refused, pending kept.
	other := startStation(t, stationOpts("127.0.52.15", t.TempDir()))
	opt := stationOpts("127.0.52.16", dir)
	opt.Etcd = []string{"https://127.0.52.15:7601"}
	rootEtcdClient(t, other, &opt)
	if _, err := New(opt); err == nil || !strings.Contains(err.Error(), "fresh etcd") {
		t.Fatalf("restore over a used etcd: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, restorePend)); err != nil {
		t.Fatal("pending restore lost after a refusal")
	}
	_ = other
}

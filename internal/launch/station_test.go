package launch_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/launch/managed"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// The managed `corral up` tests run one at a time on 127.0.58.0/24 (the
// station on .1:7600, etcd on .1:7601/7602, nodes .21.., VIP .100:8080);
// the join-token test's extra node takes .31.

const stationNet = "127.0.58"

// managedUp is a `corral up` with its station, and an admin client of it.
type managedUp struct {
	*upRun
	bin, dir, data string
	cl             *api.Client
	nodes          int
}

// startManaged runs a small managed cluster: one metadata server, one
// iod, nodes web nodes.
func startManaged(t *testing.T, nodes int, args ...string) *managedUp {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a whole cluster with its station")
	}
	bin := pfstest.Binary(t)
	dir := t.TempDir()
	args = append([]string{"--meta-members", "1", "--iods", "1", "--nodes", fmt.Sprint(nodes)}, args...)
	t.Cleanup(func() { reapUnder(t, dir) }) // runs after up's own cleanup
	u := startUp(t, bin, dir, stationNet, args...)
	m := &managedUp{upRun: u, bin: bin, dir: dir, data: filepath.Join(dir, "corral-data"), nodes: nodes}
	tok, err := os.ReadFile(filepath.Join(m.data, "mgmt", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	m.cl, err = api.NewClientCAFile([]string{m.stationURL()}, strings.TrimSpace(string(tok)), filepath.Join(m.data, "mgmt", "tls", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *managedUp) stationURL() string { return "https://" + stationNet + ".1:7600" }
func (m *managedUp) vip() string        { return "http://" + stationNet + ".100:8080/" }
func (m *managedUp) vipL7() string      { return "http://" + stationNet + ".100:8081/" }

// call is one API call bounded by 10 s.
func (m *managedUp) call(method, route string, in, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return m.cl.Do(ctx, method, route, in, out)
}

// current is the station's current configuration.
func (m *managedUp) current(t *testing.T) (*clustercfg.Config, api.Version) {
	t.Helper()
	var v api.Version
	if err := m.call(http.MethodGet, api.RouteConfig, nil, &v); err != nil {
		t.Fatal(err)
	}
	c, err := clustercfg.Parse("current", []byte(v.YAML))
	if err != nil {
		t.Fatalf("the station's current configuration: %v", err)
	}
	return c, v
}

// apply stores c on base and returns the new version.
func (m *managedUp) apply(c *clustercfg.Config, base int64, comment string) (int64, error) {
	y, err := c.Marshal()
	if err != nil {
		return 0, err
	}
	var rep api.ApplyReply
	if err := m.call(http.MethodPut, api.RouteConfig, api.ApplyRequest{Base: base, YAML: string(y), Comment: comment}, &rep); err != nil {
		return 0, err
	}
	return rep.Version, nil
}

// members are the members the cluster has: the director, the nodes, meta
// and the iod.
func (m *managedUp) members() []string {
	out := []string{"director", "iod1", "meta"}
	for i := range m.nodes {
		out = append(out, managed.NodeName(i))
	}
	return out
}

// statuses is the station's members list by name.
func (m *managedUp) statuses() (map[string]api.MemberStatus, error) {
	var ms []api.MemberStatus
	if err := m.call(http.MethodGet, api.RouteMembers, nil, &ms); err != nil {
		return nil, err
	}
	out := map[string]api.MemberStatus{}
	for _, s := range ms {
		out[s.Name] = s
	}
	return out, nil
}

// waitApplied waits until every member of names is up and reports
// version v applied with no error.
func (m *managedUp) waitApplied(t *testing.T, v int64, names []string, limit time.Duration) {
	t.Helper()
	waitFor(t, fmt.Sprintf("every member applies version %d", v), limit, func() error {
		st, err := m.statuses()
		if err != nil {
			return err
		}
		for _, n := range names {
			s, ok := st[n]
			switch {
			case !ok:
				return fmt.Errorf("%s: not a member (members: %v)", n, st)
			case !s.Up:
				return fmt.Errorf("%s: not up", n)
			case s.Version != v || s.Error != "":
				return fmt.Errorf("%s: version %d applied, error %q", n, s.Version, s.Error)
			}
		}
		return nil
	})
}

// nodeWeight sets node name's weight in c.
func nodeWeight(t *testing.T, c *clustercfg.Config, name string, w int) {
	t.Helper()
	for i := range c.Nodes {
		if c.Nodes[i].Name == name {
			c.Nodes[i].Weight = managed.Weight(w)
			return
		}
	}
	t.Fatalf("no node %s in the configuration", name)
}

// directorWeight is the configured weight of server addr in service svc,
// as the director's admin API shows it.
func (m *managedUp) directorWeight(svc, addr string) (int, error) {
	resp, err := http.Get("http://" + stationNet + ".1:7500/api/services")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var st []struct {
		Name    string `json:"name"`
		Servers []struct {
			Addr         string `json:"addr"`
			ConfigWeight int    `json:"config_weight"`
		} `json:"servers"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, err
	}
	for _, s := range st {
		for _, r := range s.Servers {
			if s.Name == svc && r.Addr == addr {
				return r.ConfigWeight, nil
			}
		}
	}
	return 0, fmt.Errorf("no server %s in service %s: %s", addr, svc, b)
}

// TestUpStation (a): `corral up` with its station serves the sample site
// through the VIP; `corral cfg get` shows version 1; a version changing a
// node's weight is applied by every member (the station's members list)
// and the director runs the new weight.
func TestUpStation(t *testing.T) {
	m := startManaged(t, 2)
	if err := get(m.vip()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{m.stationURL(), "admin token", "cfg apply"} {
		if !strings.Contains(m.out.String(), want) {
			t.Errorf("up's output does not say %q", want)
		}
	}
	// Every role runs its own copy of the binary.
	for _, role := range append(m.members(), "mgmt") {
		if _, err := os.Stat(filepath.Join(m.data, "bin", role, "corral")); err != nil {
			t.Errorf("%s: %v", role, err)
		}
	}
	cmd := exec.Command(m.bin, "cfg", "get", "--station", m.stationURL())
	cmd.Dir = m.dir // ./corral-data/mgmt's admin token and CA by default
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("corral cfg get: %v: %s", err, out)
	}
	if first, _, _ := strings.Cut(string(out), "\n"); !strings.Contains(first, "version 1") {
		t.Fatalf("corral cfg get: first line %q, want the version 1 header", first)
	}
	m.waitApplied(t, 1, m.members(), 20*time.Second)
	checkMemberCerts(t, m.data)

	c, v := m.current(t)
	nodeWeight(t, c, "node2", 3)
	nv, err := m.apply(c, v.Version, "node2 weight 3")
	if err != nil {
		t.Fatal(err)
	}
	if nv != v.Version+1 {
		t.Fatalf("apply made version %d, want %d", nv, v.Version+1)
	}
	m.waitApplied(t, nv, m.members(), 10*time.Second)
	if w, err := m.directorWeight("www", stationNet+".22:8080"); err != nil || w != 3 {
		t.Fatalf("director: node2's weight %d (%v), want 3", w, err)
	}
	if err := get(m.vip()); err != nil {
		t.Fatal(err)
	}

	// A member killed is restarted by up and rejoins on the credential
	// it saved (DATA/state/node1), running the current version again.
	pid := m.child("node", stationNet+".21:8080")
	if pid == 0 {
		t.Fatal("no node1 child of up")
	}
	syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, "node1 restarted", 10*time.Second, func() error {
		if p := m.child("node", stationNet+".21:8080"); p == 0 || p == pid {
			return errors.New("not restarted")
		}
		return nil
	})
	m.waitApplied(t, nv, m.members(), 15*time.Second)
	if _, err := os.Stat(filepath.Join(m.data, "state", "node1")); err != nil {
		t.Errorf("node1 keeps no credential: %v", err)
	}
}

// checkMemberCerts: every member up started got a certificate from the
// station at its join, kept 0600 in a 0700 directory (meta and the iod
// serve the file-system protocol with theirs).
func checkMemberCerts(t *testing.T, data string) {
	t.Helper()
	var dirs []string
	filepath.WalkDir(data, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "member.pem" {
			dirs = append(dirs, filepath.Dir(p))
		}
		return nil
	})
	if len(dirs) < 2 { // at least meta and the iod
		t.Fatalf("member certificates under %s: %v, want one per joined member", data, dirs)
	}
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v (%v), want 0700", d, fi.Mode().Perm(), err)
		}
		for _, f := range []string{"member.pem", "member.key", "ca.pem"} {
			if fi, err := os.Stat(filepath.Join(d, f)); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s/%s: %v, want mode 0600", d, f, err)
			}
		}
	}
	t.Logf("member certificates: %v", dirs)
}

// TestApplyUnderLoad (b): 2,000 requests through both services over about
// 10 s, on kept-alive and new connections, while 10 versions change the
// schedulers and the weights: not one fails, and every version is applied.
func TestApplyUnderLoad(t *testing.T) {
	m := startManaged(t, 2)
	m.waitApplied(t, 1, m.members(), 20*time.Second)
	const perLoop, d = 500, 10 * time.Second
	type result struct {
		name string
		ok   int
		errs []error
	}
	results := make(chan result, 4)
	var wg sync.WaitGroup
	for _, url := range []string{m.vip(), m.vipL7()} {
		for _, keep := range []bool{true, false} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := result{name: fmt.Sprintf("%s keep-alive=%v", url, keep)}
				cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: !keep}, Timeout: 5 * time.Second}
				defer cl.CloseIdleConnections()
				for i := range perLoop {
					start := time.Now()
					if err := getWith(cl, url); err != nil {
						r.errs = append(r.errs, fmt.Errorf("request %d: %w", i, err))
					} else {
						r.ok++
					}
					time.Sleep(d/perLoop - time.Since(start))
				}
				results <- r
			}()
		}
	}
	scheds := []string{"rr", "wrr", "lc", "wlc", "sed"}
	var last int64
	for i := range 10 {
		time.Sleep(800 * time.Millisecond)
		c, v := m.current(t)
		for k := range c.Services {
			c.Services[k].Scheduler = scheds[i%len(scheds)]
		}
		nodeWeight(t, c, managed.NodeName(i%m.nodes), 1+i%4)
		var err error
		if last, err = m.apply(c, v.Version, fmt.Sprintf("load %d", i)); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	wg.Wait()
	close(results)
	for r := range results {
		t.Logf("%s: %d of %d", r.name, r.ok, perLoop)
		if len(r.errs) > 0 {
			t.Errorf("%s: %d requests failed during the applies: %v", r.name, len(r.errs), r.errs[:min(len(r.errs), 5)])
		}
	}
	m.waitApplied(t, last, m.members(), 10*time.Second)
}

// getWith is get through a given client.
func getWith(cl *http.Client, url string) error {
	resp, err := cl.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || !strings.Contains(string(b), "</html>") {
		return fmt.Errorf("%s: %s, %d bytes", url, resp.Status, len(b))
	}
	return nil
}

// TestStationKill (c): kill -9 of the station while the site serves: not
// a request fails, up restarts the station, and nothing is lost: the
// version, the tokens, the members (they report again and apply the next
// version).
func TestStationKill(t *testing.T) {
	m := startManaged(t, 2)
	m.waitApplied(t, 1, m.members(), 20*time.Second)
	var tok api.Token
	if err := m.call(http.MethodPost, api.RouteTokens, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour}, &tok); err != nil {
		t.Fatal(err)
	}
	_, before := m.current(t)

	loopDone := make(chan struct{})
	var ok int
	var errs []error
	go func() {
		defer close(loopDone)
		ok, errs = loop(m.vip(), 300, 6*time.Second)
	}()
	time.Sleep(time.Second)
	pid := m.child("mgmt", "")
	if pid == 0 {
		t.Fatal("no station child of up")
	}
	syscall.Kill(pid, syscall.SIGKILL)
	killed := time.Now()
	waitFor(t, "the station back", 30*time.Second, func() error {
		if p := m.child("mgmt", ""); p == 0 || p == pid {
			return errors.New("not restarted")
		}
		return m.call(http.MethodGet, api.RouteHealthz, nil, nil)
	})
	t.Logf("station serves again %v after the kill", time.Since(killed).Round(time.Millisecond))
	<-loopDone
	if len(errs) > 0 {
		t.Errorf("%d of %d requests failed while the station was down: %v", len(errs), ok+len(errs), errs[:min(len(errs), 5)])
	}
	c, after := m.current(t)
	if after.Version != before.Version || after.YAML != before.YAML {
		t.Fatalf("after the restart: version %d, want %d with the same YAML", after.Version, before.Version)
	}
	var toks []api.Token
	if err := m.call(http.MethodGet, api.RouteTokens, nil, &toks); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(toks, func(x api.Token) bool { return x.ID == tok.ID && !x.Revoked }) {
		t.Fatalf("token %s lost in the restart: %v", tok.ID, toks)
	}
	// The members report to the new process and apply what it hands out.
	nodeWeight(t, c, "node1", 2)
	nv, err := m.apply(c, after.Version, "after the station's restart")
	if err != nil {
		t.Fatal(err)
	}
	m.waitApplied(t, nv, m.members(), 15*time.Second)
	if !strings.Contains(m.errb.String(), "mgmt died (killed by signal 9") {
		t.Errorf("up did not log the station's death")
	}
}

// TestApplyRefused (d): a version the director cannot apply (a new
// service on a VIP another process holds: the station cannot know) leaves
// the director on its old version, serving, with the error in the members
// list; the nodes apply it.
func TestApplyRefused(t *testing.T) {
	m := startManaged(t, 2)
	m.waitApplied(t, 1, m.members(), 20*time.Second)
	busy, err := net.Listen("tcp", stationNet+".100:8090")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	c, v := m.current(t)
	c.Services = append(c.Services, clustercfg.Service{Name: "taken", Cluster: managed.LogicalCluster, VIP: busy.Addr().String(), Dataplane: "l4"})
	nv, err := m.apply(c, v.Version, "a VIP in use")
	if err != nil {
		t.Fatalf("the station refused it (it should not: only the director can tell): %v", err)
	}
	waitFor(t, "the director's error in the members list", 15*time.Second, func() error {
		st, err := m.statuses()
		if err != nil {
			return err
		}
		d := st["director"]
		if d.Error == "" || d.Version != v.Version {
			return fmt.Errorf("director: version %d, error %q", d.Version, d.Error)
		}
		for i := range m.nodes {
			if n := st[managed.NodeName(i)]; n.Version != nv {
				return fmt.Errorf("%s: version %d", n.Name, n.Version)
			}
		}
		return nil
	})
	st, _ := m.statuses()
	t.Logf("director's error: %s", st["director"].Error)
	if err := get(m.vip()); err != nil {
		t.Fatalf("the old configuration does not serve: %v", err)
	}
	// Fixed: the next version is applied everywhere, error gone.
	c.Services = c.Services[:len(c.Services)-1]
	nodeWeight(t, c, "node1", 2)
	fixed, err := m.apply(c, nv, "fixed")
	if err != nil {
		t.Fatal(err)
	}
	m.waitApplied(t, fixed, m.members(), 15*time.Second)
}

// TestJoinRefused (e): `corral node --join` with an expired, a used
// single-use, a revoked or an unknown token is refused with its reason and
// exits; a good token joins.
func TestJoinRefused(t *testing.T) {
	m := startManaged(t, 1)
	ca, err := os.ReadFile(filepath.Join(m.data, "mgmt", "tls", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	hash, err := managed.CAHash(ca)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(ttl time.Duration, single bool) (api.Token, string) {
		var tok api.Token
		if err := m.call(http.MethodPost, api.RouteTokens, api.TokenRequest{Role: api.RoleNode, TTL: ttl, SingleUse: single}, &tok); err != nil {
			t.Fatal(err)
		}
		return tok, managed.JoinToken(tok, hash)
	}
	_, expired := mk(time.Second, false)
	_, used := mk(time.Hour, true)
	revokedTok, revoked := mk(time.Hour, false)
	_, good := mk(time.Hour, false)
	if err := m.call(http.MethodDelete, api.RouteToken+revokedTok.ID, nil, nil); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(m.data, "mgmt", "tls", "ca.pem")
	join := func(name, token string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, m.bin, "node", "--join", m.stationURL(), "--token", token, "--name", name, "--station-ca", caFile,
			"--listen", stationNet+".31:8080", "--admin", stationNet+".31:0", "--state", filepath.Join(t.TempDir(), name))
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			return string(out), fmt.Errorf("still running after 20 s")
		}
		return string(out), err
	}
	// The single-use token is used once, by a join of its own.
	if out, err := joinAndStop(t, m, "usedonce", used, caFile); err != nil {
		t.Fatalf("first use of a single-use token: %v: %s", err, out)
	}
	time.Sleep(1500 * time.Millisecond) // the 1 s token is past its time
	bogus := "nosuchid.0123456789abcdef0123456789abcdef." + hash
	for _, c := range []struct{ what, token, want string }{
		{"expired", expired, "expired"},
		{"used", used, "used"},
		{"revoked", revoked, "revoked"},
		{"unknown", bogus, "token"},
	} {
		out, err := join("refused-"+c.what, c.token)
		if err == nil || !strings.Contains(strings.ToLower(out), c.want) {
			t.Errorf("join with a %s token: %v, output %q; want a refusal saying %q", c.what, err, out, c.want)
		}
	}
	// No CA file: the node trusts the station whose CA the token's hash
	// names.
	if out, err := joinAndStop(t, m, "goodjoin", good, ""); err != nil {
		t.Fatalf("join with a good token, the CA pinned by its hash: %v: %s", err, out)
	}
}

// joinAndStop runs a node that joins with token (trusting caFile, or
// with "" the CA the token pins) until it is a member (in the station's
// list), then stops it.
func joinAndStop(t *testing.T, m *managedUp, name, token, caFile string) (string, error) {
	t.Helper()
	args := []string{"node", "--join", m.stationURL(), "--token", token, "--name", name,
		"--listen", stationNet + ".31:8080", "--admin", stationNet + ".31:0", "--state", filepath.Join(t.TempDir(), name)}
	if caFile != "" {
		args = append(args, "--station-ca", caFile)
	}
	cmd := exec.Command(m.bin, args...)
	var out lockedBuf
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}()
	end := time.Now().Add(20 * time.Second)
	for time.Now().Before(end) {
		select {
		case err := <-exited:
			exited <- err
			return out.String(), fmt.Errorf("exited: %v", err)
		default:
		}
		if st, err := m.statuses(); err == nil {
			if _, ok := st[name]; ok {
				return out.String(), nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return out.String(), errors.New("not a member within 20 s")
}

// sha256File is the hex sha256 of a file.
func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// rollout uploads binary, rolls it out over members with check, and waits
// for the rollout to end.
func (m *managedUp) rollout(t *testing.T, binary string, members []string, check time.Duration) api.Rollout {
	t.Helper()
	b, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	sha := sha256File(t, binary)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := m.cl.DoRaw(ctx, http.MethodPut, api.RouteBinary+sha, "application/octet-stream", b, nil); err != nil {
		t.Fatalf("upload the binary: %v", err)
	}
	var r api.Rollout
	if err := m.call(http.MethodPost, api.RouteRollout, api.RolloutRequest{SHA256: sha, Members: members, Check: check}, &r); err != nil {
		t.Fatalf("start the rollout: %v", err)
	}
	waitFor(t, "the rollout ends", check*time.Duration(len(members))+30*time.Second, func() error {
		if err := m.call(http.MethodGet, api.RouteRollout, nil, &r); err != nil {
			return err
		}
		if r.State == "running" {
			return fmt.Errorf("running: %+v", r.Steps)
		}
		return nil
	})
	return r
}

// TestRolloutBrokenBinary (f): a rollout of a binary that cannot run (a
// script that exits 1) over node1 then node2 rolls node1 back to its old
// build, which serves again, and stops before node2; so does one that
// runs but never passes its check; a good new build (the same program,
// other bytes) then rolls out over node1 only, swapping node1's DATA/bin
// copy and not node2's.
func TestRolloutBrokenBinary(t *testing.T) {
	m := startManaged(t, 2)
	m.waitApplied(t, 1, m.members(), 20*time.Second)
	node1Bin := filepath.Join(m.data, "bin", "node1", "corral")
	node2Bin := filepath.Join(m.data, "bin", "node2", "corral")
	oldBuild := sha256File(t, node1Bin)

	broken := filepath.Join(t.TempDir(), "broken")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho broken build >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := m.rollout(t, broken, []string{"node1", "node2"}, 10*time.Second)
	if r.State != "failed" || len(r.Steps) != 2 || r.Steps[0].State != "rolled-back" || r.Steps[1].State != "waiting" {
		t.Fatalf("rollout of a broken binary: %+v; want failed, node1 rolled-back, node2 waiting", r)
	}
	waitFor(t, "node1 back on its old build, healthy", 20*time.Second, func() error {
		st, err := m.statuses()
		if err != nil {
			return err
		}
		if s := st["node1"]; !s.Up || !s.Healthy || s.Build != oldBuild {
			return fmt.Errorf("node1: up %v healthy %v build %.12s", s.Up, s.Healthy, s.Build)
		}
		return nil
	})
	if got := sha256File(t, node1Bin); got != oldBuild {
		t.Fatalf("node1's installed binary changed by a failed rollout")
	}
	if err := get(m.vip()); err != nil {
		t.Fatal(err)
	}

	// A build that starts but never passes its check: a script that runs
	// the old binary (so the member reports the old build, never the
	// new one): the station orders it back, the rollout fails.
	wrapper := filepath.Join(t.TempDir(), "wrapper")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nexec "+m.bin+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = m.rollout(t, wrapper, []string{"node1", "node2"}, 5*time.Second)
	if r.State != "failed" || r.Steps[0].State != "rolled-back" || r.Steps[1].State != "waiting" {
		t.Fatalf("rollout of a build that never checks healthy: %+v; want failed, node1 rolled-back, node2 waiting", r)
	}
	waitFor(t, "node1 back on its old build after the failed check", 20*time.Second, func() error {
		st, err := m.statuses()
		if err != nil {
			return err
		}
		if s := st["node1"]; !s.Up || !s.Healthy || s.Build != oldBuild {
			return fmt.Errorf("node1: up %v healthy %v build %.12s", s.Up, s.Healthy, s.Build)
		}
		return nil
	})
	if got := sha256File(t, node1Bin); got != oldBuild {
		t.Fatalf("node1's installed binary changed by a failed rollout")
	}

	// A good new build: the binary with bytes appended (an ELF runs the
	// same; its sha256 differs).
	good := filepath.Join(t.TempDir(), "corral")
	b, err := os.ReadFile(m.bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, append(b, "corral test build\n"...), 0o755); err != nil {
		t.Fatal(err)
	}
	newBuild := sha256File(t, good)
	r = m.rollout(t, good, []string{"node1"}, 20*time.Second)
	if r.State != "done" {
		t.Fatalf("rollout of a good build: %+v", r)
	}
	waitFor(t, "node1's installed binary is the new build", 10*time.Second, func() error {
		if got := sha256File(t, node1Bin); got != newBuild {
			return fmt.Errorf("node1's binary %.12s", got)
		}
		return nil
	})
	if got := sha256File(t, node2Bin); got != oldBuild {
		t.Fatalf("node2's binary changed by a rollout over node1 only")
	}
	if err := get(m.vip()); err != nil {
		t.Fatal(err)
	}
	// up killed with SIGKILL: the upgraded member dies with it too (a
	// process re-executed from another thread loses its parent-death
	// signal; the binary sets it again at start, cli's init); the next
	// up on the same data starts over, on up's own binary again.
	node1 := m.child("node", stationNet+".21:8080")
	if node1 == 0 {
		t.Fatal("no node1 child of up")
	}
	m.cmd.Process.Kill()
	<-m.done
	waitFor(t, "the upgraded node1 gone with up", 5*time.Second, func() error {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", node1)); err == nil && !strings.Contains(string(b), ") Z ") {
			return errors.New("still running")
		}
		return nil
	})
	m2 := startUp(t, m.bin, m.dir, stationNet, "--meta-members", "1", "--iods", "1", "--nodes", "2")
	if err := get(m.vip()); err != nil {
		t.Fatal(err)
	}
	if got := sha256File(t, node1Bin); got != oldBuild {
		t.Errorf("after a new start node1 runs %.12s, want up's own binary", got)
	}
	t.Logf("second start: %s", strings.TrimSpace(strings.SplitN(m2.out.String(), "\n", 2)[0]))
	m2.stop(t)
}

// TestUpImportAndReset: an older up's director.conf (an up --no-station)
// becomes version 1 once, renamed aside; a restart keeps the station's
// versions (a change made with the API survives it); --reset applies the
// flags' configuration as a new version.
func TestUpImportAndReset(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster four times")
	}
	bin := pfstest.Binary(t)
	dir := t.TempDir()
	t.Cleanup(func() { reapUnder(t, dir) })
	args := []string{"--meta-members", "1", "--iods", "1", "--nodes", "2"}
	u := startUp(t, bin, dir, stationNet, append(args, "--no-station")...)
	u.stop(t)
	conf := filepath.Join(dir, "corral-data", "director.conf")
	if _, err := os.Stat(conf); err != nil {
		t.Fatal(err)
	}
	restart := func(extra ...string) *managedUp {
		u := startUp(t, bin, dir, stationNet, append(args, extra...)...)
		m := &managedUp{upRun: u, bin: bin, dir: dir, data: filepath.Join(dir, "corral-data"), nodes: 2}
		tok, err := os.ReadFile(filepath.Join(m.data, "mgmt", "admin.token"))
		if err != nil {
			t.Fatal(err)
		}
		if m.cl, err = api.NewClientCAFile([]string{m.stationURL()}, strings.TrimSpace(string(tok)), filepath.Join(m.data, "mgmt", "tls", "ca.pem")); err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := restart()
	if !strings.Contains(m.out.String(), "imported "+conf) {
		t.Errorf("up does not say it imported %s", conf)
	}
	if _, err := os.Stat(conf + ".imported"); err != nil {
		t.Errorf("director.conf not renamed aside: %v", err)
	}
	c, v := m.current(t)
	if v.Version != 1 {
		t.Fatalf("after the import: version %d, want 1", v.Version)
	}
	m.waitApplied(t, 1, m.members(), 20*time.Second)
	if err := get(m.vip()); err != nil {
		t.Fatal(err)
	}
	nodeWeight(t, c, "node2", 5)
	mine, err := m.apply(c, v.Version, "mine")
	if err != nil {
		t.Fatal(err)
	}
	m.waitApplied(t, mine, m.members(), 10*time.Second)
	m.stop(t)

	m = restart()
	if _, v := m.current(t); v.Version != mine {
		t.Fatalf("after a restart: version %d, want %d (mine, kept)", v.Version, mine)
	}
	m.waitApplied(t, mine, m.members(), 20*time.Second)
	m.stop(t)

	m = restart("--reset")
	c, v = m.current(t)
	if v.Version != mine+1 {
		t.Fatalf("after --reset: version %d, want %d", v.Version, mine+1)
	}
	for _, n := range c.Nodes {
		if n.Weight != nil && *n.Weight != 1 {
			t.Errorf("after --reset: %s weight %d, want the flags' 1", n.Name, *n.Weight)
		}
	}
	m.waitApplied(t, v.Version, m.members(), 20*time.Second)
	if err := get(m.vip()); err != nil {
		t.Fatal(err)
	}
	m.stop(t)
}

// reapUnder kills what a test's cluster left running: processes whose
// command line names dir and that are still there 5 s after up ended
// (its children die with it, a moment later), reported as errors.
func reapUnder(t *testing.T, dir string) {
	left := func() map[int]string {
		out := map[int]string{}
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if strings.Contains(string(b), dir) && alive(pid) {
				out[pid] = strings.ReplaceAll(string(b), "\x00", " ")
			}
		}
		return out
	}
	end := time.Now().Add(5 * time.Second)
	for len(left()) > 0 && time.Now().Before(end) {
		time.Sleep(100 * time.Millisecond)
	}
	for pid, cmd := range left() {
		t.Errorf("pid %d outlived corral up: %s", pid, cmd)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

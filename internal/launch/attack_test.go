package launch_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/testbed"
)

// The attacker's-eye test: a `corral up` with its station, looked at by a
// local user with no credential (uid nobody) who connects to every socket
// the cluster listens on, asks the etcd for its keys, reads what metrics
// and health say, sends garbage, holds connections open, floods the UDP
// ports from many source addresses and tries to read every file under the
// data directory. Nothing secret may come back, and every daemon must still
// serve afterwards.

// attackPlan is what the parent gives the attacker process.
type attackPlan struct {
	TCP  []string `json:"tcp"`
	UDP  []string `json:"udp"`
	Data string   `json:"data"`
	Hold time.Duration
}

// attackReport is what the attacker saw.
type attackReport struct {
	// Replies are every byte any socket answered, by address and probe.
	Replies map[string]string `json:"replies"`
	// Readable are the paths under the data directory nobody could open
	// or list.
	Readable []string `json:"readable"`
	Errors   []string `json:"errors"`
}

const attackEnv = "CORRAL_ATTACK_PLAN"

// TestAttackerRole is the attacker process; it runs only when the parent
// test starts it (as nobody) with a plan.
func TestAttackerRole(t *testing.T) {
	planFile := os.Getenv(attackEnv)
	if planFile == "" {
		t.Skip("the attacker process of TestAttackerEye (runs only as its child)")
	}
	b, err := os.ReadFile(planFile)
	if err != nil {
		t.Fatal(err)
	}
	var plan attackPlan
	if err := json.Unmarshal(b, &plan); err != nil {
		t.Fatal(err)
	}
	rep := attack(plan)
	out, _ := json.Marshal(rep)
	os.Stdout.Write(append([]byte("ATTACK-REPORT "), out...))
	os.Stdout.Write([]byte("\n"))
}

func attack(plan attackPlan) attackReport {
	rep := attackReport{Replies: map[string]string{}}
	var mu sync.Mutex
	record := func(key string, b []byte) {
		mu.Lock()
		defer mu.Unlock()
		rep.Replies[key] += string(b)
	}
	fail := func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		rep.Errors = append(rep.Errors, fmt.Sprintf(f, a...))
	}

	// Idle connections held on every port for the whole attack.
	var held []net.Conn
	for _, a := range plan.TCP {
		for range 40 {
			c, err := net.DialTimeout("tcp", a, time.Second)
			if err != nil {
				break // a per-source cap refusing us is fine
			}
			held = append(held, c)
		}
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()

	insecureTLS := &tls.Config{InsecureSkipVerify: true}
	// etcd's gateway: every key from "\x00" on, and the CA by name.
	allKeys := fmt.Sprintf(`{"key":"%s","range_end":"%s"}`,
		base64.StdEncoding.EncodeToString([]byte{0}), base64.StdEncoding.EncodeToString([]byte{0}))
	caKey := fmt.Sprintf(`{"key":"%s"}`, base64.StdEncoding.EncodeToString([]byte("/corral/tls/ca")))
	put := fmt.Sprintf(`{"key":"%s","value":"%s"}`, base64.StdEncoding.EncodeToString([]byte("/corral/attack")),
		base64.StdEncoding.EncodeToString([]byte("x")))

	var wg sync.WaitGroup
	for _, a := range plan.TCP {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, scheme := range []string{"http", "https"} {
				cl := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: insecureTLS, DisableKeepAlives: true}}
				for _, probe := range []struct{ method, path, body string }{
					{"POST", "/v3/kv/range", allKeys},
					{"POST", "/v3/kv/range", caKey},
					{"POST", "/v3/kv/put", put},
					{"POST", "/v3/auth/authenticate", `{"name":"root","password":""}`},
					{"GET", "/metrics", ""},
					{"GET", "/healthz", ""},
					{"GET", "/health", ""},
					{"GET", "/v1/status", ""},
					{"GET", "/v1/config", ""},
					{"GET", "/", ""},
				} {
					req, _ := http.NewRequest(probe.method, scheme+"://"+a+probe.path, strings.NewReader(probe.body))
					resp, err := cl.Do(req)
					if err != nil {
						continue
					}
					body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
					resp.Body.Close()
					record(a+" "+scheme+" "+probe.method+" "+probe.path, []byte(fmt.Sprintf("%d %s", resp.StatusCode, body)))
				}
			}
			// Garbage, plain and inside TLS.
			for i := range 3 {
				c, err := net.DialTimeout("tcp", a, time.Second)
				if err != nil {
					continue
				}
				var conn net.Conn = c
				if i == 2 {
					tc := tls.Client(c, insecureTLS)
					tc.SetDeadline(time.Now().Add(2 * time.Second))
					if tc.Handshake() != nil {
						c.Close()
						continue
					}
					conn = tc
				}
				junk := make([]byte, 64<<10)
				rand.Read(junk)
				if i == 1 {
					// A frame header that claims a huge length.
					copy(junk, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
				}
				conn.SetDeadline(time.Now().Add(2 * time.Second))
				conn.Write(junk)
				b, _ := io.ReadAll(io.LimitReader(conn, 1<<20))
				record(a+" garbage", b)
				conn.Close()
			}
		}()
	}
	// UDP from many source addresses, as a spoofed flood looks to the
	// server; replies are read too.
	for _, a := range plan.UDP {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst, err := net.ResolveUDPAddr("udp", a)
			if err != nil {
				fail("udp %s: %v", a, err)
				return
			}
			for i := range 2000 {
				src := &net.UDPAddr{IP: net.IPv4(127, 200, byte(i>>8), byte(i)+1)}
				c, err := net.ListenUDP("udp", src)
				if err != nil {
					continue
				}
				junk := make([]byte, 512)
				rand.Read(junk)
				c.WriteToUDP(junk, dst)
				if i%100 == 0 {
					buf := make([]byte, 64<<10)
					c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
					if n, _, err := c.ReadFromUDP(buf); err == nil {
						record(a+" udp", buf[:n])
					}
				}
				c.Close()
			}
		}()
	}

	// Every file and directory below the data directory.
	filepath.WalkDir(plan.Data, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if p == plan.Data {
			return nil
		}
		if f, err := os.Open(p); err == nil {
			if d.IsDir() {
				if _, err := f.Readdirnames(1); err == nil || errors.Is(err, io.EOF) {
					mu.Lock()
					rep.Readable = append(rep.Readable, p+"/")
					mu.Unlock()
				}
			} else if d.Type().IsRegular() {
				mu.Lock()
				rep.Readable = append(rep.Readable, p)
				mu.Unlock()
			}
			f.Close()
		}
		return nil
	})
	wg.Wait()
	time.Sleep(plan.Hold)
	return rep
}

func TestAttackerEye(t *testing.T) {
	lab.Need(t, lab.Root) // the attacker runs as uid nobody (65534)
	m := startManaged(t, 2)
	// Only the data directory's own modes may protect it: its parents are
	// open to all, as a home directory often is.
	for d := m.dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	pids := descendants(m.cmd.Process.Pid)
	tcp, udp := listening(pids)
	if len(tcp) < 6 {
		t.Fatalf("found %d listening TCP sockets in the cluster (%v), want every daemon's", len(tcp), tcp)
	}
	// Every daemon listens on loopback only.
	for _, a := range append(append([]string{}, tcp...), udp...) {
		host, _, _ := net.SplitHostPort(a)
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			t.Errorf("%s listens on a non-loopback address", a)
		}
	}
	tok, err := os.ReadFile(filepath.Join(m.data, "mgmt", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	secrets := clusterSecrets(t, filepath.Join(m.data, "meta", "cluster.secret"))
	secrets["admin token"] = strings.TrimSpace(string(tok))

	// The cluster serves while it is attacked.
	served, failed, stop := keepGetting(m.vip())
	rep := runAttacker(t, attackPlan{TCP: tcp, UDP: udp, Data: m.data, Hold: 2 * time.Second}, nil)
	stop()
	checkReport(t, rep, secrets)

	// Every daemon still serves: the same processes, the site through both
	// dataplanes, the station's API, every member reporting.
	if gone := missing(pids, descendants(m.cmd.Process.Pid)); len(gone) > 0 {
		t.Errorf("processes died under attack: %v", gone)
	}
	if *failed > *served/100 {
		t.Errorf("the site failed %d of %d requests during the attack", *failed, *served+*failed)
	}
	for _, u := range []string{m.vip(), m.vipL7()} {
		if err := get(u); err != nil {
			t.Errorf("after the attack: %v", err)
		}
	}
	var st api.Overview
	if err := m.call(http.MethodGet, api.RouteStatus, nil, &st); err != nil {
		t.Errorf("the station's API after the attack: %v", err)
	}
	waitFor(t, "every member up after the attack", 20*time.Second, func() error {
		ms, err := m.statuses()
		if err != nil {
			return err
		}
		for _, name := range m.members() {
			if s, ok := ms[name]; !ok || !s.Up {
				return fmt.Errorf("%s not up: %+v", name, s)
			}
		}
		return nil
	})
	t.Logf("probed %d TCP and %d UDP sockets; %d replies; the site served %d requests during the attack", len(tcp), len(udp), len(rep.Replies), *served)
}

// clusterSecrets are the strings no reply may hold: the cluster secret
// (from its file) and any private key.
func clusterSecrets(t *testing.T, secretFile string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(secretFile)
	if err != nil {
		t.Fatalf("the cluster secret: %v", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		t.Fatalf("the cluster secret %s is empty", secretFile)
	}
	return map[string]string{"the cluster secret": f[len(f)-1], "a private key": "PRIVATE KEY"}
}

// keepGetting GETs url every 50 ms until stop is called, counting
// answers and failures.
func keepGetting(url string) (served, failed *int, stop func()) {
	served, failed = new(int), new(int)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if get(url) == nil {
				*served++
			} else {
				*failed++
			}
		}
	}()
	return served, failed, func() { close(done); wg.Wait() }
}

// runAttacker runs TestAttackerRole as uid nobody (behind wrap, e.g.
// nsenter into a test bed's host) and returns its report.
func runAttacker(t *testing.T, plan attackPlan, wrap []string) attackReport {
	t.Helper()
	// The attacker binary: this test binary, where nobody can run it.
	bindir, err := os.MkdirTemp("", "corral-attack-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bindir)
	os.Chmod(bindir, 0o755)
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bindir, "attacker")
	if err := os.WriteFile(exe, self, 0o755); err != nil {
		t.Fatal(err)
	}
	planB, _ := json.Marshal(plan)
	planFile := filepath.Join(bindir, "plan.json")
	if err := os.WriteFile(planFile, planB, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append(append([]string{}, wrap...), exe, "-test.run", "^TestAttackerRole$", "-test.v")
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = []string{attackEnv + "=" + planFile, "HOME=/", "PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	// nsenter (when wrapping) runs as root and then execs the attacker:
	// drop to nobody there with setpriv.
	if len(wrap) > 0 {
		args = append(append(append([]string{}, wrap...), "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"), args[len(wrap):]...)
		cmd = exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env, cmd.Dir = []string{attackEnv + "=" + planFile, "HOME=/", "PATH=/usr/bin:/bin"}, "/"
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("attacker: %v\n%s\n%s", err, out, stderr.String())
	}
	i := bytes.Index(out, []byte("ATTACK-REPORT "))
	if i < 0 {
		t.Fatalf("attacker printed no report:\n%s", out)
	}
	line := out[i+len("ATTACK-REPORT "):]
	line = line[:bytes.IndexByte(line, '\n')]
	var rep attackReport
	if err := json.Unmarshal(line, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// checkReport fails the test for every secret a reply held, every key
// etcd served or write it took, and every file nobody could read.
func checkReport(t *testing.T, rep attackReport, secrets map[string]string) {
	t.Helper()
	for _, e := range rep.Errors {
		t.Errorf("attacker: %s", e)
	}
	for probe, reply := range rep.Replies {
		for what, s := range secrets {
			if s != "" && strings.Contains(reply, s) {
				t.Errorf("%s: the reply holds %s:\n%.400s", probe, what, reply)
			}
		}
		// etcd's gateway answering a range at all means the store is open.
		if strings.Contains(probe, "/v3/kv/") && strings.Contains(reply, `"kvs"`) {
			t.Errorf("%s: etcd served keys to an unauthenticated peer: %.300s", probe, reply)
		}
		if strings.Contains(probe, "/v3/kv/put") && strings.Contains(reply, `"revision"`) && strings.HasPrefix(reply, "200") {
			t.Errorf("%s: etcd took a write from an unauthenticated peer: %.300s", probe, reply)
		}
	}
	for _, p := range rep.Readable {
		t.Errorf("uid nobody can read %s", p)
	}
}

// descendants are pid's process tree below it.
func descendants(pid int) []int {
	var out []int
	for _, c := range children(pid) {
		out = append(out, c)
		out = append(out, descendants(c)...)
	}
	return out
}

func missing(before, after []int) []int {
	have := map[int]bool{}
	for _, p := range after {
		have[p] = true
	}
	var out []int
	for _, p := range before {
		if !have[p] {
			out = append(out, p)
		}
	}
	return out
}

// listening are the TCP listeners and bound UDP sockets of pids, as
// addresses, from /proc.
func listening(pids []int) (tcp, udp []string) {
	inodes := map[string]bool{}
	for _, pid := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
	}
	seen := map[string]bool{}
	// Each process's own view: on a test bed they sit in other network
	// namespaces.
	var tables []string
	for _, pid := range pids {
		for _, f := range []string{"tcp", "tcp6", "udp", "udp6"} {
			tables = append(tables, fmt.Sprintf("/proc/%d/net/%s", pid, f))
		}
	}
	for _, table := range tables {
		f := filepath.Base(table)
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fl := strings.Fields(line)
			if len(fl) < 10 || !inodes[fl[9]] {
				continue
			}
			isTCP := strings.HasPrefix(f, "tcp")
			// TCP: LISTEN (0A); UDP: unconnected (07) sockets bound to a port.
			if (isTCP && fl[3] != "0A") || (!isTCP && fl[3] != "07") {
				continue
			}
			a := procAddr(fl[1])
			if a == "" || seen[f[:3]+a] {
				continue
			}
			seen[f[:3]+a] = true
			if isTCP {
				tcp = append(tcp, a)
			} else {
				udp = append(udp, a)
			}
		}
	}
	return tcp, udp
}

// procAddr turns /proc/net's "0100007F:1F90" into "127.0.0.1:8080".
func procAddr(s string) string {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return ""
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil || port == 0 {
		return ""
	}
	raw := make([]byte, len(h)/2)
	for i := range raw {
		v, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			return ""
		}
		raw[i] = byte(v)
	}
	var ip net.IP
	switch len(raw) {
	case 4:
		ip = net.IPv4(raw[3], raw[2], raw[1], raw[0])
	case 16:
		// Four little-endian 32-bit words.
		ip = make(net.IP, 16)
		for w := 0; w < 4; w++ {
			for b := 0; b < 4; b++ {
				ip[4*w+b] = raw[4*w+3-b]
			}
		}
	default:
		return ""
	}
	return net.JoinHostPort(ip.String(), strconv.FormatUint(port, 10))
}

// TestAttackerEyeTestbed is the same attack from another host of a test
// bed (a peer on the cluster's network, not a local user): every role on
// its own host, the attacker on one more, probing every socket the
// cluster's processes listen on. Each role's data directory must protect
// itself: the directory above them is open to all here.
func TestAttackerEyeTestbed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster on a test bed")
	}
	if err := testbed.CheckRoot(); err != nil {
		lab.Need(t, lab.Err("the test bed", err))
	}
	const name = "atk"
	spec := testbed.NewSpecOn(name, netip.MustParsePrefix("10.93.0.0/24"), append([]string{"attacker"}, launch.ClusterHosts(2, 2)...), "")
	testbed.Down(name)
	bed, err := testbed.Up(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testbed.Down(name) })
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	cc := launch.ClusterConfig{Bin: pfstest.Binary(t), Data: data, Admin: "127.0.0.1:7500", Dataplane: "l4", Scheduler: "wlc"}
	if err := cc.OnTestbed(bed, 2, 2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := launch.StartCluster(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	var pids []int
	for _, p := range append(append([]*launch.Proc{cl.Meta, cl.Director}, cl.IODs...), cl.Nodes...) {
		pids = append(pids, p.Pid())
	}
	tcp, udp := listening(pids)
	// The attacker reaches what listens on the bed's network.
	var reach []string
	for _, a := range tcp {
		if ap, err := netip.ParseAddrPort(a); err == nil && spec.Subnet.Contains(ap.Addr()) {
			reach = append(reach, a)
		}
	}
	if len(reach) < 5 {
		t.Fatalf("found %d TCP listeners on the bed (%v of %v), want every daemon's", len(reach), reach, tcp)
	}
	vip := "http://" + cc.VIP + "/"
	served, failed, stop := keepGetting(vip)
	rep := runAttacker(t, attackPlan{TCP: reach, UDP: udp, Data: data, Hold: 2 * time.Second}, bed.Wrap("attacker"))
	stop()
	checkReport(t, rep, clusterSecrets(t, cl.SecretFile))
	if *failed > *served/100 {
		t.Errorf("the site failed %d of %d requests during the attack", *failed, *served+*failed)
	}
	if err := get(vip); err != nil {
		t.Errorf("after the attack: %v", err)
	}
	if gone := missing(pids, pidsAlive(pids)); len(gone) > 0 {
		t.Errorf("processes died under attack: %v", gone)
	}
	t.Logf("probed %d TCP sockets on the bed; %d replies; the site served %d requests during the attack", len(reach), len(rep.Replies), *served)
}

func pidsAlive(pids []int) []int {
	var out []int
	for _, p := range pids {
		if alive(p) {
			out = append(out, p)
		}
	}
	return out
}

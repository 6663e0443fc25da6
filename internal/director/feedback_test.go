package director

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/node"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// This helper's loopback range is 127.0.87.0/24: .1 polls, .11-.13 are
// SNMP "nodes", .21-.23 agent nodes, .30 the VIP.

const snmpdBin = "/usr/sbin/snmpd"

// loopSnmpd runs a real net-snmp snmpd on addr (a 127.0.87.x:port) that
// admits 127.0.87.0/24 with community h7public, and stops it when the test
// ends.
func loopSnmpd(t *testing.T, addr string) {
	t.Helper()
	lab.Need(t, lab.Tool(snmpdBin))
	dir := t.TempDir()
	conf := filepath.Join(dir, "snmpd.conf")
	if err := os.WriteFile(conf, []byte("rocommunity h7public 127.0.87.0/24\ndontLogTCPWrappersConnects yes\ndisk / 10%\nload 12 10 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, snmpdBin, "-f", "-Lf", filepath.Join(dir, "log"), "-C", "-c", conf,
		"-I", "-smux", "-p", filepath.Join(dir, "pid"), "udp:"+addr)
	cmd.WaitDelay = 3 * time.Second
	cmd.Env = append(os.Environ(), "SNMP_PERSISTENT_DIR="+filepath.Join(dir, "persist"), "MIBS=", "MIBDIRS="+dir)
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start snmpd: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Logf("snmpd %s log:\n%s", addr, b)
		}
	})
}

// listenAt serves a tiny HTTP backend on addr (the real server).
func listenAt(t *testing.T, addr string, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		lab.Need(t, lab.Err("listen on "+addr, err))
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
}

// serverState is one real server's weights from the live table.
func serverState(d *Director, service, addr string) ServerStatus {
	for _, s := range d.Status() {
		if s.Name != service {
			continue
		}
		for _, r := range s.Servers {
			if r.Addr == addr {
				return r
			}
		}
	}
	return ServerStatus{}
}

// TestFeedbackSNMP: a real snmpd per "node" (two of three; the third has
// none), the director's monitor polls them, and the controller's weights
// reach the pool: the answering servers sit at max, the silent one decays
// to the floor; a ctl weight still wins; the metrics and ctl's API show
// the terms; removing the block gives the configured weights back.
func TestFeedbackSNMP(t *testing.T) {
	const port = 16187
	backs := []string{"127.0.87.11:18080", "127.0.87.12:18080", "127.0.87.13:18080"}
	for _, b := range backs {
		listenAt(t, b, okHandler())
	}
	loopSnmpd(t, fmt.Sprintf("127.0.87.11:%d", port))
	loopSnmpd(t, fmt.Sprintf("127.0.87.12:%d", port))
	vip := freeAddr(t, "tcp")
	text := fmt.Sprintf(`admin 127.0.0.1:0
feedback {
    source snmp
    interval 300ms
    timeout 100ms
    community h7public
    port %d
    ifname lo
    bandwidth 1gbit
    source-addr 127.0.87.1
    floor 2
    max 50
}
service www {
    vip %s
    scheduler wlc
    weights feedback
    check none
    server %s weight=7
    server %s weight=7
    server %s weight=7
}
`, port, vip, backs[0], backs[1], backs[2])
	d := start(t, text)
	// snmpd takes a moment to start: the first rounds may find nothing.
	waitFor(t, "feedback weights in the pool", 30*time.Second, func() bool {
		a, b, c := serverState(d, "www", backs[0]), serverState(d, "www", backs[1]), serverState(d, "www", backs[2])
		return a.Feedback >= 2 && b.Feedback >= 2 && c.Feedback == 2 && a.Weight == a.Feedback && c.Weight == 2 && a.Weight > 2 && b.Weight > 2
	})
	st, err := d.FeedbackStatus()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Services) != 1 || len(st.Services[0].Nodes) != 3 {
		t.Fatalf("feedback status: %+v", st)
	}
	for _, n := range st.Services[0].Nodes[:2] {
		if n.Terms == nil || n.Terms.Bandwidth != 1e9 || n.Terms.BandwidthFrom != "override" || n.TermsAt.IsZero() {
			t.Errorf("%s: terms %+v at %v", n.Node, n.Terms, n.TermsAt)
		}
	}
	if n := st.Services[0].Nodes[2]; n.Missed == 0 || !strings.Contains(n.Reason, "no answer") {
		t.Errorf("silent node: %+v", n)
	}

	// ctl weight wins over feedback; enable gives feedback back.
	if err := d.SetServer("www", backs[0], "weight", 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	if s := serverState(d, "www", backs[0]); s.Weight != 1 {
		t.Errorf("ctl weight 1 under feedback: %+v", s)
	}
	d.SetServer("www", backs[0], "enable", 0)

	// Metrics: promlint clean, and the terms are there.
	w := httptest.NewRecorder()
	d.MetricsHandler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.String()
	for _, want := range []string{`corral_director_feedback_weight{server="` + backs[2] + `",service="www"} 2`,
		`corral_director_feedback_term_percent{server="` + backs[0] + `",service="www",term="total"}`,
		`corral_director_feedback_load{server="` + backs[0],
		`corral_director_feedback_last_poll_timestamp_seconds{service="www"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.Contains(p.Metric, "feedback") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}

	// Without the block: configured weights again, and no feedback API.
	plain := strings.Replace(text[strings.Index(text, "service www"):], "weights feedback", "", 1)
	cfg, err := config.Parse("test.conf", []byte("admin 127.0.0.1:0\n"+plain))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	for _, b := range backs {
		if s := serverState(d, "www", b); s.Weight != 7 || s.Feedback != -1 {
			t.Errorf("after dropping feedback: %+v", s)
		}
	}
	if _, err := d.FeedbackStatus(); err == nil {
		t.Error("FeedbackStatus without a block: no error")
	}
}

// TestFeedbackAgent: the agent source reads real nodes' admin /load (the
// node package's handler, sample and all) and the weights reach the pool;
// a node whose /load is gone decays to the floor.
func TestFeedbackAgent(t *testing.T) {
	const adminPort = 19087
	backs := []string{"127.0.87.21:18080", "127.0.87.22:18080", "127.0.87.23:18080"}
	for i, b := range backs {
		listenAt(t, b, okHandler())
		if i < 2 {
			n := node.New(node.Config{Meta: "127.0.87.99:1", LoadInterface: "lo"})
			t.Cleanup(n.Close)
			listenAt(t, fmt.Sprintf("127.0.87.2%d:%d", i+1, adminPort), n.AdminMux())
		}
	}
	vip := freeAddr(t, "tcp")
	d := start(t, fmt.Sprintf(`admin 127.0.0.1:0
feedback {
    source agent
    agent-port %d
    interval 200ms
    timeout 150ms
    bandwidth 1gbit
    cpu cpuraw
}
service www {
    vip %s
    dataplane l7
    scheduler wrr
    weights feedback
    check none
    server %s
    server %s
    server %s
}
`, adminPort, vip, backs[0], backs[1], backs[2]))
	waitFor(t, "agent feedback weights in the pool", 20*time.Second, func() bool {
		a, b, c := serverState(d, "www", backs[0]), serverState(d, "www", backs[1]), serverState(d, "www", backs[2])
		return a.Feedback > 1 && b.Feedback > 1 && c.Feedback == 1 && a.Weight == a.Feedback && c.Weight == 1
	})
	st, err := d.FeedbackStatus()
	if err != nil {
		t.Fatal(err)
	}
	n := st.Services[0].Nodes[0]
	if n.Terms == nil || n.Terms.CPUFrom != "cpuraw" || n.Terms.DeltaTicks == 0 {
		t.Errorf("agent terms: %+v", n.Terms)
	}
	// The old /load fields are still there beside the sample.
	resp, err := http.Get(fmt.Sprintf("http://127.0.87.21:%d/load", adminPort))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, k := range []string{`"active"`, `"load1"`, `"cpus"`, `"sysUpTime"`, `"inOctets"`, `"cpu"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("/load lacks %s: %s", k, b)
		}
	}
}

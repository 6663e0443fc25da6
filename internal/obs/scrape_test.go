package obs_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/node"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// TestEveryDaemonScrapes runs each daemon (meta and iods as processes,
// node and director in process, a FUSE mount as a process when root), gives
// it some work, scrapes its /metrics and checks that client_golang's
// linter finds nothing, that the runtime and process collectors are there,
// that /healthz says ok, and that docs/metrics.md lists exactly the corral_*
// metrics the daemons expose.
func TestEveryDaemonScrapes(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	ctx := context.Background()
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	put(t, cl, "/www/a.test/index.html", bytes.Repeat([]byte("<p>a</p>"), 1000))
	f, err := cl.Open(ctx, "/www/a.test/index.html")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(make([]byte, 100), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()

	exposed := map[string]map[string]bool{} // role -> corral_* names
	bases := map[string]string{}            // role -> where its /metrics is (the last of a role)
	check := func(role, base string) {
		t.Helper()
		names, _ := scrape(t, role, base)
		bases[role] = base
		if exposed[role] == nil {
			exposed[role] = map[string]bool{}
		}
		for _, n := range names {
			exposed[role][n] = true
		}
	}

	check("meta", "http://"+httpAddrFromLog(t, fsys.Meta))
	for _, p := range fsys.IODs {
		check("iod", "http://"+httpAddrFromLog(t, p))
	}

	// The node: content on one listener, its metrics handler on another
	// (where the node's admin listener mounts it).
	ns := node.New(node.Config{Meta: fsys.Meta.Addr})
	defer ns.Close()
	content := httptest.NewServer(ns)
	defer content.Close()
	admin := httptest.NewServer(ns.MetricsHandler())
	defer admin.Close()
	get(t, content.URL+"/index.html", "a.test", 200)
	get(t, content.URL+"/nope.html", "a.test", 404)
	names, _ := scrape(t, "node", admin.URL)
	exposed["node"] = set(names)
	bases["node"] = admin.URL

	// The director: one l7 service in front of the node.
	vip := freePort(t)
	conf := filepath.Join(t.TempDir(), "director.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf(`admin 127.0.0.1:0
qos gold { priority 10; header X-Tier: gold }
service www {
    vip %s
    dataplane l7
    scheduler wlc
    check none
    server %s weight=1
}
`, vip, strings.TrimPrefix(content.URL, "http://"))), 0o644)
	dctx, stop := context.WithCancel(ctx)
	adminc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- director.Run(dctx, conf, slog.New(slog.NewTextHandler(io.Discard, nil)), func(a string) { adminc <- a })
	}()
	t.Cleanup(func() { stop(); <-done })
	var dadmin string
	select {
	case dadmin = <-adminc:
	case err := <-done:
		t.Fatalf("director: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("director did not start")
	}
	get(t, "http://"+vip+"/index.html", "a.test", 200)
	// Its latency histogram has a series once the request's handler returned.
	eventually(t, "http://"+dadmin, `corral_director_request_duration_seconds_count{service="www"}`, 1)
	eventually(t, "http://"+dadmin, `corral_director_qos_admitted_total{class="default",service="www"}`, 1) // qos metrics linted too
	check("director", "http://"+dadmin)

	if lab.Have(t, lab.FUSE) {
		check("mount", "http://"+startMount(t, fsys))
	}

	// The counters saw the work done above (the node's: also the request
	// through the director). A request is counted once its handler
	// returns, which may be just after the client has the response: poll.
	server := strings.TrimPrefix(content.URL, "http://")
	for _, c := range []struct {
		role, series string
		min          float64
	}{
		{"meta", `corral_meta_operations_total{op="create",result="ok"}`, 1},
		{"meta", `corral_meta_operation_duration_seconds_count{op="create"}`, 1},
		{"meta", `corral_meta_iod_servers{state="up"}`, 2},
		{"iod", `corral_iod_capacity_bytes`, 1},
		{"iod", `corral_iod_free_bytes`, 1},
		{"node", `corral_node_requests_total{code="200"}`, 2}, // direct and through the director
		{"node", `corral_node_requests_total{code="404"}`, 1},
		{"node", `corral_node_response_bytes_total`, 16000},
		{"node", `corral_node_request_duration_seconds_count`, 3},
		{"node", `corral_node_fs_request_duration_seconds_count{op="read"}`, 1},
		{"node", `corral_node_fs_requests_total{op=*,result="enoent"}`, 1}, // the 404's lookup
		{"director", `corral_director_requests_total{server="` + server + `",service="www"}`, 1},
		{"director", `corral_director_bytes_total{direction="out",server="` + server + `",service="www"}`, 8000},
		{"director", `corral_director_request_duration_seconds_count{service="www"}`, 1},
		{"director", `corral_director_server_up{server="` + server + `",service="www"}`, 1},
		{"director", `corral_director_config_last_reload_successful`, 1},
	} {
		if v := eventually(t, bases[c.role], c.series, c.min); v < c.min {
			t.Errorf("%s: %s = %v, want at least %v", c.role, c.series, v, c.min)
		}
	}
	iodIn := 0.0
	for _, p := range fsys.IODs {
		iodIn += eventually(t, "http://"+httpAddrFromLog(t, p), `corral_iod_bytes_total{direction="in"}`, 0)
	}
	if iodIn < 8000 {
		t.Errorf("iods: corral_iod_bytes_total{direction=\"in\"} sums to %v, want the 8000 bytes written", iodIn)
	}
	if base, ok := bases["mount"]; ok {
		if v := eventually(t, base, `corral_mount_operations_total{op="write",result="ok"}`, 1); v < 1 {
			t.Errorf("mount: writes counted: %v", v)
		}
		// Two I/O servers: files get two copies, written through a head.
		if v := eventually(t, base, `corral_mount_fs_request_duration_seconds_count{op="repl-write"}`, 1); v < 1 {
			t.Errorf("mount: stripe writes timed: %v", v)
		}
	}

	documented, optional := readDoc(t)
	for role, names := range exposed {
		t.Logf("%s: %d corral_* metrics", role, len(names))
	}
	for role, names := range exposed {
		for n := range names {
			if documented[n] != role {
				t.Errorf("%s exposes %s, which docs/metrics.md does not list under %s", role, n, role)
			}
		}
	}
	for n, role := range documented {
		if exposed[role] != nil && !exposed[role][n] && !optional[n] {
			t.Errorf("docs/metrics.md lists %s under %s, which %s does not expose", n, role, role)
		}
	}

	// The mount's health tells the truth: with meta gone, statfs fails.
	if base, ok := bases["mount"]; ok {
		fsys.Meta.Kill()
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, body := status(t, base+"/healthz")
			if code == http.StatusServiceUnavailable && strings.Contains(body, "statfs") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("mount /healthz with meta killed: %d %q", code, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func status(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// scrape fetches base/metrics, lints it and returns its corral_* names.
func scrape(t *testing.T, role, base string) ([]string, string) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("%s: %v", role, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: /metrics: %s", role, resp.Status)
	}
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("%s: lint: %v", role, err)
	}
	for _, p := range problems {
		t.Errorf("%s: lint: %s: %s", role, p.Metric, p.Text)
	}
	var names []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 4 && f[0] == "#" && f[1] == "TYPE" {
			seen[f[2]] = true
			if strings.HasPrefix(f[2], "corral_") {
				names = append(names, f[2])
			}
		}
	}
	for _, want := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if !seen[want] {
			t.Errorf("%s: /metrics has no %s", role, want)
		}
	}
	if len(names) == 0 {
		t.Errorf("%s: /metrics has no corral_* metric", role)
	}
	if role != "node" { // the node's /healthz is on its admin listener (node package)
		hr, err := http.Get(base + "/healthz")
		if err != nil {
			t.Fatalf("%s: /healthz: %v", role, err)
		}
		hb, _ := io.ReadAll(hr.Body)
		hr.Body.Close()
		if hr.StatusCode != 200 || string(hb) != "ok\n" {
			t.Errorf("%s: /healthz: %s %q", role, hr.Status, hb)
		}
	}
	sort.Strings(names)
	return names, string(body)
}

// eventually scrapes base until series reaches min (10 s at most) and
// returns its last value.
func eventually(t *testing.T, base, series string, min float64) float64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		v := value(string(b), series)
		if v >= min || time.Now().After(deadline) {
			return v
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// value is the sample of a series (name{labels} as exposed, labels in
// their order), or -1 when absent. A label value * matches any, and the
// samples of the series matched are summed.
func value(body, series string) float64 {
	re := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(series), `\*`, `"[^"]*"`) + ` (\S+)$`)
	sum, found := 0.0, false
	for _, line := range strings.Split(body, "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			var v float64
			fmt.Sscan(m[1], &v)
			sum, found = sum+v, true
		}
	}
	if !found {
		return -1
	}
	return sum
}

var httpLine = regexp.MustCompile(`msg="metrics and health".* http=(\S+)`)

// httpAddrFromLog finds the HTTP address a daemon logged (its --http port 0
// picked a free one).
func httpAddrFromLog(t *testing.T, p *launch.Proc) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(p.Log)
		if m := httpLine.FindSubmatch(b); m != nil {
			return string(m[1])
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s logged no HTTP address: %s", p.Name, launch.Tail(p.Log, 10))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startMount mounts the file system with corral mount --http and works in
// it a little; it returns the mount's HTTP address.
func startMount(t *testing.T, fsys *launch.FS) string {
	dir := t.TempDir()
	p, err := launch.Start(context.Background(), "mount", fsys.Bin, filepath.Join(t.TempDir(), "mount.log"),
		"mount", "--http", "127.0.0.1:0", "--meta", fsys.Meta.Addr, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		syscall.Unmount(dir, syscall.MNT_DETACH)
	})
	if err := os.WriteFile(filepath.Join(dir, "m.txt"), []byte("mounted"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "m.txt")); err != nil || string(b) != "mounted" {
		t.Fatalf("read back through the mount: %q, %v", b, err)
	}
	return httpAddrFromLog(t, p)
}

// readDoc returns docs/metrics.md's metrics (name -> the daemon whose
// section lists it) and those marked as exposed only in some setups.
func readDoc(t *testing.T) (map[string]string, map[string]bool) {
	b, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	doc, optional := map[string]string{}, map[string]bool{}
	row := regexp.MustCompile("^\\| `(corral_[a-z0-9_]+)` \\|")
	role := ""
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			role = strings.Fields(line)[1]
		}
		if m := row.FindStringSubmatch(line); m != nil {
			if prev, ok := doc[m[1]]; ok {
				t.Errorf("docs/metrics.md lists %s twice (%s, %s)", m[1], prev, role)
			}
			doc[m[1]] = role
			if strings.Contains(line, "(only ") {
				optional[m[1]] = true
			}
		}
	}
	if len(doc) == 0 {
		t.Fatal("docs/metrics.md lists no metric")
	}
	return doc, optional
}

func put(t *testing.T, cl *client.Client, p string, data []byte) {
	t.Helper()
	ctx := context.Background()
	if err := cl.MkdirAll(ctx, filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := cl.CreatePath(ctx, p, 0o644, client.CreateOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, url, host string, want int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("GET %s (Host %s): %s, want %d", url, host, resp.Status, want)
	}
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func set(names []string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

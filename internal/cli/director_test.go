package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/director"
)

// capture runs f with stdout and stderr going to files and returns them.
func capture(t *testing.T, f func()) (stdout, stderr string) {
	t.Helper()
	dir := t.TempDir()
	o, _ := os.Create(filepath.Join(dir, "out"))
	e, _ := os.Create(filepath.Join(dir, "err"))
	so, se := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = o, e
	defer func() { os.Stdout, os.Stderr = so, se }()
	f()
	o.Close()
	e.Close()
	ob, _ := os.ReadFile(o.Name())
	eb, _ := os.ReadFile(e.Name())
	return string(ob), string(eb)
}

// TestDirectorCheck: --check validates a file without running anything,
// prints every error with its place and exits 1; a good file is "ok", 0.
func TestDirectorCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.conf")
	bad := filepath.Join(dir, "bad.conf")
	os.WriteFile(good, []byte("service www {\n vip 127.0.0.100:8080\n server 127.0.0.21:8080\n}\n"), 0o644)
	os.WriteFile(bad, []byte("admin 127.0.0.1:7500\nservice www {\n vip 127.0.0.100:8080\n dataplane l4\n scheduler mwlc\n server 127.0.0.21\n}\nservice dup {\n vip 127.0.0.100:8080\n}\n"), 0o644)
	var code int
	out, errOut := capture(t, func() { code = Main([]string{"director", "--check", good}) })
	if code != 0 || out != good+": ok\n" || errOut != "" {
		t.Fatalf("good file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut = capture(t, func() { code = Main([]string{"director", "--check", bad}) })
	want := []string{
		bad + ":2: service www: scheduler: mwlc needs dataplane l7",
		bad + ":6: service www: server: \"127.0.0.21\" is not an address:port",
		bad + ":8: service dup: vip: tcp 127.0.0.100:8080 is also service \"www\"'s (line 2)",
	}
	if code != 1 || out != "" {
		t.Fatalf("bad file: exit %d, stdout %q", code, out)
	}
	for _, w := range want {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errOut)
		}
	}
	// Running a bad file fails the same way, by the errors' type.
	_, errOut = capture(t, func() { code = Main([]string{"director", "--config", bad}) })
	if code != 1 || !strings.Contains(errOut, want[2]) || strings.Contains(errOut, "corral: ") {
		t.Fatalf("director --config bad: exit %d, %q", code, errOut)
	}
	_, errOut = capture(t, func() { code = Main([]string{"director", "--check", filepath.Join(dir, "missing.conf")}) })
	if code != 1 || !strings.Contains(errOut, "missing.conf: no such file") {
		t.Fatalf("missing file: exit %d, %q", code, errOut)
	}
}

func TestPrintReload(t *testing.T) {
	var b strings.Builder
	printReload(&b, &director.ReloadStatus{Time: time.Now(), File: "d.conf", Error: "d.conf:3: service s: scheduler: unknown\nd.conf:5: service s: server: bad"})
	if s := b.String(); !strings.Contains(s, "d.conf REJECTED") || !strings.Contains(s, "\n  d.conf:5: service s: server: bad\n") {
		t.Fatalf("%q", s)
	}
}

// TestPrintServicesL4: ctl services shows an l4 service's flows against
// its caps, the refusals by cap and the idle timeouts below the table, in
// lines under 100 columns even with the largest counts.
func TestPrintServicesL4(t *testing.T) {
	st := []director.ServiceStatus{
		{Name: "www", Protocol: "tcp", Dataplane: "l4", VIP: "127.0.0.1:80", L4: &director.L4Status{Flows: 12, MaxConns: 10000, Busiest: 3,
			MaxPerSource: 1000, RefusedService: 4, RefusedSource: 5, IdleClosed: 6, TCPTimeout: "15m0s", TCPFinTimeout: "2m0s"}},
		{Name: "dns-resolvers", Protocol: "udp", Dataplane: "l4", VIP: "127.0.0.1:53", L4: &director.L4Status{Flows: 1048576, MaxConns: 1048576,
			Busiest: 1048576, MaxPerSource: 1048576, RefusedService: 1 << 40, RefusedSource: 1 << 40, UDPTimeout: "5m0s"}},
		{Name: "web", Protocol: "tcp", Dataplane: "l7", VIP: "127.0.0.1:81"},
	}
	out, _ := capture(t, func() {
		if err := printServices(st); err != nil {
			t.Fatal(err)
		}
	})
	for _, want := range []string{
		"\nwww: l4 12/10000 flows, busiest source 3/1000; idle 15m0s, half-closed 2m0s\n",
		"\nwww: refused 4 at max-conns, 5 at max-conns-per-source; 6 ended idle\n",
		"\ndns-resolvers: l4 1048576/1048576 flows, busiest source 1048576/1048576; idle 5m0s\n",
		"\ndns-resolvers: dropped 1099511627776 at max-conns, 1099511627776 at max-conns-per-source\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "web: l4") {
		t.Errorf("an l7 service has l4 lines:\n%s", out)
	}
	for _, n := range l4Notes(st[1]) {
		if len(n) >= 100 {
			t.Errorf("%d columns: %q", len(n), n)
		}
	}
}

// TestPrintServicesWidth: the live table of a corral up cluster, with
// large counters, a drained, an overridden, a fed-back and a down server,
// fits 100 columns; a down server's check error is below the table.
func TestPrintServicesWidth(t *testing.T) {
	srv := func(addr string, w, cfg, override, fb int, healthy bool) director.ServerStatus {
		s := director.ServerStatus{Addr: addr, Weight: w, ConfigWeight: cfg, Override: override, Feedback: fb, Healthy: healthy,
			Active: 12345, Inactive: 1234, Connections: 12345678, Requests: 12345678, BytesIn: 123 << 30, BytesOut: 987 << 30}
		s.Rate.CPS, s.Rate.InBPS, s.Rate.OutBPS = 12345, 900<<20, 999<<20
		if !healthy {
			s.LastError = "dial tcp 127.0.0.23:8080: connect: connection refused"
		}
		return s
	}
	servers := []director.ServerStatus{
		srv("127.0.0.21:8080", 0, 1, 0, -1, true),
		srv("127.0.0.22:8080", 3, 1, 3, -1, true),
		srv("127.0.0.23:8080", 0, 1, -1, -1, false),
		srv("127.0.0.24:8080", 12, 100, -1, 12, true),
	}
	st := []director.ServiceStatus{
		{Name: "www", Protocol: "tcp", Dataplane: "l4", Scheduler: "wlc", VIP: "127.0.0.100:8080", NewConns: 123456789, Servers: servers},
		{Name: "www-l7", Protocol: "tcp", Dataplane: "l7", Scheduler: "mwlc", VIP: "127.0.0.100:8081", NewConns: 123456789, Servers: servers},
	}
	out, _ := capture(t, func() {
		if err := printServices(st); err != nil {
			t.Fatal(err)
		}
	})
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if strings.Contains(l, "DOWN:") {
			continue // a note below the table: the error as the check saw it
		}
		if len(l) > 100 {
			t.Errorf("%d columns: %q", len(l), l)
		}
	}
	for _, want := range []string{"Conn/s", "drained", "DOWN", "connection refused", "127.0.0.24:8080"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	t.Logf("\n%s", out)
}

package obs

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestDefaultAddr(t *testing.T) {
	for _, c := range []struct{ listen, want, err string }{
		{"127.0.0.10:7400", "127.0.0.10:9400", ""},
		{"127.0.0.11:7410", "127.0.0.11:9410", ""},
		{"127.0.0.1:7411", "127.0.0.1:9411", ""},
		{"127.0.0.1:0", "127.0.0.1:0", ""},
		{":7400", "127.0.0.1:9400", ""},
		{"0.0.0.0:7400", "127.0.0.1:9400", ""},
		{"[::1]:7400", "[::1]:9400", ""},
		{"127.0.0.1:64000", "", "over 65535"},
		{"127.0.0.1", "", "missing port"},
		{"127.0.0.1:http", "", "not a number"},
	} {
		got, err := DefaultAddr(c.listen, 2000)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("DefaultAddr(%q) = %q, %v; want an error with %q", c.listen, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("DefaultAddr(%q) = %q, %v; want %q", c.listen, got, err, c.want)
		}
	}
}

func TestHealthz(t *testing.T) {
	get := func(check Check) (int, string) {
		rec := httptest.NewRecorder()
		Healthz(check).ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get(nil); code != 200 || body != "ok\n" {
		t.Errorf("no check: %d %q", code, body)
	}
	if code, body := get(func(context.Context) error { return nil }); code != 200 || body != "ok\n" {
		t.Errorf("passing check: %d %q", code, body)
	}
	if code, body := get(func(context.Context) error { return errors.New("store closed") }); code != 503 || body != "unhealthy: store closed\n" {
		t.Errorf("failing check: %d %q", code, body)
	}
	// A check that gives up on its context fails with the context's reason;
	// one that ignores the deadline but passes after it is still a failure.
	if code, body := get(func(ctx context.Context) error {
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		return cancelled.Err()
	}); code != 503 || !strings.Contains(body, "canceled") {
		t.Errorf("cancelled check: %d %q", code, body)
	}
}

func TestListenHTTPLoopbackByDefault(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := ListenHTTP(ctx, ":0", Mux(NewRegistry(), nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ip := a.(*net.TCPAddr).IP; !ip.IsLoopback() {
		t.Fatalf("a host-less address listens on %v, want loopback", ip)
	}
	resp, err := http.Get("http://" + a.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "go_goroutines") || !strings.Contains(string(b), "process_resident_memory_bytes") {
		t.Errorf("/metrics lacks the runtime and process collectors:\n%.300s", b)
	}
	if _, err := ListenHTTP(ctx, a.String(), Mux(NewRegistry(), nil), nil); err == nil || !strings.Contains(err.Error(), "metrics, health") {
		t.Errorf("second listener on %s: %v, want an error naming the listener", a, err)
	}
	if _, err := ListenHTTP(ctx, "nonsense", nil, nil); err == nil || !strings.Contains(err.Error(), `"nonsense"`) {
		t.Errorf("bad address: %v", err)
	}
	cancel()
}

// Observing an operation allocates nothing once its series exist: it runs
// once per request on every daemon.
func TestOpMetricsObserveDoesNotAllocate(t *testing.T) {
	m := NewOpMetrics(NewRegistry(), "corral_test_operations", "test", "corral_test_operation_duration_seconds", "test")
	m.Init("lookup")
	m.Observe("lookup", time.Millisecond, "enoent")
	op := strings.Clone("lookup") // not the constant the series were made with
	if n := testing.AllocsPerRun(1000, func() {
		m.Observe(op, time.Millisecond, "ok")
		m.Observe(op, time.Millisecond, "enoent")
	}); n != 0 {
		t.Errorf("Observe allocates %v times per call pair", n)
	}
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/mgmt/api"
)

func fast(t *testing.T) {
	useParser(t)
	p, r, re := pollWait, reportEvery, retryEvery
	pollWait, reportEvery, retryEvery = 2*time.Second, 100*time.Millisecond, 300*time.Millisecond
	t.Cleanup(func() { pollWait, reportEvery, retryEvery = p, r, re })
}

// doc is a configuration whose one cluster is named name.
func doc(name string) string { return "clusters:\n  - name: " + name + "\n" }

// applier records what it applied and refuses configurations whose
// cluster is named "bad".
type applier struct {
	mu      sync.Mutex
	running string // cluster name of the configuration running
	version int64
	drained []string
	calls   int
	failFor int // refuse this many more applies (a passing cause)
}

func (p *applier) apply(_ context.Context, c *clustercfg.Config, v int64, drained []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.failFor > 0 {
		p.failFor--
		return errors.New("meta: no leader yet")
	}
	if len(c.Clusters) > 0 && c.Clusters[0].Name == "bad" {
		return errors.New("service www: scheduler \"nope\" unknown")
	}
	if len(c.Clusters) > 0 {
		p.running = c.Clusters[0].Name
	}
	p.version, p.drained = v, drained
	return nil
}

func (p *applier) state() (string, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running, p.version
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run starts a's Run; the cleanup stops it and waits.
func run(t *testing.T, a *Agent) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Error("agent did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func reported(f *fakeStation, version int64, errPart string) func() bool {
	return func() bool {
		st, ok := f.lastReport()
		return ok && st.Version == version && strings.Contains(st.Error, errPart) && (errPart != "" || st.Error == "")
	}
}

func opts(f *fakeStation, state, token string, p *applier) Options {
	return Options{Stations: []string{f.url()}, Token: token, State: state, Role: api.RoleNode, Name: "node1",
		Addr: "127.0.54.20:8080", Apply: p.apply, Health: func() error { return nil }, Report: func() any { return map[string]int{"x": 1} }}
}

func TestJoinRefusals(t *testing.T) {
	fast(t)
	f := newFakeStation(t, "127.0.54.1")
	ctx := context.Background()
	expired := f.token("t1", "token t1 expired at 2026-11-25T17:00:00Z")
	_, _, err := Join(ctx, opts(f, t.TempDir(), expired, &applier{}))
	if err == nil || !strings.Contains(err.Error(), "join: token t1 expired at 2026-11-25T17:00:00Z (make a new one: corral mgmt token create --role node)") {
		t.Fatalf("expired token: got %v", err)
	}
	_, _, err = Join(ctx, opts(f, t.TempDir(), "nodots", &applier{}))
	if err == nil || !strings.Contains(err.Error(), "want ID.SECRET.CAHASH") {
		t.Fatalf("malformed token: got %v", err)
	}
	// A token naming another CA: the station is not trusted, the secret
	// never leaves (the handshake fails before the request).
	other := "t2.s3cret." + strings.Repeat("ab", 16)
	f.mu.Lock()
	f.tokens[other] = ""
	f.mu.Unlock()
	_, _, err = Join(ctx, opts(f, t.TempDir(), other, &applier{}))
	if err == nil || !strings.Contains(err.Error(), "station's CA does not match the token's hash") {
		t.Fatalf("wrong CA hash: got %v", err)
	}
	if f.joined() != 0 {
		t.Fatalf("a join went through with a bad token")
	}
	o := opts(f, t.TempDir(), f.token("t3", ""), &applier{})
	o.Stations = []string{"https://127.0.54.2:1"}
	_, _, err = Join(ctx, o)
	if err == nil || !strings.Contains(err.Error(), "no station answered") {
		t.Fatalf("no station: got %v", err)
	}
	o = opts(f, t.TempDir(), f.token("t5", ""), &applier{})
	o.Stations = []string{"http://10.1.2.3:7600"}
	if _, _, err = Join(ctx, o); err == nil || !strings.Contains(err.Error(), "plain http is for a station on loopback only") {
		t.Fatalf("plain http off loopback: got %v", err)
	}
	_, _, err = Join(ctx, opts(f, t.TempDir(), "", &applier{}))
	if err == nil || !strings.Contains(err.Error(), "no --token") {
		t.Fatalf("no token: got %v", err)
	}
	// The right CA, but a certificate for another address.
	g := newFakeStationCert(t, "127.0.54.7", "127.0.54.99")
	_, _, err = Join(ctx, opts(g, t.TempDir(), g.token("t4", ""), &applier{}))
	if err == nil || !strings.Contains(err.Error(), "127.0.54.7") || g.joined() != 0 {
		t.Fatalf("certificate for another address: got %v", err)
	}
}

func TestJoinSavedCredential(t *testing.T) {
	fast(t)
	f := newFakeStation(t, "127.0.54.3")
	f.set(1, doc("one"))
	state := filepath.Join(t.TempDir(), "state")
	p := &applier{}
	a, reply, err := Join(context.Background(), opts(f, state, f.token("t1", ""), p))
	if err != nil {
		t.Fatal(err)
	}
	if string(reply.Secret) != "fs-credential" || len(reply.Meta) != 1 {
		t.Fatalf("join reply: %+v", reply)
	}
	fi, err := os.Stat(filepath.Join(state, StateFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved credential: %v %v", fi, err)
	}
	stop := run(t, a)
	waitFor(t, "version 1 applied and reported", reported(f, 1, ""))
	stop()

	// A restart without the token: the saved credential serves.
	p2 := &applier{}
	a2, reply2, err := Join(context.Background(), opts(f, state, "", p2))
	if err != nil {
		t.Fatalf("restart with the saved credential: %v", err)
	}
	if string(reply2.Secret) != "fs-credential" || f.joined() != 1 {
		t.Fatalf("restart: reply %+v, joins %d", reply2, f.joined())
	}
	stop = run(t, a2)
	waitFor(t, "the restarted agent applies version 1", func() bool { n, v := p2.state(); return n == "one" && v == 1 })
	stop()

	// Credential revoked: without a token the error says so; with one it
	// joins again.
	f.revoke()
	if _, _, err := Join(context.Background(), opts(f, state, "", &applier{})); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("revoked credential, no token: got %v", err)
	}
	if _, _, err := Join(context.Background(), opts(f, state, f.token("t2", ""), &applier{})); err != nil || f.joined() != 2 {
		t.Fatalf("revoked credential with a token: %v (joins %d)", err, f.joined())
	}
}

func TestApplyErrorKeepsOld(t *testing.T) {
	fast(t)
	f := newFakeStation(t, "127.0.54.4")
	f.set(1, doc("one"))
	p := &applier{}
	a, _, err := Join(context.Background(), opts(f, t.TempDir(), f.token("t1", ""), p))
	if err != nil {
		t.Fatal(err)
	}
	run(t, a)
	waitFor(t, "version 1", reported(f, 1, ""))
	f.set(2, doc("bad"))
	waitFor(t, "version 2's error reported with version 1 running", reported(f, 1, `scheduler "nope" unknown`))
	if n, v := p.state(); n != "one" || v != 1 {
		t.Fatalf("running %s v%d after a refused version, want one v1", n, v)
	}
	// A version the parser refuses is reported likewise.
	f.set(3, "clusters: [\n")
	waitFor(t, "version 3's parse error", func() bool {
		st, ok := f.lastReport()
		return ok && st.Version == 1 && st.Error != "" && !strings.Contains(st.Error, "nope")
	})
	f.set(4, doc("four"), "node2")
	waitFor(t, "version 4", reported(f, 4, ""))
	p.mu.Lock()
	drained := fmt.Sprint(p.drained)
	p.mu.Unlock()
	if drained != "[node2]" {
		t.Fatalf("drained %s, want [node2]", drained)
	}
	// A drain alone (same version) is applied too.
	f.set(4, doc("four"))
	waitFor(t, "undrain applied", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.drained) == 0 })
	st, _ := f.lastReport()
	if !st.Healthy || st.Name != "node1" || st.Role != api.RoleNode || string(st.Report) != `{"x":1}` || st.Build == "" {
		t.Fatalf("report: %+v", st)
	}
}

func TestStationOutage(t *testing.T) {
	fast(t)
	f := newFakeStation(t, "127.0.54.5")
	f.set(1, doc("one"))
	p := &applier{}
	a, _, err := Join(context.Background(), opts(f, t.TempDir(), f.token("t1", ""), p))
	if err != nil {
		t.Fatal(err)
	}
	run(t, a)
	waitFor(t, "version 1", reported(f, 1, ""))
	f.down()
	time.Sleep(500 * time.Millisecond) // a few failed polls and reports
	if n, v := p.state(); n != "one" || v != 1 {
		t.Fatalf("running %s v%d while the station is away, want one v1", n, v)
	}
	p.mu.Lock()
	calls := p.calls
	p.mu.Unlock()
	f.mu.Lock()
	f.reports = nil
	f.mu.Unlock()
	f.set(2, doc("two"))
	f.up()
	waitFor(t, "version 2 after the station is back", reported(f, 2, ""))
	p.mu.Lock()
	after := p.calls
	p.mu.Unlock()
	if n, _ := p.state(); n != "two" || after != calls+1 {
		t.Fatalf("after outage: running %s, %d applies (want two, %d)", n, after, calls+1)
	}
}

// A version refused for a passing cause is tried again and applied.
func TestApplyRetried(t *testing.T) {
	fast(t)
	f := newFakeStation(t, "127.0.54.8")
	f.set(1, doc("one"))
	p := &applier{failFor: 2}
	a, _, err := Join(context.Background(), opts(f, t.TempDir(), f.token("t1", ""), p))
	if err != nil {
		t.Fatal(err)
	}
	run(t, a)
	waitFor(t, "the error reported", reported(f, 0, "no leader yet"))
	waitFor(t, "version 1 applied on a later try", reported(f, 1, ""))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls != 3 {
		t.Fatalf("%d applies, want 3", p.calls)
	}
}

// A role report over MaxReport (a director of thousands of services) is
// left out, so the status still fits the station's body limit and the
// member is seen up with its version.
func TestBigReportLeftOut(t *testing.T) {
	big := strings.Repeat("x", MaxReport+1)
	a := &Agent{opt: Options{Name: "d1", Role: api.RoleDirector, Report: func() any { return big }}, log: slog.New(slog.DiscardHandler)}
	if st := a.Status(); len(st.Report) != 0 || !st.Healthy {
		t.Fatalf("a %d-byte report was sent (%d bytes) or marked the member unhealthy", len(big), len(st.Report))
	}
	a.opt.Report = func() any { return "small" }
	if st := a.Status(); string(st.Report) != `"small"` {
		t.Fatalf("small report: %q", st.Report)
	}
}

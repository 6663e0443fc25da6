package mgmt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// The store's YAML validation and transaction ops are swapped for
// trivial ones: a document is valid unless it contains "bad"; its
// canonical form is itself trimmed; an op appends a line.
func TestMain(m *testing.M) {
	validate = func(file string, b []byte) ([]byte, error) {
		if i := bytes.Index(b, []byte("bad")); i >= 0 {
			line := bytes.Count(b[:i], []byte("\n")) + 1
			return nil, clustercfg.Errors{{File: file, Path: "services[0].vip", Line: line, Msg: "bad value"}}
		}
		return append(bytes.TrimSpace(b), '\n'), nil
	}
	applyOps = func(base []byte, ops []api.TxOp) ([]byte, error) {
		out := string(base)
		for _, op := range ops {
			if op.Kind == "nope" {
				return nil, fmt.Errorf("unknown kind %q", op.Kind)
			}
			out += fmt.Sprintf("# %s %s %s %s\n", op.Op, op.Kind, op.Name, op.Value)
		}
		return []byte(out), nil
	}
	diffYAML = func(a, b []byte) string {
		if bytes.Equal(a, b) {
			return ""
		}
		return "-" + string(a) + "+" + string(b)
	}
	os.Exit(m.Run())
}

// tstation is a station under test on its own loopback address.
type tstation struct {
	s     *Station
	ip    string
	dir   string
	url   string
	admin string // bootstrap admin token
	stop  func()
}

func stationOpts(ip, dir string) Options {
	return Options{Data: dir, Listen: ip + ":7600", EtcdName: "st-" + strings.ReplaceAll(ip, ".", "-"),
		EtcdPeer: ip + ":7602", EtcdClient: ip + ":7601", MemberTimeout: 3 * time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// startStation opens and serves a station; it stops with the test (or
// earlier through stop).
func startStation(t *testing.T, opt Options) *tstation {
	t.Helper()
	s, err := New(opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return serve(t, s, opt)
}

func serve(t *testing.T, s *Station, opt Options) *tstation {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, func(a string) { ready <- a }) }()
	ts := &tstation{s: s, dir: opt.Data, ip: strings.Split(opt.Listen, ":")[0]}
	select {
	case a := <-ready:
		ts.url = "https://" + a
		if opt.Insecure {
			ts.url = "http://" + a
		}
	case err := <-done:
		cancel()
		s.Close()
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("station did not listen within 30 s")
	}
	b, err := os.ReadFile(filepath.Join(opt.Data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	ts.admin = strings.TrimSpace(string(b))
	var once bool
	ts.stop = func() {
		if once {
			return
		}
		once = true
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not end within 10 s")
		}
		s.Close()
	}
	t.Cleanup(ts.stop)
	return ts
}

// client is an API client of ts with token.
func (ts *tstation) client(t *testing.T, token string) *api.Client {
	t.Helper()
	c, err := api.NewClient([]string{ts.url}, token, ts.s.CA())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func status(err error) int {
	var se *api.StatusError
	if errors.As(err, &se) {
		return se.Status
	}
	return 0
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustApply(t *testing.T, c *api.Client, base int64, yaml string) api.ApplyReply {
	t.Helper()
	var r api.ApplyReply
	if err := c.Do(ctxT(t), http.MethodPut, api.RouteConfig, api.ApplyRequest{Base: base, YAML: yaml}, &r); err != nil {
		t.Fatalf("apply on %d: %v", base, err)
	}
	return r
}

func TestApplyHistoryRollbackDiff(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.52.1", t.TempDir()))
	c := ts.client(t, ts.admin)
	ctx := ctxT(t)

	var v api.Version
	if err := c.Do(ctx, "GET", api.RouteConfig, nil, &v); err != nil || v.Version != 0 {
		t.Fatalf("empty station: %+v %v", v, err)
	}
	r1 := mustApply(t, c, 0, "a: 1")
	if r1.Version != 1 || r1.Diff == "" {
		t.Fatalf("first apply: %+v", r1)
	}
	r2 := mustApply(t, c, 1, "a: 2\n")
	if r2.Version != 2 {
		t.Fatalf("second apply: %+v", r2)
	}
	// The same canonical YAML again: unchanged, no version.
	r3 := mustApply(t, c, 2, "  a: 2  ")
	if !r3.Unchanged || r3.Version != 2 {
		t.Fatalf("unchanged apply: %+v", r3)
	}
	// Dry run: a diff, nothing stored.
	var dr api.ApplyReply
	if err := c.Do(ctx, "PUT", api.RouteConfig, api.ApplyRequest{Base: 2, YAML: "a: 3", DryRun: true}, &dr); err != nil || dr.Version != 2 || dr.Diff == "" {
		t.Fatalf("dry run: %+v %v", dr, err)
	}
	// Invalid YAML: 400 with path and line, nothing stored.
	err := c.Do(ctx, "PUT", api.RouteConfig, api.ApplyRequest{Base: 2, YAML: "a: 1\nb: bad\n"}, nil)
	var se *api.StatusError
	if !errors.As(err, &se) || se.Status != 400 || len(se.Body.Errors) != 1 || se.Body.Errors[0].Line != 2 || se.Body.Errors[0].Path != "services[0].vip" {
		t.Fatalf("bad YAML: %v", err)
	}
	if err := c.Do(ctx, "GET", api.RouteConfig, nil, &v); err != nil || v.Version != 2 || v.YAML != "a: 2\n" || v.Author != "admin" || v.Parent != 1 {
		t.Fatalf("current: %+v %v", v, err)
	}
	var hist []api.Version
	if err := c.Do(ctx, "GET", api.RouteHistory, nil, &hist); err != nil || len(hist) != 2 || hist[0].Version != 2 || hist[1].Version != 1 || hist[0].YAML != "" {
		t.Fatalf("history: %+v %v", hist, err)
	}
	if err := c.Do(ctx, "GET", api.RouteHistory+"?limit=1", nil, &hist); err != nil || len(hist) != 1 {
		t.Fatalf("history limit 1: %+v %v", hist, err)
	}
	var rb api.ApplyReply
	if err := c.Do(ctx, "POST", api.RouteRollback, api.RollbackRequest{To: 1, Base: 2}, &rb); err != nil || rb.Version != 3 {
		t.Fatalf("rollback: %+v %v", rb, err)
	}
	if err := c.Do(ctx, "GET", api.RouteVersion+"3", nil, &v); err != nil || v.YAML != "a: 1\n" || v.Parent != 2 {
		t.Fatalf("version 3: %+v %v", v, err)
	}
	if err := c.Do(ctx, "GET", api.RouteVersion+"9", nil, &v); status(err) != 404 {
		t.Fatalf("version 9: %v", err)
	}
	var d api.ApplyReply
	if err := c.Do(ctx, "GET", api.RouteDiff+"?from=1&to=3", nil, &d); err != nil || !d.Unchanged || d.Diff != "" {
		t.Fatalf("diff 1..3: %+v %v", d, err)
	}
	var d2 api.ApplyReply
	if err := c.Do(ctx, "GET", api.RouteDiff+"?from=1&to=2", nil, &d2); err != nil || d2.Unchanged || d2.Diff == "" {
		t.Fatalf("diff 1..2: %+v %v", d2, err)
	}
	var audit []api.AuditEntry
	if err := c.Do(ctx, "GET", api.RouteAudit, nil, &audit); err != nil {
		t.Fatal(err)
	}
	var acts []string
	for _, a := range audit {
		if a.Version > 0 {
			acts = append(acts, fmt.Sprintf("%s %d %s", a.Action, a.Version, a.User))
		}
	}
	if strings.Join(acts, ",") != "rollback 3 admin,apply 2 admin,apply 1 admin" {
		t.Fatalf("audit: %v", acts)
	}
	if ev := ts.s.recentEvents(10); len(ev) < 3 || ev[len(ev)-1].Kind != "rollback" {
		t.Fatalf("events: %+v", ev)
	}
}

func TestStaleBaseAndConcurrentApplies(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.52.2", t.TempDir()))
	c := ts.client(t, ts.admin)
	ctx := ctxT(t)
	mustApply(t, c, 0, "v: 1")
	err := c.Do(ctx, "PUT", api.RouteConfig, api.ApplyRequest{Base: 0, YAML: "v: 2"}, nil)
	var se *api.StatusError
	if !api.IsConflict(err) || !errors.As(err, &se) || se.Body.Current != 1 {
		t.Fatalf("stale base: want 409 with current 1, got %v", err)
	}
	// Force (-1) goes through.
	if r := mustApply(t, c, -1, "v: 3"); r.Version != 2 {
		t.Fatalf("forced apply: %+v", r)
	}

	const n = 20
	type res struct {
		v   int64
		err error
	}
	out := make(chan res, n)
	for i := 0; i < n; i++ {
		go func() {
			var r api.ApplyReply
			err := c.Do(ctx, "PUT", api.RouteConfig, api.ApplyRequest{Base: 2, YAML: fmt.Sprintf("w: %d", i)}, &r)
			out <- res{r.Version, err}
		}()
	}
	wins, conflicts := 0, 0
	for i := 0; i < n; i++ {
		r := <-out
		switch {
		case r.err == nil && r.v == 3:
			wins++
		case api.IsConflict(r.err):
			conflicts++
		default:
			t.Errorf("apply: %d %v", r.v, r.err)
		}
	}
	if wins != 1 || conflicts != n-1 {
		t.Fatalf("20 applies on one base: %d won, %d conflicts; want 1 and 19", wins, conflicts)
	}
	var hist []api.Version
	if err := c.Do(ctx, "GET", api.RouteHistory, nil, &hist); err != nil || len(hist) != 3 {
		t.Fatalf("history after the race: %d versions, %v", len(hist), err)
	}
}

func TestTransaction(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.52.3", t.TempDir()))
	c := ts.client(t, ts.admin)
	ctx := ctxT(t)
	mustApply(t, c, 0, "x: 1")
	var r api.ApplyReply
	tx := api.TxRequest{Base: 1, Ops: []api.TxOp{
		{Op: "put", Kind: "node", Value: []byte(`{"name":"n1"}`)},
		{Op: "delete", Kind: "service", Name: "web"},
	}}
	if err := c.Do(ctx, "POST", api.RouteTx, tx, &r); err != nil || r.Version != 2 {
		t.Fatalf("tx: %+v %v", r, err)
	}
	var v api.Version
	c.Do(ctx, "GET", api.RouteConfig, nil, &v)
	if !strings.Contains(v.YAML, "put node") || !strings.Contains(v.YAML, "delete service web") {
		t.Fatalf("tx made one version with both ops? %q", v.YAML)
	}
	if err := c.Do(ctx, "POST", api.RouteTx, tx, nil); !api.IsConflict(err) {
		t.Fatalf("tx on a stale base: %v", err)
	}
	bad := api.TxRequest{Base: 2, Ops: []api.TxOp{{Op: "put", Kind: "node", Value: []byte(`"bad"`)}}}
	if err := c.Do(ctx, "POST", api.RouteTx, bad, nil); status(err) != 400 {
		t.Fatalf("tx making an invalid config: %v", err)
	}
	if err := c.Do(ctx, "POST", api.RouteTx, api.TxRequest{Base: 2, Ops: []api.TxOp{{Op: "put", Kind: "nope"}}}, nil); status(err) != 400 || !strings.Contains(err.Error(), "unknown kind") {
		t.Fatalf("tx with an op that does not apply: %v", err)
	}
	if err := c.Do(ctx, "POST", api.RouteTx, api.TxRequest{Base: 2, Ops: []api.TxOp{{Op: "frob", Kind: "node"}}}, nil); status(err) != 400 {
		t.Fatalf("tx with a bad op: %v", err)
	}
	c.Do(ctx, "GET", api.RouteConfig, nil, &v)
	if v.Version != 2 {
		t.Fatalf("failed tx stored something: version %d", v.Version)
	}
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

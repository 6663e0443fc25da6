package mgmt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// fakeMember is a member of fakeStore: how it answers a binary order.
type fakeMember struct {
	api.MemberStatus
	// comesBack: an order to a new build makes it report that build
	// healthy; otherwise it stays on (reports) its old build.
	comesBack bool
	old       string
	downWhen  string // goes down when this member gets its order
}

// fakeStore is a station store with fake members that obey orders at
// once; it records what the coordinator did.
type fakeStore struct {
	mu         sync.Mutex
	ms         []*fakeMember
	orders     []string // "member sha revert?"
	drains     []string // "member true|false"
	drainedSet map[string]bool
	events     []api.Event
	audits     []api.AuditEntry
}

func (f *fakeStore) members(ctx context.Context) ([]api.MemberStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.MemberStatus
	for _, m := range f.ms {
		out = append(out, m.MemberStatus)
	}
	return out, nil
}

func (f *fakeStore) drained(ctx context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n, d := range f.drainedSet {
		if d {
			out = append(out, n)
		}
	}
	return out, nil
}

func (f *fakeStore) setDrain(ctx context.Context, node string, drain bool, who string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drains = append(f.drains, node+" "+map[bool]string{true: "drain", false: "undrain"}[drain])
	if f.drainedSet == nil {
		f.drainedSet = map[string]bool{}
	}
	f.drainedSet[node] = drain
	return nil
}

func (f *fakeStore) setBinary(ctx context.Context, member string, o *api.BinaryOrder) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o == nil {
		f.orders = append(f.orders, member+" clear")
		return nil
	}
	rev := ""
	if o.Revert {
		rev = " revert"
	}
	f.orders = append(f.orders, member+" "+o.SHA256[:8]+rev)
	for _, m := range f.ms {
		if m.downWhen == member {
			m.Up = false
		}
		if m.Name != member {
			continue
		}
		switch {
		case o.Revert:
			m.Build, m.Healthy = m.old, true
		case m.comesBack:
			m.Build, m.Healthy = o.SHA256, true
		default:
			m.Healthy = false // a broken binary: crashes and comes back old, or hangs
		}
	}
	return nil
}

func (f *fakeStore) audit(ctx context.Context, e api.AuditEntry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.audits = append(f.audits, e)
	return nil
}

func (f *fakeStore) event(e api.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e)
}

func (f *fakeStore) member(name string, role string, comesBack bool) {
	old := strings.Repeat("0", 64)
	f.ms = append(f.ms, &fakeMember{MemberStatus: api.MemberStatus{Name: name, Role: role, Addr: name + ":80", Build: old, Healthy: true, Up: true}, comesBack: comesBack, old: old})
}

// putTestBinary stores bytes as an uploaded binary and returns its sha256.
func putTestBinary(t *testing.T, rs *rolloutState, body []byte) string {
	t.Helper()
	sum := sha256.Sum256(body)
	sha := hex.EncodeToString(sum[:])
	req := httptest.NewRequest("PUT", api.RouteBinary+sha, bytes.NewReader(body))
	req.SetPathValue("sha", sha)
	w := httptest.NewRecorder()
	rs.putBinary(w, req, &Principal{Name: "admin", Role: api.RoleAdmin})
	if w.Code != 200 {
		t.Fatalf("put binary: %d %s", w.Code, w.Body)
	}
	return sha
}

// waitRollout waits (bounded) for the rollout to end.
func waitRollout(t *testing.T, rs *rolloutState) *api.Rollout {
	t.Helper()
	rs.mu.Lock()
	done := rs.done
	rs.mu.Unlock()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("rollout did not end within 30 s")
	}
	return rs.snapshot()
}

func TestRolloutBrokenMemberRevertsAndStops(t *testing.T) {
	f := &fakeStore{}
	f.member("director1", api.RoleDirector, true)
	f.member("node2", api.RoleNode, false) // the broken one
	f.member("node1", api.RoleNode, true)
	f.member("node3", api.RoleNode, true)
	dir := t.TempDir()
	rs := newRolloutState(f, filepath.Join(dir, "binaries"), filepath.Join(dir, "rollout.json"))
	sha := putTestBinary(t, rs, []byte("new corral"))

	ro, status, err := rs.begin(context.Background(), api.RolloutRequest{SHA256: sha, Check: 600 * time.Millisecond, Drain: 100 * time.Millisecond}, "admin")
	if err != nil {
		t.Fatalf("begin: %d %v", status, err)
	}
	// Default order: nodes by name, then directors.
	var names []string
	for _, s := range ro.Steps {
		names = append(names, s.Member)
	}
	if got := strings.Join(names, ","); got != "node1,node2,node3,director1" {
		t.Fatalf("order %s, want node1,node2,node3,director1", got)
	}
	// A second rollout while this one runs is refused.
	if _, status, err := rs.begin(context.Background(), api.RolloutRequest{SHA256: sha}, "admin"); status != http.StatusConflict {
		t.Errorf("second rollout: %d %v, want 409", status, err)
	}
	ro = waitRollout(t, rs)
	if ro.State != "failed" || !strings.Contains(ro.Error, "node2") {
		t.Errorf("rollout %s %q, want failed naming node2", ro.State, ro.Error)
	}
	want := []string{"done", "rolled-back", "waiting", "waiting"}
	for i, s := range ro.Steps {
		if s.State != want[i] {
			t.Errorf("step %s: %s (%s), want %s", s.Member, s.State, s.Error, want[i])
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got := strings.Join(f.orders, "; "); got != "node1 "+sha[:8]+"; node2 "+sha[:8]+"; node2 "+sha[:8]+" revert" {
		t.Errorf("orders: %s", got)
	}
	if got := strings.Join(f.drains, "; "); got != "node1 drain; node1 undrain; node2 drain; node2 undrain" {
		t.Errorf("drains: %s", got)
	}
	if f.ms[1].Build != f.ms[1].old || f.ms[2].Build != sha {
		t.Errorf("builds: node2 %s node1 %s", f.ms[1].Build, f.ms[2].Build)
	}
	// Kept on disk: a new station state sees it.
	rs2 := newRolloutState(f, rs.dir, rs.file)
	if got := rs2.snapshot(); got == nil || got.ID != ro.ID || got.State != "failed" {
		t.Errorf("reloaded rollout: %+v", got)
	}
}

func TestRolloutAllGood(t *testing.T) {
	f := &fakeStore{}
	f.member("iod1", api.RoleIOD, true)
	f.member("node1", api.RoleNode, true)
	f.member("down", api.RoleNode, true)
	f.ms[2].Up = false
	f.drainedSet = map[string]bool{"node1": true} // by the operator: stays so
	dir := t.TempDir()
	rs := newRolloutState(f, filepath.Join(dir, "binaries"), "")
	sha := putTestBinary(t, rs, []byte("new corral 2"))
	if _, status, err := rs.begin(context.Background(), api.RolloutRequest{SHA256: sha, Members: []string{"down"}}, "admin"); status != 400 || !strings.Contains(err.Error(), "down") {
		t.Errorf("rollout to a down member: %d %v", status, err)
	}
	if _, status, err := rs.begin(context.Background(), api.RolloutRequest{SHA256: sha, Members: []string{"nope"}}, "admin"); status != 400 || !strings.Contains(err.Error(), "nope") {
		t.Errorf("rollout to an unknown member: %d %v", status, err)
	}
	if _, status, err := rs.begin(context.Background(), api.RolloutRequest{SHA256: strings.Repeat("a", 64)}, "admin"); status != 400 || !strings.Contains(err.Error(), "not uploaded") {
		t.Errorf("rollout of a binary not uploaded: %d %v", status, err)
	}
	if _, _, err := rs.begin(context.Background(), api.RolloutRequest{SHA256: sha, Check: time.Second}, "admin"); err != nil {
		t.Fatal(err)
	}
	ro := waitRollout(t, rs)
	if ro.State != "done" || len(ro.Steps) != 2 || ro.Steps[0].Member != "node1" || ro.Steps[1].Member != "iod1" {
		t.Fatalf("rollout: %+v", ro)
	}
	for _, s := range ro.Steps {
		if s.State != "done" {
			t.Errorf("step %+v", s)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.drains) != 0 || !f.drainedSet["node1"] {
		t.Errorf("a node drained before the rollout: drains %v, drained %v", f.drains, f.drainedSet)
	}
}

func TestRolloutMemberDownAtItsTurn(t *testing.T) {
	f := &fakeStore{}
	f.member("node1", api.RoleNode, true)
	f.member("node2", api.RoleNode, true)
	dir := t.TempDir()
	rs := newRolloutState(f, filepath.Join(dir, "binaries"), "")
	sha := putTestBinary(t, rs, []byte("new corral 3"))
	f.ms[1].downWhen = "node1" // node2 goes down once node1 has its order
	if _, _, err := rs.begin(context.Background(), api.RolloutRequest{SHA256: sha, Check: time.Second, Drain: 50 * time.Millisecond}, "admin"); err != nil {
		t.Fatal(err)
	}
	ro := waitRollout(t, rs)
	if ro.State != "failed" || ro.Steps[0].State != "done" || ro.Steps[1].State != "failed" || !strings.Contains(ro.Error, "node2") {
		t.Errorf("rollout: %+v", ro)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.orders {
		if strings.HasPrefix(o, "node2") {
			t.Errorf("node2 got an order while down: %v", f.orders)
		}
	}
}

func TestRolloutBinaryUpload(t *testing.T) {
	dir := t.TempDir()
	rs := newRolloutState(&fakeStore{}, filepath.Join(dir, "binaries"), "")
	body := []byte("#!/bin/sh\necho hi\n")
	sha := putTestBinary(t, rs, body)
	fi, err := os.Stat(filepath.Join(rs.dir, sha))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("stored binary: %v %v", fi, err)
	}
	// The binaries the station pushes to every member: only it may
	// change or list them (the directory was 0755).
	if di, err := os.Stat(rs.dir); err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("binaries directory %s: %v, mode %v; want 0700", rs.dir, err, di.Mode())
	}
	// A body that does not match its name is refused and not kept.
	bad := strings.Repeat("b", 64)
	req := httptest.NewRequest("PUT", api.RouteBinary+bad, bytes.NewReader(body))
	req.SetPathValue("sha", bad)
	w := httptest.NewRecorder()
	rs.putBinary(w, req, &Principal{Name: "admin"})
	if w.Code != 400 || !strings.Contains(w.Body.String(), "sha256") {
		t.Errorf("mismatched body: %d %s", w.Code, w.Body)
	}
	if ents, _ := os.ReadDir(rs.dir); len(ents) != 1 {
		t.Errorf("binaries dir holds %d files, want 1", len(ents))
	}
	// A name that is not a sha256 (a path trick) is refused.
	req = httptest.NewRequest("GET", api.RouteBinary+"x", nil)
	req.SetPathValue("sha", "../../etc/passwd")
	w = httptest.NewRecorder()
	rs.getBinary(w, req, &Principal{Member: true})
	if w.Code != 400 {
		t.Errorf("bad name: %d", w.Code)
	}
	req = httptest.NewRequest("GET", api.RouteBinary+sha, nil)
	req.SetPathValue("sha", sha)
	w = httptest.NewRecorder()
	rs.getBinary(w, req, &Principal{Member: true})
	if w.Code != 200 || !bytes.Equal(w.Body.Bytes(), body) {
		t.Errorf("get: %d %q", w.Code, w.Body)
	}
}

func TestRolloutRecoverAfterRestart(t *testing.T) {
	f := &fakeStore{}
	f.member("node1", api.RoleNode, true)
	dir := t.TempDir()
	file := filepath.Join(dir, "rollout.json")
	rs := newRolloutState(f, dir, file)
	rs.cur = &api.Rollout{ID: "r1", SHA256: strings.Repeat("c", 64), State: "running", Steps: []api.RolloutStep{{Member: "node1", State: "checking"}, {Member: "node2", State: "waiting"}}}
	rs.save()
	rs2 := newRolloutState(f, dir, file)
	if err := rs2.recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ro := rs2.snapshot()
	if ro.State != "failed" || !strings.Contains(ro.Error, "restarted") || ro.Steps[0].State != "failed" || ro.Steps[1].State != "waiting" {
		t.Errorf("recovered: %+v", ro)
	}
	if got := strings.Join(f.orders, ";") + "|" + strings.Join(f.drains, ";"); got != "node1 cccccccc revert|node1 undrain" {
		t.Errorf("orders|drains: %s", got)
	}
}

// The routes register on one mux without clashing (ServeMux panics on
// conflicting patterns).
func TestRolloutUploadRoutesRegister(t *testing.T) {
	s := &Station{opt: Options{Data: t.TempDir()}}
	mux := http.NewServeMux()
	s.routesRollout(mux)
	s.routesUpload(mux)
	for _, r := range []struct{ method, path string }{
		{"PUT", api.RouteBinary + strings.Repeat("a", 64)}, {"GET", api.RouteBinary + strings.Repeat("a", 64)},
		{"POST", api.RouteRollout}, {"GET", api.RouteRollout},
		{"PUT", api.RouteFiles + "a.test/x/y.html"}, {"DELETE", api.RouteFiles + "a.test/x"},
	} {
		if _, pat := mux.Handler(httptest.NewRequest(r.method, r.path, nil)); pat == "" {
			t.Errorf("%s %s: no route", r.method, r.path)
		}
	}
}

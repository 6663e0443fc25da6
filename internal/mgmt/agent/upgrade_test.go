package agent

// Process tests of the member's side of a rolling upgrade: the test
// binary itself is the member (TestMain's child mode, a tiny agent loop
// against a station fake); the "new" binaries are copies of it with bytes
// appended (an ELF file runs the same with a trailer, but hashes apart),
// and the test plays the supervisor that restarts the installed binary.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

const (
	envChildStation = "UPTEST_STATION"
	envChildState   = "UPTEST_STATE"
	envChildBad     = "UPTEST_BAD" // a build that reports itself unhealthy
)

func TestMain(m *testing.M) {
	if os.Getenv(envChildStation) != "" {
		childMain()
		return
	}
	os.Exit(m.Run())
}

// childReport is what the child member reports to the fake.
type childReport struct {
	PID     int    `json:"pid"`
	Build   string `json:"build"`
	Healthy bool   `json:"healthy"`
	Trial   string `json:"trial"`
	Error   string `json:"error,omitempty"`
	Leak    bool   `json:"leak,omitempty"` // the trial's variables reach programs it starts
}

// childMain is a member's agent loop in miniature (what the agent core
// does around handleBinary): poll the order, hand a changed one to
// handleBinary, report build and health, for at most two minutes.
func childMain() {
	station, state, bad := os.Getenv(envChildStation), os.Getenv(envChildState), os.Getenv(envChildBad)
	build, err := api.FileSHA256(upRunning())
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	health := func() error {
		if build == bad {
			return errors.New("broken on purpose")
		}
		return nil
	}
	a := &Agent{opt: Options{State: state, Stations: []string{station}, Health: health}}
	var last *api.BinaryOrder
	var lastErr string
	end := time.Now().Add(2 * time.Minute)
	for time.Now().Before(end) {
		var d api.Desired
		if resp, err := http.Get(station + "/test/desired"); err == nil {
			json.NewDecoder(resp.Body).Decode(&d)
			resp.Body.Close()
			changed := (last == nil) != (d.Binary == nil) || last != nil && *last != *d.Binary
			if changed {
				last = d.Binary
				if err := a.handleBinary(context.Background(), d.Binary); err != nil {
					lastErr = err.Error()
					fmt.Fprintln(os.Stderr, "child: handleBinary:", err)
				}
			}
		}
		r := childReport{PID: os.Getpid(), Build: build, Healthy: health() == nil, Trial: upg.trial, Error: lastErr,
			Leak: os.Getenv(EnvRollout) != "" || os.Getenv(EnvRollback) != ""}
		b, _ := json.Marshal(r)
		if resp, err := http.Post(station+"/test/report", "application/json", bytes.NewReader(b)); err == nil {
			resp.Body.Close()
		}
		time.Sleep(100 * time.Millisecond)
	}
	os.Exit(0)
}

// upEnv is a station fake, the installed binary and a supervised child.
type upEnv struct {
	t       *testing.T
	srv     *httptest.Server
	dir     string
	inst    string // the installed binary (what the supervisor runs)
	state   string
	oldSHA  string
	mu      sync.Mutex
	order   *api.BinaryOrder
	bins    map[string]string // sha -> file served
	reports []childReport
	fetches int
	bad     string
}

func newUpEnv(t *testing.T) *upEnv {
	e := &upEnv{t: t, dir: t.TempDir(), bins: map[string]string{}}
	e.state = filepath.Join(e.dir, "state")
	os.MkdirAll(filepath.Join(e.dir, "inst"), 0o755)
	e.inst = filepath.Join(e.dir, "inst", "corral")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := upCopy(self, e.inst, 0o755); err != nil {
		t.Fatal(err)
	}
	e.oldSHA, _ = api.FileSHA256(e.inst)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /test/desired", func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		json.NewEncoder(w).Encode(api.Desired{Binary: e.order})
	})
	mux.HandleFunc("POST /test/report", func(w http.ResponseWriter, r *http.Request) {
		var rep childReport
		json.NewDecoder(r.Body).Decode(&rep)
		e.mu.Lock()
		e.reports = append(e.reports, rep)
		e.mu.Unlock()
	})
	mux.HandleFunc("GET "+api.RouteBinary+"{sha}", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer member-cred" {
			http.Error(w, `{"error":"bad credential"}`, 401)
			return
		}
		e.mu.Lock()
		f, ok := e.bins[r.PathValue("sha")]
		e.fetches++
		e.mu.Unlock()
		if !ok {
			http.Error(w, `{"error":"no such binary"}`, 404)
			return
		}
		http.ServeFile(w, r, f)
	})
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	// The join's credential, as the agent core keeps it.
	os.MkdirAll(e.state, 0o700)
	jr, _ := json.Marshal(api.JoinReply{Member: "node1", Credential: "member-cred", Stations: []string{e.srv.URL}})
	if err := os.WriteFile(filepath.Join(e.state, "member.json"), jr, 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// binary makes a new binary: the test binary with a trailer, or a script.
func (e *upEnv) binary(name string, script string) string {
	p := filepath.Join(e.dir, name)
	if script != "" {
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			e.t.Fatal(err)
		}
	} else {
		if err := upCopy(e.inst, p, 0o755); err != nil {
			e.t.Fatal(err)
		}
		f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		fmt.Fprintf(f, "\ncorral test build %s\n", name)
		f.Close()
	}
	sha, _ := api.FileSHA256(p)
	e.mu.Lock()
	e.bins[sha] = p
	e.mu.Unlock()
	return sha
}

func (e *upEnv) setOrder(o *api.BinaryOrder) {
	e.mu.Lock()
	e.order = o
	e.mu.Unlock()
}

// start runs the installed binary as the member, as a supervisor would.
func (e *upEnv) start() *exec.Cmd {
	cmd := exec.Command(e.inst)
	cmd.Env = append(os.Environ(), envChildStation+"="+e.srv.URL, envChildState+"="+e.state, envChildBad+"="+e.bad)
	log, _ := os.OpenFile(filepath.Join(e.dir, "child.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
		if e.t.Failed() {
			b, _ := os.ReadFile(log.Name())
			e.t.Logf("child log:\n%s", b)
		}
	})
	return cmd
}

// wait waits (bounded) for a report after the n-th that satisfies ok.
func (e *upEnv) wait(what string, from int, d time.Duration, ok func(childReport) bool) (childReport, int) {
	e.t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		e.mu.Lock()
		for i := from; i < len(e.reports); i++ {
			if ok(e.reports[i]) {
				r := e.reports[i]
				e.mu.Unlock()
				return r, i + 1
			}
		}
		e.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
	e.mu.Lock()
	last := "none"
	if n := len(e.reports); n > 0 {
		last = fmt.Sprintf("%+v", e.reports[n-1])
	}
	e.mu.Unlock()
	e.t.Fatalf("no report %s within %v (last: %s)", what, d, last)
	return childReport{}, 0
}

func (e *upEnv) installedSHA() string {
	s, _ := api.FileSHA256(e.inst)
	return s
}

// A good binary: exec'd in place (same PID), confirmed and installed with
// the old one kept as .prev; a Revert order then puts the old one back,
// on disk and running, still the same PID.
func TestUpgradeExecConfirmInstallRevert(t *testing.T) {
	e := newUpEnv(t)
	newSHA := e.binary("good", "")
	e.start()
	first, n := e.wait("from the old binary", 0, 20*time.Second, func(r childReport) bool { return r.Build == e.oldSHA })
	e.setOrder(&api.BinaryOrder{SHA256: newSHA, Rollout: "r1", Check: 10 * time.Second})
	r, n := e.wait("from the new binary", n, 30*time.Second, func(r childReport) bool { return r.Build == newSHA })
	if r.PID != first.PID || r.Trial != newSHA || r.Leak {
		t.Errorf("new binary: pid %d (was %d), trial %q, variables left for children %v", r.PID, first.PID, r.Trial, r.Leak)
	}
	end := time.Now().Add(20 * time.Second)
	for e.installedSHA() != newSHA && time.Now().Before(end) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := e.installedSHA(); got != newSHA {
		t.Fatalf("installed binary %s, want the new %s", upShort(got), upShort(newSHA))
	}
	if got, _ := api.FileSHA256(e.inst + ".prev"); got != e.oldSHA {
		t.Errorf("%s.prev is %s, want the old build", e.inst, upShort(got))
	}
	if fi, err := os.Stat(filepath.Join(e.state, "bin", newSHA)); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("STATE/bin/SHA: %v %v", fi, err)
	}
	e.setOrder(&api.BinaryOrder{SHA256: newSHA, Rollout: "r1", Check: 10 * time.Second, Revert: true})
	r, _ = e.wait("from the old binary after the revert", n, 20*time.Second, func(r childReport) bool { return r.Build == e.oldSHA })
	if r.PID != first.PID || r.Trial != "" {
		t.Errorf("after revert: pid %d (was %d), trial %q", r.PID, first.PID, r.Trial)
	}
	if got := e.installedSHA(); got != e.oldSHA {
		t.Errorf("after revert the installed binary is %s, want the old one", upShort(got))
	}
}

// A new binary that starts but stays unhealthy is never installed and
// goes back by itself when its trial time is up.
func TestUpgradeUnhealthyTrialRevertsItself(t *testing.T) {
	e := newUpEnv(t)
	badSHA := e.binary("unhealthy", "")
	e.bad = badSHA
	e.start()
	first, n := e.wait("from the old binary", 0, 20*time.Second, func(r childReport) bool { return r.Build == e.oldSHA })
	e.setOrder(&api.BinaryOrder{SHA256: badSHA, Rollout: "r2", Check: time.Second})
	r, n := e.wait("from the unhealthy binary", n, 30*time.Second, func(r childReport) bool { return r.Build == badSHA })
	if r.Healthy || r.PID != first.PID {
		t.Errorf("trial: %+v", r)
	}
	r, n = e.wait("from the old binary after the trial expired", n, 20*time.Second, func(r childReport) bool { return r.Build == e.oldSHA })
	if r.PID != first.PID {
		t.Errorf("reverted: pid %d, was %d", r.PID, first.PID)
	}
	if got := e.installedSHA(); got != e.oldSHA {
		t.Errorf("installed binary changed to %s", upShort(got))
	}
	if _, err := os.Stat(e.inst + ".prev"); err == nil {
		t.Errorf("%s.prev exists after a failed trial", e.inst)
	}
	// The order still stands, but the old binary does not try again.
	time.Sleep(time.Second)
	r, _ = e.wait("later, still old", n, 5*time.Second, func(r childReport) bool { return true })
	e.mu.Lock()
	last := e.reports[len(e.reports)-1]
	e.mu.Unlock()
	if last.Build != e.oldSHA || last.Error == "" {
		t.Errorf("after the failed trial: %+v", last)
	}
}

// A broken binary (it exits at once): the supervisor restarts the
// installed one, which is still the old build, and it does not try the
// same rollout's binary again.
func TestUpgradeCrashingBinaryRollsBackByConstruction(t *testing.T) {
	e := newUpEnv(t)
	crashSHA := e.binary("crash.sh", "#!/bin/sh\necho broken build >&2\nexit 1\n")
	cmd := e.start()
	first, n := e.wait("from the old binary", 0, 20*time.Second, func(r childReport) bool { return r.Build == e.oldSHA })
	e.setOrder(&api.BinaryOrder{SHA256: crashSHA, Rollout: "r3", Check: 5 * time.Second})
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("member ended with %v, want the broken binary's exit 1", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the member did not exec the broken binary within 30 s")
	}
	if got := e.installedSHA(); got != e.oldSHA {
		t.Fatalf("installed binary changed to %s", upShort(got))
	}
	// The supervisor restarts what is installed.
	e.start()
	r, n := e.wait("from the restarted old binary", n, 20*time.Second, func(r childReport) bool { return r.PID != first.PID })
	if r.Build != e.oldSHA {
		t.Errorf("restarted member runs %s", upShort(r.Build))
	}
	e.mu.Lock()
	fetches := e.fetches
	e.mu.Unlock()
	time.Sleep(time.Second)
	r, _ = e.wait("a second later", n, 5*time.Second, func(childReport) bool { return true })
	e.mu.Lock()
	last, again := e.reports[len(e.reports)-1], e.fetches
	e.mu.Unlock()
	if last.Build != e.oldSHA || last.PID != r.PID || again != fetches {
		t.Errorf("the old binary tried the broken one again: %+v, fetches %d -> %d", last, fetches, again)
	}
	if last.Error == "" {
		t.Errorf("no error reported for the order it will not carry out")
	}
}

// Bad orders and bad downloads are errors, not execs.
func TestUpgradeRefusesBadBinary(t *testing.T) {
	e := newUpEnv(t)
	sha := e.binary("tampered", "")
	// The station serves other bytes than the order names.
	e.mu.Lock()
	e.bins[sha] = e.inst
	e.mu.Unlock()
	execd := false
	old := execFn
	execFn = func(string, []string, []string) error { execd = true; return errors.New("no exec in this test") }
	t.Cleanup(func() { execFn = old })
	u := &upgrader{log: upg.log}
	a := &Agent{opt: Options{State: e.state, Stations: []string{e.srv.URL}}}
	err := u.handle(context.Background(), a, &api.BinaryOrder{SHA256: sha, Rollout: "r4"})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("sha256")) || execd {
		t.Errorf("tampered binary: err %v, exec %v", err, execd)
	}
	if _, err := os.Stat(filepath.Join(e.state, "bin", sha)); err == nil {
		t.Error("a tampered binary was kept")
	}
	err = u.handle(context.Background(), a, &api.BinaryOrder{SHA256: "../../x", Rollout: "r4"})
	if err == nil || execd {
		t.Errorf("bad sha: err %v", err)
	}
	// No credential: a clear error.
	os.Remove(filepath.Join(e.state, "member.json"))
	good := e.binary("good", "")
	err = u.handle(context.Background(), a, &api.BinaryOrder{SHA256: good, Rollout: "r5"})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("credential")) {
		t.Errorf("no credential: %v", err)
	}
}

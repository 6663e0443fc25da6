package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/spf13/cobra"
)

// fakeStation is a TLS station fake for the rollout and upload commands.
type fakeStation struct {
	srv            *httptest.Server
	caFile, tokens string
	mu             sync.Mutex
	puts           map[string][]byte // route path -> body
	gets           int
	script         []api.Rollout // GET RouteRollout answers, in turn
	started        *api.RolloutRequest
}

func newFakeStation(t *testing.T) *fakeStation {
	f := &fakeStation{puts: map[string][]byte{}}
	mux := http.NewServeMux()
	authed := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer tok" {
				w.WriteHeader(401)
				json.NewEncoder(w).Encode(api.Error{Error: "bad token"})
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("PUT "+api.RouteBinary+"{sha}", authed(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != r.PathValue("sha") {
			w.WriteHeader(400)
			json.NewEncoder(w).Encode(api.Error{Error: "sha mismatch"})
			return
		}
		f.mu.Lock()
		f.puts[r.URL.Path] = b
		f.mu.Unlock()
	}))
	mux.HandleFunc("POST "+api.RouteRollout, authed(func(w http.ResponseWriter, r *http.Request) {
		var req api.RolloutRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.started = &req
		first := f.script[0]
		f.mu.Unlock()
		json.NewEncoder(w).Encode(first)
	}))
	mux.HandleFunc("GET "+api.RouteRollout, authed(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		i := min(f.gets, len(f.script)-1)
		f.gets++
		ro := f.script[i]
		f.mu.Unlock()
		json.NewEncoder(w).Encode(ro)
	}))
	mux.HandleFunc("PUT "+api.RouteFiles+"{domain}/{path...}", authed(func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("domain") != "a.test" {
			w.WriteHeader(403)
			json.NewEncoder(w).Encode(api.Error{Error: "wa may not write to domain \"" + r.PathValue("domain") + "\""})
			return
		}
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.puts[r.PathValue("domain")+"/"+r.PathValue("path")] = b
		f.mu.Unlock()
		json.NewEncoder(w).Encode(api.FileReply{Domain: r.PathValue("domain"), Path: r.PathValue("path"), Size: int64(len(b))})
	}))
	f.srv = httptest.NewTLSServer(mux)
	t.Cleanup(f.srv.Close)
	dir := t.TempDir()
	f.caFile = filepath.Join(dir, "ca.pem")
	os.WriteFile(f.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw}), 0o644)
	f.tokens = filepath.Join(dir, "token")
	os.WriteFile(f.tokens, []byte("tok\n"), 0o600)
	return f
}

// run executes a command built by mk with the station flags and returns
// its exit status and standard error.
func (f *fakeStation) run(mk func() *cobra.Command, args ...string) (int, string) {
	cmd := mk()
	var errb bytes.Buffer
	cmd.SetErr(&errb)
	cmd.SetOut(&errb)
	cmd.SetArgs(append(args, "--station", f.srv.URL, "--ca", f.caFile, "--token-file", f.tokens))
	err := cmd.Execute()
	code := exitStatus("corral mgmt", err)
	if err != nil {
		errb.WriteString(err.Error())
	}
	return code, errb.String()
}

func TestRolloutCommand(t *testing.T) {
	f := newFakeStation(t)
	bin := filepath.Join(t.TempDir(), "corral")
	os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755)
	steps := func(a, b string) []api.RolloutStep {
		return []api.RolloutStep{{Member: "node1", State: a}, {Member: "node2", State: b}}
	}
	f.script = []api.Rollout{
		{ID: "r1", State: "running", Steps: steps("waiting", "waiting")},
		{ID: "r1", State: "running", Steps: steps("checking", "waiting")},
		{ID: "r1", State: "running", Steps: steps("done", "checking")},
		{ID: "r1", State: "failed", Error: "node2: not back healthy within 1s (rolled back to its old build)",
			Steps: []api.RolloutStep{{Member: "node1", State: "done"}, {Member: "node2", State: "rolled-back", Error: "not back healthy"}}},
	}
	code, out := f.run(rolloutCmd, "--binary", bin, "--members", "node1,node2", "--check", "1s")
	if code != 1 {
		t.Errorf("exit %d, want 1 for a failed rollout; output:\n%s", code, out)
	}
	for _, want := range []string{"uploading", "rollout r1 started: node1, node2", "node1: checking", "node1: done", "node2: rolled-back: not back healthy", "rollout r1 failed: node2"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	f.mu.Lock()
	if f.started == nil || strings.Join(f.started.Members, ",") != "node1,node2" || f.started.Check.String() != "1s" || len(f.puts) != 1 {
		t.Errorf("request %+v, %d binaries", f.started, len(f.puts))
	}
	f.gets = 0
	f.script = []api.Rollout{{ID: "r2", State: "running", Steps: steps("waiting", "waiting")}, {ID: "r2", State: "done", Steps: steps("done", "done")}}
	f.mu.Unlock()
	if code, out := f.run(rolloutCmd, "--binary", bin); code != 0 || !strings.Contains(out, "rollout r2 done") {
		t.Errorf("good rollout: exit %d\n%s", code, out)
	}
	if code, out := f.run(rolloutCmd); code != 2 || !strings.Contains(out, "--binary") {
		t.Errorf("no --binary: exit %d %s", code, out)
	}
	os.Chmod(bin, 0o644)
	if code, out := f.run(rolloutCmd, "--binary", bin); code != 1 || !strings.Contains(out, "not an executable") {
		t.Errorf("not executable: exit %d %s", code, out)
	}
}

func TestUploadCommand(t *testing.T) {
	f := newFakeStation(t)
	dir := t.TempDir()
	site := filepath.Join(dir, "site")
	os.MkdirAll(filepath.Join(site, "img"), 0o755)
	os.WriteFile(filepath.Join(site, "index.html"), []byte("<h1>hi</h1>"), 0o644)
	os.WriteFile(filepath.Join(site, "img", "a b.png"), []byte("png"), 0o644)
	one := filepath.Join(dir, "one.txt")
	os.WriteFile(one, []byte("1"), 0o644)
	code, out := f.run(uploadCmd, "a.test", site, one, "--to", "v2")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	f.mu.Lock()
	for p, want := range map[string]string{"a.test/v2/index.html": "<h1>hi</h1>", "a.test/v2/img/a b.png": "png", "a.test/v2/one.txt": "1"} {
		if string(f.puts[p]) != want {
			t.Errorf("%s: %q, want %q (have %v)", p, f.puts[p], want, f.puts)
		}
	}
	f.mu.Unlock()
	if !strings.Contains(out, "uploaded 3 files") {
		t.Errorf("output:\n%s", out)
	}
	code, out = f.run(uploadCmd, "b.test", one)
	if code != 1 || !strings.Contains(out, "one.txt") || !strings.Contains(out, "403") {
		t.Errorf("other domain: exit %d %s", code, out)
	}
	if code, out := f.run(uploadCmd, "a.test/x", one); code != 2 {
		t.Errorf("domain with a slash: exit %d %s", code, out)
	}
}

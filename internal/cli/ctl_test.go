package cli

import (
	"context"
	"encoding/json"
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

	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

func loopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// ctlRun runs the corral binary in dir with env added; it returns stdout,
// stderr and whether it exited 0.
func ctlRun(t *testing.T, bin, dir string, env []string, args ...string) (string, string, bool) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err == nil
}

// TestCtl runs a real director and drives it with the real `corral ctl`:
// the token (where ctl finds it, what it says without it), --json
// listings, rates, conns, add and remove.
func TestCtl(t *testing.T) {
	bin := pfstest.Binary(t)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "a") }))
	t.Cleanup(be.Close)
	beAddr := be.Listener.Addr().String()
	confDir := t.TempDir()
	admin := loopbackAddr(t)
	conf := filepath.Join(confDir, "director.conf")
	text := fmt.Sprintf("admin %s\nservice www {\n  vip %s\n  scheduler rr\n  check none\n  server %s\n}\n", admin, loopbackAddr(t), beAddr)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := launch.Start(context.Background(), "director", bin, filepath.Join(confDir, "director.log"), "director", "--config", conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	tokenFile := director.DefaultTokenFile(conf)
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatalf("the director wrote no token beside its configuration: %v", err)
	}
	empty := t.TempDir() // a working directory without token files
	ctl := func(dir string, env []string, args ...string) (string, string, bool) {
		return ctlRun(t, bin, dir, env, append([]string{"ctl", "--admin", admin}, args...)...)
	}

	// No token anywhere: a change fails and says what to do.
	if _, stderr, ok := ctl(empty, nil, "drain", "www", beAddr); ok || !strings.Contains(stderr, "--token-file") {
		t.Errorf("drain without a token: ok=%v %q, want a failure naming --token-file", ok, stderr)
	}
	// A listing needs none on loopback.
	if _, stderr, ok := ctl(empty, nil, "services"); !ok {
		t.Errorf("services without a token: %s", stderr)
	}
	// A wrong token: the director's 401, said plainly.
	wrong := filepath.Join(empty, "wrong.token")
	os.WriteFile(wrong, []byte(strings.Repeat("ab", 32)+"\n"), 0o600)
	if _, stderr, ok := ctl(empty, nil, "--token-file", wrong, "drain", "www", beAddr); ok || !strings.Contains(stderr, "401") || !strings.Contains(stderr, "--token-file") {
		t.Errorf("drain with a wrong token: ok=%v %q, want a 401 naming --token-file", ok, stderr)
	}
	// --token-file and the environment.
	if _, stderr, ok := ctl(empty, nil, "--token-file", tokenFile, "drain", "www", beAddr); !ok {
		t.Errorf("drain --token-file: %s", stderr)
	}
	if _, stderr, ok := ctl(empty, []string{"CORRAL_ADMIN_TOKEN_FILE=" + tokenFile}, "enable", "www", beAddr); !ok {
		t.Errorf("enable with CORRAL_ADMIN_TOKEN_FILE: %s", stderr)
	}
	// The default: ./corral-data/admin.token, where `corral up` has it.
	upDir := t.TempDir()
	os.Mkdir(filepath.Join(upDir, "corral-data"), 0o755)
	if err := os.WriteFile(filepath.Join(upDir, "corral-data", "admin.token"), tok, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, ok := ctl(upDir, nil, "add", "www", "127.0.0.1:9", "--weight", "2"); !ok {
		t.Fatalf("add with ./corral-data/admin.token: %s", stderr)
	}

	// services --json: the added server and the rates.
	out, stderr, ok := ctl(empty, nil, "services", "--json")
	if !ok {
		t.Fatalf("services --json: %s", stderr)
	}
	var st []map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st) != 1 {
		t.Fatalf("services --json: %v in %q", err, out)
	}
	if _, ok := st[0]["rate"]; !ok {
		t.Errorf("services --json: no rate in %q", out)
	}
	found := false
	for _, s := range st[0]["servers"].([]any) {
		m := s.(map[string]any)
		found = found || m["addr"] == "127.0.0.1:9" && m["config_weight"] == 2.0
	}
	if !found {
		t.Errorf("services --json after add: %q, want 127.0.0.1:9 with weight 2", out)
	}
	out, _, _ = ctl(empty, nil, "services")
	if !strings.Contains(out, "Conn/s") || !strings.Contains(out, "127.0.0.1:9") {
		t.Errorf("services table: %q, want the rate columns and the added server", out)
	}
	if _, stderr, ok := ctl(upDir, nil, "remove", "www", "127.0.0.1:9"); !ok {
		t.Errorf("remove: %s", stderr)
	}
	if _, stderr, ok := ctl(upDir, nil, "remove", "www", "127.0.0.1:9"); ok || !strings.Contains(stderr, "no real server") {
		t.Errorf("remove twice: ok=%v %q, want an error saying there is no such server", ok, stderr)
	}

	// conns: the table's header, and JSON.
	out, stderr, ok = ctl(empty, nil, "conns")
	if !ok || !strings.Contains(out, "pro") || !strings.Contains(out, "destination") {
		t.Errorf("conns: ok=%v %q %s", ok, out, stderr)
	}
	out, stderr, ok = ctl(empty, nil, "conns", "--json")
	var cs []director.ConnStatus
	if !ok || json.Unmarshal([]byte(out), &cs) != nil {
		t.Errorf("conns --json: ok=%v %q %s", ok, out, stderr)
	}

	// ha and handover on a director without HA: said plainly; a
	// handover is a change and wants the token first.
	if _, stderr, ok := ctl(empty, nil, "ha"); ok || !strings.Contains(stderr, "HA is off") || !strings.Contains(stderr, "docs/ha.md") {
		t.Errorf("ha without HA: ok=%v %q", ok, stderr)
	}
	if _, stderr, ok := ctl(empty, nil, "handover"); ok || !strings.Contains(stderr, "--token-file") {
		t.Errorf("handover without a token: ok=%v %q", ok, stderr)
	}
	if _, stderr, ok := ctl(upDir, nil, "handover", "--to", "d2"); ok || !strings.Contains(stderr, "HA is off") {
		t.Errorf("handover without HA: ok=%v %q", ok, stderr)
	}
}

// TestCtlHelpExamples: every ctl page has an Examples section.
func TestCtlHelpExamples(t *testing.T) {
	c := ctlCmd()
	pages := append([]string{""}, func() (n []string) {
		for _, s := range c.Commands() {
			n = append(n, s.Name())
		}
		return
	}()...)
	for _, name := range pages {
		sub := c
		if name != "" {
			sub, _, _ = c.Find([]string{name})
		}
		if strings.TrimSpace(sub.Example) == "" {
			t.Errorf("corral ctl %s --help: no Examples", name)
		}
	}
}

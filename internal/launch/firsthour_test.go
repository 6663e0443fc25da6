package launch_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// clientEnv is the environment of a client command run as a user would:
// none of the test's CORRAL_* variables, and xdg as XDG_CONFIG_HOME.
func clientEnv(xdg string) []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CORRAL_") && !strings.HasPrefix(e, "XDG_CONFIG_HOME=") {
			env = append(env, e)
		}
	}
	return append(env, "XDG_CONFIG_HOME="+xdg)
}

// runIn runs the corral binary in dir with env; stdout, stderr, success.
func runIn(bin, dir string, env []string, args ...string) (string, string, bool) {
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env = dir, env
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err == nil
}

// TestUpFromAnyDirectory: after `corral up`, the client commands (fs, cfg,
// ctl) find the cluster from a directory other than up's, through the
// per-user client configuration up writes (0600 in a 0700 directory);
// without it each says where it looked and what to run. A `ctl drain`
// outlives a kill -9 of the director. A second `corral up` prints the
// scheduler of the stored configuration, not its flags'.
func TestUpFromAnyDirectory(t *testing.T) {
	m := startManaged(t, 2)
	m.waitApplied(t, 1, m.members(), 20*time.Second)
	xdg := filepath.Join(m.dir, ".config") // startUp's
	cc := filepath.Join(xdg, "corral", "client.yaml")
	if fi, err := os.Stat(cc); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("client configuration %s: %v, want a file of mode 0600", cc, err)
	}
	if fi, err := os.Stat(filepath.Dir(cc)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v, want a directory of mode 0700", filepath.Dir(cc), err)
	}
	if !strings.Contains(m.out.String(), cc) {
		t.Errorf("up's banner does not name the client configuration %s", cc)
	}
	elsewhere := t.TempDir()
	env := clientEnv(xdg)
	run := func(args ...string) (string, string, bool) { return runIn(m.bin, elsewhere, env, args...) }

	if out, stderr, ok := run("fs", "ls", "/"); !ok || !strings.Contains(out, "www") {
		t.Errorf("fs ls / from another directory: ok=%v %q %s", ok, out, stderr)
	}
	if out, stderr, ok := run("cfg", "get"); !ok || !strings.Contains(out, "version") {
		t.Errorf("cfg get from another directory: ok=%v %q %s", ok, out, stderr)
	}
	node1 := stationNet + ".21:8080"
	if out, stderr, ok := run("ctl", "drain", "www", node1); !ok || !strings.Contains(out, "restart") {
		t.Fatalf("ctl drain from another directory: ok=%v %q %s", ok, out, stderr)
	}

	// The dashboard's login: up gave user admin a password, in a 0600
	// file its banner names; a login with it records the station for
	// every directory (another user's client configuration here).
	pw := filepath.Join(m.data, "mgmt", "admin.password")
	if fi, err := os.Stat(pw); err != nil || fi.Mode().Perm() != 0o600 || !strings.Contains(m.out.String(), pw) {
		t.Fatalf("admin password %s: %v (banner names it: %v), want a 0600 file the banner names", pw, err, strings.Contains(m.out.String(), pw))
	}
	xdg2 := filepath.Join(elsewhere, "other-user")
	if _, stderr, ok := runIn(m.bin, elsewhere, clientEnv(xdg2), "mgmt", "login", "--user", "admin", "--password-file", pw,
		"--station", m.stationURL(), "--ca", filepath.Join(m.data, "mgmt", "tls", "ca.pem")); !ok {
		t.Fatalf("mgmt login as admin with up's password: %s", stderr)
	}
	if out, stderr, ok := runIn(m.bin, elsewhere, clientEnv(xdg2), "cfg", "get"); !ok || !strings.Contains(out, "version") {
		t.Errorf("cfg get after mgmt login, no flags: ok=%v %q %s", ok, out, stderr)
	}

	// Without the client configuration: each names where it looked and
	// what to run.
	bare := clientEnv(filepath.Join(elsewhere, "no-config"))
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"fs", "ls", "/"}, []string{"--secret-file", "CORRAL_SECRET_FILE", "client.yaml", "corral up"}},
		{[]string{"cfg", "get", "--station", m.stationURL()}, []string{"--token-file", "CORRAL_MGMT_TOKEN_FILE", "client.yaml", "corral mgmt login"}},
		{[]string{"ctl", "--admin", stationNet + ".1:7500", "drain", "www", node1}, []string{"--token-file", "CORRAL_ADMIN_TOKEN_FILE", "client.yaml", "corral up"}},
	} {
		_, stderr, ok := runIn(m.bin, elsewhere, bare, c.args...)
		if ok {
			t.Errorf("%v without any credential succeeded", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v without any credential: %q does not name %q", c.args, stderr, w)
			}
		}
	}

	// The drain outlives a kill -9 of the director (up restarts it).
	pid := m.child("director", "")
	if pid == 0 {
		t.Fatal("no director child of up")
	}
	syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, "the director restarted and serving its admin API", 20*time.Second, func() error {
		if p := m.child("director", ""); p == 0 || p == pid {
			return errors.New("not restarted")
		}
		out, stderr, ok := run("ctl", "services", "--json")
		if !ok {
			return errors.New(stderr)
		}
		var st []struct {
			Name    string `json:"name"`
			Servers []struct {
				Addr   string `json:"addr"`
				Weight int    `json:"weight"`
			} `json:"servers"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return err
		}
		for _, s := range st {
			for _, r := range s.Servers {
				if s.Name == "www" && r.Addr == node1 {
					if r.Weight != 0 {
						t.Fatalf("after kill -9 of the director: %s at weight %d, want 0 (drained)", node1, r.Weight)
					}
					return nil
				}
			}
		}
		return errors.New("www has no " + node1 + " yet")
	})

	// A second up prints what the stored configuration runs.
	c, v := m.current(t)
	for i := range c.Services {
		if c.Services[i].Name == "www" {
			c.Services[i].Scheduler = "rr"
		}
	}
	nv, err := m.apply(c, v.Version, "scheduler rr")
	if err != nil {
		t.Fatal(err)
	}
	m.waitApplied(t, nv, m.members(), 15*time.Second)
	m.stop(t)
	u := startUp(t, m.bin, m.dir, stationNet, "--meta-members", "1", "--iods", "1", "--nodes", "2")
	banner := u.out.String()
	i := strings.Index(banner, "VIP ")
	if i < 0 {
		t.Fatalf("second up's banner has no VIP line: %s", banner)
	}
	line, _, _ := strings.Cut(banner[i:], "\n")
	if !strings.Contains(line, "rr") || strings.Contains(line, "wlc") {
		t.Errorf("second up's VIP line %q, want the stored scheduler rr (not the flags' wlc)", line)
	}
}

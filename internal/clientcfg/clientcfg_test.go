package clientcfg

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOrder: the environment, then up's files in the working directory,
// then the client configuration (under XDG_CONFIG_HOME), then the
// default; Missing names every place and what to run.
func TestOrder(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "xdg"))
	t.Setenv("CORRAL_SECRET_FILE", "")
	t.Setenv("CORRAL_META", "")
	t.Chdir(t.TempDir())

	if v := Secret.Value(); v != "" {
		t.Fatalf("nothing anywhere: %q", v)
	}
	err := Secret.Missing()
	for _, w := range []string{"--secret-file", "$CORRAL_SECRET_FILE", "./corral-data/meta/cluster.secret", filepath.Join(home, "xdg", "corral", "client.yaml"), "corral up"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Missing: %q does not name %q", err, w)
		}
	}
	if v := Meta.Value(); v != Meta.Default {
		t.Errorf("meta with nothing set: %q, want the default", v)
	}

	p, err := Update(func(c *Config) {
		c.SecretFile = "/abs/secret"
		c.Meta = "10.0.0.1:7400"
		c.DirectorTokenFile = "rel.token"
	})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, want mode 0600", p, err)
	}
	if fi, err := os.Stat(filepath.Dir(p)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v, want mode 0700", filepath.Dir(p), err)
	}
	if v, from := Secret.Lookup(); v != "/abs/secret" || from != p {
		t.Errorf("from the client configuration: %q from %q", v, from)
	}
	if v := DirectorToken.Value(); v != filepath.Join(filepath.Dir(p), "rel.token") {
		t.Errorf("a relative path: %q, want it under the file's directory", v)
	}
	if v := Meta.Value(); v != "10.0.0.1:7400" {
		t.Errorf("meta: %q", v)
	}
	os.MkdirAll("corral-data/meta", 0o700)
	os.WriteFile("corral-data/meta/cluster.secret", []byte("x"), 0o600)
	if v := Secret.Value(); v != "corral-data/meta/cluster.secret" {
		t.Errorf("up's file in the working directory before the client configuration: %q", v)
	}
	t.Setenv("CORRAL_SECRET_FILE", "/env")
	if v := Secret.Value(); v != "/env" {
		t.Errorf("the environment first: %q", v)
	}

	// A file others may read is refused, and said so.
	os.Chmod(p, 0o644)
	invalidate()
	t.Setenv("CORRAL_SECRET_FILE", "")
	os.Remove("corral-data/meta/cluster.secret")
	if v := Secret.Value(); v != "" {
		t.Errorf("from a client configuration others may read: %q", v)
	}
	if err := Secret.Missing(); !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("Missing with an exposed file: %q, want the chmod that fixes it", err)
	}
	// An unknown key is an error, not silently ignored.
	os.Chmod(p, 0o600)
	os.WriteFile(p, []byte("secret_file: /x\n"), 0o600)
	invalidate()
	if _, _, err := Load(); err == nil || !strings.Contains(err.Error(), "secret_file") {
		t.Errorf("unknown key: %v", err)
	}
}

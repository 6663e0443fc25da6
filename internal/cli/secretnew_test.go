package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// TestSecretNew: `fs secret --new --out FILE` makes a cluster secret
// (0600) that the servers load, and never overwrites one.
func TestSecretNew(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cluster.secret")
	if code, _, stderr := runMain(t, "fs", "secret", "--new", "--out", p); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%v %v, want mode 0600", fi, err)
	}
	c, err := proto.LoadCredential(p)
	if err != nil || c.Kind() != proto.KindFull {
		t.Fatalf("the new secret: %v %v", c, err)
	}
	before, _ := os.ReadFile(p)
	code, _, stderr := runMain(t, "fs", "secret", "--new", "--out", p)
	if after, _ := os.ReadFile(p); code != 1 || !strings.Contains(stderr, "exists already") || string(after) != string(before) {
		t.Errorf("second --new: exit %d, %q; file changed: %t", code, stderr, string(after) != string(before))
	}
	if code, _, stderr := runMain(t, "fs", "secret", "--new"); code != 2 || !strings.Contains(stderr, "--out") {
		t.Errorf("--new without --out: exit %d, %q", code, stderr)
	}
}

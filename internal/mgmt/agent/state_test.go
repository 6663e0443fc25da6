package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// The saved credential is 0600 whatever lay in the way: a temporary file
// left readable by an earlier crash (or another hand) does not pass its
// mode on to member.json.
func TestSavedCredentialMode(t *testing.T) {
	fast(t)
	f := newFakeStation(t, "127.0.62.61")
	state := t.TempDir()
	p := filepath.Join(state, StateFile)
	if err := os.WriteFile(p+".tmp", []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p+".tmp", 0o644); err != nil { // past the umask
		t.Fatal(err)
	}
	if _, _, err := Join(context.Background(), opts(f, state, f.token("t1", ""), &applier{})); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v, want mode 0600", p, fi.Mode(), err)
	}
	if _, err := os.Stat(p + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("the temporary file stays: %v", err)
	}
}

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTokenFileExposed: the station's admin token and a join token in a
// file its group or others may read are refused, naming the file and the
// chmod (as ssh does); they were used as they were.
func TestTokenFileExposed(t *testing.T) {
	p := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(p, []byte("id.secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o644)
	sf := stationFlags{station: "https://127.0.0.1:1", tokenFile: p}
	if _, err := sf.client(true); err == nil || !strings.Contains(err.Error(), "chmod 600 "+p) {
		t.Errorf("0644 API token file: %v; want a refusal naming chmod 600 %s", err, p)
	}
	ro := roStation{station: "https://127.0.0.1:1", tokenFile: p}
	if _, err := ro.client(); err == nil || !strings.Contains(err.Error(), "chmod 600 "+p) {
		t.Errorf("0644 rollout --token-file: %v", err)
	}
	j := joinFlags{tokenFile: p}
	if _, err := j.options("node", "n1", t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "chmod 600 "+p) {
		t.Errorf("0644 join token file: %v", err)
	}
	os.Chmod(p, 0o600)
	if _, err := sf.client(true); err != nil {
		t.Errorf("0600 API token file: %v", err)
	}
}

// TestWriteFileAtomicMode: the CLI's secrets (a login's token, the
// file-system credential a join hands over) are written 0600 and replace
// a file of another mode whole.
func TestWriteFileAtomicMode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	os.WriteFile(p, []byte("old"), 0o644)
	if err := writeFileAtomic(p, []byte("new\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %04o, want 0600", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d entries left in %s, want 1", len(ents), dir)
	}
}

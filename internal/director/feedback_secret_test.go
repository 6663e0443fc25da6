package director

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-cluster/corral/internal/config"
)

// TestFeedbackSecretFileMode: a community file others may read is refused
// with the chmod that fixes it (it was read whatever its mode); 0600 is
// read.
func TestFeedbackSecretFileMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "community")
	if err := os.WriteFile(p, []byte("s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o644)
	f := config.NewFeedback()
	f.CommFile = p
	_, _, _, err := FeedbackSecrets("d.conf", f)
	if err == nil || !strings.Contains(err.Error(), "chmod 600 "+p) {
		t.Fatalf("0644 community file: err %v, want a refusal naming chmod 600 %s", err, p)
	}
	os.Chmod(p, 0o600)
	if c, _, _, err := FeedbackSecrets("d.conf", f); err != nil || c != "s3cret" {
		t.Fatalf("0600 community file: %q, %v", c, err)
	}
}

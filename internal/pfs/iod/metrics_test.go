package iod

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Healthy tells the truth: not before meta accepted the server, and not
// when its data directory cannot take a file.
func TestHealthyNeedsRegistrationAndAWritableDir(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	ctx := context.Background()
	if err := st.Healthy(ctx); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("unregistered: %v", err)
	}
	st.registered.Store(true)
	if err := st.Healthy(ctx); err != nil {
		t.Fatalf("registered: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "objects", ".healthz-*")); len(left) != 0 {
		t.Fatalf("the check left %v", left)
	}
	// The disk is gone (root ignores permissions, so remove the directory).
	if err := os.RemoveAll(filepath.Join(dir, "objects")); err != nil {
		t.Fatal(err)
	}
	if err := st.Healthy(ctx); err == nil || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("objects directory removed: %v", err)
	}
}

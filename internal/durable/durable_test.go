package durable_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/corral-cluster/corral/internal/durable"
	"github.com/corral-cluster/corral/internal/powercut"
	"github.com/corral-cluster/corral/internal/safefile"
)

// disk mounts the power-cut harness; its root entries are made durable by
// the test (the mount root stands for a data directory that exists).
func disk(t *testing.T) *powercut.Disk {
	t.Helper()
	powercut.Need(t)
	d, err := powercut.Mount(t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func cut(t *testing.T, d *powercut.Disk) {
	t.Helper()
	if err := d.Cut(); err != nil {
		t.Fatal(err)
	}
}

func TestMkdirAllSurvivesACut(t *testing.T) {
	d := disk(t)
	p := filepath.Join(d.Dir(), "objects", "3f")
	if err := durable.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	// Again on an existing one: no error.
	if err := durable.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	cut(t, d)
	if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
		t.Fatalf("after a cut: %v", err)
	}
	// The plain call loses the same thing: the harness can tell.
	q := filepath.Join(d.Dir(), "plain", "3f")
	if err := os.MkdirAll(q, 0o755); err != nil {
		t.Fatal(err)
	}
	cut(t, d)
	if _, err := os.Stat(q); err == nil {
		t.Fatal("os.MkdirAll's directories survived a cut: the harness is not cutting")
	}
}

func TestMkdirAllOverAFile(t *testing.T) {
	d := disk(t)
	f := filepath.Join(d.Dir(), "f")
	os.WriteFile(f, nil, 0o644)
	if err := durable.MkdirAll(f, 0o755); err == nil {
		t.Fatal("MkdirAll over a file succeeded")
	}
}

func TestCreateSurvivesACut(t *testing.T) {
	d := disk(t)
	dir := filepath.Join(d.Dir(), "raft")
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "raft.wal")
	f, err := durable.Create(p, 0, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("record"))
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// Opening an existing file keeps it (no O_EXCL, no O_TRUNC).
	if f, err = durable.Create(p, 0, 0o644); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := durable.Create(p, os.O_EXCL, 0o644); err == nil {
		t.Fatal("Create with O_EXCL over an existing file succeeded")
	}
	cut(t, d)
	if b, err := os.ReadFile(p); err != nil || string(b) != "record" {
		t.Fatalf("after a cut: %q, %v", b, err)
	}
}

// safefile's atomic write, under the power-cut harness.
func TestWriteFileSurvivesACut(t *testing.T) {
	d := disk(t)
	p := filepath.Join(d.Dir(), "identity")
	if err := safefile.WriteFile(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := safefile.WriteFile(p, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	cut(t, d)
	b, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(b, []byte("two")) {
		t.Fatalf("after a cut: %q, %v", b, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(d.Dir())
	if len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}

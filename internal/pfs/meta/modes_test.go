package meta

import (
	"os"
	"path/filepath"
	"testing"
)

// Meta's data directory is the owner's only: 0700, its files (store,
// secret) 0600; an older install's 0755 directory and 0644 files are
// tightened when meta opens it.
func TestDataModesOwnerOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	check := func(when string) {
		t.Helper()
		if err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			want := os.FileMode(0o600)
			if fi.IsDir() {
				want = 0o700
			}
			if fi.Mode().Perm() != want {
				t.Errorf("%s: %s has mode %#o, want %#o", when, p, fi.Mode().Perm(), want)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(dir, 0o755) // as corral meta used to make it
	s, err := Open(Config{Data: dir, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	check("first start")
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if fi.IsDir() {
			return os.Chmod(p, 0o755)
		}
		return os.Chmod(p, 0o644)
	})
	s, err = Open(Config{Data: dir, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	check("an older install reopened")
}

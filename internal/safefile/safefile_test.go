package safefile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// crash stops a write as a crash would: nothing after it runs.
type crash struct{ at string }

// withSteps runs f with each step recorded in *log and, at step stop, a
// crash (a panic that f's caller recovers).
func withSteps(t *testing.T, stop string, log *[]string, f func()) (crashed bool) {
	t.Helper()
	old := sys
	defer func() { sys = old }()
	step := func(name string) {
		*log = append(*log, name)
		if name == stop {
			panic(crash{name})
		}
	}
	sys = steps{
		syncFile: func(f *os.File) error { step("sync file"); return old.syncFile(f) },
		rename: func(a, b string) error {
			step("rename")
			return old.rename(a, b)
		},
		syncDir: func(d string) error { step("sync dir " + filepath.Base(d)); return old.syncDir(d) },
	}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(crash); !ok {
				panic(r)
			}
			crashed = true
		}
	}()
	f()
	return false
}

func TestWriteFileOrder(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "new", "secret")
	var log []string
	withSteps(t, "", &log, func() {
		if err := WriteFile(p, []byte("s3cret"), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	// The new directory's entry, then the file's bytes, the rename, and the
	// rename's directory: each synced before the write counts as done.
	want := []string{"sync dir " + filepath.Base(dir), "sync file", "rename", "sync dir new"}
	if strings.Join(log, ",") != strings.Join(want, ",") {
		t.Fatalf("steps %q, want %q", log, want)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %04o, want 0600", p, fi.Mode().Perm())
	}
	di, _ := os.Stat(filepath.Dir(p))
	if di.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %04o, want 0700", filepath.Dir(p), di.Mode().Perm())
	}
	if b, _ := os.ReadFile(p); string(b) != "s3cret" {
		t.Errorf("content %q", b)
	}
}

// TestCrashAtEveryStep stops a replacement at each of its steps: the
// destination holds the old bytes or the new, never a part or nothing.
func TestCrashAtEveryStep(t *testing.T) {
	oldB, newB := bytes.Repeat([]byte("old "), 5000), bytes.Repeat([]byte("new!"), 7000)
	for _, stop := range []string{"sync file", "rename", "sync dir d"} {
		t.Run(stop, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "d", "f")
			if err := WriteFile(p, oldB, 0o644); err != nil {
				t.Fatal(err)
			}
			var log []string
			if !withSteps(t, stop, &log, func() { WriteFile(p, newB, 0o600) }) {
				t.Fatalf("no crash at %q (steps %q)", stop, log)
			}
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatalf("after a crash at %q: %v", stop, err)
			}
			switch {
			case bytes.Equal(got, oldB):
			case bytes.Equal(got, newB):
				if stop != "sync dir d" {
					t.Errorf("crash at %q: new content before the rename", stop)
				}
			default:
				t.Fatalf("crash at %q: destination holds %d bytes, neither the old (%d) nor the new (%d)", stop, len(got), len(oldB), len(newB))
			}
		})
	}
}

// TestFailedStepKeepsOld: a step that fails (disk full, I/O error) leaves
// the old content and no temporary file.
func TestFailedStepKeepsOld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := sys
	defer func() { sys = old }()
	boom := errors.New("boom")
	sys.syncFile = func(*os.File) error { return boom }
	if err := WriteFile(p, []byte("new"), 0o600); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("content %q after a failed write", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("%d entries left in %s, want 1", len(ents), dir)
	}
}

func TestCreateAbort(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("old"), 0o644)
	f, err := Create(p, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("half"))
	f.Abort()
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("content %q after Abort", b)
	}
	if err := f.Commit(); err == nil {
		t.Error("Commit after Abort succeeded")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("%d entries left, want 1", len(ents))
	}
	if _, err := Create(dir, 0o600); err == nil {
		t.Error("Create of a directory's name succeeded")
	}
}

func TestCommitMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bin")
	if _, err := Copy(p, 0o755, strings.NewReader("#!/bin/sh\n")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %04o, want 0755", fi.Mode().Perm())
	}
}

func TestReadSecret(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	os.WriteFile(p, []byte("k"), 0o600)
	if b, err := ReadSecret(p); err != nil || string(b) != "k" {
		t.Fatalf("ReadSecret 0600: %q, %v", b, err)
	}
	for _, m := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o602} {
		os.Chmod(p, m)
		_, err := ReadSecret(p)
		if !errors.Is(err, ErrExposed) {
			t.Fatalf("mode %04o: err %v, want ErrExposed", m, err)
		}
		for _, w := range []string{p, "chmod 600 " + p} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("mode %04o: %q does not say %q", m, err, w)
			}
		}
		if CheckSecret(p) == nil {
			t.Errorf("CheckSecret accepts mode %04o", m)
		}
	}
	os.Chmod(p, 0o400)
	if err := CheckSecret(p); err != nil {
		t.Errorf("0400: %v", err)
	}
	if _, err := ReadSecret(dir); err == nil {
		t.Error("ReadSecret of a directory succeeded")
	}
}

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-cluster/corral/internal/lab"
)

// TestUpUserCommand: under go run the binary is a temporary build, gone
// once up exits; up's follow-up commands name `go run ./cmd/corral` from
// the module's directory instead. An installed binary is named as is.
func TestUpUserCommand(t *testing.T) {
	tmp := "/tmp/go-build3920155/b001/exe/corral"
	mod := t.TempDir()
	os.MkdirAll(filepath.Join(mod, "cmd", "corral"), 0o755)
	os.WriteFile(filepath.Join(mod, "cmd", "corral", "main.go"), []byte("package main\n"), 0o644)
	t.Chdir(mod)
	if got := userCommand(tmp); got != "go run ./cmd/corral" {
		t.Errorf("go run's build from the module: %q, want go run ./cmd/corral", got)
	}
	t.Chdir(t.TempDir())
	t.Setenv("PATH", "")
	if got := userCommand(tmp); got == tmp {
		t.Errorf("go run's build elsewhere: %q, the temporary path", got)
	}
	if got := userCommand("/usr/local/bin/corral"); got != "/usr/local/bin/corral" {
		t.Errorf("an installed binary: %q", got)
	}
}

// TestUnmountNotMounted: `corral mount --unmount` of a directory with
// nothing mounted says so (the kernel's answer is "invalid argument").
func TestUnmountNotMounted(t *testing.T) {
	lab.Need(t, lab.Root) // the unmount path without fusermount
	dir := t.TempDir()
	code, _, errs := corral(t, "", "mount", "--unmount", dir)
	if code == 0 || !strings.Contains(errs, "nothing is mounted") || strings.Contains(errs, "invalid argument") {
		t.Errorf("unmount of %s (not mounted): %d %q, want it to say nothing is mounted there", dir, code, errs)
	}
}

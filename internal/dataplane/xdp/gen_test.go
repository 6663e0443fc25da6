package xdp

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-cluster/corral/internal/lab"
)

// TestGeneratedCurrent regenerates the BPF objects and bindings from gen.go's
// go:generate lines into a scratch directory and fails when the committed
// ones differ: the C was changed without `go generate`.
func TestGeneratedCurrent(t *testing.T) {
	lab.Need(t, lab.Tool("clang")) // to check the generated BPF files
	if testing.Short() {
		t.Skip("regenerating takes a few seconds")
	}
	src, err := os.ReadFile("gen.go")
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "//go:generate go run github.com/cilium/ebpf/cmd/bpf2go "
	out := t.TempDir()
	n := 0
	for _, line := range strings.Split(string(src), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		args := append([]string{"run", "github.com/cilium/ebpf/cmd/bpf2go", "-output-dir", out}, splitArgs(strings.TrimPrefix(line, prefix))...)
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "GOPACKAGE=xdp")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("bpf2go: %v\n%s", err, b)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no bpf2go lines in gen.go")
	}
	files, _ := filepath.Glob(filepath.Join(out, "*"))
	if len(files) != 2*n {
		t.Fatalf("bpf2go wrote %d files for %d programs", len(files), n)
	}
	for _, f := range files {
		want, _ := os.ReadFile(f)
		have, err := os.ReadFile(filepath.Base(f))
		if err != nil || !bytes.Equal(have, want) {
			t.Errorf("%s is stale: run `go generate ./internal/dataplane/xdp` and commit the result", filepath.Base(f))
		}
	}
}

// splitArgs splits a command line on spaces, keeping "quoted strings" whole.
func splitArgs(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, any := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, any = !quoted, true
		case r == ' ' && !quoted:
			if any {
				out = append(out, cur.String())
			}
			cur.Reset()
			any = false
		default:
			cur.WriteRune(r)
			any = true
		}
	}
	if any {
		out = append(out, cur.String())
	}
	return out
}

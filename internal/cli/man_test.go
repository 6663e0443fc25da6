package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestManPages: `corral man DIR` writes a page per visible command from
// its own flags and examples; the hidden packaging commands stay out of
// the help.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := runMain(t, "man", dir); code != 0 {
		t.Fatalf("corral man: exit %d: %s", code, stderr)
	}
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		n++
		p := filepath.Join(dir, strings.ReplaceAll(c.CommandPath(), " ", "-")+".1")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("no page for %q: %v", c.CommandPath(), err)
			return
		}
		page := string(b)
		if !strings.HasPrefix(page, ".TH ") || !strings.Contains(page, ".SH NAME\n") {
			t.Errorf("%s: not a man page: %.80q", p, page)
		}
		c.NonInheritedFlags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && !strings.Contains(page, ".B "+manFlag(f.Name)) && !strings.Contains(page, ", "+manFlag(f.Name)) {
				t.Errorf("%s lacks its flag --%s", p, f.Name)
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot())
	if n < 50 {
		t.Errorf("only %d commands walked", n)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "corral-fs-put.1"))
	if !strings.Contains(string(page), `\-\-force`) || !strings.Contains(string(page), ".SH EXAMPLES") {
		t.Errorf("corral-fs-put.1 lacks --force or its examples:\n%s", page)
	}
	_, help, _ := runMain(t, "--help")
	for _, hidden := range []string{"\n  man ", "\n  completion "} {
		if strings.Contains(help, hidden) {
			t.Errorf("corral --help lists%s", hidden)
		}
	}
	for _, sh := range []string{"bash", "zsh"} {
		code, out, _ := runMain(t, "completion", sh)
		if code != 0 || !strings.Contains(out, "corral") {
			t.Errorf("corral completion %s: exit %d, %.60q", sh, code, out)
		}
	}
}

func manFlag(name string) string { return `\-\-` + strings.ReplaceAll(name, "-", `\-`) }

// TestVersionFlag: --version prints what `corral version` prints, the
// tag given at build time first.
func TestVersionFlag(t *testing.T) {
	old := Version
	Version = "v9.8.7-2-gabcdef1"
	defer func() { Version = old }()
	_, v1, _ := runMain(t, "version")
	code, v2, _ := runMain(t, "--version")
	if code != 0 || v1 != v2 || !strings.HasPrefix(v2, "corral v9.8.7-2-gabcdef1 ") {
		t.Errorf("--version: exit %d %q; version: %q", code, v2, v1)
	}
}

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestOneMetaDefault: `corral meta` listens where every --meta points by
// default, and `corral up` runs meta there (issue 12 §3: meta listened on
// 127.0.0.1:7400, --meta pointed at 127.0.0.10:7400).
func TestOneMetaDefault(t *testing.T) {
	t.Setenv("CORRAL_META", "")
	listen := metaCmd().Flags().Lookup("listen").DefValue
	n := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		check := func(f *pflag.Flag) {
			if f.Name == "meta" && f.DefValue != "" { // "": start a file system of its own
				n++
				if f.DefValue != defaultMetaMembers || !strings.HasPrefix(f.DefValue, listen+",") {
					t.Errorf("%s --meta defaults to %s; corral meta listens on %s, corral up runs %s", c.CommandPath(), f.DefValue, listen, defaultMetaMembers)
				}
			}
		}
		c.Flags().VisitAll(check)
		c.PersistentFlags().VisitAll(check)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	for _, c := range []*cobra.Command{iodCmd(), fsCmd(), mountCmd(), directorCmd(), nodeCmd(), ctlCmd(), upCmd(), benchCmd(), fsxCmd()} {
		walk(c)
	}
	if n < 4 {
		t.Fatalf("found %d --meta flags; the walk is broken", n)
	}
	net, err := upNet(upCmd().Flags().Lookup("net").DefValue)
	if err != nil || net+".1:7400" != listen {
		t.Errorf("corral up runs meta on %s.1:7400 (%v), corral meta listens on %s", net, err, listen)
	}
	members, _ := upCmd().Flags().GetInt("meta-members")
	if got := upMetaMembers(net, members); got != defaultMetaMembers {
		t.Errorf("corral up runs %d metadata members on %s; --meta defaults to %s", members, got, defaultMetaMembers)
	}
}

// TestSecretFileDefault: after `corral up` (default --data), commands run
// from the same directory find the cluster secret without
// CORRAL_SECRET_FILE.
func TestSecretFileDefault(t *testing.T) {
	t.Setenv("CORRAL_SECRET_FILE", "")
	t.Chdir(t.TempDir())
	if got := secretFileDefault(); got != "" {
		t.Fatalf("no secret anywhere: default %q", got)
	}
	if err := os.MkdirAll(filepath.Dir(upSecretFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(upSecretFile, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := secretFileDefault(); got != upSecretFile {
		t.Fatalf("default %q, want %q", got, upSecretFile)
	}
	t.Setenv("CORRAL_SECRET_FILE", "/elsewhere")
	if got := secretFileDefault(); got != "/elsewhere" {
		t.Fatalf("with CORRAL_SECRET_FILE: %q", got)
	}
}

func TestUpNet(t *testing.T) {
	for in, want := range map[string]string{"127.0.0.0/24": "127.0.0", "127.5.6.0/24": "127.5.6"} {
		if got, err := upNet(in); err != nil || got != want {
			t.Errorf("upNet(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"10.0.0.0/24", "127.0.0.0/16", "127.0.0.5/24", "127.0.0.0", "x"} {
		if _, err := upNet(bad); err == nil {
			t.Errorf("upNet(%q) accepted", bad)
		}
	}
}

func TestConfMeta(t *testing.T) {
	p := filepath.Join(t.TempDir(), "director.conf")
	os.WriteFile(p, []byte("# written by corral up\nadmin 127.0.0.1:7500\nmeta 127.0.0.10:7400 # old\ndocroot /www\n"), 0o644)
	if got := confMeta(p); got != "127.0.0.10:7400" {
		t.Fatalf("confMeta = %q", got)
	}
	os.WriteFile(p, []byte("admin 127.0.0.1:7500\n"), 0o644)
	if got := confMeta(p); got != "" {
		t.Fatalf("no meta line: %q", got)
	}
}

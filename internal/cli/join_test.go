package cli

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/spf13/pflag"
)

// Every member command takes the join flags beside its own (a clash
// panics when the command is built).
func TestJoinFlagsRegistered(t *testing.T) {
	for name, tf := range map[string]string{"director": "join-token-file", "node": "token-file", "meta": "token-file", "iod": "token-file"} {
		var cmd = map[string]func() *pflag.FlagSet{
			"director": func() *pflag.FlagSet { return directorCmd().Flags() },
			"node":     func() *pflag.FlagSet { return nodeCmd().Flags() },
			"meta":     func() *pflag.FlagSet { return metaCmd().Flags() },
			"iod":      func() *pflag.FlagSet { return iodCmd().Flags() },
		}[name]()
		for _, f := range []string{"join", "token", tf, "name", "state", "station-ca"} {
			if cmd.Lookup(f) == nil {
				t.Errorf("corral %s has no --%s", name, f)
			}
		}
	}
}

// meta's --join is a station URL, or alone (with --id) the Raft entry it
// always was.
func TestMetaJoinFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		raft    bool
		station string
		bad     bool
		msg     string // in the error of a bad one
	}{
		{args: []string{"--id", "4", "--join", "--listen", "x:1"}, raft: true},
		{args: []string{"--id", "4", "--listen", "x:1", "--join"}, raft: true},
		{args: []string{"--join", "https://127.0.0.1:7600", "--token", "a.b.c"}, station: "https://127.0.0.1:7600"},
		{args: []string{"--join=https://127.0.0.1:7600,https://127.0.0.2:7600"}, station: "https://127.0.0.1:7600,https://127.0.0.2:7600"},
		{args: []string{"--listen", "x:1"}},
		{args: []string{"--join", "https://127.0.0.1:7600", "extra"}, bad: true},
		{args: []string{"stray"}, bad: true},
		// A station without its scheme: not a stray argument, a URL to mend.
		{args: []string{"--join", "127.0.0.1:7600", "--token", "a.b.c"}, bad: true, msg: "--join 127.0.0.1:7600: want a station URL such as https://127.0.0.1:7600"},
	} {
		var jf joinFlags
		fs := pflag.NewFlagSet("meta", pflag.ContinueOnError)
		fs.Uint64("id", 0, "")
		fs.String("listen", "", "")
		jf.add(fs, api.RoleMeta, "token-file")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		raft, err := jf.metaJoin(fs.Args())
		switch {
		case tc.bad:
			if err == nil || (tc.msg != "" && !strings.Contains(err.Error(), tc.msg)) {
				t.Errorf("%q: %v, want an error saying %q", tc.args, err, tc.msg)
			}
		case err != nil || raft != tc.raft || jf.enabled() != (tc.station != "") || (tc.station != "" && jf.join != tc.station):
			t.Errorf("%q: raft %v, station %v %q, err %v", tc.args, raft, jf.enabled(), jf.join, err)
		}
	}
}

func TestJoinOptions(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "tok")
	os.WriteFile(tf, []byte("id.secret.hash\n"), 0o600)
	jf := joinFlags{join: "https://a:1, https://b:2", tokenFile: tf}
	o, err := jf.options(api.RoleNode, "node-x", "st", nil)
	if err != nil || o.Token != "id.secret.hash" || strings.Join(o.Stations, " ") != "https://a:1 https://b:2" || o.Name != "node-x" || o.State != "st" {
		t.Fatalf("%+v %v", o, err)
	}
	jf.token = "x.y.z"
	if _, err := jf.options(api.RoleNode, "n", "s", nil); err == nil {
		t.Fatal("--token with a token file accepted")
	}
	jf = joinFlags{join: "https://a:1", tokenFile: filepath.Join(dir, "missing")}
	if _, err := jf.options(api.RoleNode, "n", "s", nil); err == nil || !strings.Contains(err.Error(), "join token") {
		t.Fatalf("missing token file: %v", err)
	}
}

// A meta member that leads applies filesystem.layouts as 'corral fs
// layout set' would, making the directories that are missing.
func TestApplyLayouts(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	cred, err := proto.DefaultCredential()
	if err != nil {
		t.Fatal(err)
	}
	sec := proto.Security{Cred: cred}
	ctx := context.Background()
	layouts := []clustercfg.Layout{{Path: "/www", StripeSize: "1M", StripeCount: 2}, {Path: "/www/db", Replicas: 2, StripeCount: -1}}
	if err := applyLayouts(ctx, fsys.Meta.Addr, sec, layouts, slog.Default()); err != nil {
		t.Fatal(err)
	}
	cl := client.New(fsys.Meta.Addr, client.WithSecurity(sec))
	defer cl.Close()
	a, err := cl.Stat(ctx, "/www")
	if err != nil || a.StripeSize != 1<<20 || a.StripeCount != 2 {
		t.Fatalf("/www: %+v %v", a, err)
	}
	a, err = cl.Stat(ctx, "/www/db")
	if err != nil || a.Replicas != 2 || a.StripeCount != proto.AllServers {
		t.Fatalf("/www/db: %+v %v", a, err)
	}
	for _, bad := range []clustercfg.Layout{{Path: "/x", StripeSize: "3K"}, {Path: "/x", StripeCount: -2}, {Path: "/x", Replicas: 9}, {Path: "/x", Placement: "round"}} {
		err := applyLayouts(ctx, fsys.Meta.Addr, sec, []clustercfg.Layout{bad}, slog.Default())
		if err == nil || !strings.Contains(err.Error(), "filesystem.layouts[0] (/x)") {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

// The credential the join hands over is kept 0600, whatever file was
// there: one with the same text but readable by all is tightened, one
// with other text replaced whole.
func TestJoinSecretMode(t *testing.T) {
	c, err := proto.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := proto.NewSecret()
	for name, old := range map[string][]byte{"same": c.Marshal(), "other": other.Marshal()} {
		state := t.TempDir()
		p := filepath.Join(state, "fs.secret")
		if err := os.WriteFile(p, old, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, 0o644)
		if _, got, err := joinSecret(state, c.Marshal()); err != nil || got != p {
			t.Fatalf("%s: joinSecret: %q %v", name, got, err)
		}
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %s mode %v (%v), want 0600", name, p, fi.Mode(), err)
		}
		if b, _ := os.ReadFile(p); string(b) != string(c.Marshal()) {
			t.Errorf("%s: %s holds %q", name, p, b)
		}
	}
}

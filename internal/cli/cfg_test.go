package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// TestCfgApplyNotUTF8: a file that is not UTF-8 would reach the station
// with its bad bytes turned into U+FFFD by the API's JSON and be stored
// so; apply and diff refuse it as validate does, naming line and column,
// and send nothing.
func TestCfgApplyNotUTF8(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.63.51")
	os.WriteFile("l1.yaml", []byte("# version 1\nclusters:\n  - name: a\n    description: caf\xe9\n"), 0o644)
	want := "l1.yaml:4: (syntax): not UTF-8 text: byte 0xE9 at column 21"
	for _, args := range [][]string{{"cfg", "apply", "l1.yaml"}, {"cfg", "diff", "l1.yaml"}, {"cfg", "validate", "l1.yaml"}} {
		code, out, errs := f.run(append(args, "--token-file", tf)...)
		if code != 1 || out != "" || !strings.Contains(errs, want) {
			t.Errorf("%s: exit %d %q %q, want 1 and %q", strings.Join(args, " "), code, out, errs, want)
		}
	}
	if n := len(f.versions); n != 1 {
		t.Errorf("%d versions at the station after refused applies, want 1", n)
	}
}

// TestCfgTxErrorsName: a transaction's configuration errors are the
// resulting configuration's, not lines of OPS.json: they are printed as
// PATH: message, without a FILE:LINE that points into the wrong file.
func TestCfgTxErrorsName(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.63.52")
	// The fake station refuses a document holding "bad:".
	os.WriteFile("ops.json", []byte(`[{"op":"delete","kind":"node","name":"bad:x"}]`), 0o644)
	code, _, errs := f.run("cfg", "tx", "ops.json", "--token-file", tf)
	if code != 1 || !strings.Contains(errs, "\nservices[0].vip: not an IP address\n") || strings.Contains(errs, "ops.json:") {
		t.Errorf("tx refused by the station: exit %d %q, want 1 and 'services[0].vip: ...' without ops.json:LINE", code, errs)
	}
	if got := fieldErrorLine("c.yaml", api.FieldError{Path: "a", Line: 2, Msg: "m"}); got != "c.yaml:2: a: m" {
		t.Errorf("fieldErrorLine with a file: %q", got)
	}
}

// TestParseTxOpsStrict: a misspelt field or trailing junk is named, not
// read as an empty field.
func TestParseTxOpsStrict(t *testing.T) {
	for in, want := range map[string]string{
		`[{"op":"delete","kind":"node","nmae":"web1"}]`:                `unknown field "nmae"`,
		`[{"op":"put","kind":"node","vaule":{"name":"a"}}]`:            `unknown field "vaule"`,
		`{"opz":[{"op":"delete","kind":"node","name":"a"}]}`:           `unknown field "opz"`,
		`[{"op":"delete","kind":"node","name":"a"}] [{"op":"delete"}]`: "more after the list",
		`[{"op":"delete","kind":"nodes","name":"a"}]`:                  "want one of account, cluster, director, domain, feedback, layout, node, qos, service",
	} {
		if _, err := parseTxOps([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseTxOps(%s): %v, want ...%s...", in, err, want)
		}
	}
	if ops, err := parseTxOps([]byte(`{"base":3,"comment":"c","ops":[{"op":"delete","kind":"node","name":"a"}]}`)); err != nil || len(ops) != 1 {
		t.Errorf("the object form: %v %v", ops, err)
	}
}

// TestCfgImportInvalid: a director's file may name a service "www:80",
// which the cluster configuration refuses; import says so, naming the
// output's lines (exit 1), and --apply sends nothing.
func TestCfgImportInvalid(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.63.53")
	os.WriteFile("d.conf", []byte("service www:80 {\n  vip 127.0.0.10:80\n  server 127.0.0.21:8080\n}\n"), 0o644)
	code, _, errs := f.run("cfg", "import", "d.conf", "-o", "c.yaml")
	if b, _ := os.ReadFile("c.yaml"); code != 1 || !strings.Contains(errs, `c.yaml:4: services[0].name: "www:80" is not a well-formed name`) || !strings.Contains(string(b), "www:80") {
		t.Errorf("import -o: exit %d %q (file %q), want 1, the file written and its error named", code, errs, b)
	}
	code, _, errs = f.run("cfg", "import", "d.conf", "--apply", "--token-file", tf)
	if code != 1 || !strings.Contains(errs, "nothing sent") || len(f.versions) != 1 {
		t.Errorf("import --apply: exit %d %q, %d versions; want 1, nothing sent", code, errs, len(f.versions))
	}
	os.WriteFile("ok.conf", []byte("service www {\n  vip 127.0.0.10:80\n  server 127.0.0.21:8080 weight=0\n}\n"), 0o644)
	if code, out, errs := f.run("cfg", "import", "ok.conf"); code != 0 || !strings.Contains(out, "weight: 0") {
		t.Errorf("import of a valid file: exit %d %q %q", code, out, errs)
	}
}

// TestMgmtBackupToDir: a directory as FILE is named before the download
// (it used to fetch the whole backup, then fail on "rename FILE.tmp FILE:
// file exists" and leave nothing).
func TestMgmtBackupToDir(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.63.54")
	f.backup = []byte("snapshot")
	os.Mkdir("bk", 0o755)
	code, _, errs := f.run("mgmt", "backup", "bk", "--token-file", tf)
	if code != 2 || !strings.Contains(errs, "bk is a directory") {
		t.Errorf("backup into a directory: exit %d %q, want 2 and 'bk is a directory'", code, errs)
	}
	if _, err := os.Stat("bk.tmp"); err == nil {
		t.Error("bk.tmp left behind")
	}
}

// TestStationClientErrors: a missing token or CA file, a CA file that is
// no certificate, a station without the CA and http for https each name
// the file or say what to do.
func TestStationClientErrors(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.63.55")
	os.WriteFile("notca.pem", []byte("hello\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--station", f.srv.URL, "--ca", f.caFile, "--token-file", "nope.tok"}, "API token file nope.tok: no such file or directory"},
		{[]string{"--station", f.srv.URL, "--ca", "nope.pem", "--token-file", tf}, "station CA file nope.pem: no such file or directory"},
		{[]string{"--station", f.srv.URL, "--ca", "notca.pem", "--token-file", tf}, "station CA file notca.pem: no PEM certificate in it"},
		{[]string{"--station", f.srv.URL, "--token-file", tf}, "(give --ca, the station's DATA/tls/ca.pem)"},
		{[]string{"--station", strings.Replace(f.srv.URL, "https:", "http:", 1), "--ca", f.caFile, "--token-file", tf}, "(the station speaks HTTPS: give --station https://...)"},
	} {
		code, _, errs := runMain(t, append([]string{"cfg", "history"}, c.args...)...)
		if code != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("cfg history %v: exit %d %q, want 1 and ...%s...", c.args, code, errs, c.want)
		}
	}
}

// TestMgmtStartUsage: a bad address is a usage error before anything is
// made under --data; an unwritable --data names the flag.
func TestMgmtStartUsage(t *testing.T) {
	mgmtTestEnv(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"mgmt", "--data", "d1", "--listen", "nonsense"}, 2, `--listen "nonsense": want HOST:PORT`},
		{[]string{"mgmt", "--data", "d1", "--etcd-peer", "127.0.63.56"}, 2, `--etcd-peer "127.0.63.56": want HOST:PORT`},
		{[]string{"mgmt", "--data", "/proc/nope/d", "--listen", "127.0.63.56:0"}, 1, "--data /proc/nope/d: no such file or directory"},
	} {
		code, _, errs := runMain(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d %q, want %d and ...%s...", c.args, code, errs, c.code, c.want)
		}
	}
	if _, err := os.Stat("d1"); err == nil {
		t.Error("d1 made for a command line that was refused")
	}
}

// TestMgmtRestoreErrors: each refusal names the backup file or --data.
func TestMgmtRestoreErrors(t *testing.T) {
	mgmtTestEnv(t)
	os.WriteFile("afile", nil, 0o644)
	os.WriteFile("junk.bak", []byte("junk"), 0o644)
	os.Mkdir("adir", 0o755)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nope.bak", "--data", "n1"}, 1, "backup file nope.bak: no such file or directory"},
		{[]string{"adir", "--data", "n1"}, 2, "backup file adir is a directory"},
		{[]string{"junk.bak", "--data", "afile"}, 2, "--data afile is a file"},
		{[]string{"junk.bak", "--data", "n1"}, 1, "restore junk.bak into n1: junk.bak: not a corral station backup"},
	} {
		code, _, errs := runMain(t, append([]string{"mgmt", "restore"}, c.args...)...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("restore %v: exit %d %q, want %d and ...%s...", c.args, code, errs, c.code, c.want)
		}
	}
}

// TestCfgGetToDir: -o naming a directory says so (it said "rename
// d.tmp d: file exists").
func TestCfgGetToDir(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.63.57")
	os.Mkdir("d", 0o755)
	code, _, errs := f.run("cfg", "get", "-o", "d", "--token-file", tf)
	if code != 1 || !strings.Contains(errs, "d is a directory") {
		t.Errorf("get -o DIR: exit %d %q", code, errs)
	}
	if _, err := os.Stat("d.tmp"); err == nil {
		t.Error("d.tmp left behind")
	}
}

// TestCfgStdinNamed: standard input is <stdin> in messages, not "-".
func TestCfgStdinNamed(t *testing.T) {
	mgmtTestEnv(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("[")
	w.Close()
	old := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = old }()
	code, _, errs := runMain(t, "cfg", "tx", "-", "--token-file", "x")
	if code != 1 || !strings.Contains(errs, "<stdin>: not a JSON list") {
		t.Errorf("tx -: exit %d %q", code, errs)
	}
}

// TestCfgImportBinary: a binary file is refused in one line naming where,
// not echoed line by line as unknown statements.
func TestCfgImportBinary(t *testing.T) {
	mgmtTestEnv(t)
	os.WriteFile("bin.conf", []byte("admin 127.0.0.1:7500\n\x00\x1b[2J\xff\xfe\n"), 0o644)
	code, out, errs := runMain(t, "cfg", "import", "bin.conf")
	if code != 1 || out != "" || !strings.Contains(errs, "bin.conf:2: not a text file") || strings.Contains(errs, "\x1b") {
		t.Errorf("import of a binary file: exit %d %q %q", code, out, errs)
	}
	code, _, errs = runMain(t, "cfg", "import", "nope.conf")
	if code != 1 || !strings.Contains(errs, "director configuration nope.conf: no such file or directory") {
		t.Errorf("import of a missing file: exit %d %q", code, errs)
	}
}

// TestCfgDiffStale: diff of a file edited from an older version says so:
// its diff also undoes the changes made since.
func TestCfgDiffStale(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.63.58")
	os.WriteFile("c.yaml", []byte("# version 1\nnodes:\n  - name: web2\n"), 0o644)
	if code, _, errs := f.run("cfg", "apply", "c.yaml", "--token-file", tf); code != 0 {
		t.Fatalf("apply: %d %q", code, errs)
	}
	os.WriteFile("old.yaml", []byte("# version 1\nnodes:\n  - name: web3\n"), 0o644)
	code, _, errs := f.run("cfg", "diff", "old.yaml", "--token-file", tf)
	if code != 0 || !strings.Contains(errs, "old.yaml was edited from version 1, the current is 2") {
		t.Errorf("diff of a stale file: exit %d %q", code, errs)
	}
	os.WriteFile("new.yaml", []byte("# version 2\nnodes:\n  - name: web4\n"), 0o644)
	code, _, errs = f.run("cfg", "diff", "new.yaml", "--token-file", tf)
	if code != 0 || strings.Contains(errs, "edited from") {
		t.Errorf("diff of a file on a current header said it was stale? exit %d %q", code, errs)
	}
}

// TestCfgApplyEmpty: an empty file (what a failed 'cfg get > FILE'
// leaves) would remove every service: refused unless --allow-empty.
func TestCfgApplyEmpty(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.63.59")
	for _, doc := range []string{"", "# version 1\n", "{}\n", "---\n"} {
		os.WriteFile("e.yaml", []byte(doc), 0o644)
		code, _, errs := f.run("cfg", "apply", "e.yaml", "--token-file", tf)
		if code != 2 || !strings.Contains(errs, "e.yaml holds no configuration") || len(f.versions) != 1 {
			t.Errorf("apply %q: exit %d %q, %d versions; want 2 and nothing stored", doc, code, errs, len(f.versions))
		}
	}
	os.WriteFile("e.yaml", []byte("# version 1\n"), 0o644)
	if code, out, errs := f.run("cfg", "apply", "e.yaml", "--allow-empty", "--token-file", tf); code != 0 || !strings.Contains(out, "applied: version 2") {
		t.Errorf("apply --allow-empty: exit %d %q %q", code, out, errs)
	}
}

// TestCfgImportApplyReplaces: import --apply on a station that has a
// configuration would replace all of it (nodes, domains, accounts) with
// the director's services: refused unless --replace.
func TestCfgImportApplyReplaces(t *testing.T) {
	tf := mgmtTestEnv(t)
	f := newCfgStation(t, "127.0.63.60")
	os.WriteFile("ok.conf", []byte("service www {\n  vip 127.0.0.10:80\n  server 127.0.0.21:8080\n}\n"), 0o644)
	code, _, errs := f.run("cfg", "import", "ok.conf", "--apply", "--token-file", tf)
	if code != 1 || !strings.Contains(errs, "already holds a configuration (version 1)") || len(f.versions) != 1 {
		t.Errorf("import --apply over a configuration: exit %d %q, %d versions", code, errs, len(f.versions))
	}
	if code, _, errs = f.run("cfg", "import", "ok.conf", "--replace"); code != 2 {
		t.Errorf("--replace without --apply: exit %d %q", code, errs)
	}
	code, out, errs := f.run("cfg", "import", "ok.conf", "--apply", "--replace", "--token-file", tf)
	if code != 0 || !strings.Contains(out, "applied: version 2") {
		t.Errorf("import --apply --replace: exit %d %q %q", code, out, errs)
	}
}

// TestMgmtSecretFileMissing: a missing --secret-file names the flag.
func TestMgmtSecretFileMissing(t *testing.T) {
	mgmtTestEnv(t)
	code, _, errs := runMain(t, "mgmt", "--data", "d", "--listen", "127.0.63.61:0", "--secret-file", "nope.secret")
	if code != 1 || !strings.Contains(errs, "--secret-file nope.secret: no such file or directory") {
		t.Errorf("exit %d %q", code, errs)
	}
}

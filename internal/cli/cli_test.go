package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/spf13/cobra"
)

// runMain runs Main in this process with its standard output and error
// captured.
func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	capture := func(f **os.File) func() string {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		old := *f
		*f = w
		done := make(chan string)
		go func() {
			b, _ := io.ReadAll(r)
			done <- string(b)
		}()
		return func() string {
			*f = old
			w.Close()
			return <-done
		}
	}
	endOut, endErr := capture(&os.Stdout), capture(&os.Stderr)
	code = Main(args)
	return code, endOut(), endErr()
}

// TestUsageErrors: a mistyped command line exits 2 with what was wrong and,
// when something is near, what was meant (cobra alone prints help and exits
// 0 for an unknown subcommand below the root).
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"fs", "typo"}, []string{`corral fs: unknown command "typo"`}},
		{[]string{"fs", "lyout"}, []string{"did you mean layout?"}},
		{[]string{"fs", "layout", "gett"}, []string{`corral fs layout: unknown command "gett"`, "get"}},
		{[]string{"typo"}, []string{`corral: unknown command "typo"`}},
		{[]string{"fs", "ls", "--lng"}, []string{"corral fs ls: unknown flag: --lng", "did you mean --long?"}},
		{[]string{"fs", "put", "a"}, []string{"corral fs put: accepts 2 arg(s), received 1", "usage: corral fs put LOCAL REMOTE"}},
		{[]string{"fs", "layout", "set", "/d", "--stripe-count", "x", "--meta", "127.0.0.1:1", "--secret-file", "/nonexistent"}, []string{"corral fs layout set"}},
		{[]string{"fs", "layout", "set", "/d", "--replicas", "6", "--meta", "127.0.0.1:1"}, []string{"--replicas: 6 out of range [1, 5]"}},
		{[]string{"fs", "layout", "set", "/d", "--replicas", "0", "--meta", "127.0.0.1:1"}, []string{"--replicas: 0 out of range [1, 5]"}},
		{[]string{"fs", "layout", "set", "/d", "--placement", "spread", "--meta", "127.0.0.1:1"}, []string{`--placement: "spread" is not striped or whole`}},
		{[]string{"fs", "put", "--replicas", "9", "a", "/b", "--meta", "127.0.0.1:1"}, []string{"--replicas: 9 out of range [1, 5]"}},
		{[]string{"fs", "servers", "lost", "x", "--meta", "127.0.0.1:1"}, []string{`invalid server ID "x"`}},
		{[]string{"ctl", "servces"}, []string{"did you mean services?"}},
		{[]string{"ctl", "weight", "www", "127.0.0.1:1", "abc"}, []string{`corral ctl weight: weight "abc": want 0..65535`}},
		{[]string{"ctl", "add", "www", "127.0.0.1:1", "--weight", "-1"}, []string{"corral ctl add: --weight -1: want 0..65535"}},
		{[]string{"version", "extra"}, []string{"corral version"}},
		{[]string{"node", "--data-cache", "lots"}, []string{`corral node: --data-cache "lots": want a size such as 64M (0: no cache)`}},
		{[]string{"node", "--cache-file-max", "0"}, []string{`corral node: --cache-file-max "0": want a positive size`}},
		{[]string{"meta", "--heal-rate", "fast"}, []string{`corral meta: --heal-rate "fast": want a positive size per second such as 64M`}},
		{[]string{"meta", "--lost-after", "0s"}, []string{`corral meta: --lost-after 0s: want a positive duration such as 30m`}},
		{[]string{"iod", "--data", "/nonexistent/a,/nonexistent/b"}, []string{"corral iod: --data with 2 directories needs --raid 0 (striping) or --raid 1 (mirroring)"}},
		{[]string{"iod", "--data", "/nonexistent/a,/nonexistent/b", "--raid", "5"}, []string{"corral iod: --raid 5: want 0 (striping) or 1 (mirroring)"}},
		{[]string{"iod", "--data", "/nonexistent/a", "--raid", "1"}, []string{"corral iod: --raid 1 needs several --data directories"}},
		{[]string{"iod", "--data", "/nonexistent/a,", "--raid", "0"}, []string{"an empty directory name"}},
		{[]string{"bench", "raid", "--rate", "fast"}, []string{`corral bench raid: --rate "fast": want a positive rate`}},
		{[]string{"bench", "raid", "--rate", "0"}, []string{`--rate "0": want a positive rate`}},
		{[]string{"bench", "raid", "--size", "big"}, []string{`corral bench raid: --size "big": want a positive size`}},
		{[]string{"bench", "raid", "--disks", "1,9"}, []string{`--disks "1,9": want counts from 1 to 8`}},
		{[]string{"help", "fs", "lyout"}, []string{`corral help: no help topic "lyout" under "corral fs"; did you mean layout?`}},
	} {
		code, _, stderr := runMain(t, c.args...)
		if code != 2 {
			t.Errorf("corral %s: exit %d, want 2 (stderr %q)", strings.Join(c.args, " "), code, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("corral %s: stderr %q lacks %q", strings.Join(c.args, " "), stderr, w)
			}
		}
	}
	if code, stdout, _ := runMain(t, "fs"); code != 0 || !strings.Contains(stdout, "Available Commands") {
		t.Errorf("corral fs alone: exit %d, want 0 and help", code)
	}
}

// TestExitStatusFromTypes: the status follows the error's type, whatever
// its text says.
func TestExitStatusFromTypes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("unknown command, bad flag, wrong arg"), 1},
		{usageError{errors.New("x")}, 2},
		{exitError{3}, 3},
	} {
		if got := exitStatus("corral", c.err); got != c.want {
			t.Errorf("exitStatus(%#v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// TestEveryCommandHasExample walks the whole command tree.
func TestEveryCommandHasExample(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Example == "" && !c.Hidden && c.Name() != "help" && c.Name() != "completion" {
			t.Errorf("%s --help has no Examples section", c.CommandPath())
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot())
}

func TestVersionText(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-23T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, c := range []struct {
		info     *debug.BuildInfo
		override string
		want     string
	}{
		{info, "", "corral v1.2.3 (0123456789ab+dirty, 2026-11-23T10:00:00Z) go1.99"},
		{info, "v9", "corral v9 (0123456789ab+dirty, 2026-11-23T10:00:00Z) go1.99"},
		{&debug.BuildInfo{GoVersion: "go1.99"}, "", "corral (devel) go1.99"},
	} {
		if got := versionText(c.info, c.override); got != c.want {
			t.Errorf("versionText = %q, want %q", got, c.want)
		}
	}
	if code, stdout, _ := runMain(t, "version"); code != 0 || !strings.HasPrefix(stdout, "corral ") {
		t.Errorf("corral version: exit %d, %q", code, stdout)
	}
}

func TestProgressLine(t *testing.T) {
	for _, c := range []struct {
		n, total int64
		elapsed  time.Duration
		want     string
	}{
		{0, 100 << 20, 0, "put f [                              ]   0% 0B/100MiB 0B/s --:--"},
		{25 << 20, 100 << 20, 5 * time.Second, "put f [=======                       ]  25% 25MiB/100MiB 5MiB/s ETA 0:15"},
		{100 << 20, 100 << 20, 20 * time.Second, "put f [==============================] 100% 100MiB/100MiB 5MiB/s 0:20"},
		{3 << 30, 4 << 30, time.Second, "put f [======================        ]  75% 3GiB/4GiB 3GiB/s ETA 0:00"},
		{1 << 20, 1 << 40, time.Second, "put f [                              ]   0% 1MiB/1TiB 1MiB/s ETA 291:16:15"},
		{10 << 20, -1, 2 * time.Second, "put f 10MiB 5MiB/s"},
	} {
		if got := progressLine("put f", c.n, c.total, c.elapsed); got != c.want {
			t.Errorf("progressLine(%d, %d, %v) =\n%q, want\n%q", c.n, c.total, c.elapsed, got, c.want)
		}
	}
}

// TestProgressDraws: nothing without a terminal or with --quiet; on one, at
// most one draw per progressEvery, and the last state at the end.
func TestProgressDraws(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	clockText := func() time.Time { return now }
	if p := newProgressTo(&buf, false, "get f", 1<<30, clockText); p != nil {
		t.Fatal("a bar without a terminal")
	}
	progressQuiet = true
	p := newProgressTo(&buf, true, "get f", 1<<30, clockText)
	progressQuiet = false
	if p != nil {
		t.Fatal("a bar with --quiet")
	}
	p.set(1) // nil: no-op
	p.done()
	p = newProgressTo(&buf, true, "get f", 1<<30, clockText)
	for i := int64(1); i <= 100; i++ {
		p.set(i << 20)
		now = now.Add(10 * time.Millisecond) // 100 updates in 1 s
	}
	p.done()
	if n := strings.Count(buf.String(), "\r"); n < 2 || n > 11 {
		t.Errorf("%d draws for 100 updates over 1 s plus the end, want at most 11:\n%q", n, buf.String())
	}
	if !strings.Contains(buf.String(), "100% 1GiB/1GiB") || !strings.HasSuffix(buf.String(), "\n") {
		t.Errorf("final state not drawn: %q", buf.String())
	}
}

// corral runs the real binary with stdin and returns its exit status and
// output.
func corral(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pfstest.Binary(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("corral %v: %v", args, err)
	}
	return code, o.String(), e.String()
}

// TestFSCommands runs corral fs against a real metadata server and three
// I/O servers: put refuses to replace without --force, - is standard input
// and output, ln makes hard links (-s: symbolic), layout policies reach
// subdirectories and say where they come from, a stripe count over the
// servers is refused, and errors carry no inode numbers.
func TestFSCommands(t *testing.T) {
	fsys := pfstest.Start(t, 3)
	fs := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		return corral(t, stdin, append([]string{"fs", "--meta", fsys.Meta.Addr, "--secret-file", fsys.SecretFile}, args...)...)
	}
	ok := func(stdin string, args ...string) string {
		t.Helper()
		code, out, errs := fs(stdin, args...)
		if code != 0 {
			t.Fatalf("corral fs %s: exit %d: %s", strings.Join(args, " "), code, errs)
		}
		return out
	}
	fails := func(want string, args ...string) {
		t.Helper()
		code, _, errs := fs("", args...)
		if code != 1 || !strings.Contains(errs, want) {
			t.Errorf("corral fs %s: exit %d, stderr %q; want 1 and %q", strings.Join(args, " "), code, errs, want)
		}
		if strings.Contains(errs, "inode") {
			t.Errorf("corral fs %s: stderr %q names an inode", strings.Join(args, " "), errs)
		}
	}
	local := filepath.Join(t.TempDir(), "a.txt")
	os.WriteFile(local, []byte("one"), 0o644)

	// put, put again, --force, stdin, get to stdout.
	ok("", "put", local, "/a")
	fails("/a: file exists (use --force to replace it)", "put", local, "/a")
	ok("two", "put", "-", "/a", "--force")
	if got := ok("", "get", "/a", "-"); got != "two" {
		t.Errorf("get /a - after put - --force: %q", got)
	}
	ok("three", "put", "-", "/b")
	if got := ok("", "cat", "/b"); got != "three" {
		t.Errorf("put - /b: %q", got)
	}
	fails("is a directory", "get", "/", filepath.Join(t.TempDir(), "x"))
	ok("", "mkdir", "/dir")
	ok("", "ln", "-s", "/nowhere", "/dangling")
	fails("/dangling: file exists", "put", local, "/dangling")
	fails("/dir: is a directory", "put", "-f", "-", "/dir")
	ok("", "put", local, "/dir/")
	fails("/dir/a.txt: file exists", "put", local, "/dir")

	// ln: hard by default, -s symbolic.
	ok("", "ln", "/a", "/hard")
	ok("", "ln", "-s", "/a", "/soft")
	ls := ok("", "ls", "-l", "/")
	for _, want := range []string{" 2 ", "soft -> /a"} {
		if !strings.Contains(ls, want) {
			t.Errorf("ls -l / lacks %q:\n%s", want, ls)
		}
	}
	ok("two!", "put", "-f", "-", "/a") // replaces the name /a only
	if got := ok("", "cat", "/hard"); got != "two" {
		t.Errorf("hard link after /a was replaced: %q", got)
	}
	fails("directories cannot be hard-linked", "ln", "/", "/rootlink")

	// Layout policies.
	const dflt = " replicas default (default) placement striped (default)\n"
	ok("", "mkdir", "-p", "/www/old")
	ok("", "layout", "set", "/www", "--stripe-size", "1M", "--stripe-count", "2")
	ok("", "mkdir", "-p", "/www/new/deeper")
	for _, d := range []string{"/www/old", "/www/new/deeper"} {
		if got, want := ok("", "layout", "get", d), "stripe-size 1MiB (inherited from /www) stripe-count 2 (inherited from /www)"+dflt; got != want {
			t.Errorf("layout get %s = %q, want %q", d, got, want)
		}
		ok("x", "put", "-", d+"/f")
		if got := ok("", "layout", "get", d+"/f"); !strings.HasPrefix(got, "stripe-size 1MiB stripe-count 2 servers [") {
			t.Errorf("file in %s: %q", d, got)
		}
	}
	if got, want := ok("", "layout", "set", "/www/new", "--stripe-count", "1"), "stripe-size 1MiB (inherited from /www) stripe-count 1 (set here)"+dflt; got != want {
		t.Errorf("layout set /www/new = %q, want %q", got, want)
	}
	if got, want := ok("", "layout", "get", "/"), "stripe-size default (default) stripe-count all (default)"+dflt; got != want {
		t.Errorf("layout get / = %q, want %q", got, want)
	}
	fails("stripe count 99, but the file system has 3 I/O servers", "layout", "set", "/www", "--stripe-count", "99")
	fails("a file's layout is fixed", "layout", "set", "/www/old/f", "--stripe-count", "1")
	if got := ok("", "layout", "get", "/www"); !strings.Contains(got, "stripe-count 2 (set here)") {
		t.Errorf("a refused layout set changed /www: %q", got)
	}
}

// TestWrongMeta: a --meta that accepts connections but never answers fails
// fs commands with a plain message, not after the minute of a long call.
func TestWrongMeta(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	secret := filepath.Join(t.TempDir(), "secret")
	fsys := pfstest.Start(t, 1) // for a valid credential file
	b, _ := os.ReadFile(fsys.SecretFile)
	os.WriteFile(secret, b, 0o600)
	start := time.Now()
	code, _, errs := corral(t, "", "fs", "--meta", l.Addr().String(), "--secret-file", secret, "ls", "/")
	if code != 1 || !strings.Contains(errs, "cannot reach metadata server at "+l.Addr().String()) {
		t.Errorf("fs ls with a silent --meta: exit %d, %q", code, errs)
	}
	// Generous: the point is failing on the reach timeout, not the 20 s and
	// more of the calls' own retries.
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("fs ls with a silent --meta took %v", d)
	}
}

// TestExamplesParse: every example line that runs corral names a command
// that exists, with flags it has and as many arguments as it takes.
func TestExamplesParse(t *testing.T) {
	var lines []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, l := range strings.Split(c.Example, "\n") {
			lines = append(lines, l)
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot())
	n := 0
	for _, l := range lines {
		l, _, _ = strings.Cut(l, " #")
		l, _, _ = strings.Cut(l, " | ")
		l, _, _ = strings.Cut(l, " > ")
		if strings.Contains(l, "...") { // elided: not meant to run as is
			continue
		}
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "sudo" {
			f = f[1:]
		}
		if len(f) == 0 || f[0] != "corral" {
			continue
		}
		n++
		root := newRoot() // flags keep what a parse set: a fresh tree each time
		cmd, rest, err := root.Find(f[1:])
		if err == nil {
			err = cmd.ParseFlags(rest)
		}
		if err == nil && cmd.Args != nil {
			err = cmd.ValidateArgs(cmd.Flags().Args())
		}
		if err != nil || cmd == root {
			t.Errorf("example %q: %v (command %s)", l, err, cmd.CommandPath())
		}
	}
	if n < 40 {
		t.Errorf("only %d example lines run corral", n)
	}
}

package launch_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/testbed"
)

// The package's files, from this package's directory.
const (
	guidePath = "../../docs/deploy.md"
	unitDir   = "../../packaging/systemd"
)

// TestDeployGuide follows docs/deploy.md on a test bed: each host of the
// guide's table is a network namespace (10.95.0.0/24), every daemon runs
// its package unit's ExecStart line expanded with the unit's
// EnvironmentFiles, which hold what the guide's blocks say, as the unit's
// unprivileged user with the unit's capabilities alone, and joins the
// station over the bed's network with a token made as the guide makes
// it. The site is then fetched through the VIP from a client host; a node
// host and an I/O server host are killed (-9) and restarted with the same
// command lines, and the site and the file are still served.
func TestDeployGuide(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of 7 hosts on a test bed")
	}
	lab.Need(t, lab.Netns, lab.Tool("curl"), lab.Tool("setpriv"))
	g := readGuide(t)
	units := readUnits(t)
	hosts := slices.Sorted(func(yield func(string) bool) {
		for h := range g.addr {
			if !yield(h) {
				return
			}
		}
	})
	const name = "dep"
	spec := testbed.NewSpecOn(name, netip.MustParsePrefix("10.95.0.0/24"), append(hosts, "client"), "")
	testbed.Down(name)
	bed, err := testbed.Up(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testbed.Down(name) })
	// The guide's addresses become the bed's, host by host.
	var pairs []string
	for h, a := range g.addr {
		b, err := bed.HostAddr(h)
		if err != nil {
			t.Fatal(err)
		}
		pairs = append(pairs, a, b)
	}
	// Longest first: 10.0.0.1 must not rewrite the start of 10.0.0.10.
	repl := addrReplacer(pairs)
	dir := t.TempDir()
	// The daemons run as the units say: an unprivileged user (nobody
	// here, corral on a real host) with the unit's capabilities alone,
	// so the binary and the directories must be theirs to reach.
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	bin := filepath.Join(dir, "bin", "corral")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(pfstest.Binary(t)); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	// Each host's /etc/corral and /var/lib/corral (the package's
	// postinst makes them 0700).
	root := func(h string) (etc, lib string) {
		return filepath.Join(dir, h, "etc"), filepath.Join(dir, h, "lib")
	}
	for _, h := range hosts {
		etc, lib := root(h)
		// As the package's postinst makes them: /etc/corral readable,
		// its tokens and /var/lib/corral the daemons' own.
		if err := os.MkdirAll(etc, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{filepath.Join(etc, "tokens"), lib} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(d, daemonUID, daemonUID); err != nil {
				t.Fatal(err)
			}
		}
		// Every host's corral.env is the station's (the guide: "as on the
		// station"), then the blocks for that host.
		for _, f := range g.files {
			if f.host == h || f.file == "/etc/corral/corral.env" {
				p := filepath.Join(etc, strings.TrimPrefix(f.file, "/etc/corral/"))
				if err := os.WriteFile(p, []byte(repl.Replace(f.text)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	paths := func(h string) *strings.Replacer {
		etc, lib := root(h)
		return strings.NewReplacer("/usr/bin/corral", bin, "/etc/corral", etc, "/var/lib/corral", lib)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// start runs a unit's instance on host h as systemd would.
	procs := map[string]*launch.Proc{}
	cmdLines := map[string][]string{}
	start := func(h, unit, instance string) {
		t.Helper()
		u, ok := units[unit]
		if !ok {
			t.Fatalf("no unit %s in %s", unit, unitDir)
		}
		args, err := u.command(instance, paths(h))
		if err != nil {
			t.Fatalf("%s on %s: %v", unit, h, err)
		}
		_, lib := root(h)
		for _, d := range u.stateDirs(instance) {
			p := filepath.Join(lib, strings.TrimPrefix(d, "corral"))
			if err := os.MkdirAll(p, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, daemonUID, daemonUID); err != nil {
				t.Fatal(err)
			}
		}
		args = append(u.privileges(), args...)
		cmdLines[h] = args
		w := bed.Wrap(h)
		p, err := launch.Start(ctx, h, w[0], filepath.Join(dir, "logs", h+".log"), append(append(w[1:], args[0]), args[1:]...)...)
		if err != nil {
			t.Fatalf("%s on %s (%s): %v", unit, h, strings.Join(args, " "), err)
		}
		procs[h] = p
		t.Cleanup(func() { p.Stop() })
	}
	// Commands the guide runs on the station, with its environment.
	_, stationLib := root("station")
	stationAddr, _ := bed.HostAddr("station")
	env := []string{"CORRAL_STATION=https://" + stationAddr + ":7600",
		"CORRAL_STATION_CA=" + filepath.Join(stationLib, "mgmt/tls/ca.pem"),
		"CORRAL_MGMT_TOKEN_FILE=" + filepath.Join(stationLib, "mgmt/admin.token")}
	onStation := func(stdin []byte, args ...string) string {
		t.Helper()
		args = strings.Fields(paths("station").Replace(repl.Replace(strings.Join(args, " "))))
		run := append([]string{bin}, args[1:]...)
		if args[0] == "sudo" { // sudo -u corral corral ...: as the daemons' user
			run = append([]string{"setpriv", "--reuid", fmt.Sprint(daemonUID), "--regid", fmt.Sprint(daemonUID), "--clear-groups", bin}, args[4:]...)
		}
		cmd, err := bed.Command(ctx, "station", run...)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(os.Environ(), env...)
		cmd.Dir = dir
		cmd.Stdin = bytes.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("on station: %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
		}
		return out.String()
	}

	// 2. The station.
	onStation(nil, g.need(t, "corral fs secret --new --out /var/lib/corral/cluster.secret")...)
	start("station", "corral-mgmt.service", "")
	// 3. The configuration.
	if err := os.WriteFile(filepath.Join(dir, "cluster.yaml"), []byte(repl.Replace(g.yaml)), 0o644); err != nil {
		t.Fatal(err)
	}
	onStation(nil, g.need(t, "corral cfg apply cluster.yaml")...)
	// 4 and 5. A token per member, into its file; the members in the
	// guide's order.
	members := []struct{ host, role, n string }{
		{"meta1", "meta", "1"}, {"iod1", "iod", "1"}, {"iod2", "iod", "2"},
		{"node1", "node", "1"}, {"node2", "node", "2"}, {"director", "director", "1"}}
	for _, m := range members {
		// The guide's line, for this member's role.
		line := g.need(t, "corral mgmt token create --role")
		if i := slices.Index(line, "--role"); i >= 0 && i+1 < len(line) {
			line[i+1] = m.role
		}
		tok := strings.TrimSpace(onStation(nil, line...))
		if strings.Count(tok, ".") != 2 || strings.ContainsAny(tok, " \n") {
			t.Fatalf("token create printed %q, want ID.SECRET.CAHASH", tok)
		}
		etc, _ := root(m.host)
		tf := filepath.Join(etc, "tokens", m.role+m.n+".token")
		if err := os.WriteFile(tf, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(tf, daemonUID, daemonUID); err != nil {
			t.Fatal(err)
		}
		start(m.host, "corral-"+m.role+"@.service", m.n)
	}
	// Each daemon is the unit's user, with the unit's capabilities only.
	for h, p := range procs {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
		if err != nil {
			t.Fatal(err)
		}
		uid, capEff := "", ""
		for _, l := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(l, "Uid:"); ok {
				uid = strings.Fields(v)[1] // effective
			}
			if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
				capEff = strings.TrimSpace(v)
			}
		}
		noCaps := capEff == "0000000000000000"
		if uid != fmt.Sprint(daemonUID) || noCaps != (h != "director") {
			t.Errorf("%s runs as uid %s with capabilities %s", h, uid, capEff)
		}
	}
	// The site, put as the guide puts it.
	page := []byte("<h1>deployed by the guide</h1>\n")
	if err := os.WriteFile(filepath.Join(dir, "index.html"), page, 0o644); err != nil {
		t.Fatal(err)
	}
	onStation(nil, g.need(t, "mkdir -p /www/www.example.org")...)
	onStation(nil, g.need(t, "put index.html /www/www.example.org/")...)
	vip := repl.Replace(g.need(t, "curl http://")[1])
	fetch := func() error {
		cmd, err := bed.Command(ctx, "client", "curl", "-sS", "--max-time", "5", vip)
		if err != nil {
			return err
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("curl %s: %v: %s", vip, err, out)
		}
		if !bytes.Equal(out, page) {
			return fmt.Errorf("curl %s: %q, want the page put", vip, out)
		}
		return nil
	}
	waitFor(t, "the site through the VIP from the client host", 60*time.Second, fetch)
	allServed := func(what string) {
		t.Helper()
		// Both nodes in the pool: 20 requests, none failing (the
		// scheduler spreads them over both).
		waitFor(t, what, 60*time.Second, func() error {
			for range 20 {
				if err := fetch(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	allServed("every request served with both nodes")

	// Kill -9 a node host and an I/O server host.
	for _, h := range []string{"node1", "iod1"} {
		procs[h].Kill()
	}
	waitFor(t, "the site with node1 and iod1 dead", 60*time.Second, func() error {
		for range 10 {
			if err := fetch(); err != nil {
				return err
			}
		}
		return nil
	})
	getFile := func() error {
		cmd, err := bed.Command(ctx, "station", bin, "fs", "--meta", repl.Replace("10.0.0.2:7400"),
			"--secret-file", filepath.Join(stationLib, "cluster.secret"), "get", "/www/www.example.org/index.html", "-")
		if err != nil {
			return err
		}
		b, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("fs get: %v", err)
		}
		if !bytes.Equal(b, page) {
			return fmt.Errorf("fs get: %q", b)
		}
		return nil
	}
	if err := getFile(); err != nil {
		t.Fatalf("the file with iod1 dead: %v", err)
	}
	// The same command lines bring them back: no token is needed (the
	// single-use ones are spent), the saved credentials serve.
	for _, h := range []string{"iod1", "node1"} {
		args := cmdLines[h]
		w := bed.Wrap(h)
		p, err := launch.Start(ctx, h, w[0], filepath.Join(dir, "logs", h+".log"), append(append(w[1:], args[0]), args[1:]...)...)
		if err != nil {
			t.Fatalf("restarting %s: %v", h, err)
		}
		procs[h] = p
		t.Cleanup(func() { p.Stop() })
	}
	allServed("every request served after the restarts")
	if err := getFile(); err != nil {
		t.Fatalf("the file after the restarts: %v", err)
	}
	out := onStation(nil, "corral", "cfg", "status")
	for _, m := range members {
		if !strings.Contains(out, m.role+m.n) {
			t.Errorf("cfg status does not list %s%s:\n%s", m.role, m.n, out)
		}
	}
}

// guide is what the test takes from docs/deploy.md.
type guide struct {
	addr  map[string]string // host -> address, from the table
	files []guideFile       // ```ini file=... host=... blocks
	yaml  string            // the configuration
	cmds  []string          // every command line of its sh blocks
}

type guideFile struct{ file, host, text string }

// need returns the guide's command line that contains s, as arguments
// (from "corral" on); the test fails when the guide has no such line.
func (g *guide) need(t *testing.T, s string) []string {
	t.Helper()
	for _, c := range g.cmds {
		if strings.Contains(c, s) {
			if i := strings.Index(c, " #"); i >= 0 {
				c = c[:i]
			}
			f := strings.Fields(c)
			if len(f) > 3 && slices.Equal(f[:4], []string{"sudo", "-u", "corral", "corral"}) {
				return f
			}
			if i := slices.Index(f, "corral"); i >= 0 {
				return f[i:]
			}
			return f
		}
	}
	t.Fatalf("docs/deploy.md has no command line with %q", s)
	return nil
}

var tableRow = regexp.MustCompile(`^\| ([a-z0-9, ]+) \| (10\.0\.0\.[0-9]+(?:, 10\.0\.0\.[0-9]+)*) \|`)

func readGuide(t *testing.T) *guide {
	t.Helper()
	b, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	g := &guide{addr: map[string]string{}}
	var block *strings.Builder
	var info string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if block != nil {
			if line != "```" {
				block.WriteString(line + "\n")
				continue
			}
			text := block.String()
			block = nil
			switch f := strings.Fields(info); {
			case len(f) == 0:
			case f[0] == "yaml":
				g.yaml = text
			case f[0] == "sh":
				for _, l := range strings.Split(text, "\n") {
					if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
						g.cmds = append(g.cmds, l)
					}
				}
			case f[0] == "ini":
				gf := guideFile{text: text}
				for _, kv := range f[1:] {
					k, v, _ := strings.Cut(kv, "=")
					switch k {
					case "file":
						gf.file = v
					case "host":
						gf.host = v
					}
				}
				g.files = append(g.files, gf)
			}
			continue
		}
		if rest, ok := strings.CutPrefix(line, "```"); ok {
			block, info = &strings.Builder{}, rest
			continue
		}
		if m := tableRow.FindStringSubmatch(line); m != nil {
			hs, as := strings.Split(m[1], ", "), strings.Split(m[2], ", ")
			if len(hs) != len(as) {
				t.Fatalf("guide table row %q: %d hosts, %d addresses", line, len(hs), len(as))
			}
			for i, h := range hs {
				g.addr[strings.TrimSpace(h)] = as[i]
			}
		}
	}
	if len(g.addr) < 7 || g.yaml == "" || len(g.files) < 7 {
		t.Fatalf("docs/deploy.md: %d hosts, %d environment files, configuration %t: the test cannot follow it", len(g.addr), len(g.files), g.yaml != "")
	}
	return g
}

// addrReplacer maps each old address to its new one, a whole address at
// a time.
func addrReplacer(pairs []string) *regexpReplacer {
	m := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i]] = pairs[i+1]
	}
	return &regexpReplacer{m: m}
}

type regexpReplacer struct{ m map[string]string }

var ipv4 = regexp.MustCompile(`\b10\.0\.0\.[0-9]+\b`)

func (r *regexpReplacer) Replace(s string) string {
	return ipv4.ReplaceAllStringFunc(s, func(a string) string {
		if n, ok := r.m[a]; ok {
			return n
		}
		return a
	})
}

// daemonUID stands for the package's corral user: nobody.
const daemonUID = 65534

// unitFile is what the test reads of a systemd unit.
type unitFile struct {
	name      string
	execStart string
	envFiles  []string
	stateDir  []string
	user      string
	caps      []string // AmbientCapabilities
	bounding  []string // CapabilityBoundingSet
	noNewPriv bool
}

// privileges is the setpriv prefix that gives the command the unit's
// user (nobody standing for corral), its capabilities and nothing more.
func (u *unitFile) privileges() []string {
	set := func(caps []string) string {
		s := "-all"
		for _, c := range caps {
			s += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
		}
		return s
	}
	p := []string{"setpriv", "--reuid", fmt.Sprint(daemonUID), "--regid", fmt.Sprint(daemonUID), "--clear-groups",
		"--inh-caps", set(u.caps), "--ambient-caps", set(u.caps), "--bounding-set", set(u.bounding)}
	if u.noNewPriv {
		p = append(p, "--no-new-privs")
	}
	return p
}

func readUnits(t *testing.T) map[string]*unitFile {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(unitDir, "*.service"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no units in %s: %v", unitDir, err)
	}
	out := map[string]*unitFile{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		u := &unitFile{name: filepath.Base(f)}
		for _, l := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(l, "=")
			if !ok || strings.HasPrefix(l, "#") {
				continue
			}
			switch k {
			case "ExecStart":
				u.execStart = v
			case "EnvironmentFile":
				u.envFiles = append(u.envFiles, v)
			case "StateDirectory":
				u.stateDir = strings.Fields(v)
			case "User":
				u.user = v
			case "AmbientCapabilities":
				u.caps = strings.Fields(v)
			case "CapabilityBoundingSet":
				u.bounding = strings.Fields(v)
			case "NoNewPrivileges":
				u.noNewPriv = v == "yes"
			}
		}
		if u.execStart == "" || u.user != "corral" {
			t.Fatalf("%s: ExecStart %q, User %q: want a command run as corral", f, u.execStart, u.user)
		}
		out[u.name] = u
	}
	return out
}

// command is the unit's ExecStart for instance as systemd runs it: %i
// replaced, the EnvironmentFiles read in order (a later one wins; "-"
// marks one that may be missing), ${VAR} replaced within its word and a
// lone $VAR split on white space. paths maps the package's paths to the
// host's.
func (u *unitFile) command(instance string, paths *strings.Replacer) ([]string, error) {
	env := map[string]string{}
	for _, f := range u.envFiles {
		optional := strings.HasPrefix(f, "-")
		f = paths.Replace(strings.ReplaceAll(strings.TrimPrefix(f, "-"), "%i", instance))
		b, err := os.ReadFile(f)
		if err != nil {
			if optional && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("EnvironmentFile: %w", err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				return nil, fmt.Errorf("%s: %q is no VAR=value", f, l)
			}
			env[k] = strings.Trim(v, `"`)
		}
	}
	var args []string
	for _, w := range strings.Fields(strings.ReplaceAll(u.execStart, "%i", instance)) {
		if name, ok := strings.CutPrefix(w, "$"); ok && !strings.HasPrefix(name, "{") {
			args = append(args, strings.Fields(env[name])...)
			continue
		}
		var missing error
		w = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).ReplaceAllStringFunc(w, func(m string) string {
			v, ok := env[m[2:len(m)-1]]
			if !ok && missing == nil {
				missing = fmt.Errorf("%s: %s is set by no EnvironmentFile", u.name, m)
			}
			return v
		})
		if missing != nil {
			return nil, missing
		}
		args = append(args, paths.Replace(w))
	}
	return args, nil
}

func (u *unitFile) stateDirs(instance string) []string {
	var out []string
	for _, d := range u.stateDir {
		out = append(out, strings.ReplaceAll(d, "%i", instance))
	}
	return out
}

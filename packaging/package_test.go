package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// corralBin is the binary under test: $CORRAL_BIN (scripts/test's
// bin/corral), else one built here with the version git describe gives.
var (
	binOnce sync.Once
	binPath string
	binErr  error
)

func corralBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if p := os.Getenv("CORRAL_BIN"); p != "" {
			binPath, binErr = filepath.Abs(p)
			return
		}
		dir, err := os.MkdirTemp("", "corral-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "corral")
		v := GitVersion("..")
		cmd := exec.Command("go", "build", "-o", binPath, "-ldflags", "-X github.com/corral-cluster/corral/internal/cli.Version="+v, "./cmd/corral")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// buildDeb builds the package once for all the tests (compressing the
// binary is most of a test's time).
var (
	debOnce sync.Once
	debPath string
	debErr  error
)

func buildDeb(t *testing.T) string {
	t.Helper()
	bin := corralBin(t)
	debOnce.Do(func() {
		dir, err := os.MkdirTemp("", "corral-deb-")
		if err != nil {
			debErr = err
			return
		}
		debPath, debErr = Build(Options{Bin: bin, Out: dir, Arch: "amd64"})
	})
	if debErr != nil {
		t.Fatal(debErr)
	}
	return debPath
}

var units = []string{"corral-mgmt.service", "corral-meta@.service", "corral-iod@.service", "corral-node@.service", "corral-director@.service"}

// TestPackageContents: the package names the binary's version and holds
// the binary, a unit per role, the default configuration (as conffiles),
// completion for bash and zsh, and a man page per command.
func TestPackageContents(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		skip(t, "no dpkg-deb to read the package with")
	}
	deb := buildDeb(t)
	out, err := exec.Command(corralBin(t), "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want, err := DebVersion(strings.Fields(string(out))[1])
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, "dpkg-deb", "-f", deb, "Version"); strings.TrimSpace(got) != want {
		t.Errorf("package version %q, want %q (from %q)", got, want, out)
	}
	list := run(t, "dpkg-deb", "-c", deb)
	for _, f := range append([]string{"./usr/bin/corral", "./etc/corral/corral.env", "./etc/corral/mgmt.env",
		"./usr/share/bash-completion/completions/corral", "./usr/share/zsh/vendor-completions/_corral",
		"./usr/share/man/man1/corral.1.gz", "./usr/share/man/man1/corral-fs-put.1.gz", "./usr/share/man/man1/corral-mgmt-rollout.1.gz",
		"./usr/share/doc/corral/deploy.md"}, prefix("./lib/systemd/system/", units)...) {
		if !strings.Contains(list, " "+f+"\n") {
			t.Errorf("the package has no %s:\n%s", f, list)
		}
	}
	ctl := t.TempDir()
	run(t, "dpkg-deb", "-e", deb, ctl)
	conf, err := os.ReadFile(filepath.Join(ctl, "conffiles"))
	if err != nil || !strings.Contains(string(conf), "/etc/corral/node-1.env") {
		t.Errorf("conffiles: %q %v", conf, err)
	}
	if _, err := os.Stat(filepath.Join(ctl, "postinst")); err != nil {
		t.Errorf("no postinst: %v", err)
	}
}

// TestInstallInChroot installs the package into a clean Debian (a
// debootstrap minbase, cached under /var/cache/corral-test), where the
// postinst makes the corral user, `corral --version` runs, and
// systemd-analyze verify passes for an instance of every unit.
func TestInstallInChroot(t *testing.T) {
	if os.Getuid() != 0 {
		skip(t, "needs root for chroot")
	}
	base, err := debianBase()
	if err != nil {
		skip(t, err.Error())
	}
	deb := buildDeb(t)
	root := t.TempDir()
	run(t, "tar", "-xzf", base, "-C", root)
	data, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "tmp", "corral.deb"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "chroot", root, "dpkg", "-i", "/tmp/corral.deb")
	v := run(t, "chroot", root, "corral", "--version")
	bv := run(t, corralBin(t), "--version")
	if v != bv {
		t.Errorf("installed corral --version = %q, want %q", v, bv)
	}
	if u := run(t, "chroot", root, "getent", "passwd", "corral"); !strings.Contains(u, ":/var/lib/corral:") {
		t.Errorf("corral user: %q", u)
	}
	for dir, mode := range map[string]os.FileMode{"/var/lib/corral": 0o700, "/etc/corral/tokens": 0o700} {
		if fi, err := os.Stat(filepath.Join(root, dir)); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want mode %o", dir, fi.Mode(), err, mode)
		}
	}
	// An instance of each template, as systemctl enable would name it.
	verify(t, root)
	// A second install (an upgrade to the same version) keeps the user
	// and runs clean.
	run(t, "chroot", root, "dpkg", "-i", "/tmp/corral.deb")
	run(t, "chroot", root, "dpkg", "--purge", "corral")
	if _, err := os.Stat(filepath.Join(root, "usr/bin/corral")); err == nil {
		t.Error("purge left /usr/bin/corral")
	}
}

// verify runs the host's systemd-analyze verify on the installed units
// with the chroot as root (the binary and user are there).
func verify(t *testing.T, root string) {
	t.Helper()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		skip(t, "no systemd-analyze")
	}
	var names []string
	for _, u := range units {
		n := strings.Replace(u, "@.", "@1.", 1)
		if n != u {
			// An instance name resolves to its template in the unit path.
			if err := os.Symlink(u, filepath.Join(root, "lib/systemd/system", n)); err != nil {
				t.Fatal(err)
			}
		}
		names = append(names, filepath.Join(root, "lib/systemd/system", n))
	}
	// The units' Documentation=man:corral(1) is checked with the
	// chroot's man below: the host's man does not see the chroot's pages.
	cmd := exec.Command(sa, append([]string{"verify", "--man=no", "--root=" + root}, names...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	// Only what concerns corral's units: the host's own may warn.
	var ours []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "corral") {
			ours = append(ours, l)
		}
	}
	if err != nil || len(ours) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out.String())
	}
	for _, n := range names {
		os.Remove(n)
	}
	if out, err := exec.Command("chroot", root, "man", "-w", "corral").CombinedOutput(); err != nil || !strings.Contains(string(out), "corral.1") {
		t.Errorf("man corral in the chroot: %v %s", err, out)
	}
}

// debianBase is a tarball of a clean Debian minbase with systemd and
// man-db (systemd-analyze verify checks the units' targets and man pages),
// made once with debootstrap from the machine's own apt mirror.
func debianBase() (string, error) {
	const dir = "/var/cache/corral-test"
	tgz := filepath.Join(dir, "debian-systemd.tar.gz")
	if _, err := os.Stat(tgz); err == nil {
		return tgz, nil
	}
	db, err := exec.LookPath("debootstrap")
	if err != nil {
		return "", errors.New("no debootstrap to make a clean Debian with (scripts/deps installs it)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "root-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	suite := "bookworm"
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VERSION_CODENAME="); ok && v != "" {
				suite = v
			}
		}
	}
	start := time.Now()
	if out, err := exec.Command(db, "--variant=minbase", "--include=systemd,man-db", suite, tmp, debMirror()).CombinedOutput(); err != nil {
		return "", fmt.Errorf("debootstrap: %v: %s", err, tail(out))
	}
	if out, err := exec.Command("tar", "-czf", tgz+".tmp", "-C", tmp, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("tar: %v: %s", err, out)
	}
	fmt.Printf("made %s in %s\n", tgz, time.Since(start).Round(time.Second))
	return tgz, os.Rename(tgz+".tmp", tgz)
}

// debMirror is the first Debian mirror apt is set up with.
func debMirror() string {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	files = append(files, "/etc/apt/sources.list")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			switch {
			case len(f) >= 2 && f[0] == "URIs:" && !strings.Contains(f[1], "security"):
				return f[1]
			case len(f) >= 3 && f[0] == "deb" && !strings.Contains(l, "security"):
				return f[1]
			}
		}
	}
	return "http://deb.debian.org/debian"
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func prefix(p string, l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = p + s
	}
	return out
}

func tail(b []byte) []byte {
	if len(b) > 2000 {
		return b[len(b)-2000:]
	}
	return b
}

// skip skips, or fails under CORRAL_CI=1 (as lab.Need: this module cannot
// import the main one's internal packages).
func skip(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CORRAL_CI") == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// TestMain removes what the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if debPath != "" {
		os.RemoveAll(filepath.Dir(debPath))
	}
	if binPath != "" && os.Getenv("CORRAL_BIN") == "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

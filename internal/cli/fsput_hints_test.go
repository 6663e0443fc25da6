package cli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// TestFSPutHints: fs put into a directory that does not exist, or of a
// local directory, names the path and says what to do; Ctrl-C during a
// put says "interrupted" (not "context canceled") and leaves no
// temporary file; ls hides names starting with '.' unless -a.
func TestFSPutHints(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	base := []string{"fs", "--meta", fsys.Meta.Addr, "--secret-file", fsys.SecretFile}
	fs := func(args ...string) (int, string, string) {
		t.Helper()
		return corral(t, "", append(append([]string{}, base...), args...)...)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "index.html")
	os.WriteFile(src, []byte("<html></html>\n"), 0o644)

	code, _, errs := fs("put", src, "/nodir/index.html")
	if code == 0 || !strings.Contains(errs, "/nodir") || !strings.Contains(errs, "mkdir -p") {
		t.Errorf("put into a missing directory: %d %q, want the directory named and mkdir -p", code, errs)
	}
	code, _, errs = fs("put", dir, "/")
	if code == 0 || !strings.Contains(errs, dir) || !strings.Contains(errs, "is a directory") || !strings.Contains(errs, "tar") {
		t.Errorf("put of a directory: %d %q, want it named with a hint", code, errs)
	}

	// ls and -a.
	if code, _, errs := corral(t, "x", append(append([]string{}, base...), "put", "-", "/.hidden")...); code != 0 {
		t.Fatalf("put /.hidden: %s", errs)
	}
	if _, out, _ := fs("ls", "/"); strings.Contains(out, ".hidden") {
		t.Errorf("ls / shows a name starting with '.': %q", out)
	}
	if _, out, errs := fs("ls", "-a", "/"); !strings.Contains(out, ".hidden") {
		t.Errorf("ls -a /: %q %s, want .hidden", out, errs)
	}

	// Ctrl-C while the bytes go up.
	cmd := exec.Command(pfstest.Binary(t), append(append([]string{}, base...), "put", "-", "/big")...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	go func() {
		buf := make([]byte, 64<<10)
		for range 16 { // 1 MiB, then standard input stays open
			if _, err := stdin.Write(buf); err != nil {
				return
			}
		}
	}()
	tmpShown := func() bool {
		_, out, _ := fs("ls", "-a", "/")
		return strings.Contains(out, ".big.corral-put-")
	}
	deadline := time.Now().Add(30 * time.Second)
	for !tmpShown() {
		if time.Now().After(deadline) {
			t.Fatal("the put's temporary file did not appear within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("put still running 30 s after SIGINT")
	}
	stdin.Close()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Errorf("put after SIGINT: %v, want a failure", err)
	}
	if s := stderr.String(); !strings.Contains(s, "interrupted") || strings.Contains(s, "context canceled") {
		t.Errorf("put after SIGINT said %q, want interrupted", s)
	}
	if tmpShown() {
		t.Errorf("the interrupted put left its temporary file")
	}
}

// TestLsTime: ls -l shows the time of day for a file changed within 6
// months, else the year, as ls does.
func TestLsTime(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.Local)
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{now.Add(-time.Hour), "Nov 28 11:00"},
		{now.AddDate(0, -5, 0), "Jun 28 12:00"},
		{now.AddDate(-1, 0, 0), "Nov 28  2025"},
		{now.AddDate(1, 0, 0), "Nov 28  2027"},
	} {
		if got := lsTime(c.t, now); got != c.want {
			t.Errorf("lsTime(%v) = %q, want %q", c.t, got, c.want)
		}
	}
}

package launch_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// TestStationRestoreWhileServing (issue 15, backup and restore): a backup
// taken online; later versions and a drain are made; the station is then
// replaced by one restored from the backup, on the same address, while the
// site serves. Not one request through the VIP fails, the restored station
// holds the backed-up version, and every member, on the credential it had,
// reconnects, reports and applies the next version.
func TestStationRestoreWhileServing(t *testing.T) {
	m := startManaged(t, 2)
	m.waitApplied(t, 1, m.members(), 20*time.Second)
	c, v1 := m.current(t)
	nodeWeight(t, c, "node2", 2)
	v2, err := m.apply(c, v1.Version, "before the backup")
	if err != nil {
		t.Fatal(err)
	}
	m.waitApplied(t, v2, m.members(), 15*time.Second)

	backup := filepath.Join(m.dir, "station.bak")
	corral := func(args ...string) {
		t.Helper()
		cmd := exec.Command(m.bin, args...)
		cmd.Dir = m.dir // ./corral-data/mgmt's admin token and CA
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("corral %v: %v\n%s", args, err, out)
		}
	}
	corral("mgmt", "backup", "--station", m.stationURL(), backup)
	// After the backup: a version the restore will not have.
	c, _ = m.current(t)
	nodeWeight(t, c, "node1", 3)
	if _, err := m.apply(c, v2, "after the backup"); err != nil {
		t.Fatal(err)
	}

	loopDone := make(chan struct{})
	var ok int
	var errs []error
	go func() {
		defer close(loopDone)
		ok, errs = loop(m.vip(), 300, 8*time.Second)
	}()

	// Replace the station: up held still (so it does not restart the old
	// one at once), the station killed, its directory swapped for the
	// restored one, up let go: it starts the station on the restored data.
	restored := filepath.Join(m.dir, "mgmt-restored")
	corral("mgmt", "restore", backup, "--data", restored)
	up := m.cmd.Process.Pid
	if err := syscall.Kill(up, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			syscall.Kill(up, syscall.SIGCONT)
		}
	}()
	pid := m.child("mgmt", "")
	if pid == 0 {
		t.Fatal("no station child of up")
	}
	syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, "the old station gone", 10*time.Second, func() error {
		// Gone, or a zombie up has not reaped yet (it is held still).
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(b), ") Z ") {
			return errors.New("still running")
		}
		return nil
	})
	dir := filepath.Join(m.data, "mgmt")
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(restored, dir); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(up, syscall.SIGCONT)
	resumed = true
	waitFor(t, "the restored station serving", 30*time.Second, func() error {
		return m.call(http.MethodGet, api.RouteHealthz, nil, nil)
	})
	<-loopDone
	if len(errs) > 0 {
		t.Errorf("%d of %d requests failed while the station was replaced: %v", len(errs), ok+len(errs), errs[:min(len(errs), 5)])
	}
	c, cur := m.current(t)
	if cur.Version != v2 {
		t.Fatalf("restored station: version %d, want %d (the backup's)", cur.Version, v2)
	}
	// The members come back on their saved credentials (no new token) and
	// apply what the restored station hands out.
	nodeWeight(t, c, "node1", 4)
	nv, err := m.apply(c, cur.Version, "after the restore")
	if err != nil {
		t.Fatal(err)
	}
	m.waitApplied(t, nv, m.members(), 20*time.Second)
	if w, err := m.directorWeight("www", stationNet+".21:8080"); err != nil || w != 4 {
		t.Fatalf("director after the restore: node1's weight %d (%v), want 4", w, err)
	}
}

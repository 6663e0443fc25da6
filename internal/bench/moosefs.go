package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/testbed"
)

// moosefsAvailable says whether Debian's MooseFS is installed.
func moosefsAvailable() bool {
	for _, p := range []string{"mfsmaster", "mfschunkserver", "mfsmount"} {
		if _, err := exec.LookPath(p); err != nil {
			return false
		}
	}
	return true
}

// moosefs is a MooseFS master on one test-bed host and a chunkserver on
// each server host, every daemon with its own configuration and data
// directory under dir.
type moosefs struct {
	bed    *testbed.Bed
	master string // master's address
	procs  []*launch.Proc
	mounts []string
}

func startMooseFS(ctx context.Context, bed *testbed.Bed, dir, masterHost string, servers []string) (*moosefs, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	mh, err := bed.Host(masterHost)
	if err != nil {
		return nil, err
	}
	m := &moosefs{bed: bed, master: mh.Addr.String()}
	md := filepath.Join(dir, "master")
	if err := os.MkdirAll(md, 0o755); err != nil {
		return nil, err
	}
	empty, err := os.ReadFile("/var/lib/mfs/metadata.mfs.empty")
	if err != nil {
		return nil, fmt.Errorf("moosefs: %w", err)
	}
	files := map[string]string{
		filepath.Join(md, "metadata.mfs"): string(empty),
		filepath.Join(dir, "exports.cfg"): "* / rw,alldirs,maproot=0\n",
		filepath.Join(dir, "master.cfg"): fmt.Sprintf("WORKING_USER = root\nWORKING_GROUP = root\nDATA_PATH = %s\nEXPORTS_FILENAME = %s/exports.cfg\nTOPOLOGY_FILENAME = /dev/null\n",
			md, dir),
	}
	for _, h := range servers {
		d := filepath.Join(dir, h)
		for _, sub := range []string{"data", "chunks"} {
			if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
				return nil, err
			}
		}
		files[filepath.Join(d, "hdd.cfg")] = filepath.Join(d, "chunks") + "\n"
		files[filepath.Join(d, "cs.cfg")] = fmt.Sprintf("WORKING_USER = root\nWORKING_GROUP = root\nDATA_PATH = %s/data\nHDD_CONF_FILENAME = %s/hdd.cfg\nMASTER_HOST = %s\n", d, d, m.master)
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			return nil, err
		}
	}
	start := func(name, host string, args ...string) error {
		// The daemons print no address; announce for launch, then exec.
		script := fmt.Sprintf("echo '%s: listening on %s' && exec \"$@\"", name, host)
		p, err := launch.Start(ctx, name, "nsenter", filepath.Join(dir, name+".log"),
			append(append(bed.Wrap(host)[1:], "sh", "-c", script, "sh"), args...)...)
		if err == nil {
			m.procs = append(m.procs, p)
		}
		return err
	}
	if err := start("mfsmaster", masterHost, "mfsmaster", "-c", filepath.Join(dir, "master.cfg"), "-f", "start"); err != nil {
		return nil, err
	}
	// The master announces nothing: wait until it accepts clients.
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(m.master, "9421"), time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(end) {
			m.stop()
			return nil, fmt.Errorf("mfsmaster on %s did not listen: %v", masterHost, err)
		}
	}
	for _, h := range servers {
		if err := start("mfschunkserver-"+h, h, "mfschunkserver", "-c", filepath.Join(dir, h, "cs.cfg"), "-f", "start"); err != nil {
			m.stop()
			return nil, err
		}
	}
	return m, nil
}

// mount mounts MooseFS on a client host under the bed's mount directory.
func (m *moosefs) mount(ctx context.Context, host string) (string, error) {
	base, err := m.bed.MountDir("moosefs")
	if err != nil {
		return "", err
	}
	mnt := filepath.Join(base, host)
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return "", err
	}
	cmd, _ := m.bed.Command(ctx, host, "mfsmount", mnt, "-H", m.master)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("mfsmount on %s: %v: %s", host, err, out)
	}
	m.mounts = append(m.mounts, mnt)
	return mnt, nil
}

func (m *moosefs) stop() {
	for _, mnt := range m.mounts {
		exec.Command("umount", "-l", mnt).Run()
	}
	for i := len(m.procs) - 1; i >= 0; i-- {
		m.procs[i].Kill()
	}
}

func moosefsNote() string {
	return "MooseFS 3 (Debian): master on the metadata host, a chunkserver on each I/O server host, mfsmount on each client host, default goal; files of 32 MiB sit in one 64 MiB chunk, so each lives whole on one chunkserver"
}

package bench

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/testbed"
)

// glusterAvailable says whether Debian's GlusterFS is installed.
func glusterAvailable() bool {
	for _, p := range []string{"glusterd", "gluster", "mount.glusterfs"} {
		if _, err := exec.LookPath(p); err != nil {
			return false
		}
	}
	return true
}

// gluster is a GlusterFS cluster on test-bed hosts: one glusterd per server
// host in a private mount namespace (its own /run, /var/lib/glusterd,
// /var/log/glusterfs), so several run on one machine.
type gluster struct {
	bed     *testbed.Bed
	dir     string
	servers []string // host names
	procs   []*launch.Proc
	mounts  []string
}

func startGluster(ctx context.Context, bed *testbed.Bed, dir string, servers []string) (*gluster, error) {
	dir, err := filepath.Abs(dir) // gluster wants absolute brick paths
	if err != nil {
		return nil, err
	}
	g := &gluster{bed: bed, dir: dir, servers: servers}
	for _, h := range servers {
		d := filepath.Join(dir, h)
		for _, sub := range []string{"lib", "log", "brick"} {
			if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
				return nil, err
			}
		}
		script := fmt.Sprintf("mount -t tmpfs tmpfs /run && mount --bind %s/lib /var/lib/glusterd && mount --bind %s/log /var/log/glusterfs && echo 'glusterd: listening on %s' && exec glusterd -N --log-file=%s/glusterd.log", d, d, h, d)
		args := append(bed.Wrap(h)[1:], "unshare", "-m", "--propagation", "private", "sh", "-c", script)
		p, err := launch.Start(ctx, "glusterd-"+h, "nsenter", filepath.Join(d, "out.log"), args...)
		if err != nil {
			g.stop()
			return nil, err
		}
		g.procs = append(g.procs, p)
	}
	// glusterd answers its CLI once it has set up; give it a moment.
	for i := 0; i < 50; i++ {
		if _, err := g.cli(ctx, "peer", "status"); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, h := range servers[1:] {
		x, _ := bed.Host(h)
		if out, err := g.cli(ctx, "peer", "probe", x.Addr.String()); err != nil {
			g.stop()
			return nil, fmt.Errorf("gluster peer probe %s: %v: %s", h, err, out)
		}
	}
	return g, nil
}

// cli runs the gluster command in the first server's namespaces.
func (g *gluster) cli(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(g.procs[0].Pid()), "-n", "-m", "gluster", "--mode=script"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// volume creates and starts a volume over the servers: "distributed" (each
// file whole on one brick), "dispersed" (erasure-coded stripes, one brick's
// worth of redundancy) or "replica" (replica 2: with an odd number of
// servers each has two bricks, ordered so that no pair shares a host).
func (g *gluster) volume(ctx context.Context, name, kind string) error {
	args := []string{"volume", "create", name}
	hosts := g.servers
	switch kind {
	case "dispersed":
		args = append(args, "disperse", strconv.Itoa(len(g.servers)), "redundancy", "1")
	case "replica":
		args = append(args, "replica", "2")
		if len(hosts)%2 == 1 {
			hosts = append(append([]string{}, hosts...), hosts...)
		}
	}
	args = append(args, "transport", "tcp")
	for i, h := range hosts {
		x, _ := g.bed.Host(h)
		brick := filepath.Join(g.dir, h, "brick", name)
		if i >= len(g.servers) {
			brick += "-2"
		}
		args = append(args, x.Addr.String()+":"+brick)
	}
	args = append(args, "force")
	if out, err := g.cli(ctx, args...); err != nil {
		return fmt.Errorf("gluster volume create: %v: %s", err, out)
	}
	if out, err := g.cli(ctx, "volume", "start", name); err != nil {
		return fmt.Errorf("gluster volume start: %v: %s", err, out)
	}
	return nil
}

// killBricks kills -9 the brick processes (glusterfsd) of volume on host,
// as a crash of that server would; "volume start force" restarts them.
func (g *gluster) killBricks(ctx context.Context, volume, host string) error {
	out, err := g.cli(ctx, "volume", "status", volume, "--xml")
	if err != nil {
		return fmt.Errorf("gluster volume status: %v: %s", err, out)
	}
	var st struct {
		Nodes []struct {
			Hostname string `xml:"hostname"`
			Path     string `xml:"path"`
			Status   int    `xml:"status"`
			Pid      int    `xml:"pid"`
		} `xml:"volStatus>volumes>volume>node"`
	}
	if err := xml.Unmarshal([]byte(out), &st); err != nil {
		return fmt.Errorf("gluster volume status --xml: %v: %s", err, out)
	}
	x, _ := g.bed.Host(host)
	killed := 0
	for _, n := range st.Nodes {
		// Bricks only (the self-heal daemons have no brick path).
		if n.Hostname != x.Addr.String() || !strings.HasPrefix(n.Path, "/") || n.Status != 1 || n.Pid <= 0 {
			continue
		}
		if syscall.Kill(n.Pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	if killed == 0 {
		return fmt.Errorf("no running brick of %s on %s (%s)", volume, host, x.Addr)
	}
	return nil
}

// restartBricks starts the volume's dead brick processes again.
func (g *gluster) restartBricks(ctx context.Context, volume string) error {
	if out, err := g.cli(ctx, "volume", "start", volume, "force"); err != nil {
		return fmt.Errorf("gluster volume start force: %v: %s", err, out)
	}
	return nil
}

// pendingHeal counts the entries the volume's self-heal has still to do
// (gluster volume heal info: "Number of entries: N" per brick).
func (g *gluster) pendingHeal(ctx context.Context, volume string) (uint64, error) {
	out, err := g.cli(ctx, "volume", "heal", volume, "info")
	if err != nil {
		return 0, fmt.Errorf("gluster volume heal info: %v: %s", err, out)
	}
	var n uint64
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Number of entries:"); ok {
			k, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("gluster heal info: %q", l)
			}
			n += k
		}
	}
	return n, nil
}

// mount mounts a volume on a client host; the mount point is under the
// bed's directory, so the bed's Down unmounts it if we do not.
func (g *gluster) mount(ctx context.Context, host, volume string) (string, error) {
	base, err := g.bed.MountDir("gluster")
	if err != nil {
		return "", err
	}
	mnt := filepath.Join(base, host+"-"+volume)
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return "", err
	}
	x, _ := g.bed.Host(g.servers[0])
	cmd, _ := g.bed.Command(ctx, host, "mount", "-t", "glusterfs", x.Addr.String()+":/"+volume, mnt)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("mount glusterfs on %s: %v: %s", host, err, out)
	}
	g.mounts = append(g.mounts, mnt)
	return mnt, nil
}

func (g *gluster) stop() {
	for _, m := range g.mounts {
		exec.Command("umount", "-l", m).Run()
	}
	for _, p := range g.procs {
		p.Kill()
	}
	// glusterfsd brick processes and client daemons live in the hosts'
	// namespaces; the bed's Down kills whatever is left there.
}

func glusterNote() string {
	return "GlusterFS 10 (Debian): one glusterd per I/O server host in a private mount namespace, bricks on the same disk, FUSE-mounted on each client host; 'distributed' keeps each file whole on one brick, 'dispersed' erasure-codes it over all bricks with one brick of redundancy"
}

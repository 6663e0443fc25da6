package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/safefile"
)

// StationConfig makes a cluster managed: a management station (`corral
// mgmt`) starts first, and every role joins it and takes its configuration
// from it instead of flags and DATA/director.conf. This package only runs
// the processes; talking to the station (waiting for it, the first
// configuration, join tokens) is Prepare's job, done by a caller that may
// import the station's API (internal/launch/managed).
type StationConfig struct {
	// Listen is the station's API address (HTTPS), e.g. 127.0.0.1:7600.
	Listen string
	// EtcdClient and EtcdPeer are the embedded etcd member's addresses.
	EtcdClient, EtcdPeer string
	// Prepare runs once the station serves and before any other role
	// starts: it must leave a join token for each role kind in
	// TokenFile(kind). It is not called on restarts.
	Prepare func(ctx context.Context, c *Cluster) error
	// Log, if set, receives what the start did by itself.
	Log func(format string, a ...any)
}

// StationDir is the station's data directory: DATA/mgmt.
func (c *Cluster) StationDir() string { return filepath.Join(c.Data, "mgmt") }

// StationURL is the station's API URL.
func (c *Cluster) StationURL() string { return "https://" + c.Cfg.Station.Listen }

// StationCA is the CA the station made on its first start.
func (c *Cluster) StationCA() string { return filepath.Join(c.StationDir(), "tls", "ca.pem") }

// AdminTokenFile is the station's bootstrap admin token.
func (c *Cluster) AdminTokenFile() string { return filepath.Join(c.StationDir(), "admin.token") }

// TokenFile is where the join token for a role kind (director, node, meta,
// iod) is kept for the roles' --token-file: DATA/state/tokens/KIND.token.
func (c *Cluster) TokenFile(kind string) string {
	return filepath.Join(c.Data, "state", "tokens", kind+".token")
}

// WriteToken saves a join token for a role kind (0600).
func (c *Cluster) WriteToken(kind, token string) error {
	if err := os.MkdirAll(filepath.Dir(c.TokenFile(kind)), 0o700); err != nil {
		return err
	}
	return writeFile(c.TokenFile(kind), []byte(token+"\n"))
}

// RoleKind is a role's kind: node1 -> node, meta2 -> meta, director.
func RoleKind(role string) string { return strings.TrimRight(role, "0123456789") }

// RoleBin is the binary a role of a managed cluster runs: its own copy,
// DATA/bin/ROLE/corral, so that a rolling upgrade that swaps one member's
// binary (renaming a new file over this path) touches only that member.
func (c *Cluster) RoleBin(role string) string {
	return filepath.Join(c.Data, "bin", role, "corral")
}

// installRoleBin (re)places role's binary by this cluster's Bin: a hard
// link when possible, a copy otherwise (another file system); made under a
// temporary name and renamed, so a running copy is never written to. A
// binary a rollout left there is replaced too: up runs what it was started
// with.
func (c *Cluster) installRoleBin(role string) error {
	dst := c.RoleBin(role)
	if err := safefile.MkdirAll(filepath.Dir(dst)); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	os.Remove(tmp)
	if err := os.Link(c.Bin, tmp); err != nil {
		if err := copyFile(c.Bin, dst, 0o755); err != nil {
			return fmt.Errorf("binary for %s: %w", role, err)
		}
		return nil
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return safefile.SyncDir(filepath.Dir(dst))
}

// copyFile copies src to dst whole through safefile (a temporary file,
// synced, renamed over dst, the directory synced).
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	_, err = safefile.Copy(dst, mode, in)
	return err
}

// joinArgs are the member flags that make role join the station, keep its
// credential in DATA/state/ROLE (so restarts reuse it, with no token
// needed) and trust the station's CA.
func (c *Cluster) joinArgs(role string) []string {
	kind := RoleKind(role)
	if role == "mgmt" {
		return nil
	}
	// The director's --token-file is its admin API token's.
	tokenFlag := "--token-file"
	if kind == "director" {
		tokenFlag = "--join-token-file"
	}
	// --join=URL: meta's bare --join means entering a Raft group.
	return []string{"--join=" + c.StationURL(), tokenFlag, c.TokenFile(kind), "--name", role,
		"--state", filepath.Join(c.Data, "state", role), "--station-ca", c.StationCA()}
}

// startStation (re)starts the station: `corral mgmt` on Station.Listen,
// with the cluster secret (for joins of meta and iods, the nodes' read-only
// credential and uploads) and the metadata members.
func (c *Cluster) startStation(ctx context.Context) (*Proc, error) {
	s := c.Cfg.Station
	args := []string{"mgmt", "--data", c.StationDir(), "--listen", s.Listen,
		"--secret-file", c.SecretFile, "--meta", c.MetaAddr()}
	if s.EtcdClient != "" {
		args = append(args, "--etcd-client", s.EtcdClient)
	}
	if s.EtcdPeer != "" {
		args = append(args, "--etcd-peer", s.EtcdPeer)
	}
	return c.start(ctx, "mgmt", args...)
}

// metaListAddrs is the metadata members' addresses before they start (a
// managed cluster's station needs them first): the configured list, which
// must name its ports.
func metaListAddrs(list string) ([]string, error) {
	addrs := splitList(list)
	for _, a := range addrs {
		if strings.HasSuffix(a, ":0") {
			return nil, errors.New("a managed cluster needs fixed metadata addresses (no port 0): the station hands them out")
		}
	}
	return addrs, nil
}

// stopLeftovers ends roles an earlier up of the same DATA left running:
// up killed with SIGKILL takes its children with it through the
// parent-death signal, but a member that re-executed itself for a rolling
// upgrade may have lost that signal, and would hold its addresses against
// the new start. A role is known by its program (under DATA: DATA/bin/ROLE
// or a rollout's DATA/state/ROLE/bin/SHA) or its --state DATA/state/ROLE
// (its argv[0] may name any binary after a rollout). It returns what it
// stopped ("node1 (pid 123)").
func (c *Cluster) stopLeftovers() []string {
	data := filepath.Clean(c.Data) + string(filepath.Separator)
	var stopped []string
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		exe, _ := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		ours := strings.HasPrefix(exe, data) || strings.HasPrefix(argv[0], data+"bin"+string(filepath.Separator))
		role := ""
		for i := 0; i+1 < len(argv); i++ {
			switch argv[i] {
			case "--state":
				ours = ours || strings.HasPrefix(argv[i+1], data+"state"+string(filepath.Separator))
			case "--name":
				role = argv[i+1]
			}
		}
		if !ours {
			continue
		}
		if bin := data + "bin" + string(filepath.Separator); role == "" && strings.HasPrefix(argv[0], bin) {
			role, _, _ = strings.Cut(strings.TrimPrefix(argv[0], bin), string(filepath.Separator))
		}
		if syscall.Kill(pid, syscall.SIGTERM) == nil {
			pids = append(pids, pid)
			stopped = append(stopped, fmt.Sprintf("%s (pid %d)", role, pid))
		}
	}
	// Bounded: 5 s to end cleanly, then SIGKILL.
	end := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(end) && syscall.Kill(pid, 0) == nil && !zombie(pid) {
			time.Sleep(50 * time.Millisecond)
		}
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return stopped
}

// zombie says whether pid has ended but not been reaped (by its parent,
// init for an orphan).
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// Package launch starts corral roles as child processes and waits until they
// serve: `corral up` and the integration tests and benchmarks share it.
package launch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/safefile"
)

// readyMarker is what a daemon prints on stdout once it accepts connections:
// "corral ROLE: listening on ADDR" (the station: "station listening on
// https://ADDR (...)").
const readyMarker = " listening on "

// readyAddr is the address a readiness line announces, or "" if line is not
// one: what follows the marker (of a URL, its host and port).
func readyAddr(line string) string {
	i := strings.Index(line, readyMarker)
	if i < 1 || line[i-1] != ':' && !strings.HasPrefix(line, "station ") {
		return ""
	}
	rest := strings.TrimSpace(line[i+len(readyMarker):])
	for _, scheme := range []string{"https://", "http://"} {
		if strings.HasPrefix(rest, scheme) {
			// A URL, perhaps followed by words: its host:port.
			a, _, _ := strings.Cut(strings.TrimPrefix(rest, scheme), " ")
			return strings.TrimRight(a, "/,")
		}
	}
	return rest // an address, or a mount's directory (spaces and all)
}

// PdeathsigEnv names the variable carrying the pid of the parent whose
// death must kill a role (see Start and cli's init).
const PdeathsigEnv = "CORRAL_PDEATHSIG"

// Proc is a running role.
type Proc struct {
	Name string
	Addr string // the address it announced
	Log  string // file collecting its output
	Args []string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
	// logStart is the log's size when the process started.
	logStart int64
}

// Start runs bin with args, sending its output to logPath, and waits (at most
// 20 s) for its readiness line.
func Start(ctx context.Context, name, bin, logPath string, args ...string) (*Proc, error) {
	// Logs name paths, addresses and clients: for the operator only.
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	// Where this process's output starts: the log holds the role's
	// earlier processes too, whose lines are not this one's last words.
	var logStart int64
	if fi, err := logf.Stat(); err == nil {
		logStart = fi.Size()
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logf
	// The child dies with us, so a crashed test or up leaves no daemons.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	// The kernel keeps Pdeathsig on the thread it was set for; a member
	// that replaces itself (a rolling upgrade's exec, from another Go
	// thread) loses it, so the corral binary sets it again from this.
	cmd.Env = append(os.Environ(), PdeathsigEnv+"="+strconv.Itoa(os.Getpid()))
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Log: logPath, Args: args, cmd: cmd, done: make(chan struct{}), logStart: logStart}
	addrc := make(chan string, 1)
	go func() {
		br := bufio.NewReader(out)
		announced := false
		for {
			line, err := br.ReadString('\n')
			if !announced {
				if a := readyAddr(line); a != "" {
					addrc <- a
					announced = true
				}
			}
			logf.WriteString(line)
			if err != nil {
				break
			}
		}
		io.Copy(logf, out)
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t := time.NewTimer(20 * time.Second)
	defer t.Stop()
	select {
	case p.Addr = <-addrc:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before serving (%v): %s", name, p.err, Tail(logPath, 5))
	case <-t.C:
		p.Kill()
		return nil, fmt.Errorf("%s did not announce readiness within 20s: %s", name, Tail(logPath, 5))
	case <-ctx.Done():
		p.Kill()
		return nil, ctx.Err()
	}
}

// Pid is the process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Stop asks the process to end (SIGTERM) and kills it after 10 s.
func (p *Proc) Stop() error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.Kill()
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) && ee.ExitCode() == -1 {
		return nil // ended by our signal
	}
	return p.err
}

// Kill ends the process at once (SIGKILL), as a crash would, and waits.
func (p *Proc) Kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Tail returns the last n lines of a log file, joined by " | ".
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// FS is a file system: its metadata members (one by default) and its I/O
// servers.
type FS struct {
	Bin, Data string
	// Meta is the first metadata member (the only one unless the metadata
	// listen address is a list); Metas is every member, Meta first.
	Meta  *Proc
	Metas []*Proc
	IODs  []*Proc
	// SecretFile is the cluster secret (meta's DATA/cluster.secret), given
	// to the iods; ReadOnlyFile the read-only credential derived from it,
	// given to the web nodes and the director.
	SecretFile, ReadOnlyFile string
	Cred                     *proto.Credential
	// Wrap, if set, gives the command prefix that runs a role on its host
	// (the test bed's nsenter); roles are named meta, iod1.., node1..,
	// director. Every metadata member runs on host meta.
	Wrap func(role string) []string

	// Args, if set, gives extra arguments for a role's command line (role
	// as in Wrap: meta, iod1, node2, director), appended to what launch
	// builds; restarts get them too. Every metadata member gets meta's.
	Args func(role string) []string

	// roleBin, if set, is the binary a role runs (managed clusters: each
	// its own copy, DATA/bin/ROLE/corral, for rolling upgrades); join, if
	// set, adds the arguments that make a role join the station.
	roleBin func(role string) string
	join    func(role string) []string

	// metaPeers is the --peers list of replicated members ("1=ADDR", ...).
	metaPeers []string
	// metaAddrs are the members' addresses as they first announced them:
	// restarts keep them, so the other roles read them without racing the
	// supervisor that replaces f.Metas.
	metaAddrs []string
}

// MetaAddr is the metadata members' addresses, comma-separated: what every
// --meta takes.
func (f *FS) MetaAddr() string {
	if len(f.metaAddrs) > 0 {
		return strings.Join(f.metaAddrs, ",")
	}
	return f.Meta.Addr
}

// start runs role with the corral binary, wrapped onto its host if need be.
func (f *FS) start(ctx context.Context, role string, args ...string) (*Proc, error) {
	bin, log := f.Bin, filepath.Join(f.Data, "logs", role+".log")
	if f.roleBin != nil {
		bin = f.roleBin(role)
	}
	host := role
	if strings.HasPrefix(role, "meta") {
		host = "meta" // members meta1.. share meta's host and extra arguments
	}
	if f.join != nil {
		args = append(append([]string{}, args...), f.join(role)...)
	}
	if f.Args != nil {
		args = append(append([]string{}, args...), f.Args(host)...)
	}
	if f.Wrap != nil {
		if w := f.Wrap(host); len(w) > 0 {
			args = append(append(append([]string{}, w[1:]...), bin), args...)
			bin = w[0]
		}
	}
	return Start(ctx, role, bin, log, args...)
}

// StartFS runs the metadata service on metaListen and one I/O server per
// entry of iodListens, with data and logs under data. Port 0 picks free
// ports. metaListen may list several members, comma-separated: they run
// replicated (corral meta --id N --peers ...).
func StartFS(ctx context.Context, bin, data, metaListen string, iodListens []string) (*FS, error) {
	return StartFSWrapped(ctx, bin, data, metaListen, iodListens, nil)
}

// StartFSWrapped is StartFS with each role run on its host by wrap.
func StartFSWrapped(ctx context.Context, bin, data, metaListen string, iodListens []string, wrap func(string) []string) (*FS, error) {
	return startFS(ctx, &FS{Bin: bin, Data: data, Wrap: wrap}, metaListen, iodListens)
}

// StartFSWith is StartFS with f's fields (Bin, Data, Wrap, Args) set by
// the caller.
func StartFSWith(ctx context.Context, f *FS, metaListen string, iodListens []string) (*FS, error) {
	return startFS(ctx, f, metaListen, iodListens)
}

// startFS starts f's metadata members and I/O servers.
func startFS(ctx context.Context, f *FS, metaListen string, iodListens []string) (*FS, error) {
	var err error
	if err = f.prepareSecret(); err != nil {
		return nil, err
	}
	members := splitList(metaListen)
	if err := f.checkMetaLayout(len(members)); err != nil {
		return nil, err
	}
	switch {
	case len(members) == 0:
		return nil, errors.New("no metadata listen address")
	case len(members) == 1:
		if f.Meta, err = f.StartMeta(ctx, members[0]); err != nil {
			return nil, err
		}
		f.Metas = []*Proc{f.Meta}
	default:
		if err := f.startMembers(ctx, members); err != nil {
			return nil, err
		}
	}
	if len(f.metaAddrs) == 0 { // a managed cluster named them before they started
		for _, p := range f.Metas {
			f.metaAddrs = append(f.metaAddrs, p.Addr)
		}
	}
	for i, l := range iodListens {
		p, err := f.StartIOD(ctx, i, l)
		if err != nil {
			f.Stop()
			return nil, err
		}
		f.IODs = append(f.IODs, p)
	}
	return f, nil
}

// checkMetaLayout refuses to start n members over the data of another
// layout: a lone server keeps its store in DATA/meta, replicated members in
// DATA/meta/1, 2, ...; starting the other kind would silently make a new,
// empty file system (whose cluster ID the iods then refuse).
func (f *FS) checkMetaLayout(n int) error {
	dir := filepath.Join(f.Data, "meta")
	single := fileExists(filepath.Join(dir, "meta.db"))
	replicated := fileExists(filepath.Join(dir, "1"))
	switch {
	case n > 1 && single:
		return fmt.Errorf("%s holds a single metadata server's store: start 1 member (corral up --meta-members 1), or move it to %d members with corral fs meta backup and restore", dir, n)
	case n == 1 && replicated:
		return fmt.Errorf("%s holds replicated metadata members' stores (%s/1, ...): start as many members as before (corral up --meta-members 3)", dir, dir)
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// StartMeta (re)starts the metadata server (a lone member).
func (f *FS) StartMeta(ctx context.Context, listen string) (*Proc, error) {
	return f.start(ctx, "meta", "meta", "--listen", listen, "--data", filepath.Join(f.Data, "meta"))
}

// startMembers starts replicated metadata members on addrs at once (each
// may wait for the others to elect a leader), free ports picked first:
// every member's --peers must name them all.
func (f *FS) startMembers(ctx context.Context, addrs []string) error {
	addrs, err := fixPorts(addrs)
	if err != nil {
		return err
	}
	f.metaPeers = nil
	for i, a := range addrs {
		f.metaPeers = append(f.metaPeers, fmt.Sprintf("%d=%s", i+1, a))
	}
	f.Metas = make([]*Proc, len(addrs))
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.Metas[i], errs[i] = f.StartMetaMember(ctx, i, a)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, p := range f.Metas {
			if p != nil {
				p.Stop()
			}
		}
		f.Metas = nil
		return err
	}
	f.Meta = f.Metas[0]
	return nil
}

// StartMetaMember (re)starts replicated metadata member i (ID i+1, data
// DATA/meta/ID) at listen. Every member uses the one cluster secret: it is
// copied into the member's directory, where meta reads it.
func (f *FS) StartMetaMember(ctx context.Context, i int, listen string) (*Proc, error) {
	id := fmt.Sprint(i + 1)
	dir := filepath.Join(f.Data, "meta", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, proto.SecretFileName), f.Cred.Marshal()); err != nil {
		return nil, err
	}
	return f.start(ctx, "meta"+id, "meta", "--id", id, "--peers", strings.Join(f.metaPeers, ","),
		"--listen", listen, "--data", dir)
}

// splitList splits a comma-separated list of addresses, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// fixPorts replaces port 0 in addrs by free ports of the same hosts.
func fixPorts(addrs []string) ([]string, error) {
	out := make([]string, len(addrs))
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("metadata member address %q: %v", a, err)
		}
		if port != "0" {
			out[i] = a
			continue
		}
		// Held open until all are picked, so no two members get one port.
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("free port for a metadata member on %s: %v", host, err)
		}
		held = append(held, l)
		out[i] = l.Addr().String()
	}
	return out, nil
}

// StartIOD (re)starts I/O server i.
func (f *FS) StartIOD(ctx context.Context, i int, listen string) (*Proc, error) {
	name := fmt.Sprintf("iod%d", i+1)
	return f.start(ctx, name, "iod", "--listen", listen, "--data", filepath.Join(f.Data, name), "--meta", f.MetaAddr(),
		"--secret-file", f.SecretFile)
}

// prepareSecret gives the cluster its secret before meta first starts (meta
// adopts an existing DATA/cluster.secret) and writes the read-only
// credential next to the logs. A new cluster takes this process's secret
// ($CORRAL_SECRET_FILE) when there is one; otherwise it gets a fresh secret
// and $CORRAL_SECRET_FILE is pointed at it, so that file-system clients made
// in this process without an explicit credential (client.New) and commands
// it runs (corral fs, corral mount) are members of the clusters it starts:
// tests and benchmarks keep working unchanged.
func (f *FS) prepareSecret() error {
	// Clusters started at once by parallel tests must agree on the one
	// secret $CORRAL_SECRET_FILE names.
	secretMu.Lock()
	defer secretMu.Unlock()
	dir := filepath.Join(f.Data, "meta")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f.SecretFile = filepath.Join(dir, proto.SecretFileName)
	if _, err := os.Stat(f.SecretFile); errors.Is(err, fs.ErrNotExist) {
		cred, _ := proto.DefaultCredential()
		adopt := cred != nil && cred.Kind() == proto.KindFull
		if !adopt {
			if cred, err = proto.NewSecret(); err != nil {
				return err
			}
		}
		if err := writeFile(f.SecretFile, cred.Marshal()); err != nil {
			return err
		}
		if !adopt {
			os.Setenv(proto.SecretEnv, f.SecretFile)
		}
	}
	cred, err := proto.EnsureSecretFile(f.SecretFile)
	if err != nil {
		return err
	}
	f.Cred = cred
	f.ReadOnlyFile = filepath.Join(f.Data, "read-only.secret")
	return writeFile(f.ReadOnlyFile, cred.ReadOnly().Marshal())
}

var secretMu sync.Mutex

// writeFile writes a credential file (mode 0600) through safefile: a
// crash or a power cut leaves the old file or the new one.
func writeFile(path string, b []byte) error {
	return safefile.WriteSecret(path, b)
}

// Stop ends the I/O servers, then the metadata members.
func (f *FS) Stop() {
	stopAll := func(ps []*Proc) {
		var wg sync.WaitGroup
		for _, p := range ps {
			if p != nil {
				wg.Add(1)
				go func() { defer wg.Done(); p.Stop() }()
			}
		}
		wg.Wait()
	}
	stopAll(f.IODs)
	// Meta too: a caller may have replaced it by a restarted process.
	metas := []*Proc{f.Meta}
	for _, p := range f.Metas {
		if p != f.Meta {
			metas = append(metas, p)
		}
	}
	stopAll(metas)
}

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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// readyMarker is what a daemon prints on stdout once it accepts connections:
// "corral ROLE: listening on ADDR".
const readyMarker = ": listening on "

// Proc is a running role.
type Proc struct {
	Name string
	Addr string // the address it announced
	Log  string // file collecting its output
	Args []string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs bin with args, sending its output to logPath, and waits (at most
// 20 s) for its readiness line.
func Start(ctx context.Context, name, bin, logPath string, args ...string) (*Proc, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logf
	// The child dies with us, so a crashed test or up leaves no daemons.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Log: logPath, Args: args, cmd: cmd, done: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		br := bufio.NewReader(out)
		announced := false
		for {
			line, err := br.ReadString('\n')
			if !announced {
				if i := strings.Index(line, readyMarker); i >= 0 {
					addrc <- strings.TrimSpace(line[i+len(readyMarker):])
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

// FS is a file system: one metadata server and its I/O servers.
type FS struct {
	Bin, Data string
	Meta      *Proc
	IODs      []*Proc
	// SecretFile is the cluster secret (meta's DATA/cluster.secret), given
	// to the iods; ReadOnlyFile the read-only credential derived from it,
	// given to the web nodes and the director.
	SecretFile, ReadOnlyFile string
	Cred                     *proto.Credential
	// Wrap, if set, gives the command prefix that runs a role on its host
	// (the test bed's nsenter); roles are named meta, iod1.., node1..,
	// director.
	Wrap func(role string) []string

	// Args, if set, gives extra arguments for a role's command line (role
	// as in Wrap: meta, iod1, node2, director), appended to what launch
	// builds; restarts get them too.
	Args func(role string) []string

	// metaAddr is the address meta first announced: restarts of meta keep
	// it, so the other roles read it without racing the supervisor that
	// replaces f.Meta.
	metaAddr string
}

// MetaAddr is the metadata server's address.
func (f *FS) MetaAddr() string {
	if f.metaAddr != "" {
		return f.metaAddr
	}
	return f.Meta.Addr
}

// start runs role with the corral binary, wrapped onto its host if need be.
func (f *FS) start(ctx context.Context, role string, args ...string) (*Proc, error) {
	bin, log := f.Bin, filepath.Join(f.Data, "logs", role+".log")
	if f.Args != nil {
		args = append(append([]string{}, args...), f.Args(role)...)
	}
	if f.Wrap != nil {
		if w := f.Wrap(role); len(w) > 0 {
			args = append(append(append([]string{}, w[1:]...), f.Bin), args...)
			bin = w[0]
		}
	}
	return Start(ctx, role, bin, log, args...)
}

// StartFS runs a metadata server on metaListen and one I/O server per entry
// of iodListens, with data and logs under data. Port 0 picks free ports.
func StartFS(ctx context.Context, bin, data, metaListen string, iodListens []string) (*FS, error) {
	return StartFSWrapped(ctx, bin, data, metaListen, iodListens, nil)
}

// StartFSWrapped is StartFS with each role run on its host by wrap.
func StartFSWrapped(ctx context.Context, bin, data, metaListen string, iodListens []string, wrap func(string) []string) (*FS, error) {
	return startFS(ctx, &FS{Bin: bin, Data: data, Wrap: wrap}, metaListen, iodListens)
}

// startFS starts f's metadata server and I/O servers.
func startFS(ctx context.Context, f *FS, metaListen string, iodListens []string) (*FS, error) {
	var err error
	if err = f.prepareSecret(); err != nil {
		return nil, err
	}
	if f.Meta, err = f.StartMeta(ctx, metaListen); err != nil {
		return nil, err
	}
	f.metaAddr = f.Meta.Addr
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

// StartMeta (re)starts the metadata server.
func (f *FS) StartMeta(ctx context.Context, listen string) (*Proc, error) {
	return f.start(ctx, "meta", "meta", "--listen", listen, "--data", filepath.Join(f.Data, "meta"))
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
	if err := os.MkdirAll(dir, 0o755); err != nil {
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

// writeFile writes a credential file (mode 0600) atomically.
func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	os.Remove(tmp) // a leftover keeps its mode: never write a secret into it
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Stop ends the I/O servers, then the metadata server.
func (f *FS) Stop() {
	var wg sync.WaitGroup
	for _, p := range f.IODs {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop() }()
	}
	wg.Wait()
	if f.Meta != nil {
		f.Meta.Stop()
	}
}

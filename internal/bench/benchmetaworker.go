package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
)

// The phases of `corral bench meta`, in the order they run: mdtest's file
// create (with a write of the file's bytes), stat, read and remove.
var metaPhases = []string{"create", "stat", "read", "delete"}

// MetaWorkerConfig is one worker process of `corral bench meta`.
type MetaWorkerConfig struct {
	Target  string // local, local+fsync, fuse (plain files under Dir), lib, lib-serial, etcd
	ID      int    // worker number: names its files and its private directory
	Files   int    // files per worker
	Size    int    // bytes written at create and read back
	Threads int    // goroutines per worker (1: mdtest's one process, one call at a time)
	Shared  bool   // all workers in Dir itself; else each in Dir/pID
	Dir     string // directory (a local path; a file-system path for lib; a key prefix for etcd)
	Meta    string // lib: metadata members, comma-separated
	Etcd    string // etcd: client endpoints, comma-separated
	// Profile, when set, is the path prefix of a CPU profile per phase
	// (PREFIX-PHASE.cpu.pprof).
	Profile string
}

// PhaseResult is what a worker reports for one phase: the operations it did
// and when it started and ended them (Unix ns, one clock for all workers on
// this machine, so the parent can take the span over all of them).
type PhaseResult struct {
	Phase string `json:"phase"`
	Ops   int    `json:"ops"`
	Start int64  `json:"start_ns"`
	End   int64  `json:"end_ns"`
	Err   string `json:"err,omitempty"`
}

// metaOps is one target's four operations on file i of a worker.
type metaOps interface {
	create(ctx context.Context, i int, data []byte) error
	stat(ctx context.Context, i int) error
	read(ctx context.Context, i int, buf []byte) error
	remove(ctx context.Context, i int) error
	close()
}

// fileName names a worker's file i: unique in a shared directory.
func (c MetaWorkerConfig) fileName(i int) string { return fmt.Sprintf("p%d.f%06d", c.ID, i) }

// subdir is the worker's own directory under Dir ("" when shared).
func (c MetaWorkerConfig) subdir() string {
	if c.Shared {
		return ""
	}
	return fmt.Sprintf("p%d", c.ID)
}

// newMetaOps prepares a worker's target: its directory exists afterwards.
func newMetaOps(ctx context.Context, c MetaWorkerConfig) (metaOps, error) {
	switch c.Target {
	case "local", "local+fsync", "fuse":
		dir := filepath.Join(c.Dir, c.subdir())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("worker %d: %w", c.ID, err)
		}
		return &fileOps{c: c, dir: dir, sync: c.Target == "local+fsync"}, nil
	case "lib", "lib-serial":
		cl := client.New(c.Meta)
		dir := strings.TrimSuffix(c.Dir, "/") + "/" + c.subdir()
		if err := cl.MkdirAll(ctx, dir, 0o755); err != nil {
			cl.Close()
			return nil, fmt.Errorf("worker %d: mkdir %s on %s: %w", c.ID, dir, c.Meta, err)
		}
		a, err := cl.Stat(ctx, dir)
		if err != nil {
			cl.Close()
			return nil, fmt.Errorf("worker %d: stat %s on %s: %w", c.ID, dir, c.Meta, err)
		}
		return &libOps{c: c, cl: cl, dir: a.Ino, serial: c.Target == "lib-serial"}, nil
	case "etcd":
		return newEtcdOps(c)
	}
	return nil, fmt.Errorf("worker %d: unknown target %q (want local, local+fsync, fuse, lib, lib-serial or etcd)", c.ID, c.Target)
}

// fileOps does the phases with plain system calls: the local baselines, and
// the FUSE mount.
type fileOps struct {
	c    MetaWorkerConfig
	dir  string
	sync bool
}

func (o *fileOps) path(i int) string { return filepath.Join(o.dir, o.c.fileName(i)) }

func (o *fileOps) create(_ context.Context, i int, data []byte) error {
	f, err := os.OpenFile(o.path(i), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if o.sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func (o *fileOps) stat(_ context.Context, i int) error {
	_, err := os.Stat(o.path(i))
	return err
}

func (o *fileOps) read(_ context.Context, i int, buf []byte) error {
	f, err := os.Open(o.path(i))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.ReadFull(f, buf)
	return err
}

func (o *fileOps) remove(_ context.Context, i int) error { return os.Remove(o.path(i)) }
func (o *fileOps) close()                                {}

// libOps does them through the client library, as a web node does: the
// directory is known, each file costs one name lookup or create. A create
// is CreateFile (a small file: one commit, its bytes written beside it);
// lib-serial does create, write and close in turn, as before CreateFile.
type libOps struct {
	c      MetaWorkerConfig
	cl     *client.Client
	dir    uint64
	serial bool
}

func (o *libOps) create(ctx context.Context, i int, data []byte) error {
	if !o.serial {
		_, err := o.cl.CreateFile(ctx, o.dir, o.c.fileName(i), 0o644, data, client.CreateOpts{})
		return err
	}
	a, _, err := o.cl.Create(ctx, o.dir, o.c.fileName(i), 0o644, client.CreateOpts{})
	if err != nil || len(data) == 0 {
		return err // an empty file is one metadata operation
	}
	f, err := o.cl.OpenAttr(ctx, a)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (o *libOps) stat(ctx context.Context, i int) error {
	_, err := o.cl.Lookup(ctx, o.dir, o.c.fileName(i))
	return err
}

func (o *libOps) read(ctx context.Context, i int, buf []byte) error {
	a, err := o.cl.Lookup(ctx, o.dir, o.c.fileName(i))
	if err != nil {
		return err
	}
	if a.Size != uint64(len(buf)) {
		return fmt.Errorf("%s: size %d, want %d", o.c.fileName(i), a.Size, len(buf))
	}
	if len(buf) == 0 {
		return nil
	}
	f, err := o.cl.OpenAttr(ctx, a)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := f.ReadAt(buf, 0)
	if err == io.EOF && n == len(buf) {
		err = nil
	}
	if err == nil && n != len(buf) {
		err = fmt.Errorf("read %s: %d of %d bytes", o.c.fileName(i), n, len(buf))
	}
	return err
}

func (o *libOps) remove(ctx context.Context, i int) error {
	return o.cl.Unlink(ctx, o.dir, o.c.fileName(i))
}
func (o *libOps) close() { o.cl.Close() }

// runPhase does one phase over all of a worker's files.
func runPhase(ctx context.Context, c MetaWorkerConfig, ops metaOps, phase string) PhaseResult {
	data := pattern(c.Size)
	res := PhaseResult{Phase: phase, Start: time.Now().UnixNano()}
	err := parallel(c.Files, max(1, c.Threads), func(i int) error {
		var err error
		switch phase {
		case "create":
			err = ops.create(ctx, i, data)
		case "stat":
			err = ops.stat(ctx, i)
		case "read":
			buf := make([]byte, c.Size)
			if err = ops.read(ctx, i, buf); err == nil && !bytes.Equal(buf, data) {
				err = errors.New("content differs from what was written")
			}
		case "delete":
			err = ops.remove(ctx, i)
		default:
			return fmt.Errorf("unknown phase %q", phase)
		}
		if err != nil {
			return fmt.Errorf("worker %d %s %s file %d: %w", c.ID, c.Target, phase, i, err)
		}
		return nil
	})
	res.End = time.Now().UnixNano()
	res.Ops = c.Files
	if err != nil {
		res.Err = err.Error()
	}
	return res
}

// MetaWorker serves the parent of `corral bench meta`: it prepares its
// target, says "ready", then for each phase name read from in runs that
// phase and answers with a PhaseResult as one JSON line. It ends at EOF.
// The parent sends each phase to all workers at once, so phases do not
// overlap across workers (mdtest's barriers).
func MetaWorker(ctx context.Context, c MetaWorkerConfig, in io.Reader, out io.Writer) error {
	if c.Files <= 0 || c.Size < 0 {
		return fmt.Errorf("worker %d: want --files > 0 and --size >= 0", c.ID)
	}
	ops, err := newMetaOps(ctx, c)
	if err != nil {
		return err
	}
	defer ops.close()
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		phase := strings.TrimSpace(sc.Text())
		if phase == "" {
			continue
		}
		var stop func()
		if c.Profile != "" {
			stop = startCPUProfile(c.Profile + "-" + phase + ".cpu.pprof")
		}
		r := runPhase(ctx, c, ops, phase)
		if stop != nil {
			stop()
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return sc.Err()
}

// startCPUProfile profiles this process's CPU into path until the returned
// function is called; a profile that cannot start costs only itself.
func startCPUProfile(path string) func() {
	f, err := os.Create(path)
	if err != nil {
		return nil
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

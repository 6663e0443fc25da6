package fusefs

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/obs"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// Metrics counts and times the FUSE operations of a mount:
// corral_mount_operations_total{op,result} and
// corral_mount_operation_duration_seconds{op}; and, with Client, the file-
// system requests they make: corral_mount_fs_requests_total{op,result} and
// corral_mount_fs_request_duration_seconds{op}.
type Metrics struct{ ops, fs *obs.OpMetrics }

// mountOps are the operations the metrics name; others (forget, init,
// locks, ioctl) pass through uncounted.
var mountOps = []string{"lookup", "getattr", "setattr", "mknod", "mkdir", "unlink", "rmdir", "rename", "link", "symlink",
	"readlink", "access", "getxattr", "listxattr", "setxattr", "removexattr", "create", "open", "read", "write",
	"flush", "fsync", "release", "fallocate", "lseek", "copy_file_range", "opendir", "readdir", "readdirplus",
	"releasedir", "fsyncdir", "statfs"}

// NewMetrics registers a mount's metrics with r.
func NewMetrics(r prometheus.Registerer) *Metrics {
	m := &Metrics{ops: obs.NewOpMetrics(r, "corral_mount_operations", "FUSE operations answered by the mount, by operation and result (ok or the errno's name)",
		"corral_mount_operation_duration_seconds", "time to answer a FUSE operation, by operation")}
	m.ops.Init(mountOps...)
	m.fs = obs.NewOpMetrics(r, "corral_mount_fs_requests", "file-system requests the mount made, by operation (lookup, read, write, ...) and result",
		"corral_mount_fs_request_duration_seconds", "time the mount waited for a file-system request (metadata, stripe I/O), by operation")
	m.fs.Init(proto.OpName(proto.OpLookup), proto.OpName(proto.OpRead), proto.OpName(proto.OpWrite))
	return m
}

// Client makes m observe c's requests; call it while c has no call in
// progress.
func (m *Metrics) Client(c *client.Client) {
	c.Pool().Observe = obs.Observer(m.fs, proto.OpName, proto.ResultLabel)
}

// done records an operation that started at start and ended with *st
// (deferred, so *st is read as the operation returns).
func (m *Metrics) done(op string, start time.Time, st *fuse.Status) {
	result := "ok"
	if *st != fuse.OK {
		result = strings.ToLower(unix.ErrnoName(syscall.Errno(*st)))
		if result == "" {
			result = "error"
		}
	}
	m.ops.Observe(op, time.Since(start), result)
}

// mount is fs.Mount with the raw file system wrapped by m (nil: as is).
func mount(dir string, root fs.InodeEmbedder, o *fs.Options, m *Metrics) (*fuse.Server, error) {
	var raw fuse.RawFileSystem = fs.NewNodeFS(root, o)
	if m != nil {
		raw = &observedFS{RawFileSystem: raw, m: m}
	}
	srv, err := fuse.NewServer(raw, dir, &o.MountOptions)
	if err != nil {
		return nil, err
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		return nil, err
	}
	return srv, nil
}

// statfsInFlight counts Healthy's statfs(2) calls still in the kernel,
// also those whose caller gave up waiting.
var statfsInFlight sync.WaitGroup

// HealthChecksDone waits (at most bound) until no statfs(2) of Healthy is
// in flight. A mount process serves its own health check: one still in the
// kernel when the process stops serving is never answered, and its thread
// keeps the process from exiting. So a mount stops its health checks, waits
// here, and only then unmounts.
func HealthChecksDone(bound time.Duration) bool {
	done := make(chan struct{})
	go func() { statfsInFlight.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(bound):
		return false
	}
}

// Healthy reports whether the mount at dir answers: statfs(2) through the
// kernel, FUSE and this process to the metadata server.
func Healthy(ctx context.Context, dir string) error {
	done := make(chan error, 1)
	statfsInFlight.Add(1)
	go func() {
		defer statfsInFlight.Done()
		var st unix.Statfs_t
		done <- unix.Statfs(dir, &st)
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("statfs %s: %w", dir, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("statfs %s: no answer", dir)
	}
}

// observedFS times every operation the kernel sends.
type observedFS struct {
	fuse.RawFileSystem
	m *Metrics
}

func (f *observedFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer f.m.done("lookup", time.Now(), &st)
	return f.RawFileSystem.Lookup(c, h, name, out)
}

func (f *observedFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) (st fuse.Status) {
	defer f.m.done("getattr", time.Now(), &st)
	return f.RawFileSystem.GetAttr(c, in, out)
}

func (f *observedFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) (st fuse.Status) {
	defer f.m.done("setattr", time.Now(), &st)
	return f.RawFileSystem.SetAttr(c, in, out)
}

func (f *observedFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer f.m.done("mknod", time.Now(), &st)
	return f.RawFileSystem.Mknod(c, in, name, out)
}

func (f *observedFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer f.m.done("mkdir", time.Now(), &st)
	return f.RawFileSystem.Mkdir(c, in, name, out)
}

func (f *observedFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) (st fuse.Status) {
	defer f.m.done("unlink", time.Now(), &st)
	return f.RawFileSystem.Unlink(c, h, name)
}

func (f *observedFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) (st fuse.Status) {
	defer f.m.done("rmdir", time.Now(), &st)
	return f.RawFileSystem.Rmdir(c, h, name)
}

func (f *observedFS) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) (st fuse.Status) {
	defer f.m.done("rename", time.Now(), &st)
	return f.RawFileSystem.Rename(c, in, oldName, newName)
}

func (f *observedFS) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer f.m.done("link", time.Now(), &st)
	return f.RawFileSystem.Link(c, in, name, out)
}

func (f *observedFS) Symlink(c <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer f.m.done("symlink", time.Now(), &st)
	return f.RawFileSystem.Symlink(c, h, target, name, out)
}

func (f *observedFS) Readlink(c <-chan struct{}, h *fuse.InHeader) (b []byte, st fuse.Status) {
	defer f.m.done("readlink", time.Now(), &st)
	return f.RawFileSystem.Readlink(c, h)
}

func (f *observedFS) Access(c <-chan struct{}, in *fuse.AccessIn) (st fuse.Status) {
	defer f.m.done("access", time.Now(), &st)
	return f.RawFileSystem.Access(c, in)
}

func (f *observedFS) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (n uint32, st fuse.Status) {
	defer f.m.done("getxattr", time.Now(), &st)
	return f.RawFileSystem.GetXAttr(c, h, attr, dest)
}

func (f *observedFS) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (n uint32, st fuse.Status) {
	defer f.m.done("listxattr", time.Now(), &st)
	return f.RawFileSystem.ListXAttr(c, h, dest)
}

func (f *observedFS) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) (st fuse.Status) {
	defer f.m.done("setxattr", time.Now(), &st)
	return f.RawFileSystem.SetXAttr(c, in, attr, data)
}

func (f *observedFS) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) (st fuse.Status) {
	defer f.m.done("removexattr", time.Now(), &st)
	return f.RawFileSystem.RemoveXAttr(c, h, attr)
}

func (f *observedFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) (st fuse.Status) {
	defer f.m.done("create", time.Now(), &st)
	return f.RawFileSystem.Create(c, in, name, out)
}

func (f *observedFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) (st fuse.Status) {
	defer f.m.done("open", time.Now(), &st)
	return f.RawFileSystem.Open(c, in, out)
}

func (f *observedFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (r fuse.ReadResult, st fuse.Status) {
	defer f.m.done("read", time.Now(), &st)
	return f.RawFileSystem.Read(c, in, buf)
}

func (f *observedFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (n uint32, st fuse.Status) {
	defer f.m.done("write", time.Now(), &st)
	return f.RawFileSystem.Write(c, in, data)
}

func (f *observedFS) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (n uint32, st fuse.Status) {
	defer f.m.done("write", time.Now(), &st)
	return f.RawFileSystem.Writev(c, in, data)
}

func (f *observedFS) Flush(c <-chan struct{}, in *fuse.FlushIn) (st fuse.Status) {
	defer f.m.done("flush", time.Now(), &st)
	return f.RawFileSystem.Flush(c, in)
}

func (f *observedFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) (st fuse.Status) {
	defer f.m.done("fsync", time.Now(), &st)
	return f.RawFileSystem.Fsync(c, in)
}

func (f *observedFS) Release(c <-chan struct{}, in *fuse.ReleaseIn) {
	st := fuse.OK // nothing to report: the kernel does not wait
	defer f.m.done("release", time.Now(), &st)
	f.RawFileSystem.Release(c, in)
}

func (f *observedFS) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) (st fuse.Status) {
	defer f.m.done("fallocate", time.Now(), &st)
	return f.RawFileSystem.Fallocate(c, in)
}

func (f *observedFS) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) (st fuse.Status) {
	defer f.m.done("lseek", time.Now(), &st)
	return f.RawFileSystem.Lseek(c, in, out)
}

func (f *observedFS) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (n uint32, st fuse.Status) {
	defer f.m.done("copy_file_range", time.Now(), &st)
	return f.RawFileSystem.CopyFileRange(c, in)
}

func (f *observedFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) (st fuse.Status) {
	defer f.m.done("opendir", time.Now(), &st)
	return f.RawFileSystem.OpenDir(c, in, out)
}

func (f *observedFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) (st fuse.Status) {
	defer f.m.done("readdir", time.Now(), &st)
	return f.RawFileSystem.ReadDir(c, in, out)
}

func (f *observedFS) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) (st fuse.Status) {
	defer f.m.done("readdirplus", time.Now(), &st)
	return f.RawFileSystem.ReadDirPlus(c, in, out)
}

func (f *observedFS) ReleaseDir(in *fuse.ReleaseIn) {
	st := fuse.OK // nothing to report: the kernel does not wait
	defer f.m.done("releasedir", time.Now(), &st)
	f.RawFileSystem.ReleaseDir(in)
}

func (f *observedFS) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) (st fuse.Status) {
	defer f.m.done("fsyncdir", time.Now(), &st)
	return f.RawFileSystem.FsyncDir(c, in)
}

func (f *observedFS) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) (st fuse.Status) {
	defer f.m.done("statfs", time.Now(), &st)
	return f.RawFileSystem.StatFs(c, h, out)
}

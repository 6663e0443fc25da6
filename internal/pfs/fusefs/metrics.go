package fusefs

import (
	"context"
	"fmt"
	"strings"
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

func (m *Metrics) done(op string, start time.Time, st fuse.Status) {
	result := "ok"
	if st != fuse.OK {
		result = strings.ToLower(unix.ErrnoName(syscall.Errno(st)))
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

// Healthy reports whether the mount at dir answers: statfs(2) through the
// kernel, FUSE and this process to the metadata server.
func Healthy(ctx context.Context, dir string) error {
	done := make(chan error, 1)
	go func() {
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

func (f *observedFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Lookup(c, h, name, out)
	f.m.done("lookup", t, st)
	return st
}

func (f *observedFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.GetAttr(c, in, out)
	f.m.done("getattr", t, st)
	return st
}

func (f *observedFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.SetAttr(c, in, out)
	f.m.done("setattr", t, st)
	return st
}

func (f *observedFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Mknod(c, in, name, out)
	f.m.done("mknod", t, st)
	return st
}

func (f *observedFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Mkdir(c, in, name, out)
	f.m.done("mkdir", t, st)
	return st
}

func (f *observedFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Unlink(c, h, name)
	f.m.done("unlink", t, st)
	return st
}

func (f *observedFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Rmdir(c, h, name)
	f.m.done("rmdir", t, st)
	return st
}

func (f *observedFS) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Rename(c, in, oldName, newName)
	f.m.done("rename", t, st)
	return st
}

func (f *observedFS) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Link(c, in, name, out)
	f.m.done("link", t, st)
	return st
}

func (f *observedFS) Symlink(c <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Symlink(c, h, target, name, out)
	f.m.done("symlink", t, st)
	return st
}

func (f *observedFS) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	t := time.Now()
	b, st := f.RawFileSystem.Readlink(c, h)
	f.m.done("readlink", t, st)
	return b, st
}

func (f *observedFS) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Access(c, in)
	f.m.done("access", t, st)
	return st
}

func (f *observedFS) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	t := time.Now()
	n, st := f.RawFileSystem.GetXAttr(c, h, attr, dest)
	f.m.done("getxattr", t, st)
	return n, st
}

func (f *observedFS) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	t := time.Now()
	n, st := f.RawFileSystem.ListXAttr(c, h, dest)
	f.m.done("listxattr", t, st)
	return n, st
}

func (f *observedFS) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.SetXAttr(c, in, attr, data)
	f.m.done("setxattr", t, st)
	return st
}

func (f *observedFS) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.RemoveXAttr(c, h, attr)
	f.m.done("removexattr", t, st)
	return st
}

func (f *observedFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Create(c, in, name, out)
	f.m.done("create", t, st)
	return st
}

func (f *observedFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Open(c, in, out)
	f.m.done("open", t, st)
	return st
}

func (f *observedFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	t := time.Now()
	r, st := f.RawFileSystem.Read(c, in, buf)
	f.m.done("read", t, st)
	return r, st
}

func (f *observedFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	t := time.Now()
	n, st := f.RawFileSystem.Write(c, in, data)
	f.m.done("write", t, st)
	return n, st
}

func (f *observedFS) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	t := time.Now()
	n, st := f.RawFileSystem.Writev(c, in, data)
	f.m.done("write", t, st)
	return n, st
}

func (f *observedFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Flush(c, in)
	f.m.done("flush", t, st)
	return st
}

func (f *observedFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Fsync(c, in)
	f.m.done("fsync", t, st)
	return st
}

func (f *observedFS) Release(c <-chan struct{}, in *fuse.ReleaseIn) {
	t := time.Now()
	f.RawFileSystem.Release(c, in)
	f.m.done("release", t, fuse.OK)
}

func (f *observedFS) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Fallocate(c, in)
	f.m.done("fallocate", t, st)
	return st
}

func (f *observedFS) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Lseek(c, in, out)
	f.m.done("lseek", t, st)
	return st
}

func (f *observedFS) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	t := time.Now()
	n, st := f.RawFileSystem.CopyFileRange(c, in)
	f.m.done("copy_file_range", t, st)
	return n, st
}

func (f *observedFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.OpenDir(c, in, out)
	f.m.done("opendir", t, st)
	return st
}

func (f *observedFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.ReadDir(c, in, out)
	f.m.done("readdir", t, st)
	return st
}

func (f *observedFS) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.ReadDirPlus(c, in, out)
	f.m.done("readdirplus", t, st)
	return st
}

func (f *observedFS) ReleaseDir(in *fuse.ReleaseIn) {
	t := time.Now()
	f.RawFileSystem.ReleaseDir(in)
	f.m.done("releasedir", t, fuse.OK)
}

func (f *observedFS) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.FsyncDir(c, in)
	f.m.done("fsyncdir", t, st)
	return st
}

func (f *observedFS) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.StatFs(c, h, out)
	f.m.done("statfs", t, st)
	return st
}

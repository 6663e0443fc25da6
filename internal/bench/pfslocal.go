// Package bench holds Corral's repeatable benchmark scenarios. Each measures
// its baseline in the same run and reports ratios against it.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/client"
)

// PFSLocalConfig sizes the pfs-local scenario.
type PFSLocalConfig struct {
	Bin         string   // corral binary to run meta and iods with
	Dir         string   // scratch directory (same disk for baseline and iods)
	Out         string   // results directory
	FileSize    int64    // bytes per large-file run
	IODs        []int    // stripe counts to try
	StripeSizes []uint32 // stripe sizes to try
	SmallFiles  int      // number of small files
	SmallSize   int      // bytes per small file
	Workers     int      // concurrent small-file workers
	FUSE        bool     // also measure through a FUSE mount
	Log         io.Writer
}

// Row is one measured line.
type Row struct {
	Path        string  `json:"path"` // local, lib, fuse
	IODs        int     `json:"iods,omitempty"`
	StripeSize  uint32  `json:"stripe_size,omitempty"`
	WriteMBs    float64 `json:"write_mb_s"`
	ReadMBs     float64 `json:"read_mb_s"`
	WriteRatio  float64 `json:"write_ratio"` // lib: to local; fuse: to lib
	ReadRatio   float64 `json:"read_ratio"`
	RatioOf     string  `json:"ratio_of"`
	FilesPerSec float64 `json:"files_per_s,omitempty"`
}

// PFSLocalResult is the scenario's output.
type PFSLocalResult struct {
	Scenario   string    `json:"scenario"`
	When       time.Time `json:"when"`
	FileSize   int64     `json:"file_size"`
	SmallFiles int       `json:"small_files"`
	SmallSize  int       `json:"small_size"`
	Workers    int       `json:"workers"`
	Large      []Row     `json:"large"`
	Small      []Row     `json:"small"`
	// TLS are the library's rows against this file system (TLS 1.3, the
	// default) and against a second one run with --insecure: what
	// encryption in transit costs, measured in the same run.
	TLS   []Row    `json:"tls"`
	Notes []string `json:"notes"`
}

const ioBuf = 8 << 20

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>13)
	}
	return b
}

// localLarge writes size bytes to a local file (fsync at the end), then
// reads them back.
func localLarge(dir string, size int64) (w, r float64, err error) {
	p := filepath.Join(dir, "local.bin")
	defer os.Remove(p)
	return writeRead(p, size, ioBuf)
}

// writeRead writes size bytes to path in records, with an fsync at the end,
// drops the page cache and reads them back: MB/s each way.
func writeRead(path string, size, record int64) (w, r float64, err error) {
	wr, err := fileIO(path, size, record, true)
	if err != nil {
		return 0, 0, err
	}
	dropCaches()
	rd, err := fileIO(path, size, record, false)
	return wr.MBps, rd.MBps, err
}

func libLarge(ctx context.Context, cl *client.Client, name string, size int64, stripe uint32, count int) (w, r float64, err error) {
	o := client.CreateOpts{StripeSize: stripe, StripeCount: uint32(count)}
	wr, err := PFSIO(ctx, cl, name, size, ioBuf, true, o)
	if err != nil {
		return 0, 0, err
	}
	dropCaches()
	rd, err := PFSIO(ctx, cl, name, size, ioBuf, false, o)
	if err != nil {
		return 0, 0, err
	}
	return wr.MBps, rd.MBps, cl.Remove(ctx, name)
}

// fuseLarge does the same through the mount with plain file I/O of 1 MiB
// (the largest FUSE request).
func fuseLarge(ctx context.Context, cl *client.Client, mnt, name string, size int64, stripe uint32, count int) (w, r float64, err error) {
	dir := filepath.Join(mnt, strings.TrimPrefix(name, "/")+".d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return 0, 0, err
	}
	a, err := cl.Stat(ctx, strings.TrimPrefix(dir, mnt))
	if err != nil {
		return 0, 0, err
	}
	if _, err := cl.SetLayout(ctx, a.Ino, stripe, uint32(count)); err != nil {
		return 0, 0, err
	}
	w, r, err = writeRead(filepath.Join(dir, "f"), size, 1<<20)
	if err != nil {
		return 0, 0, err
	}
	return w, r, os.RemoveAll(dir)
}

// fileIO writes (with fsync) or reads one file in records.
func fileIO(path string, size, record int64, write bool) (IOResult, error) {
	buf := pattern(int(record))
	start := time.Now()
	if write {
		f, err := os.Create(path)
		if err != nil {
			return IOResult{}, err
		}
		for off := int64(0); off < size; off += record {
			if _, err := f.Write(buf[:min(record, size-off)]); err != nil {
				f.Close()
				return IOResult{}, err
			}
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return IOResult{}, err
		}
		if err := f.Close(); err != nil {
			return IOResult{}, err
		}
	} else {
		f, err := os.Open(path)
		if err != nil {
			return IOResult{}, err
		}
		n, err := readAll(f, buf)
		f.Close()
		if err != nil || n != size {
			return IOResult{}, fmt.Errorf("read %s: %d of %d bytes: %v", path, n, size, err)
		}
	}
	d := time.Since(start).Seconds()
	return IOResult{Bytes: size, Seconds: d, MBps: float64(size) / 1e6 / d}, nil
}

// dropCaches empties the page cache (as root) so that reads come from the
// disk on both sides of a comparison.
func dropCaches() {
	if os.Geteuid() != 0 {
		return
	}
	syscall.Sync()
	os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200)
}

// readAll reads r to its end in len(buf) pieces (io.Copy to io.Discard
// would read 8 KiB at a time).
func readAll(r io.Reader, buf []byte) (int64, error) {
	var n int64
	for {
		k, err := r.Read(buf)
		n += int64(k)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// parallel runs fn(i) for i in [0,n) on workers goroutines.
func parallel(n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// smallFiles creates, writes and closes n files, then opens and reads each;
// files/s counts both phases (2n operations per file... reported per file).
func smallFiles(n, workers, size int, write func(i int, data []byte) error, read func(i int, buf []byte) error) (float64, error) {
	data := pattern(size)
	start := time.Now()
	if err := parallel(n, workers, func(i int) error { return write(i, data) }); err != nil {
		return 0, err
	}
	if err := parallel(n, workers, func(i int) error { return read(i, make([]byte, size)) }); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func localFile(dir string, sync bool) (func(int, []byte) error, func(int, []byte) error) {
	name := func(i int) string { return filepath.Join(dir, fmt.Sprintf("f%05d", i)) }
	return func(i int, data []byte) error {
			f, err := os.Create(name(i))
			if err != nil {
				return err
			}
			if _, err := f.Write(data); err != nil {
				return err
			}
			if sync {
				if err := f.Sync(); err != nil {
					return err
				}
			}
			return f.Close()
		}, func(i int, buf []byte) error {
			f, err := os.Open(name(i))
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.ReadFull(f, buf)
			return err
		}
}

// RunPFSLocal runs the scenario and writes results.json and results.md under
// cfg.Out.
func RunPFSLocal(ctx context.Context, cfg PFSLocalConfig) (*PFSLocalResult, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format, a...) }
	res := &PFSLocalResult{Scenario: "pfs-local", When: time.Now().UTC(), FileSize: cfg.FileSize,
		SmallFiles: cfg.SmallFiles, SmallSize: cfg.SmallSize, Workers: cfg.Workers}
	scratch, cleanup, err := scratchDir(cfg.Out, cfg.Dir, "pfs-local")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	maxIODs := 0
	for _, n := range cfg.IODs {
		maxIODs = max(maxIODs, n)
	}
	listens := make([]string, maxIODs)
	for i := range listens {
		listens[i] = "127.0.0.1:0"
	}
	fsys, err := launch.StartFS(ctx, cfg.Bin, filepath.Join(scratch, "fs"), "127.0.0.1:0", listens)
	if err != nil {
		return nil, err
	}
	defer fsys.Stop()
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()

	var mnt string
	if cfg.FUSE {
		if os.Geteuid() != 0 {
			res.Notes = append(res.Notes, "FUSE rows skipped: mounting needs root")
			cfg.FUSE = false
		} else {
			// The mount runs as its own process, as users run it; serving
			// FUSE from the process that also reads it would measure Go's
			// scheduler instead.
			mnt = filepath.Join(scratch, "mnt")
			os.Mkdir(mnt, 0o755)
			m, err := launch.Start(ctx, "mount", cfg.Bin, filepath.Join(cfg.Out, "mount.log"), "mount", "--meta", fsys.Meta.Addr, mnt)
			if err != nil {
				return nil, fmt.Errorf("FUSE mount: %w", err)
			}
			defer func() {
				if m.Stop() != nil {
					syscall.Unmount(mnt, syscall.MNT_DETACH)
				}
			}()
		}
	}

	logf("local file, %s: ", humanBytes(cfg.FileSize))
	lw, lr, err := localLarge(scratch, cfg.FileSize)
	if err != nil {
		return nil, err
	}
	logf("write %.0f MB/s, read %.0f MB/s\n", lw, lr)
	res.Large = append(res.Large, Row{Path: "local", WriteMBs: lw, ReadMBs: lr, WriteRatio: 1, ReadRatio: 1})
	for _, n := range cfg.IODs {
		for _, s := range cfg.StripeSizes {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			name := fmt.Sprintf("/bench-%d-%d", n, s)
			logf("lib  %d iods, stripe %-6s: ", n, humanBytes(int64(s)))
			w, r, err := libLarge(ctx, cl, name, cfg.FileSize, s, n)
			if err != nil {
				return nil, err
			}
			lib := Row{Path: "lib", IODs: n, StripeSize: s, WriteMBs: w, ReadMBs: r, WriteRatio: w / lw, ReadRatio: r / lr, RatioOf: "local"}
			res.Large = append(res.Large, lib)
			logf("write %.0f MB/s (%.2f of local), read %.0f MB/s (%.2f)\n", w, lib.WriteRatio, r, lib.ReadRatio)
			if cfg.FUSE {
				logf("fuse %d iods, stripe %-6s: ", n, humanBytes(int64(s)))
				w, r, err := fuseLarge(ctx, cl, mnt, name, cfg.FileSize, s, n)
				if err != nil {
					return nil, err
				}
				fr := Row{Path: "fuse", IODs: n, StripeSize: s, WriteMBs: w, ReadMBs: r, WriteRatio: w / lib.WriteMBs, ReadRatio: r / lib.ReadMBs, RatioOf: "lib"}
				res.Large = append(res.Large, fr)
				logf("write %.0f MB/s (%.2f of lib), read %.0f MB/s (%.2f)\n", w, fr.WriteRatio, r, fr.ReadRatio)
			}
		}
	}

	// Small files.
	for _, sync := range []bool{true, false} {
		dir := filepath.Join(scratch, fmt.Sprintf("small-%v", sync))
		os.Mkdir(dir, 0o755)
		wr, rd := localFile(dir, sync)
		fps, err := smallFiles(cfg.SmallFiles, cfg.Workers, cfg.SmallSize, wr, rd)
		if err != nil {
			return nil, err
		}
		label := "local+fsync"
		if !sync {
			label = "local-nosync"
		}
		res.Small = append(res.Small, Row{Path: label, FilesPerSec: fps})
		logf("small files %-12s: %.0f files/s\n", label, fps)
	}
	fps, err := smallLib(ctx, cl, "/small", cfg)
	if err != nil {
		return nil, err
	}
	base := res.Small[0].FilesPerSec
	res.Small = append(res.Small, Row{Path: "lib", FilesPerSec: fps, WriteRatio: fps / base, RatioOf: "local+fsync"})
	logf("small files %-12s: %.0f files/s (%.2f of local+fsync)\n", "lib", fps, fps/base)
	if cfg.FUSE {
		dir := filepath.Join(mnt, "small-fuse")
		os.Mkdir(dir, 0o755)
		wr, rd := localFile(dir, false) // close(2) syncs on this file system
		fps, err := smallFiles(cfg.SmallFiles, cfg.Workers, cfg.SmallSize, wr, rd)
		if err != nil {
			return nil, err
		}
		res.Small = append(res.Small, Row{Path: "fuse", FilesPerSec: fps, WriteRatio: fps / base, RatioOf: "local+fsync"})
		logf("small files %-12s: %.0f files/s (%.2f of local+fsync)\n", "fuse", fps, fps/base)
	}
	if res.TLS, err = tlsCost(ctx, cfg, scratch, cl, maxIODs, logf); err != nil {
		return nil, err
	}
	res.Notes = append(res.Notes,
		"TLS: the library's rows against this file system (TLS 1.3, the default) and against a second one whose roles and client run --insecure (plain text), in this run",
		"large files: sequential writes of 8 MiB (lib) or 1 MiB (FUSE, plain write(2)), fsync/close at the end; then reads of the same sizes, the page cache dropped before each read (as root) so both sides read the disk",
		fmt.Sprintf("small files: create+write+close of every file, then open+read of every file, %d workers; files/s over both phases", cfg.Workers),
		"lib and FUSE close = data synced on the I/O servers and size committed on the metadata server",
		"everything on one machine: clients, meta and I/O servers share its CPUs and one disk")
	return res, writeJSONMD(cfg.Out, res, res.Markdown())
}

// smallLib creates, writes and closes cfg.SmallFiles files in dir through
// the library, then reads them back; files/s over both phases.
func smallLib(ctx context.Context, cl *client.Client, dir string, cfg PFSLocalConfig) (float64, error) {
	if err := cl.MkdirAll(ctx, dir, 0o755); err != nil {
		return 0, err
	}
	dirAttr, err := cl.Stat(ctx, dir)
	if err != nil {
		return 0, err
	}
	// The library path as a web node uses it: the directory is known, each
	// file costs one name lookup or create.
	return smallFiles(cfg.SmallFiles, cfg.Workers, cfg.SmallSize, func(i int, data []byte) error {
		a, _, err := cl.Create(ctx, dirAttr.Ino, fmt.Sprintf("f%05d", i), 0o644, client.CreateOpts{})
		if err != nil {
			return err
		}
		f, err := cl.OpenAttr(ctx, a)
		if err != nil {
			return err
		}
		f.WriteAt(data, 0)
		return f.Close()
	}, func(i int, buf []byte) error {
		a, err := cl.Lookup(ctx, dirAttr.Ino, fmt.Sprintf("f%05d", i))
		if err != nil {
			return err
		}
		f, err := cl.OpenAttr(ctx, a)
		if err != nil {
			return err
		}
		_, err = f.ReadAt(buf, 0)
		if err == io.EOF {
			err = nil
		}
		return err
	})
}

// tlsCost measures the library's largest layout and its small files
// against cl's file system (TLS, the default) and against a second one of
// maxIODs I/O servers run with --insecure, alternating the two.
func tlsCost(ctx context.Context, cfg PFSLocalConfig, scratch string, cl *client.Client, maxIODs int, logf func(string, ...any)) ([]Row, error) {
	listens := make([]string, maxIODs)
	for i := range listens {
		listens[i] = "127.0.0.1:0"
	}
	plain, err := launch.StartFSWith(ctx, &launch.FS{Bin: cfg.Bin, Data: filepath.Join(scratch, "fs-plain"),
		Args: func(string) []string { return []string{"--insecure"} }}, "127.0.0.1:0", listens)
	if err != nil {
		return nil, fmt.Errorf("the plain-text file system: %w", err)
	}
	defer plain.Stop()
	pcl := client.New(plain.Meta.Addr, client.WithInsecure())
	defer pcl.Close()
	stripe := cfg.StripeSizes[len(cfg.StripeSizes)-1]
	var rows []Row
	for _, side := range []struct {
		label string
		cl    *client.Client
	}{{"lib tls", cl}, {"lib plain", pcl}} {
		logf("%-9s %d iods, stripe %-6s: ", side.label, maxIODs, humanBytes(int64(stripe)))
		w, r, err := libLarge(ctx, side.cl, "/tls-cost", cfg.FileSize, stripe, maxIODs)
		if err != nil {
			return nil, err
		}
		fps, err := smallLib(ctx, side.cl, "/tls-cost-small", cfg)
		if err != nil {
			return nil, err
		}
		logf("write %.0f MB/s, read %.0f MB/s, small files %.0f/s\n", w, r, fps)
		rows = append(rows, Row{Path: side.label, IODs: maxIODs, StripeSize: stripe, WriteMBs: w, ReadMBs: r, FilesPerSec: fps})
	}
	// Ratios of TLS to plain text.
	t, p := &rows[0], rows[1]
	t.RatioOf, t.WriteRatio, t.ReadRatio = "lib plain", t.WriteMBs/p.WriteMBs, t.ReadMBs/p.ReadMBs
	return rows, nil
}

// Markdown renders the result as tables.
func (r *PFSLocalResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# pfs-local, %s\n\nLarge file: %s. Ratios: lib to local file, FUSE to lib.\n\n", r.When.Format(time.RFC3339), humanBytes(r.FileSize))
	b.WriteString("| path | iods | stripe | write MB/s | ratio | read MB/s | ratio |\n|---|---|---|---|---|---|---|\n")
	for _, x := range r.Large {
		stripe, iods := "", ""
		if x.StripeSize > 0 {
			stripe, iods = humanBytes(int64(x.StripeSize)), fmt.Sprint(x.IODs)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.2f | %.0f | %.2f |\n", x.Path, iods, stripe, x.WriteMBs, x.WriteRatio, x.ReadMBs, x.ReadRatio)
	}
	fmt.Fprintf(&b, "\nSmall files: %d files of %s, %d workers.\n\n| path | files/s | ratio to local+fsync |\n|---|---|---|\n", r.SmallFiles, humanBytes(int64(r.SmallSize)), r.Workers)
	for _, x := range r.Small {
		ratio := ""
		if x.RatioOf != "" {
			ratio = fmt.Sprintf("%.2f", x.WriteRatio)
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s |\n", x.Path, x.FilesPerSec, ratio)
	}
	if len(r.TLS) == 2 {
		t, p := r.TLS[0], r.TLS[1]
		fmt.Fprintf(&b, "\nEncryption in transit (%d iods, stripe %s):\n\n| path | write MB/s | read MB/s | small files/s |\n|---|---|---|---|\n", t.IODs, humanBytes(int64(t.StripeSize)))
		for _, x := range r.TLS {
			fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f |\n", x.Path, x.WriteMBs, x.ReadMBs, x.FilesPerSec)
		}
		fmt.Fprintf(&b, "| tls / plain | %.2f | %.2f | %.2f |\n", t.WriteRatio, t.ReadRatio, t.FilesPerSec/p.FilesPerSec)
	}
	b.WriteString("\nNotes:\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

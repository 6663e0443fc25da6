package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/iod"
	"golang.org/x/sys/unix"
)

// RAIDConfig configures corral bench raid: an I/O server's store over
// 1..N loop-device disks, each throttled to Rate bytes/s (cgroup v1 blkio),
// as RAID-0 and RAID-1, measured bonnie-style through the Store API.
type RAIDConfig struct {
	Disks   []int
	Rate    int64 // bytes/s per disk, read and write
	Size    int64 // bytes written then read per configuration
	Streams int   // concurrent streams (bonnie processes)
	RandDur time.Duration
	Out     io.Writer
}

// RAIDRow is one configuration's figures.
type RAIDRow struct {
	Level             string // "single", "RAID-0", "RAID-1"
	Disks             int
	WriteMBs, ReadMBs float64
	RandOps           float64 // 4 KiB random reads per second
}

// paper004 is bonnie's block write, block read and seeks/s of paper 004
// (software RAID-0 over 1..4 SCSI disks), for the shape of the curve.
var paper004 = map[int][3]float64{1: {13150, 6283, 35.4}, 2: {24754, 11882, 80.0}, 3: {34172, 14421, 95.2}, 4: {36241, 15368, 141.0}}

// RAID runs the scenario; without root it prints why and returns nil.
func RAID(ctx context.Context, cfg RAIDConfig) ([]RAIDRow, error) {
	out := cfg.Out
	if os.Geteuid() != 0 {
		fmt.Fprintln(out, "bench raid: skipped: needs root (loop devices, mounts, cgroup blkio throttling)")
		return nil, nil
	}
	maxDisks := 0
	for _, d := range cfg.Disks {
		maxDisks = max(maxDisks, d)
	}
	if maxDisks < 1 {
		return nil, errors.New("--disks: give at least one count")
	}
	tmp, err := os.MkdirTemp("", "corral-bench-raid-")
	if err != nil {
		return nil, err
	}
	bed := &raidBed{dir: tmp}
	defer bed.cleanup(out)
	if err := bed.setup(maxDisks, cfg.Rate); err != nil {
		return nil, err
	}
	var rows []RAIDRow
	for _, n := range cfg.Disks {
		levels := []int{iod.RAID0, iod.RAID1}
		if n == 1 {
			levels = []int{-1}
		}
		for _, lv := range levels {
			if ctx.Err() != nil {
				return rows, ctx.Err()
			}
			r, err := bed.run(ctx, n, lv, cfg)
			if err != nil {
				return rows, err
			}
			rows = append(rows, r)
			fmt.Fprintf(out, "  %-7s %d disk(s): write %.1f MB/s, read %.1f MB/s, random 4K reads %.0f/s\n", r.Level, r.Disks, r.WriteMBs, r.ReadMBs, r.RandOps)
		}
	}
	fmt.Fprint(out, RAIDTable(rows))
	return rows, nil
}

// RAIDTable prints the rows with ratios to one disk, beside paper 004's.
func RAIDTable(rows []RAIDRow) string {
	var base RAIDRow
	for _, r := range rows {
		if r.Disks == 1 {
			base = r
		}
	}
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| level | disks | write MB/s | read MB/s | rand 4K/s | write x1 | read x1 | rand x1 | paper 004 RAID-0 write/read/seeks x1 |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		p := "-"
		if pp, ok := paper004[r.Disks]; ok && r.Level != "RAID-1" {
			p1 := paper004[1]
			p = fmt.Sprintf("%.2f / %.2f / %.2f", pp[0]/p1[0], pp[1]/p1[1], pp[2]/p1[2])
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %.0f | %s | %s | %s | %s |\n", r.Level, r.Disks, r.WriteMBs, r.ReadMBs, r.RandOps,
			ratio(r.WriteMBs, base.WriteMBs), ratio(r.ReadMBs, base.ReadMBs), ratio(r.RandOps, base.RandOps), p)
	}
	return b.String()
}

// raidBed is the loop disks, their mounts and the throttling cgroup.
type raidBed struct {
	dir    string
	loops  []string
	mounts []string
	cg     string
	moved  bool
}

func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

func (b *raidBed) setup(n int, rate int64) error {
	for i := 0; i < n; i++ {
		img := filepath.Join(b.dir, fmt.Sprintf("disk%d.img", i))
		f, err := os.Create(img)
		if err != nil {
			return err
		}
		err = f.Truncate(512 << 20)
		f.Close()
		if err != nil {
			return err
		}
		dev, err := run("losetup", "-f", "--show", img)
		if err != nil {
			return err
		}
		b.loops = append(b.loops, dev)
		if _, err := run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev); err != nil {
			return err
		}
		mnt := filepath.Join(b.dir, fmt.Sprintf("mnt%d", i))
		if err := os.Mkdir(mnt, 0o755); err != nil {
			return err
		}
		if _, err := run("mount", "-o", "noatime", dev, mnt); err != nil {
			return err
		}
		b.mounts = append(b.mounts, mnt)
	}
	// Throttle every disk: this process's I/O to each loop device is
	// limited to rate (v1 blkio throttles what the task submits itself:
	// reads and the writeback fsync starts).
	root := "/sys/fs/cgroup/blkio"
	if _, err := os.Stat(filepath.Join(root, "blkio.throttle.read_bps_device")); err != nil {
		return fmt.Errorf("cgroup v1 blkio throttling not available at %s: %v", root, err)
	}
	b.cg = filepath.Join(root, fmt.Sprintf("corral-bench-raid-%d", os.Getpid()))
	if err := os.Mkdir(b.cg, 0o755); err != nil {
		return err
	}
	for _, dev := range b.loops {
		var st unix.Stat_t
		if err := unix.Stat(dev, &st); err != nil {
			return err
		}
		rule := fmt.Sprintf("%d:%d %d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)), rate)
		for _, f := range []string{"blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device"} {
			if err := os.WriteFile(filepath.Join(b.cg, f), []byte(rule), 0o644); err != nil {
				return fmt.Errorf("%s %q: %v", f, rule, err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(b.cg, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	b.moved = true
	return nil
}

func (b *raidBed) cleanup(out io.Writer) {
	warn := func(err error) {
		if err != nil {
			fmt.Fprintf(out, "bench raid: cleanup: %v\n", err)
		}
	}
	if b.moved {
		warn(os.WriteFile("/sys/fs/cgroup/blkio/cgroup.procs", []byte(strconv.Itoa(os.Getpid())), 0o644))
	}
	if b.cg != "" {
		// The cgroup empties once every thread has moved back.
		for i := 0; i < 50; i++ {
			if os.Remove(b.cg) == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, m := range b.mounts {
		_, err := run("umount", m)
		warn(err)
	}
	for _, l := range b.loops {
		_, err := run("losetup", "-d", l)
		warn(err)
	}
	warn(os.RemoveAll(b.dir))
}

// run measures one store: Streams objects written concurrently (1 MiB
// writes, fsync at the end), their caches dropped, read back concurrently,
// then 4 KiB reads at random offsets for RandDur.
func (b *raidBed) run(ctx context.Context, n, level int, cfg RAIDConfig) (RAIDRow, error) {
	row := RAIDRow{Disks: n, Level: map[int]string{-1: "single", iod.RAID0: "RAID-0", iod.RAID1: "RAID-1"}[level]}
	var dirs []string
	for i := 0; i < n; i++ {
		d := filepath.Join(b.mounts[i], fmt.Sprintf("store-%d-%d", level+1, n))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return row, err
		}
		dirs = append(dirs, d)
	}
	defer func() {
		for _, d := range dirs {
			os.RemoveAll(d)
		}
	}()
	st, err := iod.OpenRAID(dirs, level, quietLog())
	if err != nil {
		return row, err
	}
	defer st.Close()
	if d := st.Degraded(); d != "" {
		return row, fmt.Errorf("%s over %d disks starts degraded: %s", row.Level, n, d)
	}
	streams := max(1, cfg.Streams)
	per := cfg.Size / int64(streams) &^ (1<<20 - 1)
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + i>>9)
	}
	parallel := func(fn func(s int) error) error {
		errs := make([]error, streams)
		var wg sync.WaitGroup
		for s := 0; s < streams; s++ {
			wg.Add(1)
			go func() { defer wg.Done(); errs[s] = fn(s) }()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	start := time.Now()
	err = parallel(func(s int) error {
		for off := int64(0); off < per; off += int64(len(buf)) {
			if err := st.WriteObject(uint64(s+1), 0, buf, off); err != nil {
				return err
			}
		}
		return st.SyncObject(uint64(s+1), 0)
	})
	if err != nil {
		return row, err
	}
	row.WriteMBs = float64(per*int64(streams)) / time.Since(start).Seconds() / 1e6
	if err := dropFileCaches(dirs); err != nil {
		return row, err
	}
	start = time.Now()
	err = parallel(func(s int) error {
		p := make([]byte, 1<<20)
		for off := int64(0); off < per; off += int64(len(p)) {
			if _, err := st.ReadObject(uint64(s+1), 0, p, off); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return row, err
	}
	row.ReadMBs = float64(per*int64(streams)) / time.Since(start).Seconds() / 1e6
	if err := dropFileCaches(dirs); err != nil {
		return row, err
	}
	// Random reads: no readahead, and every read in a 64 KiB block not
	// read before (the store reads and checks whole blocks), so none is
	// served from the page cache.
	for _, l := range b.loops[:n] {
		ra := filepath.Join("/sys/block", filepath.Base(l), "queue/read_ahead_kb")
		if old, err := os.ReadFile(ra); err == nil {
			os.WriteFile(ra, []byte("0"), 0o644)
			defer os.WriteFile(ra, old, 0o644)
		}
	}
	var mu sync.Mutex
	ops := 0
	start = time.Now()
	err = parallel(func(s int) error {
		r := rand.New(rand.NewPCG(uint64(s), 4))
		p := make([]byte, 4096)
		k := 0
		for _, blk := range r.Perm(int(per / (64 << 10))) {
			if time.Since(start) > cfg.RandDur || ctx.Err() != nil {
				break
			}
			off := int64(blk)<<16 + r.Int64N(16)*4096
			if _, err := st.ReadObject(uint64(s+1), 0, p, off); err != nil {
				return err
			}
			k++
		}
		mu.Lock()
		ops += k
		mu.Unlock()
		return nil
	})
	row.RandOps = float64(ops) / time.Since(start).Seconds()
	return row, err
}

// dropFileCaches drops the page cache of every file under dirs, so reads go
// to the (throttled) disks.
func dropFileCaches(dirs []string) error {
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

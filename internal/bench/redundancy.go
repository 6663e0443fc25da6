package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/testbed"
)

// RedundancyConfig sizes `corral bench redundancy`.
type RedundancyConfig struct {
	Bin, Dir, Out string
	Duration      time.Duration // of the load with kills
	KillMin       time.Duration // between kills: uniform in [KillMin, KillMax]
	KillMax       time.Duration
	Down          time.Duration // how long a killed iod stays down
	IODs          int
	Replicas      int
	Workers       int
	Files         int   // per worker
	FileSize      int64 // bytes per file
	Block         int64 // write/verify granularity
	// Wipe restarts a killed iod on an empty data directory (a lost disk,
	// accepted with ReplaceServer): with replicas 1 its data are gone, so
	// the harness must report lost operations.
	Wipe bool
	// HealWait bounds the wait, after the last restart, for stale bytes 0.
	HealWait time.Duration
	// Systems to run: "corral", "glusterfs" (replica 2, root, on a test
	// bed, when installed).
	Systems []string
	Seed    int64
	Log     io.Writer
}

// KillEvent is one kill -9 and its restart, in seconds from the start.
type KillEvent struct {
	Target  string  `json:"target"`
	At      float64 `json:"at_s"`
	Restart float64 `json:"restarted_s"`
	Err     string  `json:"error,omitempty"`
}

// RedundancyRun is one system's figures.
type RedundancyRun struct {
	System      string      `json:"system"`
	Replicas    int         `json:"replicas"`
	Seconds     float64     `json:"seconds"`
	Ops         int64       `json:"ops"` // acknowledged writes + good reads + syncs
	Writes      int64       `json:"writes"`
	Reads       int64       `json:"reads"`
	Syncs       int64       `json:"syncs"`
	WriteErrors int64       `json:"write_errors"` // failed attempts (retried)
	ReadErrors  int64       `json:"read_errors"`
	SyncErrors  int64       `json:"sync_errors"`
	GaveUp      int64       `json:"gave_up"`   // operations still failing after their deadline
	BadReads    int64       `json:"bad_reads"` // reads returning content no write could have left
	Lost        int64       `json:"lost_ops"`  // acknowledged writes whose data is not there at the end
	LostBlocks  int64       `json:"lost_blocks"`
	MaxStall    float64     `json:"max_write_stall_s"` // longest single write, retries included
	MaxAckGap   float64     `json:"max_ack_gap_s"`     // longest time no write was acknowledged
	HealSeconds float64     `json:"heal_s"`            // longest restart-to-nothing-stale (0: nothing was stale, -1: not reached)
	StalePeak   uint64      `json:"stale_peak"`
	StaleEnd    uint64      `json:"stale_end"`  // at the last sample, after the heal wait
	StaleUnit   string      `json:"stale_unit"` // bytes (Corral) or heal-info entries (GlusterFS)
	Healed      uint64      `json:"healed_bytes"`
	Kills       []KillEvent `json:"kills"`
	// Stale: [seconds, stale] every 250 ms, for plotting heal.
	Stale  [][2]float64 `json:"stale_samples,omitempty"`
	Errors []string     `json:"first_errors,omitempty"`
}

// RedundancyResult is the scenario's output.
type RedundancyResult struct {
	Scenario string          `json:"scenario"`
	When     time.Time       `json:"when"`
	Config   string          `json:"config"`
	Runs     []RedundancyRun `json:"runs"`
	Notes    []string        `json:"notes"`
}

// rfile is one open file of the system under test. WriteAt returns once
// the write is acknowledged (on the servers, not necessarily on disk).
type rfile interface {
	WriteAt(p []byte, off int64) error
	ReadAt(p []byte, off int64) error
	Sync() error
	Close() error
}

// rfs opens (creating if need be) a file of the system under test.
type rfs func(name string) (rfile, error)

type corralFile struct{ f *client.File }

func (c corralFile) WriteAt(p []byte, off int64) error {
	if _, err := c.f.WriteAt(p, off); err != nil {
		return err
	}
	return c.f.Flush()
}

func (c corralFile) ReadAt(p []byte, off int64) error {
	n, err := c.f.ReadAt(p, off)
	if err == io.EOF && n == len(p) {
		err = nil
	}
	return err
}

func (c corralFile) Sync() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*proto.DefaultTimeout)
	defer cancel()
	return c.f.Sync(ctx)
}

func (c corralFile) Close() error { return c.f.Close() }

// osFile is a file on a mounted file system (GlusterFS).
type osFile struct{ f *os.File }

func (o osFile) WriteAt(p []byte, off int64) error { _, err := o.f.WriteAt(p, off); return err }
func (o osFile) ReadAt(p []byte, off int64) error {
	_, err := o.f.ReadAt(p, off)
	return err
}
func (o osFile) Sync() error  { return o.f.Sync() }
func (o osFile) Close() error { return o.f.Close() }

func osFS(dir string) rfs {
	return func(name string) (rfile, error) {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		return osFile{f}, nil
	}
}

// fill writes the content of write seq over block blk into b: every byte
// depends on both, so a block left by another write never matches.
func fill(b []byte, seq uint64, blk int64) {
	x := seq*0x9e3779b97f4a7c15 ^ uint64(blk)*0xbf58476d1ce4e5b9
	for i := 0; i+8 <= len(b); i += 8 {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		binary.LittleEndian.PutUint64(b[i:], z^z>>31)
	}
}

// model is what a file must hold: per block, the sequence number of the
// last acknowledged write, and the writes that failed after it (their data
// may or may not have landed, so either is right).
type model struct {
	name  string
	seq   []uint64
	maybe [][]uint64
}

// matches reports whether b is the content of block blk under m.
func (m *model) matches(b, tmp []byte, blk int64) bool {
	for _, s := range append([]uint64{m.seq[blk]}, m.maybe[blk]...) {
		fill(tmp, s, blk)
		if string(tmp) == string(b) {
			return true
		}
	}
	return false
}

// loadStats is shared by a run's workers.
type loadStats struct {
	writes, reads, syncs         atomic.Int64
	writeErrs, readErrs, syncErr atomic.Int64
	gaveUp, badReads             atomic.Int64
	maxStall                     atomic.Int64 // ns
	lastAck, maxGap              atomic.Int64 // ns since start
	start                        time.Time
	mu                           sync.Mutex
	errs                         []string
}

func (s *loadStats) note(err error) {
	s.mu.Lock()
	if len(s.errs) < 8 {
		s.errs = append(s.errs, fmt.Sprintf("%.1fs: %v", time.Since(s.start).Seconds(), err))
	}
	s.mu.Unlock()
}

func atomicMax(a *atomic.Int64, v int64) {
	for {
		o := a.Load()
		if v <= o || a.CompareAndSwap(o, v) {
			return
		}
	}
}

func (s *loadStats) ack() {
	now := int64(time.Since(s.start))
	atomicMax(&s.maxGap, now-s.lastAck.Swap(now))
}

// opDeadline bounds one operation with its retries: past it the operation
// counts as given up (and its writes as maybe-landed).
const opDeadline = 60 * time.Second

// worker runs the mixed load over its files until stop is closed.
type worker struct {
	fs    rfs
	files []*model
	open  []rfile
	rng   *rand.Rand
	seq   *atomic.Uint64
	st    *loadStats
	block int64
	size  int64
}

func (w *worker) file(i int) (rfile, error) {
	if w.open[i] == nil {
		f, err := w.fs(w.files[i].name)
		if err != nil {
			return nil, err
		}
		w.open[i] = f
	}
	return w.open[i], nil
}

// drop closes a file after an error: a client File keeps its first write
// error, so the next attempt needs a fresh one.
func (w *worker) drop(i int) {
	if w.open[i] != nil {
		w.open[i].Close()
		w.open[i] = nil
	}
}

// retry runs op on file i until it succeeds, the deadline passes or stop
// closes; errs counts failed attempts.
func (w *worker) retry(i int, stop <-chan struct{}, errs *atomic.Int64, op func(f rfile) error) bool {
	end := time.Now().Add(opDeadline)
	for attempt := 0; ; attempt++ {
		f, err := w.file(i)
		if err == nil {
			if err = op(f); err == nil {
				return true
			}
			w.drop(i)
		}
		errs.Add(1)
		w.st.note(fmt.Errorf("%s: %w", w.files[i].name, err))
		if time.Now().After(end) {
			w.st.gaveUp.Add(1)
			return false
		}
		select {
		case <-stop:
			return false
		case <-time.After(time.Duration(min(attempt+1, 10)) * 50 * time.Millisecond):
		}
	}
}

// write writes blocks [b0, b0+n) of file i under a new sequence number.
func (w *worker) write(i int, b0, n int64, stop <-chan struct{}) bool {
	m := w.files[i]
	s := w.seq.Add(1)
	buf := make([]byte, n*w.block)
	for k := int64(0); k < n; k++ {
		fill(buf[k*w.block:(k+1)*w.block], s, b0+k)
	}
	t0 := time.Now()
	ok := w.retry(i, stop, &w.st.writeErrs, func(f rfile) error { return f.WriteAt(buf, b0*w.block) })
	// A write that never got through stalled too, for as long as it tried.
	atomicMax(&w.st.maxStall, int64(time.Since(t0)))
	for k := b0; k < b0+n; k++ {
		if ok {
			m.seq[k], m.maybe[k] = s, nil
		} else {
			m.maybe[k] = append(m.maybe[k], s)
		}
	}
	if ok {
		w.st.writes.Add(1)
		w.st.ack()
	}
	return ok
}

func (w *worker) step(stop <-chan struct{}, tmp []byte) {
	i := w.rng.Intn(len(w.files))
	nb := w.size / w.block
	switch r := w.rng.Intn(100); {
	case r < 50:
		n := 1 + w.rng.Int63n(min(16, nb))
		w.write(i, w.rng.Int63n(nb-n+1), n, stop)
	case r < 85:
		n := 1 + w.rng.Int63n(min(16, nb))
		b0 := w.rng.Int63n(nb - n + 1)
		buf := make([]byte, n*w.block)
		if w.retry(i, stop, &w.st.readErrs, func(f rfile) error { return f.ReadAt(buf, b0*w.block) }) {
			w.st.reads.Add(1)
			for k := int64(0); k < n; k++ {
				if !w.files[i].matches(buf[k*w.block:(k+1)*w.block], tmp, b0+k) {
					w.st.badReads.Add(1)
					w.st.note(fmt.Errorf("%s block %d: read content no write left", w.files[i].name, b0+k))
					break
				}
			}
		}
	default:
		if w.retry(i, stop, &w.st.syncErr, func(f rfile) error { return f.Sync() }) {
			w.st.syncs.Add(1)
		}
	}
}

// runLoad creates every worker's files (whole, before any kill), then runs
// the load until stop closes; it returns the models for verify.
func runLoad(fs rfs, cfg RedundancyConfig, st *loadStats, started chan<- error, stop <-chan struct{}) []*model {
	var seq atomic.Uint64
	ws := make([]*worker, cfg.Workers)
	var all []*model
	nb := cfg.FileSize / cfg.Block
	for i := range ws {
		w := &worker{fs: fs, rng: rand.New(rand.NewSource(cfg.Seed + int64(i))), seq: &seq, st: st, block: cfg.Block, size: cfg.FileSize}
		for j := 0; j < cfg.Files; j++ {
			m := &model{name: fmt.Sprintf("w%02d-f%02d", i, j), seq: make([]uint64, nb), maybe: make([][]uint64, nb)}
			w.files = append(w.files, m)
			all = append(all, m)
		}
		w.open = make([]rfile, cfg.Files)
		ws[i] = w
	}
	// Each file written whole and synced, so its size is on the metadata
	// server and every later write and read falls inside it.
	var first error
	for _, w := range ws {
		for j := range w.files {
			if !w.write(j, 0, nb, nil) || !w.retry(j, nil, &st.syncErr, func(f rfile) error { return f.Sync() }) {
				first = fmt.Errorf("creating %s failed: %s", w.files[j].name, strings.Join(st.errs, "; "))
			}
		}
	}
	started <- first
	if first != nil {
		return all
	}
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tmp := make([]byte, cfg.Block)
			for {
				select {
				case <-stop:
					for j := range w.open {
						w.drop(j)
					}
					return
				default:
				}
				w.step(stop, tmp)
			}
		}()
	}
	wg.Wait()
	return all
}

// verify reads every file whole (retrying a while on errors) and counts the
// acknowledged writes whose data are not there.
func verify(fs rfs, files []*model, block int64, run *RedundancyRun) {
	lost := map[uint64]bool{}
	tmp := make([]byte, block)
	readAt := func(name string, buf []byte, off int64) error {
		f, err := fs(name)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.ReadAt(buf, off)
	}
	for _, m := range files {
		buf := make([]byte, int64(len(m.seq))*block)
		var err error
		for try := 0; try < 10; try++ {
			if err = readAt(m.name, buf, 0); err == nil {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
		if err != nil && len(run.Errors) < 12 {
			run.Errors = append(run.Errors, fmt.Sprintf("verify %s: %v (reading it block by block)", m.name, err))
		}
		for k := range m.seq {
			b := buf[int64(k)*block : int64(k+1)*block]
			if err != nil {
				// The whole file failed: find which blocks are unreadable.
				if readAt(m.name, b, int64(k)*block) != nil {
					clear(b) // unreadable: lost (zeros match no write)
				}
			}
			if !m.matches(b, tmp, int64(k)) {
				run.LostBlocks++
				lost[m.seq[k]] = true
			}
		}
	}
	run.Lost = int64(len(lost))
}

// killer is what a run kills and restarts.
type killer struct {
	name    func(i int) string
	n       int
	kill    func(i int) error
	restart func(ctx context.Context, i int) error
	// stale reads the bytes stale and healed over all servers (nil: unknown).
	stale func(ctx context.Context) (stale, healed uint64, err error)
}

// runRedundancy runs the load on fs while k kills and restarts servers on
// cfg's schedule, then waits for heal and verifies.
func runRedundancy(ctx context.Context, cfg RedundancyConfig, system string, fs rfs, k killer, logf func(string, ...any)) RedundancyRun {
	run := RedundancyRun{System: system, Replicas: cfg.Replicas, HealSeconds: -1, StaleUnit: "bytes"}
	st := &loadStats{start: time.Now()}
	started := make(chan error, 1)
	stop := make(chan struct{})
	var files []*model
	done := make(chan struct{})
	go func() { files = runLoad(fs, cfg, st, started, stop); close(done) }()
	if err := <-started; err != nil {
		close(stop)
		<-done
		run.Errors = append(run.Errors, err.Error())
		logf("%s: %v\n", system, err)
		return run
	}
	st.start = time.Now()
	st.lastAck.Store(0)
	st.maxStall.Store(0)
	st.writes.Store(0)
	rng := rand.New(rand.NewSource(cfg.Seed))
	end := time.Now().Add(cfg.Duration)
	// Stale bytes sampled every 250 ms, through the heal wait.
	type sample struct {
		t     float64
		stale uint64
	}
	var samples []sample
	sampStop, sampDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampDone)
		for k.stale != nil {
			if s, h, err := k.stale(ctx); err == nil {
				samples = append(samples, sample{time.Since(st.start).Seconds(), s})
				run.Healed = h
			}
			select {
			case <-sampStop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	var lastRestart time.Time
	for ctx.Err() == nil {
		wait := cfg.KillMin + time.Duration(rng.Int63n(int64(cfg.KillMax-cfg.KillMin)+1))
		if time.Now().Add(wait + cfg.Down).After(end) {
			break
		}
		sleepCtx(ctx, wait)
		i := rng.Intn(k.n)
		ev := KillEvent{Target: k.name(i), At: time.Since(st.start).Seconds()}
		if err := k.kill(i); err != nil {
			ev.Err = err.Error()
		}
		sleepCtx(ctx, cfg.Down)
		if err := k.restart(ctx, i); err != nil {
			ev.Err = strings.TrimPrefix(ev.Err+"; restart: "+err.Error(), "; ")
		}
		lastRestart = time.Now()
		ev.Restart = time.Since(st.start).Seconds()
		logf("%s: killed %s at %.1fs, restarted at %.1fs %s\n", system, ev.Target, ev.At, ev.Restart, ev.Err)
		run.Kills = append(run.Kills, ev)
	}
	sleepCtx(ctx, time.Until(end))
	close(stop)
	<-done
	run.Seconds = time.Since(st.start).Seconds()
	atomicMax(&st.maxGap, int64(time.Since(st.start))-st.lastAck.Load())
	run.Writes, run.Reads, run.Syncs = st.writes.Load(), st.reads.Load(), st.syncs.Load()
	run.Ops = run.Writes + run.Reads + run.Syncs
	run.WriteErrors, run.ReadErrors, run.SyncErrors = st.writeErrs.Load(), st.readErrs.Load(), st.syncErr.Load()
	run.GaveUp, run.BadReads = st.gaveUp.Load(), st.badReads.Load()
	run.MaxStall = time.Duration(st.maxStall.Load()).Seconds()
	run.MaxAckGap = time.Duration(st.maxGap.Load()).Seconds()
	run.Errors = append(run.Errors, st.errs...)
	// Heal: wait for the stale bytes to be 0 again.
	for end := time.Now().Add(cfg.HealWait); k.stale != nil && !lastRestart.IsZero() && ctx.Err() == nil && time.Now().Before(end); {
		if s, _, err := k.stale(ctx); err == nil && s == 0 {
			break
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	close(sampStop)
	<-sampDone
	run.HealSeconds = healTime(run.Kills, samples, func(x sample) (float64, uint64) { return x.t, x.stale })
	for _, x := range samples {
		run.StalePeak = max(run.StalePeak, x.stale)
		run.StaleEnd = x.stale
		run.Stale = append(run.Stale, [2]float64{x.t, float64(x.stale)})
	}
	verify(fs, files, cfg.Block, &run)
	logf("%s replicas %d: %d ops (%d writes, %d reads, %d syncs) in %.0fs; lost %d (%d blocks), bad reads %d, given up %d; longest write %.2fs, longest ack gap %.2fs; heal %.1fs, stale peak %d, healed %d\n",
		system, run.Replicas, run.Ops, run.Writes, run.Reads, run.Syncs, run.Seconds, run.Lost, run.LostBlocks, run.BadReads, run.GaveUp,
		run.MaxStall, run.MaxAckGap, run.HealSeconds, run.StalePeak, run.Healed)
	return run
}

// healTime is the longest time from a restart until the first sample
// after it with nothing stale, over the kills after which something was
// stale (a heal may outlast the next kill: both then end together); 0 if
// nothing ever was, -1 if something stayed stale to the last sample.
func healTime[S any](kills []KillEvent, samples []S, at func(S) (float64, uint64)) float64 {
	var worst float64
	for _, ev := range kills {
		stale, healed := false, -1.0
		for _, x := range samples {
			t, s := at(x)
			if t < ev.At {
				continue
			}
			if s > 0 {
				stale = true
			} else if t >= ev.Restart {
				healed = t
				break
			}
		}
		switch {
		case !stale:
		case healed < 0:
			return -1
		default:
			worst = max(worst, healed-ev.Restart)
		}
	}
	return worst
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// corralKiller kills and restarts fsys's iods on their own addresses.
func corralKiller(fsys *launch.FS, cl *client.Client, wipe bool) killer {
	return killer{
		n:    len(fsys.IODs),
		name: func(i int) string { return fmt.Sprintf("iod%d", i+1) },
		kill: func(i int) error { fsys.IODs[i].Kill(); return nil },
		restart: func(ctx context.Context, i int) error {
			addr := fsys.IODs[i].Addr
			if wipe {
				// A lost disk, accepted before the iod starts (an iod on an
				// empty directory at a known address waits for that before
				// it listens).
				if err := os.RemoveAll(filepath.Join(fsys.Data, fmt.Sprintf("iod%d", i+1))); err != nil {
					return err
				}
				if err := replaceServer(ctx, cl, addr); err != nil {
					return err
				}
			}
			var err error
			for try := 0; try < 20; try++ {
				var p *launch.Proc
				if p, err = fsys.StartIOD(ctx, i, addr); err == nil {
					fsys.IODs[i] = p
					break
				}
				sleepCtx(ctx, 250*time.Millisecond)
			}
			return err
		},
		stale: func(ctx context.Context) (uint64, uint64, error) {
			ss, err := cl.Servers(ctx)
			var s, h uint64
			for _, x := range ss {
				s, h = s+x.Stale, h+x.Healed
			}
			return s, h, err
		},
	}
}

// replaceServer accepts an empty disk for the (stopped) server at addr.
func replaceServer(ctx context.Context, cl *client.Client, addr string) error {
	ss, err := cl.Servers(ctx)
	if err != nil {
		return err
	}
	for _, x := range ss {
		if x.Addr == addr {
			_, err := cl.Call(ctx, &proto.ReplaceServer{ID: x.ID})
			return err
		}
	}
	return fmt.Errorf("no I/O server at %s in corral fs servers", addr)
}

// SetReplicas sets directory ino's replica count (proto.SetLayout with
// Replicas; stripe fields 0 keep the directory's).
func SetReplicas(ctx context.Context, cl *client.Client, ino uint64, replicas int) error {
	_, err := cl.SetLayoutPolicy(ctx, &proto.SetLayout{Ino: ino, Replicas: uint32(replicas)})
	if err != nil {
		return fmt.Errorf("setting %d replicas on inode %d: %w", replicas, ino, err)
	}
	return nil
}

// RunRedundancy runs the kill schedule against Corral on loopback (IODs
// iods, files with cfg.Replicas copies) and, when installed and root,
// GlusterFS replica 2.
func RunRedundancy(ctx context.Context, cfg RedundancyConfig) (*RedundancyResult, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format, a...) }
	if cfg.IODs < 2 || cfg.Workers < 1 || cfg.Files < 1 || cfg.Block < 8 || cfg.Block%8 != 0 || cfg.FileSize < cfg.Block || cfg.KillMax < cfg.KillMin {
		return nil, fmt.Errorf("redundancy config: want >= 2 iods, >= 1 worker and file, block a multiple of 8 no larger than the file, kill-max >= kill-min (have %+v)", cfg)
	}
	res := &RedundancyResult{Scenario: "redundancy", When: time.Now().UTC(),
		Config: fmt.Sprintf("%s: %s with kills every %v-%v (down %v), %d iods, %d workers x %d files of %s, %s blocks, wipe %v",
			strings.Join(cfg.Systems, ", "), cfg.Duration, cfg.KillMin, cfg.KillMax, cfg.Down, cfg.IODs, cfg.Workers, cfg.Files, humanBytes(cfg.FileSize), humanBytes(cfg.Block), cfg.Wipe)}
	scratch, cleanup, err := scratchDir(cfg.Out, cfg.Dir, "redundancy")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if slices.Contains(cfg.Systems, "corral") {
		run, err := corralRedundancy(ctx, cfg, scratch, logf)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			// Replicas not (yet) in meta: the other system still runs.
			logf("corral: %v\n", err)
			res.Notes = append(res.Notes, "Corral not run: "+err.Error())
		default:
			res.Runs = append(res.Runs, run)
		}
	}
	res.Notes = append(res.Notes,
		"load: each worker owns its files; 50% writes of 1-16 blocks at random block offsets, 35% reads (checked against what was acknowledged), 15% fsyncs; a failed operation is retried (a fresh open) for up to 60 s",
		"a write counts as acknowledged when the client library's Flush returns (data on the I/O servers); a failed attempt's data may or may not land, so the verifier accepts either",
		"lost ops: acknowledged writes with at least one block not there at the end (every file read whole, content regenerated from the write's sequence number); unreadable blocks count as lost",
		"longest write: one write from its first attempt to its acknowledgement; ack gap: the longest time no worker had a write acknowledged",
		"stale bytes (ServerInfo.Stale over all servers, what corral fs servers shows; meta's corral_meta_stale_bytes) sampled every 250 ms; heal: the longest time from a restart until nothing was stale again; healed bytes: ServerInfo.Healed summed (corral_meta_healed_bytes_total), to compare with the stale peak")
	if ctx.Err() == nil && slices.Contains(cfg.Systems, "glusterfs") {
		res.Notes = append(res.Notes, glusterRedundancy(ctx, cfg, scratch, res, logf))
	}
	return res, writeJSONMD(cfg.Out, res, res.Markdown())
}

func corralRedundancy(ctx context.Context, cfg RedundancyConfig, scratch string, logf func(string, ...any)) (RedundancyRun, error) {
	listens := make([]string, cfg.IODs)
	for i := range listens {
		listens[i] = "127.0.0.1:0"
	}
	fsys, err := launch.StartFS(ctx, cfg.Bin, filepath.Join(scratch, "fs"), "127.0.0.1:0", listens)
	if err != nil {
		return RedundancyRun{}, err
	}
	defer fsys.Stop()
	cl := client.New(fsys.MetaAddr())
	defer cl.Close()
	if err := waitServers(ctx, cl, cfg.IODs); err != nil {
		return RedundancyRun{}, err
	}
	if err := cl.MkdirAll(ctx, "/red", 0o755); err != nil {
		return RedundancyRun{}, err
	}
	dir, err := cl.Stat(ctx, "/red")
	if err != nil {
		return RedundancyRun{}, err
	}
	// Set even for 1: the file system's default may be more.
	if err := SetReplicas(ctx, cl, dir.Ino, cfg.Replicas); err != nil {
		return RedundancyRun{}, err
	}
	if a, err := cl.Stat(ctx, "/red"); err == nil && a.Replicas != uint32(cfg.Replicas) {
		return RedundancyRun{}, fmt.Errorf("/red: asked for %d replicas, the directory says %d (replicas not built into meta?)", cfg.Replicas, a.Replicas)
	}
	// Files striped over every iod with a small stripe, so that each write
	// meets the killed server often.
	// (CreatePath truncates: only a missing file is created.)
	fs := func(name string) (rfile, error) {
		f, err := cl.Open(ctx, "/red/"+name)
		if errors.Is(err, os.ErrNotExist) {
			f, err = cl.CreatePath(ctx, "/red/"+name, 0o644, client.CreateOpts{Excl: true, StripeSize: 64 << 10, StripeCount: uint32(cfg.IODs), Replicas: uint32(cfg.Replicas)})
		}
		if err != nil {
			return nil, err
		}
		return corralFile{f}, nil
	}
	return runRedundancy(ctx, cfg, "corral", fs, corralKiller(fsys, cl, cfg.Wipe), logf), nil
}

// waitServers waits until n I/O servers are up.
func waitServers(ctx context.Context, cl *client.Client, n int) error {
	var up int
	for try := 0; try < 100; try++ {
		ss, err := cl.Servers(ctx)
		up = 0
		for _, x := range ss {
			if err == nil && x.State == proto.ServerUp {
				up++
			}
		}
		if up >= n {
			return nil
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return fmt.Errorf("only %d of %d I/O servers up after 10 s", up, n)
}

// Markdown renders the runs as a table.
func (r *RedundancyResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# redundancy, %s\n\n%s.\n\n", r.When.Format(time.RFC3339), r.Config)
	b.WriteString("| system | replicas | kills | ops | writes | reads | syncs | lost ops (goal 0) | lost blocks | bad reads | given up | longest write s (goal <= 5) | longest ack gap s | heal s | stale peak | healed bytes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range r.Runs {
		heal := fmt.Sprintf("%.1f", x.HealSeconds)
		switch {
		case x.HealSeconds < 0:
			heal = fmt.Sprintf("not healed (%d %s stale at the end)", x.StaleEnd, x.StaleUnit)
		case x.StalePeak == 0:
			heal = "nothing stale"
		}
		stale := fmt.Sprintf("%d %s", x.StalePeak, x.StaleUnit)
		if x.StaleUnit == "bytes" {
			stale = humanBytes(int64(x.StalePeak))
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %.2f | %.2f | %s | %s | %s |\n", x.System, x.Replicas, len(x.Kills), x.Ops, x.Writes, x.Reads, x.Syncs,
			x.Lost, x.LostBlocks, x.BadReads, x.GaveUp, x.MaxStall, x.MaxAckGap, heal, stale, humanBytes(int64(x.Healed)))
	}
	for _, x := range r.Runs {
		if len(x.Errors) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\nFirst errors (%s):\n", x.System)
		errs := append([]string(nil), x.Errors...)
		sort.Strings(errs)
		for _, e := range errs {
			fmt.Fprintf(&b, "- %s\n", e)
		}
	}
	b.WriteString("\nNotes:\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

// glusterRedundancy runs the same load and kill schedule against a
// GlusterFS replica 2 volume on a test bed (one host per iod, a client
// host), and returns a note on what ran.
func glusterRedundancy(ctx context.Context, cfg RedundancyConfig, scratch string, res *RedundancyResult, logf func(string, ...any)) string {
	if !glusterAvailable() {
		logf("GlusterFS not installed: its run skipped (scripts/deps bench installs it)\n")
		return "GlusterFS: not installed, not run (scripts/deps bench installs it)"
	}
	if err := testbed.CheckRoot(); err != nil {
		logf("GlusterFS run skipped: %v\n", err)
		return "GlusterFS: not run (" + err.Error() + ")"
	}
	run, err := glusterRun(ctx, cfg, scratch, logf)
	if err != nil {
		logf("GlusterFS: %v\n", err)
		return "GlusterFS replica 2: failed to run: " + err.Error()
	}
	res.Runs = append(res.Runs, run)
	return fmt.Sprintf("%s; replica 2 volume over %d server hosts (unshaped test bed), FUSE-mounted on a client host, default options (client quorum auto: writes need the first brick of a pair); a kill is kill -9 of every brick process (glusterfsd) on one host, the restart 'gluster volume start force'; its stale figure counts heal-info entries (files), not bytes; a write is acknowledged when write(2) returns", glusterNote(), cfg.IODs)
}

func glusterRun(ctx context.Context, cfg RedundancyConfig, scratch string, logf func(string, ...any)) (RedundancyRun, error) {
	var servers []string
	for i := 1; i <= cfg.IODs; i++ {
		servers = append(servers, fmt.Sprintf("iod%d", i))
	}
	// Its own subnet: bench pfs's bed (10.77.0.0/24) may be up meanwhile.
	spec := testbed.NewSpecOn("red", netip.MustParsePrefix("10.79.0.0/24"), append([]string{"client1"}, servers...), "")
	testbed.Down(spec.Name)
	bed, err := testbed.Up(spec)
	if err != nil {
		return RedundancyRun{}, err
	}
	defer testbed.Down(spec.Name)
	g, err := startGluster(ctx, bed, filepath.Join(scratch, "gluster"), servers)
	if err != nil {
		return RedundancyRun{}, err
	}
	defer g.stop()
	const vol = "red"
	if err := g.volume(ctx, vol, "replica"); err != nil {
		return RedundancyRun{}, err
	}
	mnt, err := g.mount(ctx, "client1", vol)
	if err != nil {
		return RedundancyRun{}, err
	}
	k := killer{
		n:       len(servers),
		name:    func(i int) string { return servers[i] },
		kill:    func(i int) error { return g.killBricks(ctx, vol, servers[i]) },
		restart: func(ctx context.Context, _ int) error { return g.restartBricks(ctx, vol) },
		stale: func(ctx context.Context) (uint64, uint64, error) {
			n, err := g.pendingHeal(ctx, vol)
			return n, 0, err
		},
	}
	run := runRedundancy(ctx, cfg, "glusterfs replica 2", osFS(mnt), k, logf)
	run.Replicas = 2
	run.StaleUnit = "entries"
	return run, nil
}

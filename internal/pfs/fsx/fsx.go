// Package fsx is a random-operation file exerciser. It applies a seeded,
// deterministic sequence of writes, truncates, hole punches, mmap reads and
// writes, reads, fsyncs and close/reopen cycles to one file, keeps an
// in-memory model of what the file must hold, and checks every byte it reads
// against that model (and the whole file at every reopen and at the end). On
// the first difference it fails with what it takes to reproduce and explain
// it: seed, operation number, the last operations, the first differing offset,
// the model's and the file's bytes and which operation wrote each.
//
// The idea is that of xfstests' fsx; the code is this project's own.
//
// mmap faults on a FUSE file block a thread outside a system call, where the
// Go runtime cannot stop it: never run the exerciser in the process that
// serves the mount it exercises (tests run `corral fsx` as a child).
package fsx

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Mode selects how the file is accessed.
type Mode int

const (
	// Buffered uses pread/pwrite through the page cache.
	Buffered Mode = iota
	// Mmap adds reads and writes through shared mappings (with msync).
	Mmap
	// Direct opens the file O_DIRECT: buffers, offsets and lengths aligned
	// (Options.Align); no mmap.
	Direct
)

var modeNames = [...]string{Buffered: "buffered", Mmap: "mmap", Direct: "direct"}

func (m Mode) String() string {
	if m >= 0 && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode reads a mode name: buffered, mmap or direct.
func ParseMode(s string) (Mode, error) {
	for i, n := range modeNames {
		if s == n {
			return Mode(i), nil
		}
	}
	return 0, fmt.Errorf("unknown mode %q (want buffered, mmap or direct)", s)
}

// Defaults of Options.
const (
	DefaultOps     = 100000
	DefaultMaxSize = 256 << 10
	DefaultMaxLen  = 64 << 10
	DefaultAlign   = 4096
	// DefaultReopen: about one close/reopen (and full-file check) in this
	// many operations.
	DefaultReopen = 100
)

// Options configure a run. The zero value of a field means its default.
type Options struct {
	Seed uint64
	Mode Mode
	// Ops is the number of operations (DefaultOps).
	Ops int
	// Duration stops the run early, successfully, after this long (0: no
	// limit); Result.TimedOut says so.
	Duration time.Duration
	// MaxSize bounds the file's size; MaxLen one operation's length.
	MaxSize, MaxLen int64
	// Align is the O_DIRECT alignment of offsets, lengths and buffers:
	// 512 or 4096 (DefaultAlign). Direct mode only.
	Align int64
	// Punch enables fallocate(PUNCH_HOLE|KEEP_SIZE).
	Punch bool
	// Reopen: about one close/reopen in this many operations.
	Reopen int
	// Name of the file created in the directory (default
	// fsx-SEED-MODE); an existing one is replaced.
	Name string
	// Progress, if set, gets a line every ProgressEvery operations.
	Progress      io.Writer
	ProgressEvery int
}

func (o *Options) fill() error {
	if o.Ops == 0 {
		o.Ops = DefaultOps
	}
	if o.MaxSize == 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.MaxLen == 0 {
		o.MaxLen = DefaultMaxLen
	}
	if o.Align == 0 {
		o.Align = DefaultAlign
	}
	if o.Reopen == 0 {
		o.Reopen = DefaultReopen
	}
	if o.ProgressEvery == 0 {
		o.ProgressEvery = 100000
	}
	if o.Name == "" {
		o.Name = fmt.Sprintf("fsx-%d-%s", o.Seed, o.Mode)
	}
	switch {
	case o.Mode < Buffered || o.Mode > Direct:
		return fmt.Errorf("fsx: unknown mode %d", int(o.Mode))
	case o.Ops < 0:
		return fmt.Errorf("fsx: negative operation count %d", o.Ops)
	case o.MaxSize < 1 || o.MaxSize > 1<<30:
		return fmt.Errorf("fsx: max size %d out of range (1 B to 1 GiB)", o.MaxSize)
	case o.MaxLen < 1 || o.MaxLen > o.MaxSize:
		return fmt.Errorf("fsx: max length %d out of range (1 B to the max size %d)", o.MaxLen, o.MaxSize)
	case o.Align != 512 && o.Align != 4096:
		return fmt.Errorf("fsx: alignment %d: want 512 or 4096", o.Align)
	case o.Mode == Direct && (o.MaxSize%o.Align != 0 || o.MaxLen%o.Align != 0):
		return fmt.Errorf("fsx: direct mode needs max size and max length multiples of the alignment %d", o.Align)
	case o.Reopen < 1:
		return fmt.Errorf("fsx: reopen interval %d: want at least 1", o.Reopen)
	case strings.ContainsRune(o.Name, '/'):
		return fmt.Errorf("fsx: file name %q contains a slash", o.Name)
	}
	return nil
}

type opKind uint8

const (
	opWrite opKind = iota
	opRead
	opMapRead
	opMapWrite
	opTruncate
	opPunch
	opFsync
	opReopen
	nKinds
)

var opNames = [nKinds]string{"write", "read", "mapread", "mapwrite", "truncate", "punch", "fsync", "reopen"}

// record is one operation as logged: enough to replay or explain it.
type record struct {
	n                int
	kind             opKind
	off, len         int64
	oldSize, newSize int64
	note             string
}

func (r record) String() string {
	s := fmt.Sprintf("%9d %-8s", r.n, opNames[r.kind])
	switch r.kind {
	case opWrite, opRead, opMapRead, opMapWrite, opPunch:
		s += fmt.Sprintf(" 0x%06x len 0x%05x [0x%06x,0x%06x)", r.off, r.len, r.off, r.off+r.len)
	case opTruncate:
		s += fmt.Sprintf(" to 0x%06x", r.newSize)
	}
	if r.oldSize != r.newSize {
		s += fmt.Sprintf("  size 0x%06x -> 0x%06x", r.oldSize, r.newSize)
	}
	if r.note != "" {
		s += "  " + r.note
	}
	return s
}

const (
	histLen = 4096 // operations kept to explain where bytes came from
	tailLen = 20   // operations printed in a failure
)

// Exerciser runs the operations one by one (Run does all of it).
type Exerciser struct {
	o     Options
	path  string
	flags int
	fd    int
	rng   *rand.Rand
	model []byte // what the file must hold; len is its size
	buf   []byte // I/O buffer: page-aligned (mmap'd), for O_DIRECT
	page  int64
	n     int // operations done
	hist  []record
	last  record // the last write, to aim overlapping writes at
	count [nKinds]int
	start time.Time
	err   error // the first failure: later calls return it
}

// Result of a run.
type Result struct {
	Ops      int
	Elapsed  time.Duration
	TimedOut bool           // Options.Duration ended it before Options.Ops
	Counts   map[string]int // operations done per kind
}

// Run exercises a new file in dir. A failure is a *Failure; then the file
// is left in place for inspection, otherwise it is removed.
func Run(dir string, o Options) (Result, error) {
	e, err := New(dir, o)
	if err != nil {
		return Result{}, err
	}
	var deadline time.Time
	if e.o.Duration > 0 {
		deadline = e.start.Add(e.o.Duration)
	}
	timedOut := false
	for e.n < e.o.Ops && err == nil {
		if !deadline.IsZero() && time.Now().After(deadline) {
			timedOut = true
			break
		}
		err = e.Step()
	}
	if cerr := e.Close(); err == nil {
		err = cerr
	}
	r := e.Result()
	r.TimedOut = timedOut
	return r, err
}

// New creates (or empties) the file dir/Options.Name and opens it.
func New(dir string, o Options) (*Exerciser, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	e := &Exerciser{
		o:     o,
		path:  filepath.Join(dir, o.Name),
		flags: unix.O_RDWR | unix.O_CLOEXEC,
		fd:    -1,
		rng:   rand.New(rand.NewPCG(o.Seed, 0x66737821)),
		model: make([]byte, 0, o.MaxSize),
		page:  int64(os.Getpagesize()),
		start: time.Now(),
	}
	if o.Mode == Direct {
		e.flags |= unix.O_DIRECT
	}
	// One buffer for every read and write, big enough for a whole-file
	// check in few calls; mmap'd so that it is page-aligned for O_DIRECT.
	size := max(o.MaxLen, 1<<20)
	size = (size + e.page - 1) / e.page * e.page
	buf, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("fsx: allocating the I/O buffer: %w", err)
	}
	e.buf = buf
	fd, err := unix.Open(e.path, e.flags|unix.O_CREAT|unix.O_TRUNC, 0o644)
	if err != nil {
		unix.Munmap(e.buf)
		return nil, fmt.Errorf("fsx: create %s: %w", e.path, err)
	}
	e.fd = fd
	return e, nil
}

// Path is the file being exercised.
func (e *Exerciser) Path() string { return e.path }

// Size is the file's size by the model.
func (e *Exerciser) Size() int64 { return int64(len(e.model)) }

// Done is the number of operations done.
func (e *Exerciser) Done() int { return e.n }

// Result reports the operations done so far.
func (e *Exerciser) Result() Result {
	r := Result{Ops: e.n, Elapsed: time.Since(e.start), Counts: map[string]int{}}
	for k, c := range e.count {
		r.Counts[opNames[k]] = c
	}
	return r
}

// Close checks the whole file once more through a fresh open, closes it,
// and removes it unless something failed.
func (e *Exerciser) Close() error {
	if e.buf == nil {
		return e.err
	}
	if e.err == nil {
		e.err = e.reopen("final check after close and reopen")
	}
	if e.fd >= 0 {
		unix.Close(e.fd)
		e.fd = -1
	}
	unix.Munmap(e.buf)
	e.buf = nil
	if e.err == nil {
		if err := os.Remove(e.path); err != nil {
			return fmt.Errorf("fsx: removing %s: %w", e.path, err)
		}
	}
	return e.err
}

// Check compares the whole file with the model now, through the open
// descriptor (no reopen).
func (e *Exerciser) Check() error {
	if e.err != nil {
		return e.err
	}
	e.err = e.checkAll("whole-file check")
	return e.err
}

// Step does the next operation.
func (e *Exerciser) Step() error {
	if e.err != nil {
		return e.err
	}
	if e.buf == nil {
		return errors.New("fsx: Step after Close")
	}
	e.n++
	e.err = e.step()
	if e.err == nil && e.o.Progress != nil && e.n%e.o.ProgressEvery == 0 {
		fmt.Fprintf(e.o.Progress, "fsx: %d operations, size 0x%x, %s\n", e.n, len(e.model), time.Since(e.start).Round(time.Millisecond))
	}
	return e.err
}

// weights of the operations, by mode; an operation that cannot run now
// (mmap of an empty file) runs as a read.
func (e *Exerciser) pick() opKind {
	w := [nKinds]int{opWrite: 30, opRead: 25, opTruncate: 5, opFsync: 2}
	if e.o.Punch {
		w[opPunch] = 5
	}
	if e.o.Mode == Mmap {
		w[opMapRead], w[opMapWrite] = 12, 12
	}
	total := 0
	for _, x := range w {
		total += x
	}
	// Reopen as one in Options.Reopen operations.
	if e.rng.IntN(e.o.Reopen) == 0 {
		return opReopen
	}
	r := e.rng.IntN(total)
	for k, x := range w {
		if r < x {
			return opKind(k)
		}
		r -= x
	}
	panic("unreachable")
}

// length draws an operation length: often tiny or about a page, sometimes
// up to MaxLen.
func (e *Exerciser) length() int64 {
	var n int64
	switch e.rng.IntN(4) {
	case 0:
		n = 1 + e.rng.Int64N(64)
	case 1:
		n = 1 + e.rng.Int64N(min(2*e.page, e.o.MaxLen))
	default:
		n = 1 + e.rng.Int64N(e.o.MaxLen)
	}
	return min(n, e.o.MaxLen)
}

// writeRange draws where to write: anywhere, next to a page boundary (so
// the first or last page is partial), or inside the last write (overlap).
func (e *Exerciser) writeRange() (off, n int64) {
	n = e.length()
	switch e.rng.IntN(4) {
	case 0:
		pages := e.o.MaxSize / e.page
		off = e.rng.Int64N(pages+1)*e.page + e.rng.Int64N(129) - 64
	case 1:
		if e.last.len > 0 {
			off = e.last.off + e.rng.Int64N(e.last.len)
			if e.rng.IntN(2) == 0 {
				off -= e.rng.Int64N(e.page)
			}
			break
		}
		fallthrough
	default:
		off = e.rng.Int64N(e.o.MaxSize)
	}
	return e.clip(off, n)
}

// clip keeps [off, off+n) inside the size bound and, in direct mode,
// aligned.
func (e *Exerciser) clip(off, n int64) (int64, int64) {
	off = max(0, min(off, e.o.MaxSize-1))
	if e.o.Mode == Direct {
		a := e.o.Align
		off = off / a * a
		n = (n + a - 1) / a * a
	}
	n = max(1, min(n, e.o.MaxSize-off))
	return off, n
}

// readRange draws a range to read: mostly inside the file, sometimes across
// or past its end.
func (e *Exerciser) readRange() (off, n int64) {
	size := int64(len(e.model))
	n = e.length()
	switch {
	case size == 0 || e.rng.IntN(10) == 0:
		off = e.rng.Int64N(e.o.MaxSize)
	default:
		off = e.rng.Int64N(size)
	}
	return e.clip(off, n)
}

func (e *Exerciser) step() error {
	k := e.pick()
	size := int64(len(e.model))
	if k == opMapRead && size == 0 {
		k = opRead // nothing to map
	}
	r := record{n: e.n, kind: k, oldSize: size, newSize: size}
	var err error
	switch k {
	case opWrite:
		r.off, r.len = e.writeRange()
		err = e.write(&r)
	case opMapWrite:
		r.off, r.len = e.writeRange()
		err = e.mapWrite(&r)
	case opRead:
		r.off, r.len = e.readRange()
		e.log(r)
		err = e.read(r)
	case opMapRead:
		r.off = e.rng.Int64N(size)
		r.len = max(1, min(e.length(), size-r.off))
		e.log(r)
		err = e.mapRead(r)
	case opTruncate:
		r.newSize = e.rng.Int64N(e.o.MaxSize + 1)
		e.log(r)
		if err = unix.Ftruncate(e.fd, r.newSize); err == nil {
			e.resize(r.newSize)
		} else {
			err = e.sysFail(r.String(), "ftruncate", err)
		}
	case opPunch:
		r.off = e.rng.Int64N(max(size, 1))
		r.len = e.length()
		e.log(r)
		err = e.punch(r)
	case opFsync:
		e.log(r)
		if err = unix.Fsync(e.fd); err != nil {
			err = e.sysFail(r.String(), "fsync", err)
		}
	case opReopen:
		e.log(r)
		err = e.reopen(fmt.Sprintf("check after reopen (op %d)", e.n))
	}
	e.count[k]++
	return err
}

func (e *Exerciser) log(r record) {
	if len(e.hist) < histLen {
		e.hist = append(e.hist, r)
	} else {
		copy(e.hist, e.hist[1:])
		e.hist[len(e.hist)-1] = r
	}
}

// pattern is the byte operation n writes at file offset x: a different
// byte for neighbouring operations and offsets, so that a failure can tell
// which operation wrote what it read.
func pattern(n int, x int64) byte {
	return byte((uint64(x)*0x9E3779B97F4A7C15)>>56) + byte(uint64(n)*157)
}

func fill(b []byte, n int, off int64) {
	for i := range b {
		b[i] = pattern(n, off+int64(i))
	}
}

// resize sets the model's size; new bytes are zeros.
func (e *Exerciser) resize(size int64) {
	old := int64(len(e.model))
	e.model = e.model[:size]
	if size > old {
		clear(e.model[old:])
	}
}

func (e *Exerciser) apply(r record) {
	if end := r.off + r.len; end > int64(len(e.model)) {
		e.resize(end)
	}
	fill(e.model[r.off:r.off+r.len], r.n, r.off)
}

func (e *Exerciser) write(r *record) error {
	r.newSize = max(r.oldSize, r.off+r.len)
	e.log(*r)
	e.last = *r
	b := e.buf[:r.len]
	fill(b, r.n, r.off)
	done := int64(0)
	for done < r.len {
		m, err := unix.Pwrite(e.fd, b[done:], r.off+done)
		if err != nil {
			return e.sysFail(r.String(), "pwrite", err)
		}
		if m == 0 {
			return e.sysFail(r.String(), "pwrite", io.ErrShortWrite)
		}
		done += int64(m)
	}
	e.apply(*r)
	return nil
}

func (e *Exerciser) mapWrite(r *record) error {
	if end := r.off + r.len; end > r.oldSize {
		// A mapping cannot extend a file: grow it first, as programs do.
		r.newSize = end
		r.note = "(ftruncate up first)"
	}
	e.log(*r)
	e.last = *r
	if r.newSize != r.oldSize {
		if err := unix.Ftruncate(e.fd, r.newSize); err != nil {
			return e.sysFail(r.String(), "ftruncate", err)
		}
		e.resize(r.newSize)
	}
	pg := r.off / e.page * e.page
	m, err := unix.Mmap(e.fd, pg, int(r.off+r.len-pg), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return e.sysFail(r.String(), "mmap", err)
	}
	fill(m[r.off-pg:], r.n, r.off)
	err = unix.Msync(m, unix.MS_SYNC)
	if uerr := unix.Munmap(m); err == nil && uerr != nil {
		return e.sysFail(r.String(), "munmap", uerr)
	}
	if err != nil {
		return e.sysFail(r.String(), "msync", err)
	}
	e.apply(*r)
	return nil
}

func (e *Exerciser) read(r record) error {
	want := e.model[min(r.off, r.oldSize):min(r.off+r.len, r.oldSize)]
	b := e.buf[:r.len]
	got := int64(0)
	for got < r.len {
		m, err := unix.Pread(e.fd, b[got:], r.off+got)
		if err != nil {
			return e.sysFail(r.String(), "pread", err)
		}
		if m == 0 {
			break
		}
		got += int64(m)
	}
	if got != int64(len(want)) {
		return e.fail(&Failure{What: r.String(), Offset: -1, WantSize: r.oldSize, GotSize: r.off + got,
			Detail: fmt.Sprintf("pread returned %d bytes, the model has %d there (size 0x%x)", got, len(want), r.oldSize)})
	}
	return e.compare(r.String(), r.off, b[:got], want)
}

func (e *Exerciser) mapRead(r record) error {
	pg := r.off / e.page * e.page
	m, err := unix.Mmap(e.fd, pg, int(r.off+r.len-pg), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return e.sysFail(r.String(), "mmap", err)
	}
	defer unix.Munmap(m)
	return e.compare(r.String(), r.off, m[r.off-pg:], e.model[r.off:r.off+r.len])
}

func (e *Exerciser) punch(r record) error {
	err := unix.Fallocate(e.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, r.off, r.len)
	if err != nil {
		f := e.sysFail(r.String(), "fallocate(PUNCH_HOLE|KEEP_SIZE)", err)
		if errors.Is(err, unix.EOPNOTSUPP) {
			f.Detail = "this file system does not punch holes: run without punch (corral fsx --punch=false)"
		}
		return f
	}
	if r.off < r.oldSize {
		clear(e.model[r.off:min(r.off+r.len, r.oldSize)])
	}
	return nil
}

// reopen closes and opens the file (close-to-open: what close published,
// open must see) and checks all of it.
func (e *Exerciser) reopen(what string) error {
	if e.fd >= 0 {
		err := unix.Close(e.fd)
		e.fd = -1
		if err != nil {
			return e.sysFail(what, "close", err)
		}
	}
	fd, err := unix.Open(e.path, e.flags, 0)
	if err != nil {
		return e.sysFail(what, "open", err)
	}
	e.fd = fd
	return e.checkAll(what)
}

// checkAll compares the size and every byte of the file with the model.
func (e *Exerciser) checkAll(what string) error {
	var st unix.Stat_t
	if err := unix.Fstat(e.fd, &st); err != nil {
		return e.sysFail(what, "fstat", err)
	}
	size := int64(len(e.model))
	if st.Size != size {
		return e.fail(&Failure{What: what, Offset: -1, WantSize: size, GotSize: st.Size,
			Detail: fmt.Sprintf("fstat says size 0x%x, the model 0x%x", st.Size, size)})
	}
	chunk := int64(len(e.buf))
	for off := int64(0); ; off += chunk {
		m, err := unix.Pread(e.fd, e.buf[:chunk], off)
		if err != nil {
			return e.sysFail(what, fmt.Sprintf("pread at 0x%x", off), err)
		}
		got := e.buf[:m]
		want := e.model[min(off, size):min(off+int64(m), size)]
		if int64(m) > int64(len(want)) || (int64(m) < chunk && off+int64(m) != size) {
			return e.fail(&Failure{What: what, Offset: -1, WantSize: size, GotSize: off + int64(m),
				Detail: fmt.Sprintf("reading the whole file ended at 0x%x, the model's size is 0x%x", off+int64(m), size)})
		}
		if err := e.compare(what, off, got, want); err != nil {
			return err
		}
		if int64(m) < chunk {
			return nil
		}
	}
}

func (e *Exerciser) compare(what string, off int64, got, want []byte) error {
	for i := range want {
		if got[i] == want[i] {
			continue
		}
		diffs := 0
		for j := i; j < len(want); j++ {
			if got[j] != want[j] {
				diffs++
			}
		}
		w := min(len(want)-i, 32)
		f := &Failure{What: what, Offset: off + int64(i), Diffs: diffs, Range: [2]int64{off, off + int64(len(want))},
			Want: append([]byte(nil), want[i:i+w]...), Got: append([]byte(nil), got[i:i+w]...)}
		f.WantFrom = e.origin(f.Offset, f.Want)
		f.GotFrom = e.origin(f.Offset, f.Got)
		return e.fail(f)
	}
	return nil
}

// origin names the newest logged write whose data matches b at off, or
// says the bytes are zeros or from no logged operation.
func (e *Exerciser) origin(off int64, b []byte) string {
	b = b[:min(len(b), 16)]
	for i := len(e.hist) - 1; i >= 0; i-- {
		r := e.hist[i]
		if (r.kind != opWrite && r.kind != opMapWrite) || off < r.off || off+int64(len(b)) > r.off+r.len {
			continue
		}
		ok := true
		for j := range b {
			if b[j] != pattern(r.n, off+int64(j)) {
				ok = false
				break
			}
		}
		if ok {
			return "op " + strings.TrimSpace(r.String())
		}
	}
	zero := true
	for _, c := range b {
		zero = zero && c == 0
	}
	if zero {
		return "zeros (as after truncate up or punch, or never written)"
	}
	return fmt.Sprintf("no write among the last %d operations", len(e.hist))
}

func (e *Exerciser) sysFail(what, call string, err error) *Failure {
	f := &Failure{What: what, Offset: -1, Err: fmt.Errorf("%s: %w", call, err)}
	e.fail(f)
	return f
}

// fail completes f with what identifies the run and the operation log.
func (e *Exerciser) fail(f *Failure) error {
	f.Seed, f.Mode, f.Path, f.Op = e.o.Seed, e.o.Mode, e.path, e.n
	f.What = strings.TrimSpace(f.What)
	start := max(0, len(e.hist)-tailLen)
	for _, r := range e.hist[start:] {
		f.Tail = append(f.Tail, r.String())
	}
	args := []string{fmt.Sprintf("--seed %d --mode %s --ops %d", e.o.Seed, e.o.Mode, e.n)}
	if !e.o.Punch {
		args = append(args, "--punch=false")
	}
	if e.o.MaxSize != DefaultMaxSize {
		args = append(args, fmt.Sprintf("--max-size %d", e.o.MaxSize))
	}
	if e.o.MaxLen != DefaultMaxLen {
		args = append(args, fmt.Sprintf("--max-len %d", e.o.MaxLen))
	}
	if e.o.Mode == Direct && e.o.Align != DefaultAlign {
		args = append(args, fmt.Sprintf("--align %d", e.o.Align))
	}
	if e.o.Reopen != DefaultReopen {
		args = append(args, fmt.Sprintf("--reopen %d", e.o.Reopen))
	}
	f.Reproduce = "corral fsx " + strings.Join(args, " ") + " " + filepath.Dir(e.path)
	// Keep what the file should hold beside it, to compare with cmp(1).
	if os.WriteFile(e.path+".expected", e.model, 0o644) == nil {
		f.Expected = e.path + ".expected"
	}
	e.err = f
	return f
}

// Failure is what a run found wrong: a data or size difference, or an
// operation's error.
type Failure struct {
	Seed uint64
	Mode Mode
	Path string
	// Op is the number of operations done when it failed (the failing
	// one included).
	Op int
	// What is the operation or check that failed.
	What string
	// Err is a system call's error; nil for a difference.
	Err error
	// Offset is the first differing byte (-1: not a data difference),
	// in Range, the range compared; Diffs bytes of it differ. Want and Got
	// are up to 32 bytes from Offset; WantFrom and GotFrom say which
	// operation wrote them.
	Offset            int64
	Range             [2]int64
	Diffs             int
	Want, Got         []byte
	WantFrom, GotFrom string
	// WantSize and GotSize are set for a size difference.
	WantSize, GotSize int64
	Detail            string
	// Tail is the last operations, oldest first.
	Tail []string
	// Reproduce is the command that replays the same operations.
	Reproduce string
	// Expected is a file holding the model's content, if it could be
	// written.
	Expected string
}

func (f *Failure) Error() string {
	var s strings.Builder
	fmt.Fprintf(&s, "fsx: %s (seed %d, mode %s) failed at operation %d: %s\n", f.Path, f.Seed, f.Mode, f.Op, f.What)
	switch {
	case f.Err != nil:
		fmt.Fprintf(&s, "  error: %v\n", f.Err)
	case f.Offset >= 0:
		fmt.Fprintf(&s, "  data differs at offset 0x%x (%d of the %d bytes in [0x%x,0x%x) differ)\n", f.Offset, f.Diffs, f.Range[1]-f.Range[0], f.Range[0], f.Range[1])
		fmt.Fprintf(&s, "  expected: % x\n", f.Want)
		fmt.Fprintf(&s, "  got:      % x\n", f.Got)
		fmt.Fprintf(&s, "  expected bytes are from %s\n", f.WantFrom)
		fmt.Fprintf(&s, "  got bytes are from %s\n", f.GotFrom)
	default:
		fmt.Fprintf(&s, "  size: expected 0x%x, got 0x%x\n", f.WantSize, f.GotSize)
	}
	if f.Detail != "" {
		fmt.Fprintf(&s, "  %s\n", f.Detail)
	}
	fmt.Fprintf(&s, "  last %d operations (number, kind, offset, length, range, size change):\n", len(f.Tail))
	for _, t := range f.Tail {
		fmt.Fprintf(&s, "  %s\n", t)
	}
	fmt.Fprintf(&s, "  reproduce: %s", f.Reproduce)
	if f.Expected != "" {
		fmt.Fprintf(&s, "\n  expected content: %s (compare: cmp -l %s %s | head)", f.Expected, f.Expected, f.Path)
	}
	return s.String()
}

package fsx_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/pfs/fsx"
	"golang.org/x/sys/unix"
)

// localOps: enough to check the model itself against the local file
// system (ext4, tmpfs) in every mode; the mount gets more.
const localOps = 20000

// TestLocal runs every mode, punch included, on a local directory: the
// model must agree with the kernel's own file systems.
func TestLocal(t *testing.T) {
	for _, mode := range []fsx.Mode{fsx.Buffered, fsx.Mmap, fsx.Direct} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			r, err := fsx.Run(dir, fsx.Options{Seed: 1, Mode: mode, Ops: localOps, Punch: true})
			if mode == fsx.Direct && errors.Is(err, unix.EINVAL) {
				lab.Need(t, lab.Err("O_DIRECT in the temporary directory", err))
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Ops != localOps || r.TimedOut {
				t.Fatalf("ran %d of %d operations (timed out: %v)", r.Ops, localOps, r.TimedOut)
			}
			// Every kind of operation of the mode ran.
			kinds := []string{"write", "read", "truncate", "punch", "fsync", "reopen"}
			if mode == fsx.Mmap {
				kinds = append(kinds, "mapread", "mapwrite")
			}
			for _, k := range kinds {
				if r.Counts[k] == 0 {
					t.Errorf("no %s in %d operations: %v", k, r.Ops, r.Counts)
				}
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("left behind after success: %v", ents)
			}
		})
	}
}

// start returns an exerciser on a local directory after n operations.
func start(t *testing.T, seed uint64, mode fsx.Mode, n int) *fsx.Exerciser {
	t.Helper()
	e, err := fsx.New(t.TempDir(), fsx.Options{Seed: seed, Mode: mode, Punch: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	for e.Done() < n || e.Size() < 4096 {
		if err := e.Step(); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// behindItsBack changes bytes of the file through another descriptor.
func behindItsBack(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestDetectsCorruption: bytes changed behind the exerciser's back are
// found, with the offset, both sides' bytes and the operation log, so the
// exerciser cannot pass vacuously.
func TestDetectsCorruption(t *testing.T) {
	for _, mode := range []fsx.Mode{fsx.Buffered, fsx.Mmap, fsx.Direct} {
		t.Run(mode.String(), func(t *testing.T) {
			e := start(t, 3, mode, 2000)
			off := e.Size() / 2
			behindItsBack(t, e.Path(), off, []byte("corrupt"))
			err := e.Check()
			var f *fsx.Failure
			if !errors.As(err, &f) {
				t.Fatalf("corrupted file passed the check: %v", err)
			}
			if f.Offset < off || f.Offset >= off+7 || f.Err != nil {
				t.Fatalf("failure at offset 0x%x, corrupted [0x%x,0x%x): %v", f.Offset, off, off+7, err)
			}
			msg := err.Error()
			for _, want := range []string{"data differs at offset", "expected:", "got:", "last 20 operations", "reproduce: corral fsx --seed 3 --mode " + mode.String(), "no write among the last"} {
				if !strings.Contains(msg, want) {
					t.Errorf("report lacks %q:\n%s", want, msg)
				}
			}
			if len(f.Tail) != 20 {
				t.Errorf("tail of %d operations, want 20", len(f.Tail))
			}
			// The model's content is kept beside the file for cmp(1).
			if b, err := os.ReadFile(f.Expected); err != nil || int64(len(b)) != e.Size() {
				t.Errorf("expected-content file %q: %d bytes, %v", f.Expected, len(b), err)
			}
			// Later calls keep failing; the file stays for inspection.
			if e.Step() != err || e.Close() != err {
				t.Error("a failed exerciser went on")
			}
			if _, err := os.Stat(e.Path()); err != nil {
				t.Errorf("failed file removed: %v", err)
			}
		})
	}
}

// TestDetectsCorruptionWhileRunning: with the whole file flipped behind its
// back, the ordinary operations (reads, reopen checks) find it.
func TestDetectsCorruptionWhileRunning(t *testing.T) {
	e := start(t, 3, fsx.Mmap, 500)
	b, err := os.ReadFile(e.Path())
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] ^= 0xff
	}
	behindItsBack(t, e.Path(), 0, b)
	for err == nil && e.Done() < 100000 {
		err = e.Step()
	}
	var f *fsx.Failure
	if !errors.As(err, &f) || f.Offset < 0 {
		t.Fatalf("flipped file not found by %d operations: %v", e.Done(), err)
	}
	t.Logf("found after %d more operations by %s", e.Done()-500, f.What)
}

// TestDetectsSizeChange: a file grown behind its back fails on size.
func TestDetectsSizeChange(t *testing.T) {
	e := start(t, 3, fsx.Buffered, 100)
	if err := os.Truncate(e.Path(), e.Size()+1); err != nil {
		t.Fatal(err)
	}
	err := e.Close()
	var f *fsx.Failure
	if !errors.As(err, &f) || f.Offset != -1 || f.WantSize != e.Size() || f.GotSize != e.Size()+1 {
		t.Fatalf("grown file: %v", err)
	}
	if !strings.Contains(err.Error(), "size: expected") {
		t.Errorf("report: %s", err)
	}
}

// TestDeterministic: a seed replays the same operations (what makes a
// reported failure reproducible), and another seed does not.
func TestDeterministic(t *testing.T) {
	content := func(seed uint64) []byte {
		e := start(t, seed, fsx.Mmap, 3000)
		b, err := os.ReadFile(e.Path())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b, c := content(5), content(5), content(6)
	if !bytes.Equal(a, b) {
		t.Fatalf("seed 5 twice: files of %d and %d bytes differ", len(a), len(b))
	}
	if bytes.Equal(a, c) {
		t.Fatal("seeds 5 and 6 made the same file")
	}
}

// TestDuration: a run stops at its time bound, successfully.
func TestDuration(t *testing.T) {
	r, err := fsx.Run(t.TempDir(), fsx.Options{Seed: 1, Ops: 1 << 30, Duration: 200e6})
	if err != nil || !r.TimedOut || r.Ops == 0 || r.Ops >= 1<<30 {
		t.Fatalf("ran %d operations, timed out %v: %v", r.Ops, r.TimedOut, err)
	}
}

func TestBadOptions(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		o    fsx.Options
		want string
	}{
		{fsx.Options{Mode: 7}, "unknown mode"},
		{fsx.Options{Ops: -1}, "negative operation count"},
		{fsx.Options{MaxSize: 2 << 30}, "max size"},
		{fsx.Options{MaxLen: 1 << 20}, "max length"},
		{fsx.Options{Mode: fsx.Direct, Align: 1000}, "alignment 1000"},
		{fsx.Options{Mode: fsx.Direct, MaxLen: 1000}, "multiples of the alignment"},
		{fsx.Options{Name: "a/b"}, "slash"},
	} {
		if _, err := fsx.Run(dir, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error with %q", tc.o, err, tc.want)
		}
	}
	if _, err := fsx.Run(filepath.Join(dir, "missing"), fsx.Options{Ops: 1}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing directory: %v", err)
	}
	if _, err := fsx.ParseMode("fast"); err == nil || !strings.Contains(err.Error(), `"fast"`) {
		t.Errorf("ParseMode(fast): %v", err)
	}
}

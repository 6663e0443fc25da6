package iod

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

func openRAID(t *testing.T, dirs []string, mode int) *Store {
	t.Helper()
	st, err := OpenRAID(dirs, mode, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func tempDirs(t *testing.T, n int) []string {
	var ds []string
	for i := 0; i < n; i++ {
		ds = append(ds, t.TempDir())
	}
	return ds
}

func TestRAID0StripesBlocks(t *testing.T) {
	ds := tempDirs(t, 3)
	st := openRAID(t, ds, RAID0)
	k := objKey{21, 1}
	want := randBytes(7*csBlock+123, 20)
	mustWrite(t, st, k, want, 0)
	checkObj(t, st, k, want)
	// Blocks 0,3,6 in the first directory, 1,4,7 in the second: each
	// holds about a third.
	for i := range ds {
		fi, err := os.Stat(st.pathIn(i, k))
		if err != nil {
			t.Fatal(err)
		}
		if wantSize := localSize(i, 3, int64(len(want))); fi.Size() != wantSize || fi.Size() > 3*csBlock {
			t.Fatalf("directory %d holds %d bytes, want %d", i, fi.Size(), wantSize)
		}
	}
	// Truncate (cut, grow), punch and partial writes keep it right.
	want = want[:4*csBlock+9]
	if err := st.truncateObj(k, int64(len(want))); err != nil {
		t.Fatal(err)
	}
	checkObj(t, st, k, want)
	want = append(want, make([]byte, 2*csBlock)...)
	if err := st.truncateObj(k, int64(len(want))); err != nil {
		t.Fatal(err)
	}
	checkObj(t, st, k, want)
	if err := st.punch(&proto.Punch{Handle: k.ino, Index: k.idx, Off: 10, Len: 2 * csBlock}); err != nil {
		t.Fatal(err)
	}
	clear(want[10 : 10+2*csBlock])
	checkObj(t, st, k, want)
	mustWrite(t, st, k, []byte("xyz"), 5*csBlock-1)
	copy(want[5*csBlock-1:], "xyz")
	checkObj(t, st, k, want)
	// A flipped byte in the second directory reports its global offset.
	f, _ := os.OpenFile(st.pathIn(1, k), os.O_RDWR, 0)
	f.WriteAt([]byte{0x55}, 3) // local block 0 of dir 1 = global block 1
	f.Close()
	if _, err := st.readObj(k, make([]byte, 10), csBlock); !isBadMsg(err) || !strings.Contains(err.Error(), "offset 65536") {
		t.Fatalf("read: %v, want EBADMSG at 65536", err)
	}
	sr, err := st.scrub(k)
	if err != nil || len(sr.Bad) != 1 || sr.Bad[0].Off != csBlock {
		t.Fatalf("scrub: %+v, %v", sr, err)
	}
	// The listing carries the object's whole size.
	all, err := st.objects()
	if err != nil || len(all) != 1 || all[0].Size != uint64(len(want)) {
		t.Fatalf("objects: %+v, %v", all, err)
	}
	if err := st.remove(k); err != nil {
		t.Fatal(err)
	}
	for i := range ds {
		if _, err := os.Stat(st.pathIn(i, k)); !os.IsNotExist(err) {
			t.Fatalf("directory %d keeps the removed object", i)
		}
	}
}

func TestRAID0RefusesMissingDir(t *testing.T) {
	ds := tempDirs(t, 2)
	st := openRAID(t, ds, RAID0)
	mustWrite(t, st, objKey{3, 0}, randBytes(3*csBlock, 1), 0)
	st.Close()
	gone := filepath.Join(t.TempDir(), "absent")
	if _, err := OpenRAID([]string{ds[0], gone}, RAID0, quiet); err == nil || !strings.Contains(err.Error(), gone) {
		t.Fatalf("open with a missing directory: %v, want an error naming %s", err, gone)
	}
	// An empty directory in place of a member is not one of the set.
	if _, err := OpenRAID([]string{ds[0], t.TempDir()}, RAID0, quiet); err == nil || !strings.Contains(err.Error(), "not a disk of this set") {
		t.Fatalf("open with a replaced directory: %v", err)
	}
	if _, err := OpenRAID([]string{ds[0], ds[1], t.TempDir()}, RAID0, quiet); err == nil {
		t.Fatal("a RAID-0 set re-striped over 3 directories")
	}
	if _, err := OpenRAID(ds, RAID1, quiet); err == nil {
		t.Fatal("a RAID-0 set opened as RAID-1")
	}
	st2 := openRAID(t, ds, RAID0)
	checkObj(t, st2, objKey{3, 0}, randBytes(3*csBlock, 1))
}

func TestRAID1MirrorsAndSpreadsReads(t *testing.T) {
	ds := tempDirs(t, 3)
	st := openRAID(t, ds, RAID1)
	k := objKey{30, 0}
	want := randBytes(3*csBlock+1, 30)
	mustWrite(t, st, k, want, 0)
	if err := st.sync(k); err != nil {
		t.Fatal(err)
	}
	if d := st.degraded(); d != "" {
		t.Fatalf("a new set of empty directories starts degraded: %s", d)
	}
	mustWrite(t, st, k, want[:10], 0)
	for i := range ds {
		b, err := os.ReadFile(st.pathIn(i, k))
		if err != nil || string(b) != string(want) {
			t.Fatalf("directory %d: %d bytes, %v", i, len(b), err)
		}
	}
	// Each mirror's copy is read in turn: a bad block in one is served
	// from another, and scrub repairs it.
	f, _ := os.OpenFile(st.pathIn(1, k), os.O_RDWR, 0)
	f.WriteAt([]byte{want[5] ^ 1}, 5)
	f.Close()
	for i := 0; i < 6; i++ {
		checkObj(t, st, k, want)
	}
	if st.csErrors.Load() == 0 {
		t.Fatal("the bad mirror was never read")
	}
	b, _ := os.ReadFile(st.pathIn(1, k))
	if string(b) != string(want) {
		t.Fatal("scrub did not repair the bad mirror")
	}
}

func TestRAID1DegradedAndRebuilt(t *testing.T) {
	ds := tempDirs(t, 2)
	gone := filepath.Join(t.TempDir(), "disk2")
	dirs := []string{ds[0], ds[1], gone}
	st := openRAID(t, dirs, RAID1)
	st.checkMembers()
	if st.degradedCount() != 1 || !strings.Contains(st.degraded(), gone) {
		t.Fatalf("degraded: %q", st.degraded())
	}
	st.registered.Store(true)
	if err := st.Healthy(t.Context()); err == nil || !strings.Contains(err.Error(), "degraded") {
		t.Fatalf("healthz: %v", err)
	}
	k := objKey{40, 0}
	want := randBytes(2*csBlock, 40)
	mustWrite(t, st, k, want, 0)
	mustWrite(t, st, objKey{41, 0}, []byte("x"), 0)
	checkObj(t, st, k, want)
	// The disk comes back (empty): the periodic check copies it.
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	st.checkMembers()
	if st.degradedCount() != 0 {
		t.Fatalf("still degraded: %q", st.degraded())
	}
	b, err := os.ReadFile(st.pathIn(2, k))
	if err != nil || string(b) != string(want) {
		t.Fatalf("rebuilt copy: %d bytes, %v", len(b), err)
	}
	st.Close()
	// A member stale on disk (it missed writes while out) is rebuilt at
	// start; removals while it was out do not come back.
	st2 := openRAID(t, []string{ds[0], ds[1]}, RAID1)
	if err := st2.remove(objKey{41, 0}); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, st2, k, []byte("new"), 0)
	st2.Close()
	st3 := openRAID(t, dirs, RAID1)
	if !strings.Contains(st3.degraded(), gone) {
		t.Fatalf("a member that missed writes counted current: %q", st3.degraded())
	}
	st3.checkMembers()
	copy(want, "new")
	for i := range dirs {
		b, err := os.ReadFile(st3.pathIn(i, k))
		if err != nil || string(b) != string(want) {
			t.Fatalf("directory %d after rebuild: %v", i, err)
		}
		if _, err := os.Stat(st3.pathIn(i, objKey{41, 0})); !os.IsNotExist(err) {
			t.Fatalf("directory %d: a removed object came back", i)
		}
	}
}

// A RAID-1 directory that fails a write is taken out (the write succeeds
// on the others) and copied back once it works again.
func TestRAID1FailedDirTakenOutAndRebuilt(t *testing.T) {
	ds := tempDirs(t, 2)
	st := openRAID(t, ds, RAID1)
	k := objKey{50, 0}
	want := randBytes(csBlock+3, 50)
	mustWrite(t, st, k, want, 0)
	// The second disk breaks: its objects directory is no directory.
	bad := filepath.Join(ds[1], "objects")
	if err := os.RemoveAll(bad); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	k2 := objKey{51, 0}
	mustWrite(t, st, k2, want, 0)
	if !strings.Contains(st.degraded(), ds[1]) {
		t.Fatalf("degraded: %q", st.degraded())
	}
	st.checkMembers() // still broken: stays out
	if st.degradedCount() != 1 {
		t.Fatal("a broken directory counted current")
	}
	checkObj(t, st, k2, want)
	os.Remove(bad)
	st.checkMembers()
	if st.degradedCount() != 0 {
		t.Fatalf("not rebuilt: %q", st.degraded())
	}
	for _, kk := range []objKey{k, k2} {
		b, err := os.ReadFile(st.pathIn(1, kk))
		if err != nil || string(b) != string(want) {
			t.Fatalf("object %v in the rebuilt directory: %v", kk, err)
		}
	}
	// The state on disk says both are current: a restart is not degraded.
	st.Close()
	st2 := openRAID(t, ds, RAID1)
	if d := st2.degraded(); d != "" {
		t.Fatalf("after restart: %q", d)
	}
}

// Over the wire, through a real server on two mirrored directories: a
// block bad in one mirror is served from the other; bad in both, the
// client gets EBADMSG and no bytes.
func TestChecksumMismatchOverTheWire(t *testing.T) {
	metaAddr := startMeta(t, t.TempDir())
	ds := tempDirs(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, "127.0.0.1:0", Config{Data: strings.Join(ds, ","), RAID: RAID1, Meta: metaAddr, Log: quiet,
			Security: testSec, SweepGrace: -1}, func(a string, _ uint32) { addrc <- a })
	}()
	t.Cleanup(func() { cancel(); <-done })
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatal(err)
	}
	pool := proto.Pool{Security: testSec}
	defer pool.Close()
	data := randBytes(2*csBlock, 60)
	if _, err := pool.Call(ctx, addr, &proto.Write{Handle: 100, Index: 0, Off: 0, Data: data}); err != nil {
		t.Fatal(err)
	}
	flip := func(dir string) {
		p := filepath.Join(dir, "objects", "64", "100")
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte{data[csBlock+1] ^ 1}, csBlock+1)
		f.Close()
	}
	readBlock1 := func() error {
		r, err := pool.Call(ctx, addr, &proto.Read{Handle: 100, Index: 0, Off: csBlock, Len: 10})
		if err == nil && !bytes.Equal(r.(*proto.DataReply).Data, data[csBlock:csBlock+10]) {
			t.Fatal("wrong bytes")
		}
		return err
	}
	flip(ds[0])
	for i := 0; i < 4; i++ {
		if err := readBlock1(); err != nil {
			t.Fatalf("one mirror bad: %v", err)
		}
	}
	flip(ds[1])
	if err := readBlock1(); !errors.Is(err, syscall.EBADMSG) {
		t.Fatalf("both mirrors bad: %v, want EBADMSG", err)
	}
}

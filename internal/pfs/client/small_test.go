package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// TestCreateFile: a file made in one call (small ones beside a reserved
// create) reads back whole, and is an ordinary file afterwards: extended
// past the small size, overwritten, truncated, renamed, removed.
func TestCreateFile(t *testing.T) {
	fsys := pfstest.Start(t, 3)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	r := rand.New(rand.NewPCG(3, 4))
	if err := cl.MkdirAll(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := cl.Stat(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for i, size := range []int{0, 1, 4096, 4096, client.SmallFileMax, client.SmallFileMax + 1, 300 << 10} {
		name := fmt.Sprintf("f%d", i)
		data := randBytes(r, size)
		a, err := cl.CreateFile(ctx, d.Ino, name, 0o640, data, client.CreateOpts{})
		if err != nil {
			t.Fatalf("%s (%d bytes): %v", name, size, err)
		}
		if a.Size != uint64(size) || a.Mode != 0o100640 {
			t.Fatalf("%s: created %+v, want size %d mode 0100640", name, a, size)
		}
		want["/d/"+name] = data
	}
	for i := range 80 { // more than one reservation's worth
		name := fmt.Sprintf("g%d", i)
		data := randBytes(r, 1+r.IntN(8<<10))
		if _, err := cl.CreateFile(ctx, d.Ino, name, 0o644, data, client.CreateOpts{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want["/d/"+name] = data
	}
	check := func(when string) {
		t.Helper()
		for p, data := range want {
			a, err := cl.Stat(ctx, p)
			if err != nil {
				t.Fatalf("%s: %s: %v", when, p, err)
			}
			if a.Size != uint64(len(data)) {
				t.Fatalf("%s: %s: size %d, want %d", when, p, a.Size, len(data))
			}
			if got := readFile(t, cl, p, r); !bytes.Equal(got, data) {
				t.Fatalf("%s: %s reads back other bytes", when, p)
			}
		}
	}
	check("after create")

	// Exclusive: an existing name is refused and keeps its bytes.
	if _, err := cl.CreateFile(ctx, d.Ino, "f2", 0o644, []byte("other"), client.CreateOpts{}); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("CreateFile over an existing name: %v, want EEXIST", err)
	}

	// An ordinary file afterwards: extend past the small size, overwrite,
	// truncate, rename, remove.
	f, err := cl.Open(ctx, "/d/f2")
	if err != nil {
		t.Fatal(err)
	}
	tail := randBytes(r, 200<<10)
	if _, err := f.WriteAt(tail, 100<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	w := append(append([]byte(nil), want["/d/f2"]...), make([]byte, 300<<10-4096)...)
	copy(w[100<<10:], tail)
	copy(w, "head")
	want["/d/f2"] = w
	f, err = cl.Open(ctx, "/d/f3")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(ctx, 10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want["/d/f3"] = want["/d/f3"][:10]
	if err := cl.RenamePath(ctx, "/d/f1", "/moved", false); err != nil {
		t.Fatal(err)
	}
	want["/moved"] = want["/d/f1"]
	delete(want, "/d/f1")
	if err := cl.Remove(ctx, "/d/g0"); err != nil {
		t.Fatal(err)
	}
	delete(want, "/d/g0")
	check("after extend, overwrite, truncate, rename, remove")

	// WriteFile of a small file takes the same path, whole or not at all.
	small := randBytes(r, 5000)
	if err := cl.WriteFile(ctx, "/d/put", bytes.NewReader(small), 0o644, client.CreateOpts{Excl: true}, nil); err != nil {
		t.Fatal(err)
	}
	if err := cl.WriteFile(ctx, "/d/put", bytes.NewReader(small), 0o644, client.CreateOpts{Excl: true}, nil); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("WriteFile Excl over an existing file: %v, want EEXIST", err)
	}
	small2 := randBytes(r, 7000)
	if err := cl.WriteFile(ctx, "/d/put", bytes.NewReader(small2), 0o644, client.CreateOpts{}, nil); err != nil {
		t.Fatal(err)
	}
	want["/d/put"] = small2
	check("after WriteFile")
	ents, err := cl.ReadDir(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, ok := want["/d/"+e.Name]; !ok {
			t.Fatalf("/d holds %s, which nothing made (a temporary left behind?)", e.Name)
		}
	}
}

// TestReservedCreateWithoutData: a client that dies after its create of a
// reserved inode committed but before its bytes reached the I/O servers
// leaves a file whose reads fail (EIO: the object is missing), never
// zeros.
func TestReservedCreateWithoutData(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	r, err := cl.Call(ctx, &proto.Reserve{Parent: 1, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	res := r.(*proto.ReserveReply).Files[0]
	if _, err := cl.Call(ctx, &proto.Create{Parent: 1, Name: "f", Mode: 0o644, Excl: true, Reserved: res.Ino, Size: 4096}); err != nil {
		t.Fatal(err)
	}
	f, err := cl.Open(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	n, err := f.ReadAt(buf, 0)
	if err == nil || err == io.EOF {
		t.Fatalf("read of a file whose bytes never reached a server: %d bytes, %v (want an error, not zeros)", n, err)
	}
	if !proto.IsMissing(err) {
		t.Logf("error (not ErrnoMissing): %v", err)
	}
}

// TestReservedObjectsReclaimed: bytes written ahead of a create that then
// fails (the name exists) are removed from the I/O servers.
func TestReservedObjectsReclaimed(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	if _, err := cl.CreateFile(ctx, 1, "f", 0o644, []byte("first"), client.CreateOpts{}); err != nil {
		t.Fatal(err)
	}
	r, err := cl.Call(ctx, &proto.Reserve{Parent: 1, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	res := r.(*proto.ReserveReply).Files[0]
	iod := fsys.IODs[0].Addr
	if _, err := cl.Pool().Call(ctx, iod, &proto.Write{Handle: res.Ino, Index: 0, Data: []byte("ahead")}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Call(ctx, &proto.Create{Parent: 1, Name: "f", Mode: 0o644, Excl: true, Reserved: res.Ino, Size: 5}); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("create of a reserved inode over an existing name: %v, want EEXIST", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		sr, err := cl.Pool().Call(ctx, iod, &proto.ObjStat{Handle: res.Ino, Index: 0})
		if err != nil {
			t.Fatal(err)
		}
		if sr.(*proto.SizeReply).Size == 0 {
			break // gone (an absent object stats as empty)
		}
		if time.Now().After(deadline) {
			t.Fatal("the object written ahead of a failed create is still on its server after 30 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestCreateFileServerDown: with one of two copies' servers down, small
// files are still made whole on the other (the copy that missed them is
// marked stale), heal fills it once the server is back, and then the files
// read back from that server alone.
func TestCreateFileServerDown(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	r := rand.New(rand.NewPCG(5, 6))
	down := fsys.IODs[1]
	down.Kill()
	want := map[string][]byte{}
	for i := range 10 {
		name := fmt.Sprintf("f%d", i)
		data := randBytes(r, 1+r.IntN(16<<10))
		a, err := cl.CreateFile(ctx, 1, name, 0o644, data, client.CreateOpts{})
		if err != nil {
			t.Fatalf("%s with a server down: %v", name, err)
		}
		if a.Replicas != 2 {
			t.Fatalf("%s: %d copies, want 2", name, a.Replicas)
		}
		want["/"+name] = data
	}
	for p, data := range want {
		a, err := cl.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if a.Stale == 0 {
			t.Fatalf("%s: no stale record, but one copy's server was down", p)
		}
		if got := readFile(t, cl, p, r); !bytes.Equal(got, data) {
			t.Fatalf("%s reads back other bytes with a server down", p)
		}
	}
	back, err := fsys.StartIOD(ctx, 1, down.Addr)
	if err != nil {
		t.Fatal(err)
	}
	fsys.IODs[1] = back
	deadline := time.Now().Add(90 * time.Second)
	for p := range want {
		for {
			a, err := cl.Stat(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if a.Stale == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still has %d stale records 90 s after its server came back", p, a.Stale)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	fsys.IODs[0].Kill()
	for p, data := range want {
		if got := readFile(t, cl, p, r); !bytes.Equal(got, data) {
			t.Fatalf("%s: the healed copy reads back other bytes", p)
		}
	}
}

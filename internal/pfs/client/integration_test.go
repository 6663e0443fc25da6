package client_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// writeFile writes data in random-sized pieces, in order, then closes.
func writeFile(t *testing.T, cl *client.Client, p string, data []byte, o client.CreateOpts, r *rand.Rand) {
	t.Helper()
	ctx := ctxT(t)
	f, err := cl.CreatePath(ctx, p, 0o644, o)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); {
		n := min(len(data)-off, 1+r.IntN(3<<20))
		if _, err := f.WriteAt(data[off:off+n], int64(off)); err != nil {
			t.Fatal(err)
		}
		off += n
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, cl *client.Client, p string, r *rand.Rand) []byte {
	t.Helper()
	f, err := cl.Open(ctxT(t), p)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, f.Size())
	for off := 0; off < len(out); {
		n := min(len(out)-off, 1+r.IntN(5<<20))
		got, err := f.ReadAt(out[off:off+n], int64(off))
		if err != nil && !(err == io.EOF && off+got == len(out)) {
			t.Fatalf("%s: read at %d: %v", p, off, err)
		}
		off += got
	}
	return out
}

func TestRandomFilesRoundTrip(t *testing.T) {
	fsys := pfstest.Start(t, 3)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	r := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, 4095, 4096, 65535, 65537, 1 << 20, 3<<20 + 17, 64 << 20}
	for i := 0; i < 6; i++ {
		sizes = append(sizes, r.IntN(8<<20))
	}
	stripes := []uint32{4 << 10, 64 << 10, 100 * 512, 1 << 20, 4 << 20}
	for i, size := range sizes {
		o := client.CreateOpts{StripeSize: stripes[r.IntN(len(stripes))], StripeCount: uint32(1 + r.IntN(3))}
		p := fmt.Sprintf("/f%d", i)
		data := randBytes(r, size)
		writeFile(t, cl, p, data, o, r)
		a, err := cl.Stat(ctxT(t), p)
		if err != nil {
			t.Fatal(err)
		}
		if a.Size != uint64(size) || a.StripeSize != o.StripeSize || len(a.Servers) != int(o.StripeCount) {
			t.Fatalf("%s: attr %+v, want size %d layout %+v", p, a, size, o)
		}
		if got := readFile(t, cl, p, r); !bytes.Equal(got, data) {
			t.Fatalf("%s (size %d, layout %+v): read back differs", p, size, o)
		}
	}
}

// TestSparseAndTruncate checks holes, overwrites and truncation against a
// byte slice model.
func TestSparseAndTruncate(t *testing.T) {
	fsys := pfstest.Start(t, 3)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	r := rand.New(rand.NewPCG(3, 4))
	f, err := cl.CreatePath(ctx, "/sparse", 0o644, client.CreateOpts{StripeSize: 4096, StripeCount: 3})
	if err != nil {
		t.Fatal(err)
	}
	var model []byte
	for step := 0; step < 300; step++ {
		switch r.IntN(4) {
		case 0, 1: // write somewhere, maybe past the end
			off := r.IntN(200 << 10)
			data := randBytes(r, 1+r.IntN(20000))
			if _, err := f.WriteAt(data, int64(off)); err != nil {
				t.Fatal(err)
			}
			if need := off + len(data); need > len(model) {
				model = append(model, make([]byte, need-len(model))...)
			}
			copy(model[off:], data)
		case 2: // truncate, shrinking or growing
			size := r.IntN(150 << 10)
			if err := f.Truncate(ctx, int64(size)); err != nil {
				t.Fatal(err)
			}
			if size < len(model) {
				model = model[:size]
			} else {
				model = append(model, make([]byte, size-len(model))...)
			}
		case 3: // read a range
			off := r.IntN(len(model) + 1)
			buf := make([]byte, r.IntN(30000))
			n, err := f.ReadAt(buf, int64(off))
			want := model[off:min(off+len(buf), len(model))]
			if n != len(want) || !bytes.Equal(buf[:n], want) || (n < len(buf) && err != io.EOF) {
				t.Fatalf("step %d: read %d at %d: got %d bytes err %v, want %d", step, len(buf), off, n, err, len(want))
			}
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, cl, "/sparse", r); !bytes.Equal(got, model) {
		t.Fatalf("after close: got %d bytes, want %d, differ", len(got), len(model))
	}
}

func TestTwoClients(t *testing.T) {
	fsys := pfstest.Start(t, 3)
	a, b := client.New(fsys.Meta.Addr), client.New(fsys.Meta.Addr)
	defer a.Close()
	defer b.Close()
	var wg sync.WaitGroup
	datas := make([][][]byte, 2)
	for ci, cl := range []*client.Client{a, b} {
		r := rand.New(rand.NewPCG(uint64(ci), 9))
		datas[ci] = make([][]byte, 8)
		for i := range datas[ci] {
			datas[ci][i] = randBytes(r, r.IntN(2<<20))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, d := range datas[ci] {
				writeFile(t, cl, fmt.Sprintf("/c%d-%d", ci, i), d, client.CreateOpts{}, r)
			}
		}()
	}
	wg.Wait()
	r := rand.New(rand.NewPCG(5, 5))
	// Close-to-open: each client sees the other's files once closed.
	for ci, cl := range []*client.Client{b, a} {
		for i, d := range datas[ci] {
			if got := readFile(t, cl, fmt.Sprintf("/c%d-%d", ci, i), r); !bytes.Equal(got, d) {
				t.Fatalf("client %d file %d differs when read by the other client", ci, i)
			}
		}
	}
	ents, err := a.ReadDir(ctxT(t), "/")
	if err != nil || len(ents) != 16 {
		t.Fatalf("readdir: %d entries, %v", len(ents), err)
	}
}

func TestKillMetaAndIOD(t *testing.T) {
	fsys := pfstest.Start(t, 3)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	r := rand.New(rand.NewPCG(7, 8))
	want := map[string][]byte{}
	write := func(n int) {
		for i := 0; i < n; i++ {
			p := fmt.Sprintf("/d%d/f%d", i%3, len(want))
			if err := cl.MkdirAll(ctx, p[:3], 0o755); err != nil {
				t.Fatal(err)
			}
			want[p] = randBytes(r, r.IntN(1<<20))
			writeFile(t, cl, p, want[p], client.CreateOpts{Replicas: 1}, r) // one copy: reads needing a dead server fail
		}
	}
	check := func(when string) {
		for p, d := range want {
			if got := readFile(t, cl, p, r); !bytes.Equal(got, d) {
				t.Fatalf("%s: %s differs", when, p)
			}
		}
	}
	write(20)
	if err := cl.RenamePath(ctx, "/d0/f0", "/d1/moved", false); err != nil {
		t.Fatal(err)
	}
	want["/d1/moved"] = want["/d0/f0"]
	delete(want, "/d0/f0")

	// kill -9 the metadata server: every acknowledged change must be there.
	fsys.Meta.Kill()
	if _, err := cl.Stat(ctx, "/d1/moved"); err == nil || !strings.Contains(err.Error(), fsys.Meta.Addr) {
		t.Fatalf("stat with meta down: %v (want an error naming %s)", err, fsys.Meta.Addr)
	}
	m, err := fsys.StartMeta(ctx, fsys.Meta.Addr)
	if err != nil {
		t.Fatal(err)
	}
	fsys.Meta = m
	check("after meta kill -9")
	write(5)

	// kill -9 an I/O server: reads needing it fail naming it, and after a
	// restart everything synced is there.
	dead := fsys.IODs[1]
	dead.Kill()
	var sawErr bool
	for p := range want {
		f, err := cl.Open(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		// Files written since meta's restart may lie on the servers that
		// had registered again by then only: take one that spans the dead one.
		if f.Size() < int64(f.Layout().StripeSize)*int64(len(f.Layout().Servers)) || !slices.Contains(f.Addrs(), dead.Addr) {
			f.Close()
			continue
		}
		_, err = f.ReadAt(make([]byte, f.Size()), 0)
		if err == nil || !strings.Contains(err.Error(), dead.Addr) {
			t.Fatalf("read %s with %s down: %v (want an error naming it)", p, dead.Addr, err)
		}
		sawErr = true
		break
	}
	if !sawErr {
		t.Fatal("no file large enough to span every server")
	}
	p, err := fsys.StartIOD(ctx, 1, dead.Addr)
	if err != nil {
		t.Fatal(err)
	}
	fsys.IODs[1] = p
	check("after iod kill -9")
}

func TestNameSpaceErrors(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	if _, err := cl.Open(ctx, "/nope"); !errors.Is(err, fs.ErrNotExist) || err.Error() != "open /nope: no such file or directory" && !strings.Contains(err.Error(), "/nope") {
		t.Fatalf("open missing: %v", err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cl.MkdirAll(ctx, "/a/b/c", 0o755))
	f, err := cl.CreatePath(ctx, "/a/file", 0o644, client.CreateOpts{})
	must(err)
	must(f.Close())
	cases := []struct {
		err   error
		errno syscall.Errno
	}{
		{cl.MkdirPath(ctx, "/a/b", 0o755), syscall.EEXIST},
		{cl.MkdirPath(ctx, "/a/file/x", 0o755), syscall.ENOTDIR},
		{cl.Remove(ctx, "/a"), syscall.ENOTEMPTY},
		{cl.RenamePath(ctx, "/a", "/a/b/c/d", false), syscall.EINVAL},
		{cl.RenamePath(ctx, "/a/file", "/a/b", false), syscall.EISDIR},
		{cl.RenamePath(ctx, "/a/b", "/a/file", false), syscall.ENOTDIR},
		{cl.MkdirPath(ctx, "/"+strings.Repeat("x", 300), 0o755), syscall.ENAMETOOLONG},
	}
	for i, c := range cases {
		if !errors.Is(c.err, c.errno) {
			t.Errorf("case %d: got %v, want %v", i, c.err, c.errno)
		}
	}
	// Directory link counts follow subdirectories.
	a, _ := cl.Stat(ctx, "/a")
	if a.Nlink != 3 {
		t.Errorf("/a nlink %d, want 3", a.Nlink)
	}
	must(cl.RenamePath(ctx, "/a/b", "/b", false))
	a, _ = cl.Stat(ctx, "/a")
	root, _ := cl.Stat(ctx, "/")
	if a.Nlink != 2 || root.Nlink != 4 {
		t.Errorf("after moving /a/b to /: /a nlink %d root nlink %d, want 2 and 4", a.Nlink, root.Nlink)
	}
	// Symbolic links inside paths are followed.
	must(cl.SymlinkPath(ctx, "/b/c", "/lnk"))
	must(cl.MkdirPath(ctx, "/lnk/inner", 0o755))
	if _, err := cl.Stat(ctx, "/b/c/inner"); err != nil {
		t.Fatal(err)
	}
	// A rename over a file frees its space and keeps the name atomic.
	must(cl.RemoveAll(ctx, "/a"))
	if _, err := cl.Stat(ctx, "/a/file"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after rm -r: %v", err)
	}
}

func TestMissingServers(t *testing.T) {
	// A metadata server without I/O servers refuses to create files and says
	// why.
	fsys := pfstest.Start(t, 0)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	_, err := cl.CreatePath(ctx, "/x", 0o644, client.CreateOpts{})
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "no I/O servers") {
		t.Fatalf("create without servers: %v", err)
	}
	// A client of a metadata server that is not there names the address.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	dead := client.New(addr, client.WithTimeout(300*time.Millisecond))
	defer dead.Close()
	if _, err := dead.Stat(ctx, "/"); err == nil || !strings.Contains(err.Error(), addr) || !errors.Is(err, proto.ErrUnavailable) ||
		!errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("stat via dead meta: %v", err)
	}
}

// TestGarbageToDaemons sends malformed bytes to every daemon: each closes
// that connection, logs why, and goes on serving.
func TestGarbageToDaemons(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	hdr := func(magic string, ver, op byte, n uint32) []byte {
		return append([]byte(magic), ver, op, 1, 0, 0, 0, byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
	}
	inputs := map[string][]byte{
		"garbage":   []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"version":   hdr("CR", 99, byte(proto.OpGetAttr), 8),
		"oversized": hdr("CR", proto.Version, byte(proto.OpWrite), 1<<31),
		"unknownop": hdr("CR", proto.Version, 200, 0),
		"truncated": append(hdr("CR", proto.Version, byte(proto.OpGetAttr), 8), 1, 2, 3),
		"badbody":   append(hdr("CR", proto.Version, byte(proto.OpWalk), 4), 0xff, 0xff, 0xff, 0x7f),
	}
	for _, p := range append(fsys.IODs, fsys.Meta) {
		for name, b := range inputs {
			raw, err := net.Dial("tcp", p.Addr)
			if err != nil {
				t.Fatal(err)
			}
			// Inside TLS, as every peer speaks by default: the garbage
			// reaches the daemon's frame reader.
			c := tls.Client(raw, proto.BoundClientTLS())
			c.Write(b)
			if name == "truncated" {
				c.CloseWrite()
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadAll(c); err != nil {
				t.Errorf("%s/%s: connection not closed by the server: %v", p.Name, name, err)
			}
			c.Close()
		}
		log, _ := os.ReadFile(p.Log)
		if n := strings.Count(string(log), "closing connection"); n < len(inputs) {
			t.Errorf("%s logged %d closed connections, want %d:\n%s", p.Name, n, len(inputs), log)
		}
	}
	// Still serving.
	data := []byte("still here")
	writeFile(t, cl, "/after", data, client.CreateOpts{}, rand.New(rand.NewPCG(1, 1)))
	if got := readFile(t, cl, "/after", rand.New(rand.NewPCG(1, 1))); !bytes.Equal(got, data) {
		t.Fatal("daemon broken after garbage")
	}
	_ = ctx
}

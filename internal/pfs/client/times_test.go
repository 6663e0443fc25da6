package client_test

import (
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// A file's mtime through the library: the time of its last write, published
// at close; an explicit time set after the writes (write, set, close: cp -a
// and tar) is kept; a write after it moves it again; a truncate's time wins
// over earlier writes'.
func TestTimesLibrary(t *testing.T) {
	fsys := pfstest.Start(t, 3)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	const old = 1_222_222_222_000_000_456
	const pause = 200 * time.Millisecond
	// window is when an operation ran (both clocks are this machine's).
	window := func(fn func()) (lo, hi int64) {
		lo = time.Now().UnixNano()
		fn()
		return lo, time.Now().UnixNano()
	}
	write := func(f *client.File, off int64) {
		if _, err := f.WriteAt(make([]byte, 100<<10), off); err != nil {
			t.Fatal(err)
		}
	}
	setMtime := func(f *client.File, mtime int64) {
		if _, err := cl.SetAttr(ctx, &proto.SetAttr{Ino: f.Ino(), Mask: proto.SetMtime | proto.SetAtime, Atime: mtime, Mtime: mtime}); err != nil {
			t.Fatal(err)
		}
	}
	closeAndStat := func(f *client.File, p string) proto.Attr {
		time.Sleep(pause) // the close's time differs from any before it
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		a, err := cl.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, o := range []client.CreateOpts{{StripeCount: 3}, {StripeCount: 3, Replicas: 2}} {
		create := func(p string) *client.File {
			f, err := cl.CreatePath(ctx, p, 0o644, o)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		name := "plain"
		if o.Replicas > 1 {
			name = "replicated"
		}
		t.Run(name, func(t *testing.T) {
			f := create("/" + name + "-write")
			lo, hi := window(func() { write(f, 0) })
			if a := closeAndStat(f, "/"+name+"-write"); a.Mtime < lo || a.Mtime > hi || a.Size != 100<<10 {
				t.Errorf("write, close: mtime %d size %d, want the write's time in [%d, %d] and size %d", a.Mtime, a.Size, lo, hi, 100<<10)
			}

			f = create("/" + name + "-set")
			write(f, 0)
			setMtime(f, old)
			if a := closeAndStat(f, "/"+name+"-set"); a.Mtime != old || a.Atime != old || a.Size != 100<<10 {
				t.Errorf("write, set, close: mtime %d atime %d size %d, want %d, %d, %d", a.Mtime, a.Atime, a.Size, old, old, 100<<10)
			}

			f = create("/" + name + "-set-write")
			write(f, 0)
			setMtime(f, old)
			lo, hi = window(func() { write(f, 100<<10) })
			if a := closeAndStat(f, "/"+name+"-set-write"); a.Mtime < lo || a.Mtime > hi || a.Atime != old || a.Size != 200<<10 {
				t.Errorf("write, set, write, close: mtime %d atime %d size %d, want the last write's time in [%d, %d], %d, %d", a.Mtime, a.Atime, a.Size, lo, hi, old, 200<<10)
			}

			f = create("/" + name + "-trunc")
			write(f, 0)
			time.Sleep(pause)
			lo, hi = window(func() {
				if err := f.Truncate(ctx, 10); err != nil {
					t.Fatal(err)
				}
			})
			if a := closeAndStat(f, "/"+name+"-trunc"); a.Mtime < lo || a.Mtime > hi || a.Size != 10 {
				t.Errorf("write, truncate, close: mtime %d size %d, want the truncate's time in [%d, %d], 10", a.Mtime, a.Size, lo, hi)
			}
		})
	}
}

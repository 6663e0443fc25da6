package fault

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
)

// failingReader gives n bytes, then an error, as a source that breaks
// mid-copy (a full local disk, a dropped pipe).
type failingReader struct{ n int }

var errSource = errors.New("source broke")

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errSource
	}
	k := min(len(p), r.n)
	clear(p[:k])
	r.n -= k
	return k, nil
}

// A create + write that fails leaves no file and no objects, and the file
// it was to replace stays whole.
func TestFailedWriteLeavesNothing(t *testing.T) {
	c := newCluster(t, 2)
	c.mustPut("/keep", 300<<10)
	before := c.objectBytes(0) + c.objectBytes(1)
	cl := client.New(c.metaAddr)
	defer cl.Close()
	ctx := context.Background()

	for _, p := range []string{"/new", "/keep"} {
		err := cl.WriteFile(ctx, p, &failingReader{n: 20 << 20}, 0o644, client.CreateOpts{}, nil)
		if !errors.Is(err, errSource) {
			t.Fatalf("WriteFile %s with a failing source: %v", p, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := cl.WriteFile(cctx, "/cancelled", io.MultiReader(bytes.NewReader(make([]byte, 9<<20)), &failingReader{}), 0o644, client.CreateOpts{}, nil); err == nil {
		t.Fatal("WriteFile with a cancelled context succeeded")
	}
	out := c.mustFS("ls", "/")
	if strings.TrimSpace(out) != "keep" {
		t.Fatalf("left behind:\n%s", out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for c.objectBytes(0)+c.objectBytes(1) != before {
		if time.Now().After(deadline) {
			t.Fatalf("objects of failed writes not reclaimed: %d bytes, want %d", c.objectBytes(0)+c.objectBytes(1), before)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if failed := c.verify(); len(failed) > 0 {
		t.Fatalf("unreadable: %v", failed)
	}
}

// createMidway creates a file at a path of the file system after n bytes of
// its own have been read: another writer taking the name during an upload.
type createMidway struct {
	n    int
	done bool
	make func()
}

func (r *createMidway) Read(p []byte) (int, error) {
	if r.n == 0 {
		if !r.done {
			r.done = true
			r.make()
		}
		return 0, io.EOF
	}
	k := min(len(p), r.n)
	clear(p[:k])
	r.n -= k
	return k, nil
}

// An exclusive WriteFile (fs put without --force) never replaces a file,
// also not one created at its name while its bytes were going up: it fails
// with EEXIST, the other writer's file stays and the temporary goes.
func TestExclusivePutNeverReplaces(t *testing.T) {
	c := newCluster(t, 2)
	cl := client.New(c.metaAddr)
	defer cl.Close()
	ctx := context.Background()
	other := []byte("the other writer's file\n")
	src := &createMidway{n: 9 << 20, make: func() {
		if err := cl.WriteFile(ctx, "/taken", bytes.NewReader(other), 0o644, client.CreateOpts{}, nil); err != nil {
			t.Error(err)
		}
	}}
	err := cl.WriteFile(ctx, "/taken", src, 0o644, client.CreateOpts{Excl: true}, nil)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("exclusive put over a file created meanwhile: %v, want EEXIST", err)
	}
	f, err := cl.Open(ctx, "/taken")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	f.Close()
	if err != nil || !bytes.Equal(got, other) {
		t.Fatalf("/taken holds %d bytes (%v), want the other writer's %d", len(got), err, len(other))
	}
	ents, err := cl.ReadDir(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name, "corral-put") {
			t.Errorf("temporary left behind: %s", e.Name)
		}
	}
}

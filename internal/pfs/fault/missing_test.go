package fault

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
)

// An object file removed behind the file system's back is never read as
// zeros: with two copies every read is right (the other copy serves it)
// and heal writes the lost one again; with one copy the read fails with
// EIO. The I/O server logs the absence.
func TestMissingObjectNeverZeros(t *testing.T) {
	for _, r := range []int{1, 2} {
		t.Run("replicas"+strconv.Itoa(r), func(t *testing.T) {
			c := replicated(t, 3, r)
			w := newWriter(c)
			if err := w.write("/r/f", 1<<20); err != nil {
				t.Fatal(err)
			}
			ino := c.ino("/r/f")
			victim, removed := -1, ""
			for i := range c.iods {
				if fs := c.objectFiles(i, ino); len(fs) > 0 {
					victim, removed = i, fs[0]
					break
				}
			}
			if victim < 0 {
				t.Fatal("no object file of /r/f found")
			}
			if err := os.Remove(removed); err != nil {
				t.Fatal(err)
			}
			os.Remove(removed + ".crc")
			if r == 1 {
				// The only copy is gone: every read of the whole file
				// fails, with EIO, and returns no bytes.
				for range 3 {
					got, err := readFile(w.cl, "/r/f")
					if !errors.Is(err, syscall.EIO) {
						t.Fatalf("read with the only copy's object removed: %d bytes, err %v; want EIO", len(got), err)
					}
				}
				c.iods[victim].waitLog(t, "object absent", 10*time.Second)
				return
			}
			// Each unit is read from a copy chosen at random: read often
			// enough that the removed copy is chosen.
			for range 8 {
				w.readAll(t, "with one copy's object removed")
			}
			c.iods[victim].waitLog(t, "object absent", 10*time.Second)
			// Heal writes the lost copy again: fsck finds nothing, and the
			// object file is back.
			for deadline := time.Now().Add(30 * time.Second); ; {
				out, rc := c.fs("fsck", "--grace", "0s", "/")
				if rc == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("fsck 30 s after the missing object was read: exit %d:\n%s", rc, out)
				}
				time.Sleep(300 * time.Millisecond)
			}
			if _, err := os.Stat(removed); err != nil {
				t.Errorf("the removed object was not healed: %v", err)
			}
			w.readAll(t, "after heal")
		})
	}
}

// A sparse file's holes (ranges never written, whole columns among them)
// read as zeros with no error: a hole is decided by what the file holds,
// not mistaken for a missing object.
func TestSparseHolesStillZeros(t *testing.T) {
	for _, r := range []int{1, 2} {
		t.Run("replicas"+strconv.Itoa(r), func(t *testing.T) {
			c := replicated(t, 3, r)
			cl := client.New(c.metaAddr)
			t.Cleanup(cl.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			f, err := cl.CreatePath(ctx, "/r/sparse", 0o644, client.CreateOpts{})
			if err != nil {
				t.Fatal(err)
			}
			// Two stripe units far apart: the columns between them are
			// never written.
			a, b := make([]byte, 64<<10), make([]byte, 64<<10)
			rand.Read(a)
			rand.Read(b)
			far := int64(10 << 20)
			if _, err := f.WriteAt(a, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(b, far); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			want := make([]byte, far+int64(len(b)))
			copy(want, a)
			copy(want[far:], b)
			cl2 := client.New(c.metaAddr) // a reader with no state of the writer
			t.Cleanup(cl2.Close)
			got, err := readFile(cl2, "/r/sparse")
			if err != nil {
				t.Fatalf("read of a sparse file: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("sparse file: %d bytes differ", diff(got, want))
			}
		})
	}
}

// readFile reads remote p whole through cl.
func readFile(cl *client.Client, p string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f, err := cl.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
}

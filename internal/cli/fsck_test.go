package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// TestFsck seeds damage into a real file system (a metadata server and two
// I/O servers) and checks what corral fs fsck reports, repairs and exits
// with: an object longer than its file says (mismatch), stray objects
// (orphans), flipped bytes (corrupt: the iod's Scrub sees them), bad arguments
// and an unreachable metadata server (8), and the --json shape.
func TestFsck(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	fs := func(args ...string) (int, string, string) {
		t.Helper()
		return corral(t, "", append([]string{"fs", "-q", "--meta", fsys.Meta.Addr, "--secret-file", fsys.SecretFile}, args...)...)
	}
	data := make([]byte, 10000)
	for i := range data {
		data[i] = byte(i)
	}
	local := filepath.Join(t.TempDir(), "a")
	os.WriteFile(local, data, 0o644)
	if code, _, errs := fs("put", "--stripe-size", "4K", "--stripe-count", "2", "--replicas", "1", local, "/a"); code != 0 {
		t.Fatalf("put: exit %d: %s", code, errs)
	}
	code, out, errs := fs("fsck")
	if code != 0 || !strings.Contains(out, "1 files, 2 copies") || !strings.Contains(out, "clean") {
		t.Fatalf("fsck of a sound file system: exit %d, stdout %q, stderr %q; want 0 and clean", code, out, errs)
	}

	_, out, _ = fs("stat", "/a")
	m := regexp.MustCompile(`Inode: (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no inode in stat output %q", out)
	}
	var ino uint64
	fmt.Sscan(m[1], &ino)
	// objectFile is the data file of object (n, idx) on whichever iod has it
	// ("" when none has).
	objectPath := func(iod int, n uint64, idx int) string {
		name := fmt.Sprint(n)
		if idx != 0 {
			name += fmt.Sprintf(".%d", idx)
		}
		return filepath.Join(fsys.Data, fmt.Sprintf("iod%d", iod), "objects", fmt.Sprintf("%02x", n&0xff), name)
	}
	objectFile := func(n uint64, idx int) string {
		for i := 1; i <= 2; i++ {
			if _, err := os.Stat(objectPath(i, n, idx)); err == nil {
				return objectPath(i, n, idx)
			}
		}
		t.Fatalf("object (%d, %d) on no iod", n, idx)
		return ""
	}
	// Column 0 holds units 0 and 2: 4096 + 1808 bytes. 100 bytes more is a
	// mismatch (nothing to heal from with one copy: left).
	col0 := objectFile(ino, 0)
	f, err := os.OpenFile(col0, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 100))
	f.Close()
	// A stray object, made two hours ago: an orphan.
	stray := objectPath(2, 987654, 0)
	os.MkdirAll(filepath.Dir(stray), 0o755)
	os.WriteFile(stray, []byte("left by a crash"), 0o644)
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(stray, old, old)

	code, out, _ = fs("fsck", "--json")
	var rep struct {
		Files  int
		Counts map[string]int
		Damage []struct {
			Path   string
			Ino    uint64
			Column int
			Server uint32
			Kind   string
			Ranges []struct{ Off, Len uint64 }
			Repair string
		}
		Repaired, Left, Exit int
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v in %q", err, out)
	}
	for _, k := range []string{"missing", "mismatch", "stale", "corrupt", "orphaned", "unreadable"} {
		if _, ok := rep.Counts[k]; !ok {
			t.Errorf("--json counts lack %q: %v", k, rep.Counts)
		}
	}
	if code != 4 || rep.Exit != 4 || rep.Files != 1 || rep.Counts["mismatch"] != 1 || rep.Counts["orphaned"] != 1 || len(rep.Damage) != 2 || rep.Left != 2 {
		t.Fatalf("fsck --json after damage: exit %d, report %+v; want 4, one mismatch and one orphan", code, rep)
	}
	if d := rep.Damage[1]; d.Path != "/a" || d.Column != 0 || d.Kind != "mismatch" || len(d.Ranges) != 1 || d.Ranges[0].Off != 5904 || d.Ranges[0].Len != 100 {
		t.Errorf("mismatch entry %+v; want /a column 0 [5904, +100)", d)
	}
	if d := rep.Damage[0]; d.Kind != "orphaned" || d.Ino != 987654 || d.Path != "" {
		t.Errorf("orphan entry %+v; want object of 987654", d)
	}

	code, out, _ = fs("fsck", "--repair")
	if code != 4 || !strings.Contains(out, "orphan: file 987654 column 0 on server") || !strings.Contains(out, ": removed") ||
		!strings.Contains(out, "/a: column 0 server") || !strings.Contains(out, "1 repaired, 1 left") {
		t.Fatalf("fsck --repair: exit %d, stdout %q; want 4, the orphan removed, the mismatch left", code, out)
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("orphan still there after --repair: %v", err)
	}
	// The mismatch undone, a new orphan: repaired, none left, exit 1.
	os.Truncate(col0, 4096+1808)
	os.WriteFile(stray, []byte("again"), 0o644)
	os.Chtimes(stray, old, old)
	if code, out, _ = fs("fsck", "--repair"); code != 1 || !strings.Contains(out, "1 repaired, none left") {
		t.Fatalf("fsck --repair of one orphan: exit %d, stdout %q; want 1", code, out)
	}
	if code, out, _ = fs("fsck", "/"); code != 0 {
		t.Fatalf("fsck after repair: exit %d, stdout %q; want 0", code, out)
	}

	for _, args := range [][]string{{"fsck", "/a", "/b"}, {"fsck", "--bogus"}, {"fsck", "--workers", "0"}, {"fsck", "/nonexistent"}} {
		if code, _, errs := fs(args...); code != 8 || errs == "" {
			t.Errorf("corral fs %v: exit %d, stderr %q; want 8 with a reason", args, code, errs)
		}
	}
	code, _, errs = corral(t, "", "fs", "--meta", "127.0.0.1:1", "--secret-file", fsys.SecretFile, "fsck")
	if code != 8 || !strings.Contains(errs, "cannot reach metadata server") {
		t.Errorf("fsck with the metadata server unreachable: exit %d, stderr %q; want 8", code, errs)
	}

	t.Run("stale", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl := client.New(fsys.Meta.Addr)
		defer cl.Close()
		if code, _, errs := fs("put", "--replicas", "2", local, "/b"); code != 0 {
			t.Fatalf("put: exit %d: %s", code, errs)
		}
		a, err := cl.Stat(ctx, "/b")
		if err != nil {
			t.Fatal(err)
		}
		col := append([]uint32{a.Servers[0]}, a.Extra[:a.Replicas-1]...)
		// Meta's healer repairs the copy within about a second, so a check
		// counts only when the record was still there after fsck ran.
		for try := 0; ; try++ {
			if _, err := cl.Call(ctx, &proto.MarkStale{Ino: a.Ino, Index: 0, Column: col, Servers: col[1:], Off: 0, Len: 4096}); err != nil {
				t.Fatal(err)
			}
			code, out, _ := fs("fsck")
			r, err := cl.Call(ctx, &proto.GetStale{Ino: a.Ino})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.(*proto.StaleReply).Recs) == 0 {
				if try < 5 {
					continue // healed before or during fsck: try again
				}
				t.Skip("the stale record was healed before fsck could see it, 6 times")
			}
			if code != 4 || !strings.Contains(out, "stale [0-4096]") {
				t.Errorf("fsck after MarkStale: exit %d, stdout %q; want 4 and the stale range", code, out)
			}
			break
		}
	})

	t.Run("corrupt", func(t *testing.T) {
		b, err := os.ReadFile(col0)
		if err != nil {
			t.Fatal(err)
		}
		b[10] ^= 0xff
		os.WriteFile(col0, b, 0o644)
		code, out, _ := fs("fsck")
		if code != 4 || !strings.Contains(out, "corrupt") {
			t.Errorf("fsck after flipping a byte: exit %d, stdout %q; want 4 and corrupt", code, out)
		}
	})
}

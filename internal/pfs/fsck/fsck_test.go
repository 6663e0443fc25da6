package fsck

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// fake is a file system in memory: the metadata server's files and stale
// records, and the I/O servers' objects. It answers the requests fsck
// sends as the real servers do (docs/pfs-protocol.md).
type fake struct {
	mu      sync.Mutex
	attrs   map[string]proto.Attr // by path
	stale   map[uint64][]proto.StaleRec
	servers []proto.ServerInfo
	objs    map[string]map[proto.ObjRef]*obj // by server address
	noScrub map[string]bool
	// refFirstOnly: RefCheck counts only first copies (a metadata server
	// from before replicas).
	refFirstOnly bool
	heals        []*proto.Heal
	removes      []proto.ObjRef
}

type obj struct {
	size  uint64
	mtime int64
	bad   []proto.Extent
}

const stripe = 4096

func newFake(nservers int) *fake {
	f := &fake{attrs: map[string]proto.Attr{"/": {Ino: 1, Mode: syscall.S_IFDIR | 0o755}}, stale: map[uint64][]proto.StaleRec{},
		objs: map[string]map[proto.ObjRef]*obj{}, noScrub: map[string]bool{}}
	for i := 1; i <= nservers; i++ {
		addr := fmt.Sprintf("iod%d", i)
		f.servers = append(f.servers, proto.ServerInfo{ID: uint32(i), Addr: addr})
		f.objs[addr] = map[proto.ObjRef]*obj{}
	}
	return f
}

func (f *fake) addr(id uint32) string { return fmt.Sprintf("iod%d", id) }

// file makes a file of size bytes with the given layout, every copy's
// object written in full (as a client would), an hour old.
func (f *fake) file(p string, size uint64, servers []uint32, replicas int, extra []uint32) proto.Attr {
	a := proto.Attr{Ino: uint64(100 + len(f.attrs)), Mode: syscall.S_IFREG | 0o644, Size: size, StripeSize: stripe,
		Servers: servers, Replicas: uint32(replicas), Extra: extra}
	f.attrs[p] = a
	lay := layout.Layout{StripeSize: stripe, Servers: servers, Replicas: replicas, Extra: extra}
	for k := range servers {
		n := uint64(lay.ObjectSize(k, int64(size)))
		if n == 0 {
			continue
		}
		for _, id := range lay.Column(k) {
			f.objs[f.addr(id)][proto.ObjRef{Ino: a.Ino, Index: uint32(k)}] = &obj{size: n, mtime: time.Now().Add(-time.Hour).UnixNano()}
		}
	}
	return a
}

func (f *fake) Lstat(_ context.Context, p string) (proto.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.attrs[path.Clean(p)]
	if !ok {
		return a, syscall.ENOENT
	}
	return a, nil
}

func (f *fake) Readdir(_ context.Context, ino uint64) ([]proto.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var dir string
	for p, a := range f.attrs {
		if a.Ino == ino {
			dir = p
		}
	}
	var out []proto.Entry
	for p, a := range f.attrs {
		if p != "/" && path.Dir(p) == dir {
			out = append(out, proto.Entry{Name: path.Base(p), Attr: a})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (f *fake) Servers(context.Context) ([]proto.ServerInfo, error) { return f.servers, nil }

func (f *fake) Call(_ context.Context, req proto.Msg) (proto.Msg, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch m := req.(type) {
	case *proto.GetStale:
		return &proto.StaleReply{Recs: f.stale[m.Ino]}, nil
	case *proto.RefCheck:
		r := &proto.RefsReply{}
		for _, o := range m.Objs {
			used := false
			for _, a := range f.attrs {
				if a.Ino != o.Ino || int(o.Index) >= len(a.Servers) {
					continue
				}
				lay := layout.Layout{StripeSize: a.StripeSize, Servers: a.Servers, Replicas: int(a.Replicas), Extra: a.Extra}
				col := lay.Column(int(o.Index))
				if f.refFirstOnly {
					col = col[:1]
				}
				for _, id := range col {
					used = used || id == m.Server
				}
			}
			r.Used = append(r.Used, used)
		}
		return r, nil
	}
	return nil, fmt.Errorf("fake meta: unexpected %T", req)
}

// iodCaller is the fake's I/O side (Call is taken by the metadata side).
type iodCaller struct{ f *fake }

func (c iodCaller) Call(_ context.Context, addr string, req proto.Msg) (proto.Msg, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	objs := f.objs[addr]
	switch m := req.(type) {
	case *proto.Scrub:
		if f.noScrub[addr] {
			return nil, proto.Errorf(syscall.EOPNOTSUPP, "not built yet")
		}
		o := objs[proto.ObjRef{Ino: m.Handle, Index: m.Index}]
		if o == nil {
			return &proto.ScrubReply{}, nil
		}
		return &proto.ScrubReply{Size: o.size, Exists: true, Bad: o.bad}, nil
	case *proto.ObjStat:
		if o := objs[proto.ObjRef{Ino: m.Handle, Index: m.Index}]; o != nil {
			return &proto.SizeReply{Size: o.size}, nil
		}
		return &proto.SizeReply{}, nil
	case *proto.ListObjects:
		r := &proto.ObjectsReply{}
		for ref, o := range objs {
			r.Objs = append(r.Objs, proto.ObjectInfo{ObjRef: ref, Size: o.size, Mtime: o.mtime})
		}
		return r, nil
	case *proto.Heal:
		f.heals = append(f.heals, m)
		src := f.objs[m.From[0].Addr][proto.ObjRef{Ino: m.Handle, Index: m.Index}]
		ref := proto.ObjRef{Ino: m.Handle, Index: m.Index}
		if src == nil {
			return nil, proto.Errorf(syscall.EIO, "no source")
		}
		o := objs[ref]
		if o == nil || m.Whole {
			o = &obj{size: src.size, mtime: src.mtime}
		}
		o.bad = nil
		objs[ref] = o
		return &proto.HealReply{Copied: src.size}, nil
	case *proto.Remove:
		f.removes = append(f.removes, proto.ObjRef{Ino: m.Handle, Index: m.Index})
		delete(objs, proto.ObjRef{Ino: m.Handle, Index: m.Index})
		return nil, nil
	}
	return nil, fmt.Errorf("fake iod: unexpected %T", req)
}

func check(t *testing.T, f *fake, repair bool) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := Check(ctx, f, iodCaller{f}, Options{Repair: repair, Workers: 3, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func kinds(r *Report) string {
	var s []string
	for _, d := range r.Damage {
		s = append(s, fmt.Sprintf("%s:%d:%d:%s:%s", d.Path, d.Column, d.Server, d.Kind, d.Repair))
	}
	return strings.Join(s, " ")
}

// replicated: a 3-column, 2-copy file over 4 servers, and a small one.
func replicated(f *fake) proto.Attr {
	f.file("/small", 10, []uint32{4}, 2, []uint32{1})
	return f.file("/big", 3*stripe+100, []uint32{1, 2, 3}, 2, []uint32{2, 3, 4})
}

func TestClean(t *testing.T) {
	f := newFake(4)
	replicated(f)
	f.file("/hole", 5*stripe, []uint32{1, 2}, 1, nil) // sparse: no objects at all
	delete(f.objs["iod1"], proto.ObjRef{Ino: f.attrs["/hole"].Ino, Index: 0})
	r := check(t, f, false)
	if r.Exit != ExitClean || len(r.Damage) != 0 || r.Files != 3 {
		t.Fatalf("exit %d, %d files, damage %s; want a clean check of 3 files", r.Exit, r.Files, kinds(r))
	}
}

// TestMissing: a copy deleted where the other copy has data is missing;
// --repair heals it whole from the other copy, and a second check is clean.
func TestMissing(t *testing.T) {
	f := newFake(4)
	a := replicated(f)
	delete(f.objs["iod3"], proto.ObjRef{Ino: a.Ino, Index: 1}) // column 1 is {2, 3}
	r := check(t, f, false)
	if r.Exit != ExitDamage || r.Counts.Missing != 1 || kinds(r) != "/big:1:3:missing:" {
		t.Fatalf("exit %d counts %+v damage %s; want one missing copy, exit 4", r.Exit, r.Counts, kinds(r))
	}
	if len(f.heals) != 0 {
		t.Fatal("a check without --repair sent Heal")
	}
	r = check(t, f, true)
	if r.Exit != ExitRepaired || kinds(r) != "/big:1:3:missing:repaired" {
		t.Fatalf("repair: exit %d damage %s", r.Exit, kinds(r))
	}
	h := f.heals[0]
	if !h.Whole || h.Handle != a.Ino || h.Index != 1 || len(h.From) != 1 || h.From[0].ID != 2 {
		t.Fatalf("heal sent %+v; want whole object 1 from server 2", h)
	}
	if r := check(t, f, false); r.Exit != ExitClean {
		t.Fatalf("after repair: exit %d damage %s", r.Exit, kinds(r))
	}
}

// TestCorrupt: bad blocks reported by Scrub are healed over those ranges.
func TestCorrupt(t *testing.T) {
	f := newFake(4)
	a := replicated(f)
	f.objs["iod2"][proto.ObjRef{Ino: a.Ino, Index: 0}].bad = []proto.Extent{{Off: 0, Len: 4096}} // column 0 is {1, 2}
	r := check(t, f, true)
	if r.Exit != ExitRepaired || r.Counts.Corrupt != 1 || kinds(r) != "/big:0:2:corrupt:repaired" {
		t.Fatalf("exit %d counts %+v damage %s", r.Exit, r.Counts, kinds(r))
	}
	if h := f.heals[0]; h.Whole || len(h.Ranges) != 1 || h.Ranges[0] != (proto.Extent{Off: 0, Len: 4096}) || h.From[0].ID != 1 {
		t.Fatalf("heal sent %+v; want [0,4096) from server 1", h)
	}
}

// TestMismatch: a copy longer than the file says, and one shorter than its
// twin, are mismatched; a column with one copy corrupt and the other gone
// is unreadable (nothing to heal from).
func TestMismatch(t *testing.T) {
	f := newFake(4)
	a := replicated(f)
	f.objs["iod4"][proto.ObjRef{Ino: a.Ino, Index: 2}].size = 9000 // column 2 {3, 4}: over the end
	f.objs["iod1"][proto.ObjRef{Ino: f.attrs["/small"].Ino, Index: 0}].size = 3
	r := check(t, f, false)
	if r.Counts.Mismatch != 2 || kinds(r) != "/big:2:4:mismatch: /small:0:1:mismatch:" || r.Exit != ExitDamage {
		t.Fatalf("exit %d counts %+v damage %s", r.Exit, r.Counts, kinds(r))
	}
	f.objs["iod3"][proto.ObjRef{Ino: a.Ino, Index: 2}].bad = []proto.Extent{{Off: 0, Len: 4096}}
	delete(f.objs["iod4"], proto.ObjRef{Ino: a.Ino, Index: 2})
	r = check(t, f, true)
	if r.Counts.Unreadable != 1 || r.Exit != ExitDamage || !strings.Contains(kinds(r), "/big:2:0:unreadable:") {
		t.Fatalf("column with no good copy: exit %d counts %+v damage %s", r.Exit, r.Counts, kinds(r))
	}
}

// TestStale: a stale record is reported; --repair leaves it to the
// metadata server ("healing"), so damage is left (exit 4).
func TestStale(t *testing.T) {
	f := newFake(4)
	a := replicated(f)
	a.Stale = 1
	f.attrs["/big"] = a
	f.stale[a.Ino] = []proto.StaleRec{{Index: 1, Server: 3, Off: 4096, Len: 0}}
	r := check(t, f, true)
	if r.Counts.Stale != 1 || kinds(r) != "/big:1:3:stale:healing" || r.Exit != ExitDamage || len(f.heals) != 0 {
		t.Fatalf("exit %d counts %+v damage %s heals %d", r.Exit, r.Counts, kinds(r), len(f.heals))
	}
}

// TestOrphans: an old object no file references is an orphan, removed with
// --repair; a young one is left alone (a create may be writing it).
func TestOrphans(t *testing.T) {
	f := newFake(2)
	f.file("/a", 100, []uint32{1}, 1, nil)
	f.objs["iod2"][proto.ObjRef{Ino: 999, Index: 0}] = &obj{size: 7, mtime: time.Now().Add(-time.Hour).UnixNano()}
	f.objs["iod2"][proto.ObjRef{Ino: 998, Index: 0}] = &obj{size: 7, mtime: time.Now().UnixNano()}
	r := check(t, f, false)
	if r.Counts.Orphaned != 1 || r.Exit != ExitDamage || r.Damage[0].Ino != 999 {
		t.Fatalf("exit %d counts %+v damage %+v", r.Exit, r.Counts, r.Damage)
	}
	// Copies the reference check does not count are no orphans when the
	// walk saw their file.
	f.refFirstOnly = true
	f.file("/r", 100, []uint32{1}, 2, []uint32{2})
	r = check(t, f, true)
	if r.Exit != ExitRepaired || len(f.removes) != 1 || f.removes[0].Ino != 999 {
		t.Fatalf("repair: exit %d removes %v", r.Exit, f.removes)
	}
}

// TestLostAndNoScrub: a missing single copy on a server whose disk was
// replaced after the file was made is missing and unreadable; a server
// that does not scrub is checked from its listing.
func TestLostAndNoScrub(t *testing.T) {
	f := newFake(2)
	a := f.file("/a", 2*stripe, []uint32{1, 2}, 1, nil)
	f.noScrub["iod1"], f.noScrub["iod2"] = true, true
	f.servers[1].Base = a.Ino + 1
	delete(f.objs["iod2"], proto.ObjRef{Ino: a.Ino, Index: 1})
	r := check(t, f, true)
	if kinds(r) != "/a:1:0:unreadable: /a:1:2:missing:" || r.Exit != ExitDamage {
		t.Fatalf("exit %d damage %s", r.Exit, kinds(r))
	}
	if len(r.Warnings) != 2 || !strings.Contains(r.Warnings[0], "does not scrub") {
		t.Fatalf("warnings %q; want one per server that does not scrub", r.Warnings)
	}
}

// TestCorruptBoth: two copies corrupt in different blocks still serve the
// column (no unreadable), and each heals from the other over its own bad
// block; where both are bad, the column is unreadable over that block.
func TestCorruptBoth(t *testing.T) {
	f := newFake(4)
	a := f.file("/c", 3*stripe, []uint32{1}, 2, []uint32{2})
	ref := proto.ObjRef{Ino: a.Ino, Index: 0}
	f.objs["iod1"][ref].bad = []proto.Extent{{Off: 0, Len: stripe}}
	f.objs["iod2"][ref].bad = []proto.Extent{{Off: stripe, Len: stripe}}
	r := check(t, f, true)
	if r.Exit != ExitRepaired || kinds(r) != "/c:0:1:corrupt:repaired /c:0:2:corrupt:repaired" {
		t.Fatalf("exit %d damage %s; want both copies healed", r.Exit, kinds(r))
	}
	for _, h := range f.heals {
		if h.Whole || len(h.From) != 1 {
			t.Errorf("heal %+v; want a range heal from the other copy", h)
		}
	}
	f.objs["iod1"][ref].bad = []proto.Extent{{Off: 0, Len: 2 * stripe}}
	f.objs["iod2"][ref].bad = []proto.Extent{{Off: stripe, Len: 0}}
	r = check(t, f, false)
	var lost []proto.Extent
	for _, d := range r.Damage {
		if d.Kind == Unreadable {
			lost = d.Ranges
		}
	}
	if r.Counts.Unreadable != 1 || len(lost) != 1 || lost[0] != (proto.Extent{Off: stripe, Len: stripe}) {
		t.Fatalf("damage %+v; want the column unreadable over [4096, 8192) only", r.Damage)
	}
}

// TestServerDown: copies on a server that is down are not checked (a
// warning and a count), not called missing, and the column is not
// unreadable while they may still be whole.
func TestServerDown(t *testing.T) {
	f := newFake(2)
	a := f.file("/a", 100, []uint32{1}, 2, []uint32{2})
	f.servers[1].State = proto.ServerDown
	delete(f.objs["iod1"], proto.ObjRef{Ino: a.Ino, Index: 0})
	f.objs["iod1"][proto.ObjRef{Ino: a.Ino, Index: 0}] = &obj{size: 100, bad: []proto.Extent{{Off: 0, Len: 0}}}
	r := check(t, f, false)
	if r.Unchecked != 1 || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "server 2") || kinds(r) != "/a:0:1:corrupt:" {
		t.Fatalf("unchecked %d warnings %q damage %s; want server 2's copy unchecked, only the corrupt copy reported", r.Unchecked, r.Warnings, kinds(r))
	}
}

// Package fsck checks the parallel file system's data against its metadata:
// every copy of every column of every regular file (missing, mismatched,
// stale or corrupt), and objects no file references (orphans). With Repair
// it heals damaged copies from a good one and removes orphans.
package fsck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/extent"
	"github.com/corral-cluster/corral/internal/pfs/iod"
	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Exit statuses, as e2fsck's: a sum of what happened is not needed here,
// one of them is returned.
const (
	ExitClean    = 0 // nothing wrong
	ExitRepaired = 1 // damage found, all of it repaired
	ExitDamage   = 4 // damage left (found without --repair, or not repairable)
	ExitFailed   = 8 // fsck itself failed: metadata unreachable, bad arguments
)

// Kinds of damage.
const (
	Missing    = "missing"    // the copy's object is gone where it must hold data
	Mismatch   = "mismatch"   // the copy's size differs from what the file and the other copies say
	Stale      = "stale"      // the metadata server records the copy as out of date
	Corrupt    = "corrupt"    // blocks whose checksum does not match
	Unreadable = "unreadable" // a damaged column with no good copy left
	Orphaned   = "orphaned"   // an object no file references
)

// Meta is what the checker needs of the metadata server; *client.Client
// has it.
type Meta interface {
	Lstat(ctx context.Context, p string) (proto.Attr, error)
	Readdir(ctx context.Context, ino uint64) ([]proto.Entry, error)
	Servers(ctx context.Context) ([]proto.ServerInfo, error)
	Call(ctx context.Context, req proto.Msg) (proto.Msg, error)
}

// IOD calls an I/O server at addr; *proto.Pool has it.
type IOD interface {
	Call(ctx context.Context, addr string, req proto.Msg) (proto.Msg, error)
}

// Options of a check.
type Options struct {
	Path    string        // where the walk starts (default /)
	Repair  bool          // heal damaged copies, remove orphans
	Workers int           // files checked at once (default 8)
	Grace   time.Duration // orphans younger than this are left alone (a create may be writing them)
	// Progress, if set, gets a line every ProgressEvery while the check runs.
	Progress      io.Writer
	ProgressEvery time.Duration
}

// Damage is one damaged copy (Server 0: the whole column, for Unreadable)
// or one orphan (Column -1, Path "").
type Damage struct {
	Path   string         `json:"path,omitempty"`
	Ino    uint64         `json:"ino"`
	Column int            `json:"column"`
	Server uint32         `json:"server,omitempty"`
	Kind   string         `json:"kind"`
	Ranges []proto.Extent `json:"ranges,omitempty"` // object byte ranges; Len 0: to the end
	Detail string         `json:"detail,omitempty"`
	// Repair: "" (not tried), "repaired", "healing" (left to the metadata
	// server's healer), "removed", or "failed: why".
	Repair string `json:"repair,omitempty"`
}

// Counts per kind of damage.
type Counts struct {
	Missing    int `json:"missing"`
	Mismatch   int `json:"mismatch"`
	Stale      int `json:"stale"`
	Corrupt    int `json:"corrupt"`
	Orphaned   int `json:"orphaned"`
	Unreadable int `json:"unreadable"`
}

// Report is the outcome of a check.
type Report struct {
	Files   int64 `json:"files"`   // regular files checked
	Copies  int64 `json:"copies"`  // object copies checked
	Objects int64 `json:"objects"` // objects listed on the servers
	// Unchecked: copies on servers that are down or unknown.
	Unchecked int64    `json:"unchecked"`
	Counts    Counts   `json:"counts"`
	Damage    []Damage `json:"damage"`
	// Repaired and Left count damage entries by outcome (Unreadable and
	// stale records being healed by the metadata server count as left).
	Repaired int `json:"repaired"`
	Left     int `json:"left"`
	// Warnings: what could not be checked (a server down, a file that
	// vanished, checksums not supported by a server).
	Warnings []string `json:"warnings,omitempty"`
	Exit     int      `json:"exit"`
}

// server is what the check knows of one I/O server.
type server struct {
	info    proto.ServerInfo
	up      bool
	objs    map[proto.ObjRef]proto.ObjectInfo // its listing (when up)
	noScrub atomic.Bool                       // Scrub answered EOPNOTSUPP: sizes from the listing
}

type checker struct {
	meta    Meta
	iod     IOD
	opt     Options
	servers map[uint32]*server

	mu      sync.Mutex
	rep     Report
	warned  map[string]bool
	seen    map[uint64]bool          // inodes already checked (hard links)
	lays    map[uint64]layout.Layout // layouts of the files checked
	files   atomic.Int64
	damaged atomic.Int64
}

// Check walks opt.Path and checks every regular file below it, then every
// server's objects for orphans. An error means the check itself failed
// (the report is then incomplete).
func Check(ctx context.Context, meta Meta, io IOD, opt Options) (*Report, error) {
	if opt.Path == "" {
		opt.Path = "/"
	}
	if opt.Workers <= 0 {
		opt.Workers = 8
	}
	c := &checker{meta: meta, iod: io, opt: opt, servers: map[uint32]*server{}, warned: map[string]bool{}, seen: map[uint64]bool{}, lays: map[uint64]layout.Layout{}}
	ss, err := meta.Servers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list I/O servers: %w", err)
	}
	for _, s := range ss {
		sv := &server{info: s, up: s.State == proto.ServerUp || s.State == proto.ServerFull}
		c.servers[s.ID] = sv
		if !sv.up {
			c.warn(fmt.Sprintf("server %d (%s) is %s: its copies are not checked", s.ID, s.Addr, proto.StateName(s.State)))
			continue
		}
		// The listing is taken before the walk: an object made after it
		// is newer than the grace and no orphan; a copy missing from it
		// is looked at again (objectAt) before it is called missing.
		objs, err := ListObjects(ctx, io, s.Addr)
		if err != nil {
			sv.up = false
			c.warn(fmt.Sprintf("server %d (%s): cannot list objects: %v", s.ID, s.Addr, err))
			continue
		}
		sv.objs = make(map[proto.ObjRef]proto.ObjectInfo, len(objs))
		for _, o := range objs {
			sv.objs[o.ObjRef] = o
		}
		c.rep.Objects += int64(len(objs))
	}
	stop := c.startProgress()
	err = c.walk(ctx)
	if err == nil {
		err = c.orphans(ctx)
	}
	stop()
	if err != nil {
		return nil, err
	}
	r := &c.rep
	if r.Damage == nil {
		r.Damage = []Damage{} // [] in JSON, not null
	}
	sort.SliceStable(r.Damage, func(i, j int) bool {
		a, b := r.Damage[i], r.Damage[j]
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.Column != b.Column {
			return a.Column < b.Column
		}
		return a.Server < b.Server
	})
	for _, d := range r.Damage {
		if d.Repair == "repaired" || d.Repair == "removed" {
			r.Repaired++
		} else {
			r.Left++
		}
	}
	switch {
	case r.Left > 0:
		r.Exit = ExitDamage
	case r.Repaired > 0:
		r.Exit = ExitRepaired
	default:
		r.Exit = ExitClean
	}
	return r, nil
}

func (c *checker) warn(w string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.warned[w] {
		c.warned[w] = true
		c.rep.Warnings = append(c.rep.Warnings, w)
	}
}

func (c *checker) add(d Damage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rep.Damage = append(c.rep.Damage, d)
	switch d.Kind {
	case Missing:
		c.rep.Counts.Missing++
	case Mismatch:
		c.rep.Counts.Mismatch++
	case Stale:
		c.rep.Counts.Stale++
	case Corrupt:
		c.rep.Counts.Corrupt++
	case Orphaned:
		c.rep.Counts.Orphaned++
	case Unreadable:
		c.rep.Counts.Unreadable++
	}
	c.damaged.Add(1)
}

func (c *checker) startProgress() (stop func()) {
	if c.opt.Progress == nil {
		return func() {}
	}
	every := c.opt.ProgressEvery
	if every <= 0 {
		every = 2 * time.Second
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(c.opt.Progress, "fsck: %d files checked, %d damaged copies so far\n", c.files.Load(), c.damaged.Load())
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

type fileJob struct {
	path string
	attr proto.Attr
}

// walk lists directories depth first (one at a time: listing is cheap
// next to checking) and hands regular files to the workers.
func (c *checker) walk(ctx context.Context) error {
	root := path.Clean("/" + c.opt.Path)
	a, err := c.meta.Lstat(ctx, root)
	if err != nil {
		return fmt.Errorf("%s: %w", root, err)
	}
	jobs := make(chan fileJob, 2*c.opt.Workers)
	var wg sync.WaitGroup
	for range c.opt.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				c.checkFile(ctx, j.path, j.attr)
			}
		}()
	}
	err = c.visit(ctx, root, a, jobs)
	close(jobs)
	wg.Wait()
	if err == nil {
		err = ctx.Err()
	}
	return err
}

func (c *checker) visit(ctx context.Context, p string, a proto.Attr, jobs chan<- fileJob) error {
	switch a.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		c.mu.Lock()
		dup := c.seen[a.Ino]
		c.seen[a.Ino] = true
		c.mu.Unlock()
		if !dup {
			select {
			case jobs <- fileJob{p, a}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	case syscall.S_IFDIR:
	default:
		return nil
	}
	ents, err := c.meta.Readdir(ctx, a.Ino)
	switch {
	case errors.Is(err, syscall.ENOENT):
		c.warn(fmt.Sprintf("%s: removed during the check", p))
		return nil
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		c.warn(fmt.Sprintf("%s: not checked: %v", p, err))
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: list: %w", p, err)
	}
	for _, e := range ents {
		if e.Name == "." || e.Name == ".." {
			continue
		}
		if err := c.visit(ctx, path.Join(p, e.Name), e.Attr, jobs); err != nil {
			return err
		}
	}
	return nil
}

// copyState is what one copy of a column holds.
type copyState struct {
	id      uint32
	known   bool // its server could be asked
	exists  bool
	size    uint64
	bad     []proto.Extent
	stale   []proto.Extent
	lostErr bool // EIO: the data went with a replaced disk
}

func (c *checker) checkFile(ctx context.Context, p string, a proto.Attr) {
	defer c.files.Add(1)
	c.mu.Lock()
	c.rep.Files++
	c.mu.Unlock()
	lay := client.AttrLayout(a)
	if err := lay.Validate(); err != nil {
		c.add(Damage{Path: p, Ino: a.Ino, Column: -1, Kind: Unreadable, Detail: "bad layout: " + err.Error()})
		return
	}
	c.mu.Lock()
	c.lays[a.Ino] = lay
	c.mu.Unlock()
	stale := map[[2]uint32][]proto.Extent{}
	if a.Stale > 0 {
		r, err := c.meta.Call(ctx, &proto.GetStale{Ino: a.Ino})
		if err != nil {
			c.warn(fmt.Sprintf("%s: stale records: %v", p, err))
		} else if sr, ok := r.(*proto.StaleReply); ok {
			for _, rec := range sr.Recs {
				k := [2]uint32{rec.Index, rec.Server}
				stale[k] = append(stale[k], proto.Extent{Off: rec.Off, Len: rec.Len})
			}
		}
	}
	for k := range lay.Servers {
		col := lay.Column(k)
		want := uint64(lay.ObjectSize(k, int64(a.Size)))
		cs := make([]copyState, len(col))
		for i, id := range col {
			cs[i] = c.copyAt(ctx, p, a.Ino, uint32(k), id)
			cs[i].stale = stale[[2]uint32{uint32(k), id}]
		}
		c.judge(ctx, p, a, k, want, cs)
	}
}

// copyAt asks server id about object (ino, k): Scrub when the server has
// it, else its listing (and ObjStat for an object the listing lacks: it may
// be newer than the listing).
func (c *checker) copyAt(ctx context.Context, p string, ino uint64, k, id uint32) copyState {
	st := copyState{id: id}
	sv := c.servers[id]
	if sv == nil || !sv.up {
		if sv == nil {
			c.warn(fmt.Sprintf("%s: column %d names server %d, which the metadata server does not list", p, k, id))
		}
		c.mu.Lock()
		c.rep.Unchecked++
		c.mu.Unlock()
		return st
	}
	c.mu.Lock()
	c.rep.Copies++
	c.mu.Unlock()
	st.known = true
	if !sv.noScrub.Load() {
		r, err := c.iod.Call(ctx, sv.info.Addr, &proto.Scrub{Handle: ino, Index: k})
		if err == nil {
			if sr, ok := r.(*proto.ScrubReply); ok {
				st.exists, st.size, st.bad = sr.Exists, sr.Size, sr.Bad
				return st
			}
			err = fmt.Errorf("unexpected reply %T to scrub", r)
		}
		switch proto.ErrnoOf(err) {
		case syscall.EOPNOTSUPP, syscall.ENOSYS:
			sv.noScrub.Store(true)
			c.warn(fmt.Sprintf("server %d (%s) does not scrub: checksums not checked there, sizes only", id, sv.info.Addr))
		case syscall.EIO:
			st.lostErr = true
			return st
		default:
			st.known = false
			c.warn(fmt.Sprintf("%s: column %d on server %d: scrub: %v", p, k, id, err))
			return st
		}
	}
	o, ok := sv.objs[proto.ObjRef{Ino: ino, Index: k}]
	if !ok && k == 0 {
		o, ok = sv.objs[proto.ObjRef{Ino: ino, Index: proto.AnyIndex}]
	}
	if ok {
		st.exists, st.size = true, o.Size
		return st
	}
	// Not in the listing: made since, or gone. ObjStat answers 0 for an
	// absent object (a hole) and EIO for one lost with a replaced disk.
	r, err := c.iod.Call(ctx, sv.info.Addr, &proto.ObjStat{Handle: ino, Index: k})
	switch {
	case proto.ErrnoOf(err) == syscall.EIO:
		st.lostErr = true
	case err != nil:
		st.known = false
		c.warn(fmt.Sprintf("%s: column %d on server %d: stat: %v", p, k, id, err))
	default:
		if sr, ok := r.(*proto.SizeReply); ok && sr.Size > 0 {
			st.exists, st.size = true, sr.Size
		}
	}
	return st
}

// judge classifies the copies of column k (want: the object size the file
// size implies) and repairs what it can.
func (c *checker) judge(ctx context.Context, p string, a proto.Attr, k int, want uint64, cs []copyState) {
	// ref: the most data any sound copy holds (a copy may be shorter than
	// want: a hole at the end of a column is not stored). held: the most
	// data any current copy holds, corrupt blocks or not (a copy absent
	// where another has data lost it).
	var ref, held uint64
	for _, s := range cs {
		if !s.known || !s.exists || len(s.stale) > 0 {
			continue
		}
		if len(s.bad) == 0 && s.size <= want {
			ref = max(ref, s.size)
		}
		held = max(held, min(s.size, want))
	}
	base := func(id uint32) uint64 {
		if sv := c.servers[id]; sv != nil {
			return sv.info.Base
		}
		return 0
	}
	type hurt struct {
		d     Damage
		copy  int
		whole bool
	}
	var hurts []hurt
	// lacks[i]: the object ranges copy i cannot serve; nil for a copy that
	// serves all (a copy on a server that is down counts as one: its state
	// is unknown, not damaged).
	lacks := make([][]extent.Range, len(cs))
	all := []extent.Range{{Lo: 0, Hi: want}}
	for i, s := range cs {
		if !s.known {
			continue
		}
		d := Damage{Path: p, Ino: a.Ino, Column: k, Server: s.id}
		switch {
		case len(s.stale) > 0:
			// Missing or short data in a stale copy is what the record
			// says: the metadata server's healer brings it up to date.
			d.Kind, d.Ranges, d.Detail = Stale, s.stale, "out of date (stale record)"
			hurts = append(hurts, hurt{d: d, copy: i})
			lacks[i] = spans(s.stale, want)
		case s.lostErr || !s.exists && (a.Ino < base(s.id) && want > 0 || held > 0):
			d.Kind, d.Ranges = Missing, []proto.Extent{{Off: 0, Len: 0}}
			d.Detail = fmt.Sprintf("object absent, want %d bytes", max(held, want))
			hurts = append(hurts, hurt{d: d, copy: i, whole: true})
			lacks[i] = all
			continue
		case s.exists && s.size < ref:
			d.Kind, d.Ranges = Mismatch, []proto.Extent{{Off: s.size, Len: ref - s.size}}
			d.Detail = fmt.Sprintf("object %d bytes, other copies %d", s.size, ref)
			hurts = append(hurts, hurt{d: d, copy: i, whole: true})
			lacks[i] = all
			continue
		case s.exists && s.size > want:
			// Bytes past the end are never read: the copy still serves.
			d.Kind, d.Ranges = Mismatch, []proto.Extent{{Off: want, Len: s.size - want}}
			d.Detail = fmt.Sprintf("object %d bytes, file says %d", s.size, want)
			hurts = append(hurts, hurt{d: d, copy: i, whole: true})
		}
		if len(s.bad) > 0 {
			d.Kind, d.Ranges, d.Detail = Corrupt, s.bad, "checksum mismatch"
			hurts = append(hurts, hurt{d: d, copy: i})
			lacks[i] = extent.Union(lacks[i], spans(s.bad, want))
		}
	}
	if len(hurts) == 0 {
		return
	}
	damaged := make([]bool, len(cs))
	for _, h := range hurts {
		damaged[h.copy] = true
	}
	for _, h := range hurts {
		d := h.d
		if d.Kind == Stale {
			// The metadata server heals its own records; healing here too
			// would race with it.
			if c.opt.Repair {
				d.Repair = "healing"
			}
			c.add(d)
			continue
		}
		// Sources: copies with no damage; for a range heal also those
		// whose damage is elsewhere (corrupt blocks, or stale records,
		// outside the ranges).
		var from []proto.Peer
		need := spans(d.Ranges, want)
		for j, s := range cs {
			if j == h.copy || !s.known || damaged[j] && (h.whole || len(extent.Intersect(lacks[j], need)) > 0 || !s.exists || s.size > want) {
				continue
			}
			from = append(from, proto.Peer{ID: s.id, Addr: c.servers[s.id].info.Addr})
		}
		switch {
		case len(from) == 0:
			d.Detail += "; no copy to heal from"
		case c.opt.Repair:
			d.Repair = c.heal(ctx, c.servers[d.Server].info.Addr, a.Ino, uint32(k), h.whole, d.Ranges, from, want)
		}
		c.add(d)
	}
	// Ranges no copy can serve make the column unreadable there.
	lost := all
	for _, l := range lacks {
		lost = extent.Intersect(lost, l)
	}
	if len(lost) > 0 && want > 0 {
		ids := make([]uint32, len(cs))
		for i, s := range cs {
			ids[i] = s.id
		}
		var rs []proto.Extent
		for _, x := range lost {
			rs = append(rs, proto.Extent{Off: x.Lo, Len: x.Hi - x.Lo})
		}
		c.add(Damage{Path: p, Ino: a.Ino, Column: k, Kind: Unreadable, Ranges: rs, Detail: fmt.Sprintf("no good copy among servers %v", ids)})
	}
}

// spans turns extents (Len 0: to the end) into sorted, merged ranges
// below end.
func spans(xs []proto.Extent, end uint64) []extent.Range {
	out := make([]extent.Range, 0, len(xs))
	for _, x := range xs {
		r := extent.FromOffLen(x.Off, x.Len)
		out = append(out, extent.Range{Lo: r.Lo, Hi: min(r.Hi, end)})
	}
	return extent.Union(out, nil)
}

// held is the object size the file's size gives (Heal.Held): a source
// whose object is gone is never copied as zeros.
func (c *checker) heal(ctx context.Context, addr string, ino uint64, k uint32, whole bool, ranges []proto.Extent, from []proto.Peer, held uint64) string {
	if whole {
		ranges = []proto.Extent{{Off: 0, Len: 0}}
	}
	_, err := c.iod.Call(ctx, addr, &proto.Heal{Handle: ino, Index: k, Whole: whole, Ranges: ranges, From: from, Held: held})
	if err != nil {
		return "failed: " + err.Error()
	}
	return "repaired"
}

// orphans finds, on every server up, the objects older than the grace no
// file references, as corral fs gc does, and removes them with Repair.
func (c *checker) orphans(ctx context.Context) error {
	cut := time.Now().Add(-c.opt.Grace).UnixNano()
	ids := make([]uint32, 0, len(c.servers))
	for id := range c.servers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		sv := c.servers[id]
		if !sv.up {
			continue
		}
		objs := make([]proto.ObjectInfo, 0, len(sv.objs))
		for _, o := range sv.objs {
			objs = append(objs, o)
		}
		gone, err := Orphans(ctx, c.meta, id, objs, cut)
		if err != nil {
			return fmt.Errorf("server %d (%s): %w", id, sv.info.Addr, err)
		}
		for _, o := range gone {
			if c.walked(o.ObjRef, id) {
				continue
			}
			idx := o.Index
			if idx == proto.AnyIndex {
				idx = 0 // a legacy name is index 0's
			}
			d := Damage{Ino: o.Ino, Column: int(idx), Server: id, Kind: Orphaned, Ranges: []proto.Extent{{Off: 0, Len: o.Size}},
				Detail: fmt.Sprintf("%d bytes, no file references it", o.Size)}
			if c.opt.Repair {
				if _, err := c.iod.Call(ctx, sv.info.Addr, &proto.Remove{Handle: o.Ino, Index: idx}); err != nil {
					d.Repair = "failed: " + err.Error()
				} else {
					d.Repair = "removed"
				}
			}
			c.add(d)
		}
	}
	return nil
}

// walked says whether a file the walk checked has object o on server id:
// then it is no orphan, whatever the reference check says (a metadata
// server that does not count replica copies must not get them removed).
func (c *checker) walked(o proto.ObjRef, id uint32) bool {
	c.mu.Lock()
	lay, ok := c.lays[o.Ino]
	c.mu.Unlock()
	if !ok {
		return false
	}
	for k := range lay.Servers {
		if o.Index != proto.AnyIndex && o.Index != uint32(k) {
			continue
		}
		for _, s := range lay.Column(k) {
			if s == id {
				return true
			}
		}
	}
	return false
}

// Orphans returns, of server id's objects objs, those last written before
// cut (Unix ns; younger ones may belong to a create still writing) that
// no file references, sorted by inode and index. corral fs gc and the
// check's orphan step share it.
func Orphans(ctx context.Context, meta iod.MetaCaller, id uint32, objs []proto.ObjectInfo, cut int64) ([]proto.ObjectInfo, error) {
	var old []proto.ObjectInfo
	for _, o := range objs {
		if o.Mtime < cut {
			old = append(old, o)
		}
	}
	sort.Slice(old, func(i, j int) bool {
		if old[i].Ino != old[j].Ino {
			return old[i].Ino < old[j].Ino
		}
		return old[i].Index < old[j].Index
	})
	gone, err := iod.Unreferenced(ctx, meta, id, old)
	if err != nil {
		return nil, fmt.Errorf("reference check: %w", err)
	}
	return gone, nil
}

// ListObjects lists every object of the I/O server at addr (ListObjects
// pages).
func ListObjects(ctx context.Context, io IOD, addr string) ([]proto.ObjectInfo, error) {
	var out []proto.ObjectInfo
	req := &proto.ListObjects{}
	for range 1 << 30 {
		r, err := io.Call(ctx, addr, req)
		if err != nil {
			return nil, err
		}
		or, ok := r.(*proto.ObjectsReply)
		if !ok {
			return nil, fmt.Errorf("%s: unexpected reply %T to list", addr, r)
		}
		out = append(out, or.Objs...)
		if !or.More || len(or.Objs) == 0 {
			return out, nil
		}
		req = &proto.ListObjects{AfterSet: true, After: or.Objs[len(or.Objs)-1].ObjRef}
	}
	return nil, fmt.Errorf("%s: listing objects did not end", addr)
}

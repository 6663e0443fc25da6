package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/corral-cluster/corral/internal/pfs/extent"
	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Tuning of the data path.
const (
	// WriteWindow bounds the bytes of writes in flight per open file: enough
	// to keep every server's link busy, small enough to bound memory.
	WriteWindow = 64 << 20
	// maxReq caps one request so that a 64 MiB stripe unit still pipelines.
	maxReq = 4 << 20
	// replPiece caps one write request of a replicated file. The head
	// forwards a write only once all of it has arrived (store and
	// forward), so the copies' links start that much later and the last
	// forwards of a flush run after the client's link fell idle: smaller
	// pieces keep every link of the chain busy to the end (docs/iod.md,
	// "Replicated writes at the bound").
	replPiece = 256 << 10
)

// File is an open regular file. ReadAt and WriteAt may be called
// concurrently. Writes are buffered and sent behind the caller's back
// (write-behind); Sync or Close makes them durable and publishes the size.
// Errors of background writes are reported by the next WriteAt, Sync or
// Close.
//
// Every File of one inode opened through one Client shares the inode's write
// state (its buffer and the requests in flight), so writes through several
// handles are ordered as if through one; each handle keeps its own
// read-ahead, so concurrent sequential readers of a popular file do not
// disturb each other.
type File struct {
	*wstate
	closed atomic.Bool

	ra readahead
	// raMax caps the read-ahead window (0: the default of 8-64 MiB;
	// negative: no read-ahead).
	raMax int64
}

// wstate is the state one Client keeps per open inode.
type wstate struct {
	c     *Client
	ino   uint64
	lay   layout.Layout
	addrs []string
	refs  int // open Files; guarded by c.mu

	mu       sync.Mutex
	cond     *sync.Cond
	size     int64 // size including our writes
	metaSize int64 // size the metadata server last told or was told
	// pub mirrors metaSize for reads, which do not hold mu: the object
	// sizes it implies are bytes each column must hold (Read.Held).
	pub      atomic.Int64
	dirty    bool
	touched  []bool // servers written since the last sync
	pend     []byte // coalescing buffer: contiguous writes inside one request
	pendOff  int64
	inflight []*span // write requests not yet acknowledged, oldest first
	flying   int64   // bytes in flight
	werr     error
	// syncWrites: every write is durable on its copies when answered
	// (ReplWrite's Sync): CreateFile's bytes written ahead, no Sync after.
	syncWrites bool
	gen        uint64 // bumped by every write and truncate: read-ahead older than it is stale
	ctime      int64  // the newest change time meta has told us: older attributes are stale
	// wtime is when the latest write not yet published happened (unix ns;
	// 0: none, or a later explicit mtime or truncate superseded it). Sync
	// publishes it as the mtime: a file's mtime is its last write's, not
	// its close's.
	wtime int64

	// Replicated files only (replica.go): where the copies live, the
	// object range of each column written since the last sync, and the
	// stale records known (guarded by smu: reads do not hold mu).
	rep   atomic.Pointer[copies]
	dirt  []extent.Range
	smu   sync.Mutex
	stale []proto.StaleRec
	// staleNeed: meta changed the inode since the list was read (the
	// cache's watch said so; the next read refreshes it). staleAt: when
	// the list was last asked for (unix ns; without the cache a read
	// refreshes it when older than StaleEvery).
	staleNeed atomic.Bool
	staleAt   atomic.Int64
}

// span is one write request, from the moment it leaves the coalescing
// buffer until its server acknowledges it.
type span struct{ off, end int64 }

// Limits on one inode's write requests not yet acknowledged: bytes (enough
// to keep every server's link busy, small enough to bound memory) and count
// (each waits in a goroutine).
const maxInflight = 256

// OpenAttr opens the regular file described by a (from Lookup, Create, Stat).
func (c *Client) OpenAttr(ctx context.Context, a proto.Attr) (*File, error) {
	if a.Mode&0o170000 != 0o100000 {
		if a.Mode&0o170000 == 0o040000 {
			return nil, fmt.Errorf("inode %d: is a directory", a.Ino)
		}
		return nil, fmt.Errorf("inode %d: not a regular file", a.Ino)
	}
	lay := AttrLayout(a)
	if err := lay.Validate(); err != nil {
		return nil, fmt.Errorf("inode %d: bad layout from metadata server: %v", a.Ino, err)
	}
	if c.cache != nil && lay.Copies() > 1 {
		// Its watch tells open replicated files when their stale records
		// may have changed (staleFresh).
		c.cached()
	}
	c.mu.Lock()
	st := c.open[a.Ino]
	if st != nil {
		st.refs++
	}
	c.mu.Unlock()
	if st != nil {
		st.mu.Lock()
		if !st.dirty && len(st.pend) == 0 && len(st.inflight) == 0 && a.Ctime >= st.ctime {
			// Nothing of ours pending and the attributes are not older than
			// what we published: what meta says is the truth (another
			// client may have truncated it).
			st.size, st.metaSize, st.ctime = int64(a.Size), int64(a.Size), a.Ctime
			st.pub.Store(st.metaSize)
		}
		st.mu.Unlock()
		if st.replicated() {
			// Reopen: where meta says the copies are now, and which are
			// stale.
			if !sameCopies(st.rep.Load(), a) {
				if err := st.refresh(ctx); err != nil {
					c.release(st)
					return nil, err
				}
			}
			if err := st.staleFromAttr(ctx, a); err != nil {
				c.release(st)
				return nil, err
			}
		}
		return newFile(st), nil
	}
	st = &wstate{c: c, ino: a.Ino, lay: lay, size: int64(a.Size), metaSize: int64(a.Size),
		ctime: a.Ctime, touched: make([]bool, len(a.Servers)), refs: 1}
	st.pub.Store(st.metaSize)
	if lay.Copies() == 1 {
		addrs, err := c.addrs(ctx, a.Servers)
		if err != nil {
			return nil, err
		}
		st.addrs = addrs
	} else {
		cp, err := c.buildCopies(ctx, lay)
		if err != nil {
			return nil, err
		}
		st.rep.Store(cp)
		st.addrs = make([]string, len(cp.addrs))
		for k := range cp.addrs {
			st.addrs[k] = cp.addrs[k][0]
		}
		st.dirt = make([]extent.Range, len(a.Servers))
		if err := st.staleFromAttr(ctx, a); err != nil {
			return nil, err
		}
	}
	st.cond = sync.NewCond(&st.mu)
	c.mu.Lock()
	if cur := c.open[a.Ino]; cur != nil {
		// opened meanwhile by another caller: share theirs
		cur.refs++
		st = cur
	} else {
		c.open[a.Ino] = st
	}
	c.mu.Unlock()
	return newFile(st), nil
}

// AttrLayout is the layout (stripes and copies) attribute a describes.
// It lives here, not in proto or layout, because those two share layer 0
// and may not import each other.
func AttrLayout(a proto.Attr) layout.Layout {
	return layout.Layout{StripeSize: a.StripeSize, Servers: a.Servers, Replicas: int(a.Replicas), Extra: a.Extra}
}

// staleFromAttr loads the stale records when a says there are any, and
// forgets them when it says there are none.
func (st *wstate) staleFromAttr(ctx context.Context, a proto.Attr) error {
	if a.Stale > 0 {
		return st.loadStale(ctx)
	}
	st.staleAt.Store(now().UnixNano())
	st.smu.Lock()
	st.stale = nil
	st.smu.Unlock()
	return nil
}

// release drops one reference to st (an open that failed).
func (c *Client) release(st *wstate) {
	c.mu.Lock()
	st.refs--
	if st.refs == 0 && c.open[st.ino] == st {
		delete(c.open, st.ino)
	}
	c.mu.Unlock()
}

func newFile(st *wstate) *File {
	f := &File{wstate: st}
	f.ra.f = f
	return f
}

// SetReadAhead caps the read-ahead window at n bytes (at least one request):
// a server streaming many files at once bounds its memory with it. A
// negative n turns read-ahead off: each read fetches just what it asks.
func (f *File) SetReadAhead(n int64) { f.raMax = n }

// Ino is the file's inode number.
func (f *File) Ino() uint64 { return f.ino }

// Layout is the file's striping.
func (f *File) Layout() layout.Layout { return f.lay }

// Addrs are the addresses of the file's I/O servers, in stripe order.
func (f *File) Addrs() []string { return f.addrs }

// Size is the file's size as this handle sees it.
func (f *File) Size() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size
}

// Pending is the size including writes not yet published, and the time of
// the latest such write (unix ns; 0: none), which Sync will publish as the
// mtime.
func (f *File) Pending() (size, mtime int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size, f.wtime
}

func (f *File) unit() int64 { return min(int64(f.lay.StripeSize), maxReq) }

// boundary is the first request boundary after off: the end of its stripe
// unit, or of its maxReq-sized piece of a larger unit (replPiece-sized for
// a replicated file).
func (f *File) boundary(off int64) int64 {
	s, u := int64(f.lay.StripeSize), f.unit()
	if f.replicated() {
		u = min(u, replPiece)
	}
	return min((off/s+1)*s, (off/u+1)*u)
}

// WriteAt writes p at off. It returns once p is copied; the data travels in
// the background.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if lim := f.lay.MaxFileSize(); off > lim-int64(len(p)) {
		// Refused whole, before any byte goes out: its I/O servers could
		// not hold it (and meta would refuse the size).
		return 0, fmt.Errorf("write of %d bytes at %d: past the largest size of this file's layout (%d): %w", len(p), off, lim, syscall.EFBIG)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.werr != nil {
		return 0, f.werr
	}
	// Dirty before any byte is buffered: a Sync running while this write
	// waits for back-pressure must not leave it out.
	f.dirty = true
	for done := 0; done < len(p); {
		// Back-pressure first: the wait releases f.mu, so the buffer is
		// looked at only after it (another writer may have filled it).
		for f.flying > WriteWindow || len(f.inflight) > maxInflight {
			f.cond.Wait()
		}
		o := off + int64(done)
		end := f.boundary(o)
		n := int(min(int64(len(p)-done), end-o))
		chunk := p[done : done+n]
		// The buffer never holds a boundary, so a contiguous write extends it.
		if len(f.pend) > 0 && o == f.pendOff+int64(len(f.pend)) {
			f.pend = append(f.pend, chunk...)
		} else {
			f.flushPend()
			f.pend = append(make([]byte, 0, max(n, int(min(end-o, 1<<20)))), chunk...)
			f.pendOff = o
		}
		if o+int64(n) == end {
			f.flushPend()
		}
		done += n
	}
	f.size = max(f.size, off+int64(len(p)))
	f.dirty = true // again: a Sync during a wait above may have cleared it
	f.wtime = now().UnixNano()
	f.gen++
	return len(p), nil
}

// flushPend sends the coalescing buffer. Called with f.mu held.
//
// Ordering: a request is queued behind every older request of this inode
// and is sent only once no older one overlapping it is still unacknowledged.
// I/O servers run requests concurrently (several connections, a goroutine
// each), so this is what makes the later of two overlapping writes win.
func (f *wstate) flushPend() {
	if len(f.pend) == 0 {
		return
	}
	data, off := f.pend, f.pendOff
	f.pend = nil
	k, objOff := f.lay.Locate(off)
	f.touched[k] = true
	if f.dirt != nil {
		f.dirt[k] = f.dirt[k].Hull(objRange(objOff, objOff+int64(len(data))))
	}
	sp := &span{off, off + int64(len(data))}
	f.inflight = append(f.inflight, sp)
	f.flying += int64(len(data))
	go f.send(sp, k, objOff, data)
}

// olderOverlap reports whether a request queued before sp overlaps it.
func (f *wstate) olderOverlap(sp *span) bool {
	for _, s := range f.inflight {
		if s == sp {
			return false
		}
		if s.off < sp.end && sp.off < s.end {
			return true
		}
	}
	return false
}

func (f *wstate) send(sp *span, k int, objOff int64, data []byte) {
	f.mu.Lock()
	for f.olderOverlap(sp) {
		f.cond.Wait()
	}
	f.mu.Unlock()
	var err error
	if f.replicated() {
		err = f.sendRepl(k, objOff, data)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), proto.DefaultTimeout)
		if f.syncWrites {
			// One copy: a replicated write with none to forward to.
			_, err = f.c.pool.Call(ctx, f.addrs[k], &proto.ReplWrite{Handle: f.ino, Index: uint32(k), Off: uint64(objOff), Data: data, Sync: true})
		} else {
			_, err = f.c.pool.Call(ctx, f.addrs[k], &proto.Write{Handle: f.ino, Index: uint32(k), Off: uint64(objOff), Data: data})
		}
		cancel()
		if err != nil {
			err = fmt.Errorf("write to %s: %w", f.addrs[k], err)
		}
	}
	f.mu.Lock()
	for i, s := range f.inflight {
		if s == sp {
			f.inflight = append(f.inflight[:i], f.inflight[i+1:]...)
			break
		}
	}
	f.flying -= int64(len(data))
	if err != nil && f.werr == nil {
		f.werr = err
	}
	f.cond.Broadcast()
	f.mu.Unlock()
}

// drain sends buffered writes and waits for all in flight. Called with f.mu
// held.
func (f *File) drain() error {
	// The wait releases f.mu: another writer may fill the buffer meanwhile,
	// and what it wrote before we return must be sent too.
	for len(f.pend) > 0 || len(f.inflight) > 0 {
		if len(f.pend) > 0 {
			f.flushPend()
			continue
		}
		f.cond.Wait()
	}
	return f.werr
}

// Flush sends buffered writes and waits for them, without forcing them to
// disk.
func (f *File) Flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.drain()
}

// ReadAt reads len(p) bytes at off; short only at the end of the file
// (io.EOF). Holes read as zeros. Sequential readers get read-ahead.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	f.mu.Lock()
	if len(f.pend) > 0 || len(f.inflight) > 0 {
		if err := f.drain(); err != nil {
			f.mu.Unlock()
			return 0, err
		}
	}
	size, gen := f.size, f.gen
	f.mu.Unlock()
	f.ra.forgetBefore(gen)
	if off >= size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), size-off))
	var err error
	if f.ra.sequential(off, size) {
		err = f.ra.read(p[:n], off, size)
	} else {
		err = f.readDirect(p[:n], off)
	}
	if err != nil {
		return 0, err
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// held is the object size column k must hold by the size the metadata
// server last told this client (Read.Held): an absent object below it was
// lost, not a hole (every object the size covers exists; ensureObjects).
func (f *wstate) held(k int) uint64 {
	return uint64(f.lay.ObjectSize(k, f.pub.Load()))
}

// ensureObjects creates, empty, the object of every column that a size
// growing from old to size makes hold bytes for the first time and that no
// write of this handle created: the columns a sparse write skipped. Then
// an absent object the size covers is always a loss (see held), and a
// hole is a sparse range inside an object that exists. At most one empty
// write per column over the file's life. Called with f.mu held, before the
// size is published.
func (f *wstate) ensureObjects(ctx context.Context, old, size int64) error {
	if size <= old {
		return nil
	}
	var errs []error
	for k := range f.lay.Servers {
		if f.touched[k] || f.lay.ObjectSize(k, old) > 0 || f.lay.ObjectSize(k, size) == 0 {
			continue
		}
		var err error
		if f.replicated() {
			err = f.sendRepl(k, 0, nil)
		} else {
			_, err = f.c.pool.Call(ctx, f.addrs[k], &proto.Write{Handle: f.ino, Index: uint32(k)})
			if err != nil {
				err = fmt.Errorf("creating the object of column %d on %s: %w", k, f.addrs[k], err)
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f.touched[k] = true
	}
	return errors.Join(errs...)
}

// readDirect fetches [off, off+len(p)) from all the servers holding it at
// once.
func (f *File) readDirect(p []byte, off int64) error {
	chunks := f.lay.Chunks(off, int64(len(p)))
	if len(chunks) == 1 {
		return f.readChunk(p, chunks[0])
	}
	errs := make([]error, len(chunks))
	var wg sync.WaitGroup
	for i, ch := range chunks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f.readChunk(p[ch.FileOff-off:ch.FileOff-off+ch.Len], ch)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (f *File) readChunk(dst []byte, ch layout.Chunk) error {
	if f.replicated() {
		for done := int64(0); done < ch.Len; {
			n := min(ch.Len-done, maxReq)
			if err := f.readRepl(dst[done:done+n], ch.Server, ch.ObjOff+done); err != nil {
				return err
			}
			done += n
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), proto.DefaultTimeout)
	defer cancel()
	for done := int64(0); done < ch.Len; {
		n := min(ch.Len-done, maxReq)
		part := dst[done : done+n]
		r, err := f.c.pool.CallInto(ctx, f.addrs[ch.Server], &proto.Read{Handle: f.ino, Index: uint32(ch.Server), Off: uint64(ch.ObjOff + done), Len: uint32(n), Held: f.held(ch.Server)}, part)
		if proto.IsMissing(err) {
			// The only copy is gone: an I/O error, never zeros.
			return proto.Errorf(syscall.EIO, fmt.Sprintf("inode %d column %d: read from %s: %v", f.ino, ch.Server, f.addrs[ch.Server], err))
		}
		if err != nil {
			return fmt.Errorf("read from %s: %w", f.addrs[ch.Server], err)
		}
		dr, ok := r.(*proto.DataReply)
		if !ok {
			return unexpected(f.addrs[ch.Server], r)
		}
		got := len(dr.Data)
		if got > 0 && &dr.Data[0] != &part[0] {
			got = copy(part, dr.Data)
		}
		clear(part[got:]) // past the object's end: a hole
		done += n
	}
	return nil
}

// Truncate sets the file's size, cutting or zero-extending each object.
func (f *File) Truncate(ctx context.Context, size int64) error {
	if size < 0 {
		return errors.New("negative size")
	}
	if lim := f.lay.MaxFileSize(); size > lim {
		return fmt.Errorf("truncate to %d: past the largest size of this file's layout (%d): %w", size, lim, syscall.EFBIG)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.drain(); err != nil {
		return err
	}
	f.gen++
	if err := f.truncObjects(ctx, size); err != nil {
		return err
	}
	a, err := f.c.attr(ctx, &proto.SetAttr{Ino: f.ino, Mask: proto.SetSize, Size: uint64(size)})
	if err != nil {
		return err
	}
	f.size, f.metaSize, f.ctime = size, size, a.Ctime
	f.wtime = 0 // the truncate set the mtime, after every earlier write
	f.pub.Store(f.metaSize)
	// The objects' new sizes become durable with the next fsync or close.
	for k := range f.touched {
		f.touched[k] = true
		if f.dirt != nil {
			f.dirt[k] = f.dirt[k].Hull(objRange(f.lay.ObjectSize(k, size), math.MaxInt64))
		}
	}
	f.dirty = true
	return nil
}

// truncObjects cuts or extends each object to its size for a file of size
// size; on every copy of a replicated file (a copy that fails is stale from
// the new size to its end). Called with f.mu held.
func (f *File) truncObjects(ctx context.Context, size int64) error {
	mk := func(k int) proto.Msg {
		return &proto.Truncate{Handle: f.ino, Index: uint32(k), Size: uint64(f.lay.ObjectSize(k, size))}
	}
	if f.replicated() {
		return f.toCopies(ctx, "truncate", allCols(len(f.addrs)), mk,
			func(k int) extent.Range { return objRange(f.lay.ObjectSize(k, size), math.MaxInt64) })
	}
	errs := make([]error, len(f.addrs))
	var wg sync.WaitGroup
	for k, a := range f.addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.c.pool.Call(ctx, a, mk(k)); err != nil {
				errs[k] = fmt.Errorf("truncate on %s: %w", a, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func allCols(n int) []int {
	out := make([]int, n)
	for k := range out {
		out[k] = k
	}
	return out
}

// syncObjects makes the touched objects durable: on every copy of a
// replicated file, where a copy that fails is stale over what was written
// to its column since the last sync. Called with f.mu held.
func (f *File) syncObjects(ctx context.Context) error {
	if f.replicated() {
		var cols []int
		for k, t := range f.touched {
			if t {
				cols = append(cols, k)
			}
		}
		return f.toCopies(ctx, "sync", cols, func(k int) proto.Msg { return &proto.Sync{Handle: f.ino, Index: uint32(k)} },
			func(k int) extent.Range { return f.dirt[k] })
	}
	errs := make([]error, len(f.addrs))
	var wg sync.WaitGroup
	for k, a := range f.addrs {
		if !f.touched[k] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.c.pool.Call(ctx, a, &proto.Sync{Handle: f.ino, Index: uint32(k)}); err != nil {
				errs[k] = fmt.Errorf("sync on %s: %w", a, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Sync makes every write durable on the I/O servers, then records the size
// and the time of the latest write (unless an explicit time or a truncate
// came after it) with the metadata server.
func (f *File) Sync(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.drain(); err != nil {
		return err
	}
	if !f.dirty {
		return nil
	}
	if err := f.ensureObjects(ctx, f.metaSize, f.size); err != nil {
		return err
	}
	if err := f.syncObjects(ctx); err != nil {
		return err
	}
	m := &proto.SetAttr{Ino: f.ino}
	if f.wtime != 0 {
		m.Mask |= proto.SetMtime
		m.Mtime = f.wtime
	}
	if f.size > f.metaSize {
		m.Mask |= proto.SetSizeExtend
		m.Size = uint64(f.size)
	}
	// Sent even with nothing in the mask (an explicit time came after the
	// writes): meta moves the ctime, which tells caches keyed by it (the
	// node's data cache) that the content changed, now that it is on the
	// I/O servers.
	a, err := f.c.attr(ctx, m)
	if err != nil {
		return err
	}
	f.metaSize, f.ctime = int64(a.Size), a.Ctime
	f.size = max(f.size, f.metaSize)
	clear(f.touched)
	clear(f.dirt)
	f.dirty = false
	f.wtime = 0
	f.pub.Store(f.metaSize)
	return nil
}

// Close syncs the file. The File must not be used afterwards; the inode's
// shared state is dropped with its last File.
func (f *File) Close() error {
	if f.closed.Swap(true) {
		return fmt.Errorf("inode %d: file already closed", f.ino)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*proto.DefaultTimeout)
	defer cancel()
	err := f.Sync(ctx)
	c := f.c
	c.mu.Lock()
	f.refs--
	if f.refs == 0 && c.open[f.ino] == f.wstate {
		delete(c.open, f.ino)
	}
	c.mu.Unlock()
	return err
}

// readahead keeps whole request-sized blocks of a sequentially read file,
// fetching a window ahead of the reader from all servers at once.
type readahead struct {
	f      *File
	mu     sync.Mutex
	next   int64 // where a sequential reader reads next
	blocks map[int64]*block
	gen    uint64 // the write generation the blocks were read at
}

type block struct {
	done chan struct{}
	data []byte
	err  error
}

// forgetBefore drops what was read ahead before the inode's write
// generation gen: a write through any handle may have changed it.
func (r *readahead) forgetBefore(gen uint64) {
	r.mu.Lock()
	if r.gen != gen {
		r.blocks, r.next, r.gen = nil, 0, gen
	}
	r.mu.Unlock()
}

// sequential reports whether a read at off belongs to the stream being read
// ahead: at or near where the last read ended. FUSE issues several reads at
// once, so they may arrive a little out of order.
func (r *readahead) sequential(off, size int64) bool {
	if r.f.raMax < 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if off == r.next {
		return true
	}
	if r.blocks == nil {
		return false
	}
	if w := r.window(); off >= r.next-w && off <= r.next+w {
		return true
	}
	r.blocks = nil // a jump: stop reading ahead until it is sequential again
	return false
}

func (r *readahead) window() int64 {
	u := r.f.unit()
	if r.f.raMax > 0 {
		return max(r.f.raMax, u)
	}
	return min(max(8<<20, 2*u*int64(len(r.f.addrs))), 64<<20)
}

func (r *readahead) read(p []byte, off, size int64) error {
	u := r.f.unit()
	first, last := off/u, (off+int64(len(p))-1)/u
	ahead := (off + int64(len(p)) + r.window() - 1) / u
	maxBlock := (size - 1) / u
	r.mu.Lock()
	if r.blocks == nil {
		r.blocks = map[int64]*block{}
	}
	// Blocks kept behind the reader, for reads arriving out of order (FUSE);
	// a capped window (a server streaming to many clients) keeps one.
	keep := r.window() / u
	if r.f.raMax > 0 {
		keep = 1
	}
	for b := range r.blocks {
		if b < first-keep {
			delete(r.blocks, b)
		}
	}
	want := make([]*block, 0, last-first+1)
	for b := first; b <= min(ahead, maxBlock); b++ {
		blk := r.blocks[b]
		if blk == nil {
			blk = &block{done: make(chan struct{})}
			r.blocks[b] = blk
			go r.fetch(blk, b*u, min(u, size-b*u))
		}
		if b <= last {
			want = append(want, blk)
		}
	}
	r.next = max(r.next, off+int64(len(p)))
	r.mu.Unlock()
	for i, blk := range want {
		<-blk.done
		if blk.err != nil {
			r.mu.Lock()
			r.blocks = nil // retry afresh next time
			r.mu.Unlock()
			return blk.err
		}
		bstart := (first + int64(i)) * u
		lo := max(off, bstart)
		hi := min(off+int64(len(p)), bstart+int64(len(blk.data)))
		copy(p[lo-off:hi-off], blk.data[lo-bstart:hi-bstart])
	}
	return nil
}

func (r *readahead) fetch(blk *block, off, n int64) {
	defer close(blk.done)
	blk.data = make([]byte, n)
	blk.err = r.f.readDirect(blk.data, off)
}

package client

// Replicated files (docs/fs.md, "Replicas: what the client does"). A file
// with R > 1 copies of each stripe unit writes through the column's head
// (ReplWrite, primary-backup), tells meta which copies missed a write
// before acknowledging it (MarkStale), and reads from any copy meta does
// not call stale. Files with one copy never come here.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/extent"
	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// DownFor is how long a server that failed a request is skipped as a
// write's head and read last: long enough that a burst of writes after a
// crash does not wait for it once each, short enough that a restarted
// server is used again soon.
const DownFor = 5 * time.Second

// maxDown caps the skip period of a server that keeps failing: each time it
// fails again right after being tried again, the period doubles, so a
// stopped server costs a write's timeout once a minute at most, not every
// DownFor.
const maxDown = time.Minute

// downRec is what the client remembers of a server that failed.
type downRec struct {
	until  time.Time
	period time.Duration
}

var now = time.Now // tests move the clock

// maxLayoutTries bounds the resends of one operation after meta answered
// ESTALE (the layout changed under it).
const maxLayoutTries = 4

// Patience bounds how long a copy may show no sign of life while another
// copy can take over: a write's head that has answered none of this
// client's requests nor any liveness probe for Patience since it was sent
// this one, or a copy as silent Patience after a Sync, Truncate, Punch or
// Alloc was sent while another copy of its column answered it, counts as
// failed (it is marked stale). Slowness is not silence: see Stall. A stopped server then stalls a write or fsync for about
// Patience, not for its bytes at 8 MiB/s. The last copy left to try is
// waited for as long as the operation may take.
const Patience = 3 * time.Second

// Stall bounds how long a copy that answers liveness probes may complete
// none of this client's requests before it counts as failed (a wedged
// disk, a hung handler). A busy server behind a saturated link completes
// requests, slowly: it is never given up for its pace.
const Stall = proto.DefaultTimeout

// writeBound bounds one replicated write, failovers included: liveness
// (Patience, Stall) decides when a copy failed; this only caps a write
// that waits for the last copy behind a full window at 1 MiB/s.
const writeBound = 2*proto.DefaultTimeout + time.Duration(WriteWindow>>20)*time.Second

// probeCall asks the I/O server at addr whether it runs (Identify) on the
// probe pool's own connection, not behind this client's bulk data.
func (c *Client) probeCall(ctx context.Context, addr string) error {
	_, err := c.probes.Call(ctx, addr, &proto.Identify{})
	return err
}

// copies is where each column of a replicated file lives, as last read
// from meta. It is replaced whole (never changed) when the layout changes.
type copies struct {
	ids   [][]uint32 // ids[k]: column k's servers, first copy first
	addrs [][]string // their addresses; "" for a server meta calls lost
}

// objRange is the object bytes [lo, hi); hi math.MaxInt64: to the end.
func objRange(lo, hi int64) extent.Range {
	if hi == math.MaxInt64 {
		return extent.Range{Lo: uint64(lo), Hi: extent.End}
	}
	return extent.Range{Lo: uint64(lo), Hi: uint64(hi)}
}

// replicated reports whether the file has more than one copy.
func (f *wstate) replicated() bool { return f.lay.Copies() > 1 }

// Replicas is where each column's copies live, server IDs first copy
// first, as this handle last learnt them (nil for a file with one copy).
func (f *File) Replicas() [][]uint32 {
	if cp := f.rep.Load(); cp != nil {
		return cp.ids
	}
	return nil
}

// buildCopies resolves every copy's address. A lost server gets "": it is
// skipped (its copies are stale until meta re-homes them).
func (c *Client) buildCopies(ctx context.Context, lay layout.Layout) (*copies, error) {
	for try := 0; ; try++ {
		cp := &copies{ids: make([][]uint32, len(lay.Servers)), addrs: make([][]string, len(lay.Servers))}
		missing, have := uint32(0), false
		c.mu.Lock()
		for k := range lay.Servers {
			cp.ids[k] = lay.Column(k)
			cp.addrs[k] = make([]string, len(cp.ids[k]))
			for i, id := range cp.ids[k] {
				if c.lost[id] {
					continue
				}
				a, ok := c.servers[id]
				if !ok {
					missing, have = id, true
				}
				cp.addrs[k][i] = a
			}
		}
		c.mu.Unlock()
		if !have {
			return cp, nil
		}
		if try > 0 {
			return nil, fmt.Errorf("I/O server %d is not known to the metadata server %s", missing, c.meta)
		}
		if _, err := c.Servers(ctx); err != nil {
			return nil, err
		}
	}
}

// sameCopies reports whether a's copies are where cp says.
func sameCopies(cp *copies, a proto.Attr) bool {
	lay := AttrLayout(a)
	if lay.Validate() != nil || len(a.Servers) != len(cp.ids) {
		return false
	}
	for k := range cp.ids {
		if !slices.Equal(lay.Column(k), cp.ids[k]) {
			return false
		}
	}
	return true
}

// markDown remembers that server id failed: skipped for DownFor.
func (c *Client) markDown(id uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down == nil {
		c.down = map[uint32]downRec{}
	}
	t := now()
	r, ok := c.down[id]
	switch {
	case ok && t.Before(r.until):
		// More failures of one outage (requests sent before it was
		// known): the period stands.
		return
	case ok && t.Before(r.until.Add(r.period)):
		r.period = min(2*r.period, maxDown) // tried again and failed again
	default:
		r.period = DownFor
	}
	r.until = t.Add(r.period)
	c.down[id] = r
	if c.probing == nil {
		c.probing = map[uint32]bool{}
	}
	if !c.probing[id] && c.closed != nil {
		c.probing[id] = true
		go c.probe(id)
	}
}

// probe asks server id every second whether it answers (Identify, 1 s)
// while it is down, so that writes and reads neither go back to a stopped
// server when its skip period ends (each such try would cost Patience)
// nor skip one that is back: silent, its skip is extended; answering, it
// is no longer down. At most 10 minutes; then the skip periods alone rule.
func (c *Client) probe(id uint32) {
	defer func() {
		c.mu.Lock()
		delete(c.probing, id)
		c.mu.Unlock()
	}()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for range 600 {
		select {
		case <-c.closed:
			return
		case <-t.C:
		}
		c.mu.Lock()
		addr := c.servers[id]
		_, down := c.down[id]
		c.mu.Unlock()
		if !down || addr == "" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.probeCall(ctx, addr)
		cancel()
		c.mu.Lock()
		if r, ok := c.down[id]; ok {
			if transport(err) {
				r.until = maxTime(r.until, now().Add(2*time.Second))
				c.down[id] = r
			} else {
				delete(c.down, id) // it answers: back
			}
		}
		c.mu.Unlock()
		if !transport(err) {
			return
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// isDown reports whether server id failed within DownFor. Called with c.mu
// held.
func (c *Client) isDown(id uint32) bool {
	r, ok := c.down[id]
	if ok && now().After(r.until.Add(r.period)) {
		delete(c.down, id) // healthy long enough: start afresh next time
		return false
	}
	return ok && now().Before(r.until)
}

// Down reports whether the client skips server id (it failed lately).
func (c *Client) Down(id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.isDown(id)
}

// inflight is this client's load on one server: requests and bytes.
type inflight struct {
	reqs  int
	bytes int64
}

// busyAdd counts a request of n bytes to addr (d = 1) or its end (d = -1),
// and returns the bytes in flight to addr with it: reads pick the copy
// with the fewest requests in flight (no timeout comes from it: see
// replicaCtx).
func (c *Client) busyAdd(addr string, n int, d int) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy == nil {
		c.busy = map[string]inflight{}
	}
	l := c.busy[addr]
	l.reqs += d
	l.bytes += int64(d * n)
	if l.reqs <= 0 {
		delete(c.busy, addr)
		return 0
	}
	c.busy[addr] = l
	return l.bytes
}

// hear records that the server at addr answered (a reply or an error
// reply, not a transport failure): progress, for Liveness.
func (c *Client) hear(addr string, err error) {
	if transport(err) {
		return
	}
	c.live.Replied(addr)
}

// replicaCtx bounds one request to the copy at addr while another copy
// could take over (not last): it ends when the server shows no sign of
// life for Patience (no reply to any of this client's requests, no answer
// to a liveness probe on a connection of its own) or completes nothing for
// Stall though it answers probes. No bound comes from the bytes queued: a
// busy server behind a saturated link answers probes and requests, however
// slowly, and is waited for; a stopped one is given up in Patience. The
// last copy to try has only ctx's bound. queued is no longer used for the
// bound; it is kept for the callers' load accounting.
func (c *Client) replicaCtx(ctx context.Context, addr string, queued int64, last bool) (context.Context, context.CancelFunc) {
	if last {
		return context.WithCancel(ctx)
	}
	return c.live.Bound(ctx, addr, nil)
}

// transport reports whether err is the server not answering (rather than
// its answer): only that marks it down.
func transport(err error) bool {
	var re *proto.RemoteError
	return err != nil && !errors.As(err, &re)
}

func isErrno(err error, no syscall.Errno) bool {
	var re *proto.RemoteError
	return errors.As(err, &re) && re.Errno == no
}

// refresh re-reads the file's attributes (the layout changed: meta said
// ESTALE) and rebuilds where its copies live. Stripe size and count never
// change under an open file; only which servers hold the copies.
func (f *wstate) refresh(ctx context.Context) error {
	a, err := f.c.attr(ctx, &proto.GetAttr{Ino: f.ino})
	if err != nil {
		return fmt.Errorf("inode %d: re-reading the layout: %w", f.ino, err)
	}
	lay := AttrLayout(a)
	if err := lay.Validate(); err != nil {
		return fmt.Errorf("inode %d: bad layout from metadata server: %v", f.ino, err)
	}
	if lay.StripeSize != f.lay.StripeSize || len(lay.Servers) != len(f.lay.Servers) || lay.Copies() != f.lay.Copies() {
		return fmt.Errorf("inode %d: layout changed shape while open (stripe %d x %d, %d copies, now %d x %d, %d copies)",
			f.ino, f.lay.StripeSize, len(f.lay.Servers), f.lay.Copies(), lay.StripeSize, len(lay.Servers), lay.Copies())
	}
	cp, err := f.c.buildCopies(ctx, lay)
	if err != nil {
		return err
	}
	f.rep.Store(cp)
	return f.staleFromAttr(ctx, a)
}

// StaleEvery is how old a replicated file's stale records may get, without
// the metadata cache, before a read asks meta for them again.
const StaleEvery = time.Second

// staleChanged marks the stale records of the open files of inos (all open
// files when all) as needing a refresh: the cache's watch said meta changed
// them.
func (c *Client) staleChanged(inos []uint64, all bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if all {
		for _, st := range c.open {
			st.staleNeed.Store(true)
		}
		return
	}
	for _, ino := range inos {
		if st := c.open[ino]; st != nil {
			st.staleNeed.Store(true)
		}
	}
}

// staleFresh re-reads the stale records before a read when they may be out
// of date: with the cache's lease running, when its watch said the inode
// changed; otherwise when older than StaleEvery (one GetStale per
// StaleEvery per file at most: concurrent reads use the list they have).
// A refresh that fails leaves the old list (meta may be electing).
func (f *wstate) staleFresh(ctx context.Context) {
	if cc := f.c.cache; cc != nil && cc.trusted() {
		if f.staleNeed.Swap(false) && f.loadStale(ctx) != nil {
			f.staleNeed.Store(true)
		}
		return
	}
	t, last := now().UnixNano(), f.staleAt.Load()
	if t-last < int64(StaleEvery) || !f.staleAt.CompareAndSwap(last, t) {
		return
	}
	f.staleNeed.Store(false)
	f.loadStale(ctx)
}

// loadStale fetches the file's stale records from meta.
func (f *wstate) loadStale(ctx context.Context) error {
	f.staleAt.Store(now().UnixNano())
	r, err := f.c.call(ctx, &proto.GetStale{Ino: f.ino})
	if err != nil {
		return fmt.Errorf("inode %d: stale records: %w", f.ino, err)
	}
	sr, ok := r.(*proto.StaleReply)
	if !ok {
		return unexpected(f.c.meta, r)
	}
	f.smu.Lock()
	f.stale = sr.Recs
	f.smu.Unlock()
	return nil
}

// current reports whether server id's copy of column k is current over
// [off, off+n) as far as this client knows.
func (f *wstate) current(k int, id uint32, off, n int64) bool {
	f.smu.Lock()
	defer f.smu.Unlock()
	for _, r := range f.stale {
		if int(r.Index) != k || r.Server != id {
			continue
		}
		if extent.FromOffLen(r.Off, r.Len).Overlaps(objRange(off, off+n)) {
			return false
		}
	}
	return true
}

// markStale tells meta that servers of column k missed [x) and, once it
// has recorded it, remembers that here too (reads then avoid them). ESTALE
// comes back as is: the caller re-reads the layout and redoes its work.
func (f *wstate) markStale(ctx context.Context, cp *copies, k int, servers []uint32, x extent.Range) error {
	off, n := x.OffLen()
	_, err := f.c.call(ctx, &proto.MarkStale{Ino: f.ino, Index: uint32(k), Column: cp.ids[k], Servers: servers, Off: off, Len: n})
	if err != nil {
		return fmt.Errorf("inode %d column %d: marking servers %v stale: %w", f.ino, k, servers, err)
	}
	f.smu.Lock()
	for _, id := range servers {
		f.stale = addStale(f.stale, proto.StaleRec{Index: uint32(k), Server: id, Off: off, Len: n})
	}
	f.smu.Unlock()
	return nil
}

// addStale adds r to recs, merged into a record of the same copy it
// overlaps or touches: a long outage under sequential writes stays a few
// records, not one per write (reads scan them).
func addStale(recs []proto.StaleRec, r proto.StaleRec) []proto.StaleRec {
	rr := extent.FromOffLen(r.Off, r.Len)
	for i := range recs {
		x := &recs[i]
		xr := extent.FromOffLen(x.Off, x.Len)
		if x.Index != r.Index || x.Server != r.Server || !xr.Touches(rr) {
			continue
		}
		x.Off, x.Len = xr.Hull(rr).OffLen()
		return recs
	}
	return append(recs, r)
}

// sendRepl writes data at objOff of column k: ReplWrite to the first copy
// not known to be down, forwarding to the others; the copies that missed it
// are marked stale before it counts as written. A failed head is marked
// stale too and the next copy becomes head. Called by send, after every
// older overlapping write was acknowledged.
func (f *wstate) sendRepl(k int, objOff int64, data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), writeBound)
	defer cancel()
	var errs []error
	viaFirst := false // retrying through the column's first copy (below)
	for try := 0; try < maxLayoutTries; try++ {
		cp := f.rep.Load()
		col, addrs := cp.ids[k], cp.addrs[k]
		// Heads in order: copies not known down, then the down ones (they
		// may be back); lost copies never.
		var live, down []int
		f.c.mu.Lock()
		for i, id := range col {
			switch {
			case addrs[i] == "":
			case f.c.isDown(id):
				down = append(down, i)
			default:
				live = append(live, i)
			}
		}
		f.c.mu.Unlock()
		if viaFirst && addrs[0] != "" {
			notFirst := func(i int) bool { return i == 0 }
			live = append([]int{0}, slices.DeleteFunc(live, notFirst)...)
			down = slices.DeleteFunc(down, notFirst)
		}
		applied := map[uint32]bool{}
		failed := map[int]bool{}
		var headErr error
		estale := false
		heads := append(live, down...)
		for hi, h := range heads {
			var fwd []proto.Peer
			for _, i := range live {
				if i != h && !failed[i] {
					fwd = append(fwd, proto.Peer{ID: col[i], Addr: addrs[i]})
				}
			}
			queued := f.c.busyAdd(addrs[h], len(data), 1)
			hctx, hcancel := f.c.replicaCtx(ctx, addrs[h], queued, hi == len(heads)-1)
			r, err := f.c.pool.Call(hctx, addrs[h], &proto.ReplWrite{Handle: f.ino, Index: uint32(k), Off: uint64(objOff), Fwd: fwd, Data: data, Sync: f.syncWrites})
			err = proto.Why(hctx, err)
			hcancel()
			f.c.hear(addrs[h], err)
			f.c.busyAdd(addrs[h], len(data), -1)
			if err == nil {
				rr, ok := r.(*proto.ReplReply)
				if !ok {
					err = unexpected(addrs[h], r)
				} else {
					applied[col[h]] = true
					bad := map[uint32]bool{}
					for i, id := range rr.Failed {
						bad[id] = true
						f.c.markDown(id) // later writes skip it at once
						why := "no reason given"
						if i < len(rr.Why) {
							why = rr.Why[i]
						}
						errs = append(errs, fmt.Errorf("server %d missed the write forwarded by head %d (column %d): %s", id, col[h], k, why))
					}
					for _, p := range fwd {
						if !bad[p.ID] {
							applied[p.ID] = true
						}
					}
					headErr = nil
					break
				}
			}
			if isErrno(err, syscall.ESTALE) {
				estale = true
				break
			}
			failed[h] = true
			headErr = fmt.Errorf("write to server %d at %s (column %d): %w", col[h], addrs[h], k, err)
			errs = append(errs, headErr)
			if transport(err) {
				f.c.markDown(col[h])
			}
		}
		if !estale {
			if len(applied) == 0 {
				if len(errs) == 0 {
					return fmt.Errorf("inode %d column %d: no copy has a known server", f.ino, k)
				}
				return errors.Join(errs...) // no copy took it: the write error
			}
			var missed []uint32
			for _, id := range col {
				if !applied[id] {
					missed = append(missed, id)
				}
			}
			if len(missed) == 0 || len(data) == 0 {
				return nil // an empty write (ensureObjects) changes no bytes
			}
			err := f.markStale(ctx, cp, k, missed, objRange(objOff, objOff+int64(len(data))))
			if err == nil {
				return nil
			}
			if len(errs) > 0 && !isErrno(err, syscall.ESTALE) {
				// Say what happened to each copy, not only that meta
				// refused: the write fails on a double fault, and both
				// faults are named.
				err = fmt.Errorf("%w; what the copies did: %w", err, errors.Join(errs...))
			}
			if isErrno(err, syscall.EIO) && !viaFirst && addrs[0] != "" {
				// Meta refused: with these copies stale no copy of the
				// range would be current (another writer marked stale the
				// ones this write reached, as when two heads each refuse
				// the other's forwards). Once more through the column's
				// first copy, the head every writer tries first.
				viaFirst = true
				errs = append(errs, err)
				continue
			}
			if !isErrno(err, syscall.ESTALE) {
				return err
			}
		}
		// The layout changed: write again where it says now.
		if err := f.refresh(ctx); err != nil {
			return err
		}
	}
	return fmt.Errorf("inode %d column %d: layout kept changing over %d tries", f.ino, k, maxLayoutTries)
}

// readRepl reads dst at objOff of column k from a current copy, moving to
// another on error, timeout or a checksum mismatch (EBADMSG, which also
// marks that range of that copy stale so heal repairs it). It fails only
// when no current copy answers.
func (f *File) readRepl(dst []byte, k int, objOff int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*proto.DefaultTimeout)
	defer cancel()
	f.staleFresh(ctx)
	tried := map[uint32]bool{}
	var errs []error
	for range 2 * layout.MaxReplicas {
		cp := f.rep.Load()
		i := f.pick(cp, k, objOff, int64(len(dst)), tried)
		if i < 0 {
			break
		}
		id, addr := cp.ids[k][i], cp.addrs[k][i]
		tried[id] = true
		last := f.pick(cp, k, objOff, int64(len(dst)), tried) < 0
		queued := f.c.busyAdd(addr, len(dst), 1)
		rctx, rcancel := f.c.replicaCtx(ctx, addr, queued, last)
		r, err := f.c.pool.CallInto(rctx, addr, &proto.Read{Handle: f.ino, Index: uint32(k), Off: uint64(objOff), Len: uint32(len(dst)), Held: f.held(k)}, dst)
		err = proto.Why(rctx, err)
		rcancel()
		f.c.hear(addr, err)
		f.c.busyAdd(addr, len(dst), -1)
		if err == nil {
			dr, ok := r.(*proto.DataReply)
			if ok {
				got := len(dr.Data)
				if got > 0 && &dr.Data[0] != &dst[0] {
					got = copy(dst, dr.Data)
				}
				clear(dst[got:]) // past the object's end: a hole
				return nil
			}
			err = unexpected(addr, r)
		}
		errs = append(errs, fmt.Errorf("read from server %d at %s: %w", id, addr, err))
		if transport(err) {
			f.c.markDown(id)
		}
		if bad, gone := isErrno(err, syscall.EBADMSG), proto.IsMissing(err); bad || gone {
			// Bad bytes on disk, or the whole object gone: make heal
			// repair them (a gone object from its start: all of it). An
			// error here only costs the repair, not the read; meta
			// refuses it when no other copy is current, and the read
			// then fails below unless another copy answers.
			x := objRange(objOff, objOff+int64(len(dst)))
			if gone {
				x = objRange(0, math.MaxInt64)
			}
			if merr := f.markStale(ctx, cp, k, []uint32{id}, x); isErrno(merr, syscall.ESTALE) {
				f.refresh(ctx)
			}
		}
		// Others may have found copies stale meanwhile.
		f.loadStale(ctx)
	}
	if len(errs) == 0 {
		return proto.Errorf(syscall.EIO, fmt.Sprintf("inode %d column %d: no current copy of object range [%d, %d)", f.ino, k, objOff, objOff+int64(len(dst))))
	}
	err := fmt.Errorf("inode %d column %d: no current copy answered: %w", f.ino, k, errors.Join(errs...))
	if proto.IsMissing(err) {
		// No copy holds the bytes: an I/O error, never zeros.
		return proto.Errorf(syscall.EIO, err.Error())
	}
	return err
}

// pick chooses the copy of column k to read [off, off+n) from: current,
// not tried, not lost; servers not known down before down ones; then the
// least requests in flight from this client, ties at random. -1: none.
func (f *wstate) pick(cp *copies, k int, off, n int64, tried map[uint32]bool) int {
	var cand []int
	for i, id := range cp.ids[k] {
		if cp.addrs[k][i] != "" && !tried[id] && f.current(k, id, off, n) {
			cand = append(cand, i)
		}
	}
	if len(cand) == 0 {
		return -1
	}
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	best, bestDown, bestLoad, ties := -1, false, 0, 0
	for _, i := range cand {
		d, l := f.c.isDown(cp.ids[k][i]), f.c.busy[cp.addrs[k][i]].reqs
		better := best < 0 || (!d && bestDown) || (d == bestDown && l < bestLoad)
		if better {
			best, bestDown, bestLoad, ties = i, d, l, 1
			continue
		}
		if d == bestDown && l == bestLoad {
			ties++
			if rand.IntN(ties) == 0 { // reservoir: each tie equally likely
				best = i
			}
		}
	}
	return best
}

// toCopies sends mk(k, server) to every copy of each column in cols, all at
// once. A copy that fails it is marked stale over span(k); the result is an
// error only when no copy of a column took it or meta could not record the
// stale copies. Called with f.mu held (Sync, Truncate, Allocate).
func (f *wstate) toCopies(ctx context.Context, what string, cols []int, mk func(k int) proto.Msg, span func(k int) extent.Range) error {
	for try := 0; try < maxLayoutTries; try++ {
		cp := f.rep.Load()
		type res struct {
			k, i int
			err  error
		}
		var mu sync.Mutex
		var out []res
		var wg sync.WaitGroup
		// answered[k] is closed once a copy of column k took it: from then
		// on the others get Patience from their start (see Patience).
		answered := map[int]chan struct{}{}
		var amu sync.Mutex
		for _, k := range cols {
			answered[k] = make(chan struct{})
		}
		for _, k := range cols {
			// Copies known down are not waited for: they missed it. When
			// every copy is down, all are asked (they may be back).
			var live, all []int
			f.c.mu.Lock()
			for i, a := range cp.addrs[k] {
				if a == "" {
					continue
				}
				all = append(all, i)
				if !f.c.isDown(cp.ids[k][i]) {
					live = append(live, i)
				}
			}
			f.c.mu.Unlock()
			if len(live) == 0 {
				live = all
			}
			for _, i := range all {
				if !slices.Contains(live, i) {
					mu.Lock()
					out = append(out, res{k, i, fmt.Errorf("%w: server %d failed lately", proto.ErrUnavailable, cp.ids[k][i])})
					mu.Unlock()
					continue
				}
				a := cp.addrs[k][i]
				wg.Add(1)
				go func() {
					defer wg.Done()
					// A copy is given up only once another copy of its
					// column answered and it shows no sign of life for
					// Patience (a stopped server must not hold up fsync or
					// close for long) or no progress for Stall; a busy one
					// is waited for. The only live copy is waited for as
					// long as the call may take.
					var cctx context.Context
					var cancel context.CancelFunc
					if len(live) == 1 {
						cctx, cancel = context.WithCancel(ctx)
					} else {
						cctx, cancel = f.c.live.Bound(ctx, a, answered[k])
					}
					_, err := f.c.pool.Call(cctx, a, mk(k))
					f.c.hear(a, err)
					if err != nil {
						err = proto.Why(cctx, err)
					}
					cancel()
					if err == nil {
						amu.Lock()
						select {
						case <-answered[k]:
						default:
							close(answered[k])
						}
						amu.Unlock()
					}
					if transport(err) {
						f.c.markDown(cp.ids[k][i])
					}
					mu.Lock()
					out = append(out, res{k, i, err})
					mu.Unlock()
				}()
			}
		}
		wg.Wait()
		var errs []error
		var again []int
		for _, k := range cols {
			var ok bool
			var missed []uint32
			var why []error
			for _, r := range out {
				if r.k != k {
					continue
				}
				if r.err == nil {
					ok = true
					continue
				}
				missed = append(missed, cp.ids[k][r.i])
				why = append(why, fmt.Errorf("%s on server %d at %s: %w", what, cp.ids[k][r.i], cp.addrs[k][r.i], r.err))
			}
			if !ok {
				errs = append(errs, why...)
				if len(why) == 0 {
					errs = append(errs, fmt.Errorf("%s: column %d has no copy on a known server", what, k))
				}
				continue
			}
			if len(missed) == 0 || span(k).Empty() {
				continue
			}
			if err := f.markStale(ctx, cp, k, missed, span(k)); err != nil {
				if isErrno(err, syscall.ESTALE) {
					again = append(again, k)
					continue
				}
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 || len(again) == 0 {
			return errors.Join(errs...)
		}
		if err := f.refresh(ctx); err != nil {
			return err
		}
		cols = again
	}
	return fmt.Errorf("inode %d: %s: layout kept changing over %d tries", f.ino, what, maxLayoutTries)
}

package meta

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"syscall"

	"github.com/corral-cluster/corral/internal/pfs/extent"
	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Stale records (docs/meta.md, "Stale replicas and heal"): which copy of
// which column of a file missed which writes. Meta is the only judge of
// which copy is current, so the records are replicated state.
var (
	bStale    = []byte("stale")    // ino + index (u32) + server (u32) -> stale extents
	kStaleSeq = []byte("staleseq") // the last sequence number given to a stale extent
)

// maxStaleExtents bounds the extents of one (file, column, server) record:
// past it the closest ones are merged (the copy is healed over a little
// more than it missed, never less).
const maxStaleExtents = 64

// Internal commands of stale records (numbers kept apart from the other
// kinds so that concurrent additions do not collide).
const (
	cmdClearStale  cmdKind = 20 // drop extents of (Ino, Left[0] index, Left[1] server) with seq <= Cut
	cmdReplaceCopy cmdKind = 21 // Ino, Left = (index, old, new) triples: new replaces old, stale whole
)

func redundancyKind(k cmdKind) bool { return k == cmdClearStale || k == cmdReplaceCopy }

// staleExt is one stale extent: [Off, Off+Len) of the object (Len 0: to
// the end), marked by the command that gave it sequence number Seq (a
// merged extent carries the highest of its parts, so a clear of what was
// healed up to a sequence number never drops a later mark).
type staleExt struct {
	Seq, Off, Len uint64
}

func (x staleExt) rng() extent.Range { return extent.FromOffLen(x.Off, x.Len) }

func (x staleExt) end() uint64 { return x.rng().Hi }

func extFromEnd(seq, off, end uint64) staleExt {
	off, n := extent.Range{Lo: off, Hi: end}.OffLen()
	return staleExt{seq, off, n}
}

// ranges is xs without their sequence numbers.
func ranges(xs []staleExt) []extent.Range {
	out := make([]extent.Range, len(xs))
	for i, x := range xs {
		out[i] = x.rng()
	}
	return out
}

func staleKey(ino uint64, index, server uint32) []byte {
	k := binary.BigEndian.AppendUint64(nil, ino)
	k = binary.BigEndian.AppendUint32(k, index)
	return binary.BigEndian.AppendUint32(k, server)
}

func encodeExts(xs []staleExt) []byte {
	e := proto.Enc{}
	e.U32(uint32(len(xs)))
	for _, x := range xs {
		e.U64(x.Seq)
		e.U64(x.Off)
		e.U64(x.Len)
	}
	return e.B
}

func decodeExts(b []byte) ([]staleExt, error) {
	d := proto.Dec{B: b}
	xs := make([]staleExt, d.Count(24))
	for i := range xs {
		xs[i] = staleExt{d.U64(), d.U64(), d.U64()}
	}
	if err := d.Err(); err != nil {
		return nil, fmt.Errorf("corrupt stale record: %w", err)
	}
	return xs, nil
}

// mergeExts adds add to xs: overlapping or adjacent extents become one,
// and past maxStaleExtents the two closest are merged until it fits.
func mergeExts(xs []staleExt, add ...staleExt) []staleExt {
	all := append(slices.Clone(xs), add...)
	slices.SortFunc(all, func(a, b staleExt) int { return cmp.Compare(a.Off, b.Off) })
	var out []staleExt
	for _, x := range all {
		if n := len(out); n > 0 && x.Off <= out[n-1].end() {
			last := out[n-1]
			out[n-1] = extFromEnd(max(last.Seq, x.Seq), last.Off, max(last.end(), x.end()))
			continue
		}
		out = append(out, x)
	}
	for len(out) > maxStaleExtents {
		best := 0
		for i := 1; i+1 < len(out); i++ {
			if out[i+1].Off-out[i].end() < out[best+1].Off-out[best].end() {
				best = i
			}
		}
		a, b := out[best], out[best+1]
		out[best] = extFromEnd(max(a.Seq, b.Seq), a.Off, b.end())
		out = slices.Delete(out, best+1, best+2)
	}
	return out
}

func overlaps(xs []staleExt, x staleExt) bool {
	for _, y := range xs {
		if y.rng().Overlaps(x.rng()) {
			return true
		}
	}
	return false
}

// replicaLayout is a file's layout with its copies.
func replicaLayout(n *inode) layout.Layout {
	return layout.Layout{StripeSize: n.StripeSize, Servers: n.Servers, Replicas: int(n.Replicas), Extra: n.Extra}
}

// column is the servers of column index of file n, checked.
func column(n *inode, index uint32) ([]uint32, error) {
	l := replicaLayout(n)
	if int(index) >= len(l.Servers) {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("inode %d has %d columns, no column %d", n.Ino, len(l.Servers), index))
	}
	if r := l.Copies(); len(l.Extra) < (int(index)+1)*(r-1) {
		return nil, proto.Errorf(syscall.EIO, fmt.Sprintf("inode %d: %d replicas but %d extra servers (corrupt layout)", n.Ino, r, len(l.Extra)))
	}
	return l.Column(int(index)), nil
}

func (t tx) staleExts(ino uint64, index, server uint32) ([]staleExt, error) {
	v := t.Bucket(bStale).Get(staleKey(ino, index, server))
	if v == nil {
		return nil, nil
	}
	return decodeExts(v)
}

func (t tx) putStaleExts(ino uint64, index, server uint32, xs []staleExt) error {
	if len(xs) == 0 {
		return t.Bucket(bStale).Delete(staleKey(ino, index, server))
	}
	return t.Bucket(bStale).Put(staleKey(ino, index, server), encodeExts(xs))
}

func (t tx) peekStaleSeq() uint64 {
	var seq uint64
	if v := t.Bucket(bSys).Get(kStaleSeq); len(v) == 8 {
		seq = binary.BigEndian.Uint64(v)
	}
	return seq + 1
}

func (t tx) nextStaleSeq() (uint64, error) {
	seq := t.peekStaleSeq()
	return seq, t.Bucket(bSys).Put(kStaleSeq, u64key(seq))
}

// goneServer: the stored state says server id holds no current data (lost,
// or its disk being replaced): none of its copies counts as current.
func (t tx) goneServer(id uint32) bool {
	v := t.Bucket(bIOD).Get(binary.BigEndian.AppendUint32(nil, id))
	if v == nil {
		return false
	}
	si, err := decodeServer(v)
	return err == nil && (si.State == proto.ServerLost || si.State == proto.ServerReplacing)
}

// countStale is how many (column, server) records file ino has.
func (t tx) countStale(ino uint64) uint32 {
	c := t.Bucket(bStale).Cursor()
	p := u64key(ino)
	var n uint32
	for k, _ := c.Seek(p); k != nil && len(k) == 16 && string(k[:8]) == string(p); k, _ = c.Next() {
		n++
	}
	return n
}

// restale stores n with its new record count; the put notifies its
// watchers, so client caches drop its attributes (and stale records).
func (t tx) restale(n *inode) error {
	n.Stale = t.countStale(n.Ino)
	return t.put(n)
}

// dropStale deletes every stale record of file n (removed, or cut to 0).
func (t tx) dropStale(n *inode) error {
	c := t.Bucket(bStale).Cursor()
	p := u64key(n.Ino)
	for k, _ := c.Seek(p); k != nil && len(k) == 16 && string(k[:8]) == string(p); k, _ = c.Seek(p) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	n.Stale = 0
	return nil
}

// markStale records m (see proto.MarkStale), refusing a layout changed
// since the sender read it (ESTALE) and a mark that would leave some range
// of the column without a current copy (EIO: the writer fails the write).
func (t tx) markStale(m *proto.MarkStale) (proto.Msg, error) {
	n, err := t.inode(m.Ino)
	if err != nil {
		return nil, err
	}
	if !n.isReg() {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("mark stale: inode %d is not a regular file", m.Ino))
	}
	col, err := column(n, m.Index)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(col, m.Column) {
		return nil, proto.Errorf(syscall.ESTALE, fmt.Sprintf("mark stale: inode %d column %d is on servers %v now, not %v: layout changed", m.Ino, m.Index, col, m.Column))
	}
	if len(m.Servers) == 0 {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("mark stale: inode %d column %d: no servers named", m.Ino, m.Index))
	}
	for _, id := range m.Servers {
		if !slices.Contains(col, id) {
			return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("mark stale: server %d holds no copy of inode %d column %d (servers %v)", id, m.Ino, m.Index, col))
		}
	}
	// The sequence number is taken only once the mark is accepted.
	seq := t.peekStaleSeq()
	add := extFromEnd(seq, m.Off, staleExt{0, m.Off, m.Len}.end())
	after := make([][]staleExt, len(col))
	var common []extent.Range
	for i, id := range col {
		xs, err := t.staleExts(m.Ino, m.Index, id)
		if err != nil {
			return nil, err
		}
		if slices.Contains(m.Servers, id) {
			xs = mergeExts(xs, add)
		}
		after[i] = xs
		if t.goneServer(id) {
			xs = []staleExt{{0, 0, 0}}
		}
		if i == 0 {
			common = ranges(xs)
		} else {
			common = extent.Intersect(common, ranges(xs))
		}
	}
	if len(common) > 0 {
		span := common[0].String()
		return nil, proto.Errorf(syscall.EIO, fmt.Sprintf("mark stale: inode %d column %d: servers %v would leave no current copy of object bytes %s (copies %v): the write fails",
			m.Ino, m.Index, m.Servers, span, col))
	}
	if _, err := t.nextStaleSeq(); err != nil {
		return nil, err
	}
	for i, id := range col {
		if slices.Contains(m.Servers, id) {
			if err := t.putStaleExts(m.Ino, m.Index, id, after[i]); err != nil {
				return nil, err
			}
		}
	}
	return nil, t.restale(n)
}

// clearStale drops what a heal made current: the extents of (ino, index,
// server) with a sequence number up to upto, the heal's snapshot (marks
// made meanwhile stay). An extent stays too where another copy of the
// column was marked stale after upto: the heal may have copied from that
// copy bytes older than a write the target had already taken, so the
// target is not current there (healed again, from the copies current now).
func (t tx) clearStale(ino uint64, index, server uint32, upto uint64) error {
	xs, err := t.staleExts(ino, index, server)
	if err != nil || xs == nil {
		return err
	}
	n, err := t.inode(ino)
	if err != nil {
		return nil // removed meanwhile
	}
	var newer []staleExt // other copies' extents marked after the snapshot
	if col, err := column(n, index); err == nil {
		for _, id := range col {
			if id == server {
				continue
			}
			ys, err := t.staleExts(ino, index, id)
			if err != nil {
				return err
			}
			for _, y := range ys {
				if y.Seq > upto {
					newer = append(newer, y)
				}
			}
		}
	}
	xs = slices.DeleteFunc(xs, func(x staleExt) bool { return x.Seq <= upto && !overlaps(newer, x) })
	if err := t.putStaleExts(ino, index, server, xs); err != nil {
		return err
	}
	return t.restale(n)
}

// replaceCopies applies cmdReplaceCopy: for each (index, old, new) the
// copy of column index on old moves to new, stale whole there (the healer
// fills it); old == new only marks that copy stale whole (a replaced
// disk). A triple the layout no longer matches is skipped.
func (t tx) replaceCopies(ino uint64, triples []uint32) error {
	n, err := t.inode(ino)
	if err != nil || !n.isReg() {
		return nil // removed meanwhile
	}
	r := max(1, int(n.Replicas))
	for i := 0; i+2 < len(triples); i += 3 {
		index, old, nw := triples[i], triples[i+1], triples[i+2]
		col, err := column(n, index)
		if err != nil {
			return nil
		}
		pos := slices.Index(col, old)
		if pos < 0 || old != nw && slices.Contains(col, nw) {
			continue
		}
		if old != nw {
			n.Servers = slices.Clone(n.Servers)
			n.Extra = slices.Clone(n.Extra)
			if pos == 0 {
				n.Servers[index] = nw
			} else {
				n.Extra[int(index)*(r-1)+pos-1] = nw
			}
			if err := t.putStaleExts(ino, index, old, nil); err != nil {
				return err
			}
		}
		seq, err := t.nextStaleSeq()
		if err != nil {
			return err
		}
		if err := t.putStaleExts(ino, index, nw, []staleExt{{seq, 0, 0}}); err != nil {
			return err
		}
	}
	return t.restale(n)
}

// getStale answers GetStale: the file's records, extent by extent.
func (s *Service) getStale(m *proto.GetStale) (proto.Msg, error) {
	r := &proto.StaleReply{}
	err := s.view(func(t tx) error {
		if _, err := t.inode(m.Ino); err != nil {
			return err
		}
		c := t.Bucket(bStale).Cursor()
		p := u64key(m.Ino)
		for k, v := c.Seek(p); k != nil && len(k) == 16 && string(k[:8]) == string(p); k, v = c.Next() {
			xs, err := decodeExts(v)
			if err != nil {
				return err
			}
			index, server := binary.BigEndian.Uint32(k[8:]), binary.BigEndian.Uint32(k[12:])
			for _, x := range xs {
				r.Recs = append(r.Recs, proto.StaleRec{Index: index, Server: server, Off: x.Off, Len: x.Len})
			}
		}
		return nil
	})
	return r, err
}

// handleRedundancy serves the data-redundancy requests (ops 86-89: stale
// records, lost servers); ok is false for any other request.
func (s *Service) handleRedundancy(ctx context.Context, req proto.Msg) (r proto.Msg, err error, ok bool) {
	switch m := req.(type) {
	case *proto.MarkStale:
		r, err := s.proposeReq(ctx, m, nil)
		return r, err, true
	case *proto.GetStale:
		r, err := s.getStale(m)
		return r, err, true
	case *proto.LoseServer:
		r, err := s.loseServer(ctx, m)
		return r, err, true
	}
	return nil, nil, false
}

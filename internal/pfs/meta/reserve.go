package meta

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	bolt "go.etcd.io/bbolt"
)

// Reserved inodes: a client takes inode numbers and their layouts ahead of
// its creates (Reserve, one commit for many files), writes a small file's
// bytes to the reserved layout's servers while its create (Create with
// Reserved and Size) commits: one replicated commit per small file, the
// data write beside it instead of between two commits.

// bReserved: ino -> reservation (client, directory, deadline, layout).
var bReserved = []byte("reserved")

// cmdUnreserve lets the reservations Inos lapse whose deadline is before
// the command's time (the leader's sweep), reclaiming what their clients
// may have written.
const cmdUnreserve cmdKind = 8

// ReserveLease is how long a reservation lives at meta; a client uses one
// for at most half of it (by its own clock, from when it asked), so clock
// rates may differ by a factor of two before a create finds its
// reservation gone (it then fails with ESTALE and the client creates the
// file the old way).
const ReserveLease = 2 * time.Minute

// reservation is one reserved inode's record.
type reservation struct {
	client, parent uint64
	until          int64
	attr           proto.Attr // Ino and layout
}

func (r *reservation) encode() []byte {
	e := proto.Enc{}
	e.U64(r.client)
	e.U64(r.parent)
	e.I64(r.until)
	r.attr.Encode(&e)
	return e.B
}

func decodeReservation(b []byte) (*reservation, error) {
	d := proto.Dec{B: b}
	r := &reservation{client: d.U64(), parent: d.U64(), until: d.I64()}
	r.attr.Decode(&d)
	if err := d.Err(); err != nil {
		return nil, fmt.Errorf("corrupt reservation record: %w", err)
	}
	return r, nil
}

func (t tx) reservation(ino uint64) (*reservation, error) {
	v := t.Bucket(bReserved).Get(u64key(ino))
	if v == nil {
		return nil, nil
	}
	return decodeReservation(v)
}

// unreserve drops reservation r and queues its objects for removal: its
// client may have written them before its create failed or never came.
func (t tx) unreserve(r *reservation) error {
	if err := t.Bucket(bReserved).Delete(u64key(r.attr.Ino)); err != nil {
		return err
	}
	if len(r.attr.Servers) == 0 {
		return nil
	}
	if t.ch != nil {
		t.ch.reclaim = true
	}
	return t.Bucket(bReclaim).Put(u64key(r.attr.Ino), encodeReclaim(append(slices.Clone(r.attr.Servers), r.attr.Extra...), uint32(len(r.attr.Servers))))
}

// reserve checks a Reserve and proposes it with the placement decided here.
func (s *Service) reserveInos(ctx context.Context, m *proto.Reserve) (proto.Msg, error) {
	if m.Count == 0 || m.Count > proto.MaxReserve {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("reserve: count %d, want 1 to %d", m.Count, proto.MaxReserve))
	}
	if _, ok := ctx.Value(reqIDKey{}).(reqID); !ok {
		// A reservation belongs to a client ID: only its creates use it.
		return nil, proto.Errorf(syscall.EINVAL, "reserve: needs a request ID (Idem) naming the client")
	}
	if err := s.notLeader(ctx); err != nil {
		return nil, err
	}
	s.awaitServers(ctx)
	return s.proposeReq(ctx, m, s.placement)
}

// newLayout is the layout of a new regular file in directory p: the
// request's fields, else p's policy, placed by the leader's decision in c.
func (t tx) newLayout(c *command, p *inode, stripeSize, stripeCount, reps uint32) (size uint32, servers, extra []uint32, replicas int, err error) {
	pol, err := t.policy(p)
	if err != nil {
		return 0, nil, nil, 0, err
	}
	size, count := stripeSize, stripeCount
	if size == 0 {
		size = pol.size
	}
	if count == 0 {
		count = pol.count
	}
	if size == 0 {
		size = c.DefSize
		if v := t.Bucket(bSys).Get(kDefSize); len(v) == 4 {
			size = binary.BigEndian.Uint32(v)
		}
	}
	replicas = int(reps)
	if replicas == 0 {
		replicas = int(pol.replicas)
	}
	if replicas == 0 {
		replicas = defaultReplicas(len(c.Picked))
	}
	// Whole placement: one column, unless the request asks for a count.
	whole := pol.placement == proto.PlaceWhole && stripeCount == 0
	servers, extra, err = c.place(int(count), replicas, whole)
	return size, servers, extra, replicas, err
}

// rotated is c with its placement started i servers further on: the files
// of one reservation spread over the servers as consecutive creates do.
func (c *command) rotated(i int) *command {
	n := len(c.Picked)
	if n == 0 || i%n == 0 {
		return c
	}
	cc := *c
	cc.Picked = append(slices.Clone(c.Picked[i%n:]), c.Picked[:i%n]...)
	if len(c.Zones) == n {
		cc.Zones = append(slices.Clone(c.Zones[i%n:]), c.Zones[:i%n]...)
	}
	return &cc
}

func (t tx) reserve(c *command, m *proto.Reserve) (proto.Msg, error) {
	if c.Client == 0 {
		return nil, proto.Errorf(syscall.EINVAL, "reserve: needs a request ID (Idem) naming the client")
	}
	if m.Count == 0 || m.Count > proto.MaxReserve {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("reserve: count %d, want 1 to %d", m.Count, proto.MaxReserve))
	}
	p, err := t.dir(m.Parent)
	if err != nil {
		return nil, err
	}
	until := t.now + int64(ReserveLease)
	r := &proto.ReserveReply{Until: until, Files: make([]proto.Attr, 0, m.Count)}
	for i := range int(m.Count) {
		size, servers, extra, replicas, err := t.newLayout(c.rotated(i), p, 0, 0, 0)
		if err != nil {
			return nil, err
		}
		ino, err := t.nextIno()
		if err != nil {
			return nil, err
		}
		a := proto.Attr{Ino: ino, Mode: sIFREG, StripeSize: size, StripeCount: uint32(len(servers)), Servers: servers,
			Replicas: uint32(replicas), Extra: extra}
		rec := &reservation{client: c.Client, parent: m.Parent, until: until, attr: a}
		if err := t.Bucket(bReserved).Put(u64key(ino), rec.encode()); err != nil {
			return nil, err
		}
		r.Files = append(r.Files, a)
	}
	return r, nil
}

// createReserved makes file m.Name in directory p as the inode c's client
// reserved, with its reserved layout and m.Size. Whatever fails once the
// reservation is known to be this client's uses it up and queues its
// objects for removal: the client wrote them for this create alone.
func (t tx) createReserved(c *command, p *inode, m *proto.Create) (proto.Msg, error) {
	r, err := t.reservation(m.Reserved)
	if err != nil {
		return nil, err
	}
	if r == nil || c.Client == 0 || r.client != c.Client {
		return nil, proto.Errorf(syscall.ESTALE, fmt.Sprintf("create %s: inode %d is not reserved by this client (its reservation lapsed?)", m.Name, m.Reserved))
	}
	fail := func(err error) (proto.Msg, error) {
		if uerr := t.unreserve(r); uerr != nil {
			return nil, uerr
		}
		return nil, err
	}
	switch {
	case r.until < t.now:
		return fail(proto.Errorf(syscall.ESTALE, fmt.Sprintf("create %s: the reservation of inode %d lapsed", m.Name, m.Reserved)))
	case r.parent != m.Parent:
		return fail(proto.Errorf(syscall.EINVAL, fmt.Sprintf("create %s: inode %d was reserved in directory %d, not %d", m.Name, m.Reserved, r.parent, m.Parent)))
	case !m.Excl:
		return fail(proto.Errorf(syscall.EINVAL, fmt.Sprintf("create %s: a create of a reserved inode must be exclusive", m.Name)))
	case m.StripeSize != 0 || m.StripeCount != 0 || m.Replicas != 0:
		return fail(proto.Errorf(syscall.EINVAL, fmt.Sprintf("create %s: a reserved inode has its layout already", m.Name)))
	case m.Size > uint64(layout.Layout{StripeSize: r.attr.StripeSize, Servers: r.attr.Servers, Replicas: int(r.attr.Replicas), Extra: r.attr.Extra}.MaxFileSize()):
		return fail(proto.Errorf(syscall.EFBIG, fmt.Sprintf("create %s: size %d past the largest this layout holds", m.Name, m.Size)))
	}
	if _, ok := t.child(m.Parent, m.Name); ok {
		return fail(exists(m.Name))
	}
	if err := t.Bucket(bReserved).Delete(u64key(r.attr.Ino)); err != nil {
		return nil, err
	}
	a := r.attr
	a.Mode, a.Uid, a.Gid, a.Nlink, a.Size = sIFREG|m.Mode&0o7777, m.Uid, m.Gid, 1, m.Size
	a.Atime, a.Mtime, a.Ctime = t.now, t.now, t.now
	n := &inode{Attr: a}
	if err := t.put(n); err != nil {
		return nil, err
	}
	return &proto.AttrReply{Attr: n.Attr, Created: true}, t.addEntry(p, m.Name, n)
}

// lapsedReservations lists the reservations whose deadline is before cut.
func lapsedReservations(btx *bolt.Tx, cut int64) []uint64 {
	var out []uint64
	btx.Bucket(bReserved).ForEach(func(k, v []byte) error {
		if r, err := decodeReservation(v); err == nil && r.until < cut && len(k) == 8 {
			out = append(out, binary.BigEndian.Uint64(k))
		}
		return nil
	})
	return out
}

// applyUnreserve applies cmdUnreserve.
func (t tx) applyUnreserve(inos []uint64) error {
	for _, ino := range inos {
		r, err := t.reservation(ino)
		if err != nil {
			return err
		}
		if r == nil || r.until >= t.now {
			continue
		}
		if err := t.unreserve(r); err != nil {
			return err
		}
	}
	return nil
}

// sweepReservations lets lapsed reservations go (leader; the reaper's tick).
func (s *Service) sweepReservations(ctx context.Context) error {
	now := time.Now().UnixNano()
	var lapsed []uint64
	s.m.view(func(btx *bolt.Tx) error {
		lapsed = lapsedReservations(btx, now)
		return nil
	})
	for len(lapsed) > 0 {
		n := min(len(lapsed), 4096)
		if _, err := s.propose(ctx, &command{Kind: cmdUnreserve, Now: now, Inos: lapsed[:n]}); err != nil {
			return err
		}
		lapsed = lapsed[n:]
	}
	return nil
}

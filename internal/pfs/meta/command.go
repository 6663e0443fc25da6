package meta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	bolt "go.etcd.io/bbolt"
)

// cmdKind is what a command does.
type cmdKind uint8

const (
	cmdReq     cmdKind = 1 // a client request (Req)
	cmdInit    cmdKind = 2 // a new store: cluster ID and root directory
	cmdServer  cmdKind = 3 // store an I/O server record (Server, NewID, Base)
	cmdReclaim cmdKind = 4 // reclaim progress of a removed file (Ino, Left; done: also Inos)
	cmdReap    cmdKind = 5 // free orphans Inos not renewed since Cut
	cmdSweep   cmdKind = 6 // drop extended attributes of removed inodes Inos
	cmdExpire  cmdKind = 7 // forget request IDs of clients Inos idle since Cut
)

// command is one entry of the log: a request or internal change with every
// decision the leader made for it.
type command struct {
	Kind cmdKind
	Now  int64 // the leader's clock: every time stamp the command writes
	// Request ID (0: none), see proto.Idem.
	Client, Seq, Done uint64
	// Init: DefSize is the file system's default stripe size (kDefSize).
	// Create: DefSize is the leader's, used only by a store that has no
	// default yet (made before kDefSize);
	// Picked the usable servers in placement order (a file with count c
	// takes the first c); when none is usable, Registered and Summary say
	// why for the error.
	DefSize    uint32
	Picked     []uint32
	Registered uint32
	Summary    string
	// Zones: the zone of each Picked server ("": none). Whole: the usable
	// servers, least loaded first (whole-file placement). Version 2.
	Zones []string
	Whole []uint32
	Req   proto.Msg

	Server      proto.ServerInfo
	NewID, Base bool
	Ino         uint64
	Left        []uint32
	Pending     bool
	Cut         int64
	Inos        []uint64
	Cluster     string
}

// commandVersion 2 added Zones and Whole, and requests with replica
// fields (a version 1 command's Create and SetLayout lack them).
const commandVersion = 2

func (c *command) encode() []byte {
	e := proto.Enc{B: make([]byte, 0, 128)}
	e.U8(commandVersion)
	e.U8(uint8(c.Kind))
	e.I64(c.Now)
	e.U64(c.Client)
	e.U64(c.Seq)
	e.U64(c.Done)
	e.U32(c.DefSize)
	e.U32s(c.Picked)
	e.U32(c.Registered)
	e.Str(c.Summary)
	if c.Req != nil {
		e.Bytes(encodeMsg(c.Req))
	} else {
		e.Bytes(nil)
	}
	if c.Kind == cmdServer {
		e.Bytes(encodeServer(c.Server))
	} else {
		e.Bytes(nil)
	}
	e.Bool(c.NewID)
	e.Bool(c.Base)
	e.U64(c.Ino)
	e.U32s(c.Left)
	e.Bool(c.Pending)
	e.I64(c.Cut)
	e.U64s(c.Inos)
	e.Str(c.Cluster)
	e.U32(uint32(len(c.Zones)))
	for _, z := range c.Zones {
		e.Str(z)
	}
	e.U32s(c.Whole)
	return e.B
}

func decodeCommand(b []byte) (*command, error) {
	d := proto.Dec{B: b}
	// Older versions stay readable (a log written before an upgrade);
	// a newer one is an error: this member must not guess.
	v := d.U8()
	if v == 0 || v > commandVersion {
		return nil, fmt.Errorf("metadata command of version %d: this server knows versions up to %d (a newer member wrote it? upgrade this one)", v, commandVersion)
	}
	c := &command{Kind: cmdKind(d.U8())}
	if (c.Kind < cmdReq || c.Kind > cmdUnreserve) && !redundancyKind(c.Kind) {
		return nil, fmt.Errorf("metadata command of unknown kind %d (a newer member wrote it? upgrade this one)", c.Kind)
	}
	c.Now = d.I64()
	c.Client, c.Seq, c.Done = d.U64(), d.U64(), d.U64()
	c.DefSize = d.U32()
	c.Picked = d.U32s()
	c.Registered = d.U32()
	c.Summary = d.Str()
	req := d.Bytes()
	srv := d.Bytes()
	c.NewID, c.Base = d.Bool(), d.Bool()
	c.Ino = d.U64()
	c.Left = d.U32s()
	c.Pending = d.Bool()
	c.Cut = d.I64()
	c.Inos = d.U64s()
	c.Cluster = d.Str()
	if v >= 2 {
		c.Zones = make([]string, d.Count(4))
		for i := range c.Zones {
			c.Zones[i] = d.Str()
		}
		c.Whole = d.U32s()
	}
	if err := d.Err(); err != nil {
		return nil, fmt.Errorf("corrupt metadata command: %w", err)
	}
	if len(req) > 0 && v == 1 {
		req = padV1Req(req)
	}
	if len(req) > 0 {
		m, err := proto.Decode(proto.Op(req[0]), req[1:])
		if err != nil {
			return nil, fmt.Errorf("metadata command: request of op %d (unknown to this server, or corrupt): %w", req[0], err)
		}
		c.Req = m
	}
	if c.Kind == cmdServer {
		si, err := decodeServer(srv)
		if err != nil {
			return nil, err
		}
		c.Server = si
	}
	return c, nil
}

// apply runs one command against the store.
func (t tx) apply(c *command) (proto.Msg, error) {
	switch c.Kind {
	case cmdReq:
		return t.applyReq(c)
	case cmdInit:
		return nil, t.initStore(c.Cluster, c.DefSize)
	case cmdServer:
		return t.putServer(c)
	case cmdReclaim:
		if !c.Pending {
			// Every object of Ino, and of each of Inos (a batch, one
			// commit per reclaim pass; a member that predates batches
			// drops only Ino's record, and the next pass asks again).
			if err := t.Bucket(bReclaim).Delete(u64key(c.Ino)); err != nil {
				return nil, err
			}
			for _, ino := range c.Inos {
				if err := t.Bucket(bReclaim).Delete(u64key(ino)); err != nil {
					return nil, err
				}
			}
			return nil, nil
		}
		// Left has the record's positions; its column count stays.
		_, cols := decodeReclaim(t.Bucket(bReclaim).Get(u64key(c.Ino)))
		if cols == 0 {
			cols = uint32(len(c.Left)) // no record: positions are indices
		}
		return nil, t.Bucket(bReclaim).Put(u64key(c.Ino), encodeReclaim(c.Left, cols))
	case cmdReap:
		return t.reap(c.Cut, c.Inos)
	case cmdSweep:
		for _, ino := range c.Inos {
			if t.Bucket(bInode).Get(u64key(ino)) != nil {
				continue // linked again? inode numbers are never reused, but be safe
			}
			if err := t.dropXattrs(ino); err != nil {
				return nil, err
			}
		}
		return nil, nil
	case cmdExpire:
		return nil, t.expireClients(c.Cut, c.Inos)
	case cmdUnreserve:
		return nil, t.applyUnreserve(c.Inos)
	case cmdClearStale:
		if len(c.Left) != 2 {
			return nil, fmt.Errorf("clear-stale command of inode %d names %d values, want index and server", c.Ino, len(c.Left))
		}
		return nil, t.clearStale(c.Ino, c.Left[0], c.Left[1], uint64(c.Cut))
	case cmdReplaceCopy:
		return nil, t.replaceCopies(c.Ino, c.Left)
	}
	return nil, fmt.Errorf("metadata command of unknown kind %d", c.Kind)
}

func (t tx) applyReq(c *command) (proto.Msg, error) {
	switch m := c.Req.(type) {
	case *proto.SetAttr:
		return t.setattr(m)
	case *proto.Create:
		return t.create(c, m)
	case *proto.Reserve:
		return t.reserve(c, m)
	case *proto.Mkdir:
		return t.mknode(m.Parent, m.Name, func(ino uint64) *inode {
			return &inode{Attr: proto.Attr{Ino: ino, Mode: sIFDIR | m.Mode&0o7777, Uid: m.Uid, Gid: m.Gid, Nlink: 2,
				Atime: t.now, Mtime: t.now, Ctime: t.now}, Parent: m.Parent}
		})
	case *proto.Symlink:
		return t.mknode(m.Parent, m.Name, func(ino uint64) *inode {
			return &inode{Attr: proto.Attr{Ino: ino, Mode: sIFLNK | 0o777, Uid: m.Uid, Gid: m.Gid, Nlink: 1,
				Size: uint64(len(m.Target)), Atime: t.now, Mtime: t.now, Ctime: t.now}, Target: m.Target}
		})
	case *proto.Mknod:
		return t.mknod(m)
	case *proto.Link:
		return t.link(m)
	case *proto.Unlink:
		return nil, t.remove(m.Parent, m.Name, false)
	case *proto.Rmdir:
		return nil, t.remove(m.Parent, m.Name, true)
	case *proto.Rename:
		if m.Flags == proto.RenameOrphan {
			return t.renameOrphan(m)
		}
		return nil, t.rename(m)
	case *proto.SetLayout:
		return t.setLayout(m)
	case *proto.SetXattr:
		return nil, t.setXattr(m)
	case *proto.RemoveXattr:
		return nil, t.removeXattr(m)
	case *proto.UnlinkOpen:
		return t.unlinkOpen(m)
	case *proto.ReleaseOrphan:
		_, err := t.freeOrphan(m.Ino)
		return nil, err
	case *proto.RenewOrphans:
		return nil, t.renewOrphans(m)
	case *proto.MarkStale:
		return t.markStale(m)
	case nil:
		return nil, errors.New("metadata request command without a request")
	}
	// The leader proposes mutations only: an op this build does not
	// apply was written by a newer one.
	return nil, fmt.Errorf("metadata command: op %d is not a mutation this server applies (a newer member wrote it?)", c.Req.Op())
}

// kDefSize: the file system's default stripe size (u32), where neither a
// file nor its directories set one. It is part of the state, set by the
// first cmdInit from the first leader's --stripe-size (Config
// .DefaultStripeSize): every member places alike whatever its own flags,
// and a later flag changes nothing (set layouts on the root instead).
var kDefSize = []byte("defstripesize")

// initStore gives a new store its cluster ID, root directory and default
// stripe size; a store that has them keeps them (an older store gets the
// stripe size it lacks).
func (t tx) initStore(cluster string, defSize uint32) error {
	b := t.Bucket(bSys)
	if b.Get(kCluster) == nil && cluster != "" {
		if err := b.Put(kCluster, []byte(cluster)); err != nil {
			return err
		}
	}
	if b.Get(kDefSize) == nil && defSize != 0 {
		if err := b.Put(kDefSize, binary.BigEndian.AppendUint32(nil, defSize)); err != nil {
			return err
		}
	}
	if _, err := t.inode(RootIno); err == nil {
		return nil
	}
	root := &inode{Attr: proto.Attr{Ino: RootIno, Mode: sIFDIR | 0o755, Nlink: 2, Atime: t.now, Mtime: t.now, Ctime: t.now}, Parent: RootIno}
	return t.put(root)
}

// putServer stores an I/O server record; NewID hands out the next ID, Base
// stamps the next inode number (the accepted store holds no object of an
// older file). The reply is the record as stored.
func (t tx) putServer(c *command) (proto.Msg, error) {
	si := c.Server
	b := t.Bucket(bSys)
	if c.NewID {
		next := uint32(1)
		if v := b.Get(kNextIOD); v != nil {
			next = binary.BigEndian.Uint32(v)
		}
		si.ID = next
		if err := b.Put(kNextIOD, binary.BigEndian.AppendUint32(nil, next+1)); err != nil {
			return nil, err
		}
	}
	if c.Base {
		si.Base = RootIno + 1
		if v := b.Get(kNextIno); v != nil {
			si.Base = binary.BigEndian.Uint64(v)
		}
	}
	if err := t.Bucket(bIOD).Put(binary.BigEndian.AppendUint32(nil, si.ID), encodeServer(si)); err != nil {
		return nil, err
	}
	if t.ch != nil {
		t.ch.server = &si
	}
	return &proto.ServersReply{Servers: []proto.ServerInfo{si}}, nil
}

// ClientTombstone: how long an expired client's watermark outlives its
// replies. A duplicate of a request from a client idle longer than
// ClientIdle is refused (ESTALE) while the tombstone lasts; past both, a
// duplicate would be taken for a new client's request, so the rule's
// assumption is that no request is delayed (queued, retried) for more
// than ClientIdle + ClientTombstone (requests carry deadlines of minutes).
// A constant of the state machine: every member must apply the same one.
const ClientTombstone = 24 * time.Hour

// expireClients forgets the replies of the clients not heard from since
// cut (they can no longer be asked for), keeping a tombstone that retires
// every seq the client used; a tombstone idle since cut-ClientTombstone
// is deleted.
func (t tx) expireClients(cut int64, clients []uint64) error {
	for _, id := range clients {
		r, ok := getClient(t.Tx, id)
		switch {
		case !ok || r.seen >= cut:
			continue // active again meanwhile
		case r.retired && r.seen < cut-int64(ClientTombstone):
			if err := t.Bucket(bClientSeen).Delete(u64key(id)); err != nil {
				return err
			}
			continue
		case r.retired:
			continue
		}
		if err := t.dropReplies(id, ^uint64(0)); err != nil {
			return err
		}
		r.retired, r.low = true, r.high+1
		if err := putClient(t.Tx, id, r); err != nil {
			return err
		}
	}
	return nil
}

// idleClients lists the clients whose last command is older than cut, and
// the tombstones due for deletion.
func idleClients(btx *bolt.Tx, cut int64) []uint64 {
	var out []uint64
	btx.Bucket(bClientSeen).ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return nil
		}
		id := binary.BigEndian.Uint64(k)
		r, _ := getClient(btx, id)
		if r.seen < cut && (!r.retired || r.seen < cut-int64(ClientTombstone)) {
			out = append(out, id)
		}
		return nil
	})
	return out
}

// padV1Req appends the zero replica fields that a version 1 command's
// Create (Replicas u32) and SetLayout (Replicas u32, Placement u8) lack:
// zero is "as the directory's policy" and "keep".
func padV1Req(req []byte) []byte {
	switch proto.Op(req[0]) {
	case proto.OpCreate:
		return append(slices.Clone(req), make([]byte, 4)...)
	case proto.OpSetLayout:
		return append(slices.Clone(req), make([]byte, 5)...)
	}
	return req
}

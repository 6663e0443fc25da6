package proto

import (
	"fmt"
	"time"
)

// Cache invalidation (docs/meta.md, "Client cache"): a client that caches
// metadata long-polls the metadata leader for the inodes that changed.
// Requests 66-67 and replies 19 and 73-74 belong to this file (73-74 are
// still free).
const (
	OpChanges Op = 19 // ChangesReply

	OpWatch   Op = 66
	OpUnwatch Op = 67
)

// CacheLease: a client trusts its metadata cache until this long after it
// sent its last answered Watch; the leader counts it (plus a margin) from
// when it answered.
const CacheLease = 500 * time.Millisecond

// MaxChangedInos bounds the inode numbers of one ChangesReply: a reply
// that would carry more says Reset instead (the client drops everything).
const MaxChangedInos = 1 << 16

// Watch asks for the inodes changed by the commands after index Since and
// acknowledges, for watcher Client, that every change up to Since is
// forgotten. With nothing to report the leader holds the request up to a
// heartbeat interval and answers an empty ChangesReply. Since 0 registers
// a watcher that has nothing cached. Epoch is the last reply's: indexes
// of another epoch (another leader or a restarted one) mean nothing, and
// the answer is Reset.
type Watch struct {
	Client uint64 // the watcher: a random ID per client.Client
	Since  uint64
	Epoch  uint64
}

func (*Watch) Op() Op          { return OpWatch }
func (m *Watch) Encode(e *Enc) { e.U64(m.Client); e.U64(m.Since); e.U64(m.Epoch) }
func (m *Watch) Decode(d *Dec) { m.Client, m.Since, m.Epoch = d.U64(), d.U64(), d.U64() }

// Unwatch: watcher Client caches nothing any more; writers stop waiting
// for it at once instead of at the end of its lease.
type Unwatch struct{ Client uint64 }

func (*Unwatch) Op() Op          { return OpUnwatch }
func (m *Unwatch) Encode(e *Enc) { e.U64(m.Client) }
func (m *Unwatch) Decode(d *Dec) { m.Client = d.U64() }

// ChangesReply answers Watch. Index is the last change the leader knows of
// (the next Watch's Since); Inos the inodes changed after Since up to
// Index. Reset: the changes after Since are not known any more (too old,
// another leader, too many): the client drops its whole cache.
type ChangesReply struct {
	Index uint64
	Epoch uint64
	Reset bool
	Inos  []uint64
}

func (*ChangesReply) Op() Op { return OpChanges }
func (m *ChangesReply) Encode(e *Enc) {
	e.U64(m.Index)
	e.U64(m.Epoch)
	e.Bool(m.Reset)
	e.U64s(m.Inos)
}
func (m *ChangesReply) Decode(d *Dec) {
	m.Index, m.Epoch = d.U64(), d.U64()
	m.Reset = d.Bool()
	m.Inos = d.U64s()
	if len(m.Inos) > MaxChangedInos && d.err == nil {
		d.err = fmt.Errorf("changes reply: %d inodes exceed the limit %d", len(m.Inos), MaxChangedInos)
	}
}

// newWatch returns an empty message for one of this file's ops, or nil.
func newWatch(op Op) Msg {
	switch op {
	case OpChanges:
		return &ChangesReply{}
	case OpWatch:
		return &Watch{}
	case OpUnwatch:
		return &Unwatch{}
	}
	return nil
}

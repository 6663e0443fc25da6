package meta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/corral-cluster/corral/internal/durable"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/replog"
	bolt "go.etcd.io/bbolt"
)

// machine is the metadata state as a replog.StateMachine: bbolt driven by
// commands. Apply never decides anything (no clock, no server choice, no
// volatile state): the leader put every decision in the command, so every
// member applying the same log holds the same store and answers alike.
type machine struct {
	mu      sync.RWMutex // write-held only while Restore swaps db
	db      *bolt.DB
	path    string
	applied atomic.Uint64
	hooks   hooks
	// deferred: commits skip fsync, pin holds the last checkpoint's
	// pages (checkpoint.go). Changed only by the goroutine that applies,
	// or with mu write-held.
	deferred bool
	pin      *bolt.Tx
	commits  int // commits since the last checkpoint
}

// hooks tell the Service what an applied command changed (every member).
type hooks struct {
	notify   func(index uint64, inos []uint64)
	server   func(si proto.ServerInfo)
	reclaim  func()
	restored func()
	halted   func(err error) // Apply cannot go on
}

var _ replog.StateMachine = (*machine)(nil)

var (
	bClient     = []byte("client")     // client ID + seq -> request sum (u64) + reply (op + payload)
	bClientSeen = []byte("clientseen") // client ID -> clientRec
	kApplied    = []byte("applied")    // log index of the last applied command
)

// openMachine opens the store synced at every commit (one-process engine).
func openMachine(path string) (*machine, error) { return openMachineMode(path, false) }

// openMachineMode opens the store; deferred (an engine with a durable log):
// the store goes back to its last checkpoint, which stays pinned, and
// commits skip fsync from then on.
func openMachineMode(path string, deferred bool) (*machine, error) {
	mmap := 0
	if deferred {
		if err := rollBack(path); err != nil {
			return nil, err
		}
		mmap = mmapSize
	} else if _, err := os.Stat(path + ckptSuffix); err == nil {
		return nil, fmt.Errorf("%s was last used by a member of a replicated group (%s exists): its latest commands may be only in that member's Raft log; start it with --id and --peers (or --join) again", path, filepath.Base(path+ckptSuffix))
	}
	db, err := openDB(path, mmap)
	if err != nil {
		return nil, err
	}
	// Temporary files a crash left behind (see Snapshot and Restore).
	if old, _ := filepath.Glob(path + ".snapshot-*"); len(old) > 0 {
		for _, f := range old {
			os.Remove(f)
		}
	}
	m := &machine{db: db, path: path}
	m.applied.Store(readApplied(db))
	if deferred {
		// Pin the state the store was rolled back to before anything
		// is applied over it: the checkpoint file still names it.
		if err := m.deferSync(); err != nil {
			db.Close()
			return nil, err
		}
	}
	return m, nil
}

func readApplied(db *bolt.DB) uint64 {
	var a uint64
	db.View(func(btx *bolt.Tx) error {
		if v := btx.Bucket(bSys).Get(kApplied); len(v) == 8 {
			a = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	return a
}

func (m *machine) close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var err error
	if m.deferred {
		// A last checkpoint: a clean stop replays nothing.
		err = m.checkpoint()
		if m.pin != nil {
			m.pin.Rollback()
			m.pin = nil
		}
	}
	if cerr := m.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// view runs fn in a read transaction of the current store.
func (m *machine) view(fn func(*bolt.Tx) error) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.db.View(fn)
}

// Applied implements replog.StateMachine.
func (m *machine) Applied() uint64 { return m.applied.Load() }

// change is what one command changed, for the hooks.
type change struct {
	inos    []uint64
	reclaim bool
	server  *proto.ServerInfo
}

func (c *change) touch(ino uint64) {
	if c != nil {
		c.inos = append(c.inos, ino)
	}
}

// Apply implements replog.StateMachine: one bbolt transaction for the
// batch, the applied index inside it. A command this member cannot decode
// (a newer release wrote it) or that fails other than with an errno (a
// corrupt record) is an error, not a reply: answering it here while the
// other members apply it would let the stores diverge silently. The batch
// is rolled back, the applied index stays before it, and the engine must
// stop applying (the hooks' halted reports it).
func (m *machine) Apply(first uint64, cmds [][]byte) ([][]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	applied := m.applied.Load()
	if first > applied+1 {
		return nil, fmt.Errorf("meta state machine: command %d given, but only %d applied: a gap in the log", first, applied)
	}
	last := first + uint64(len(cmds)) - 1
	outs := make([][]byte, len(cmds))
	changes := make([]change, len(cmds))
	grown := false
	err := m.db.Update(func(btx *bolt.Tx) error {
		for i, raw := range cmds {
			idx := first + uint64(i)
			if idx <= applied {
				continue // applied before a crash: the log replays it
			}
			reply, err := applyOne(btx, raw, &changes[i])
			if err != nil {
				return fmt.Errorf("command %d: %w", idx, err)
			}
			outs[i] = append(binary.LittleEndian.AppendUint64(nil, idx), reply...)
		}
		if last <= applied {
			return nil
		}
		if m.deferred && btx.Size() > deferLimit {
			grown = true
		}
		return btx.Bucket(bSys).Put(kApplied, u64key(last))
	})
	if err != nil {
		err = fmt.Errorf("meta state machine halted at commands %d-%d (%d applied; this member cannot go on until fixed or replaced): %w", first, last, applied, err)
		if m.hooks.halted != nil {
			m.hooks.halted(err)
		}
		return nil, err
	}
	if last > applied {
		m.applied.Store(last)
	}
	if grown {
		// Too big to stay mapped whole: back to a sync per commit
		// before bbolt has to remap under the pin.
		if err := m.undefer(); err != nil {
			return nil, err
		}
	} else if m.deferred {
		// Pages the pin holds cannot be reused: checkpoint often enough
		// that the file does not grow by more than a few MiB meanwhile.
		if m.commits++; m.commits >= ckptEvery {
			if err := m.checkpoint(); err != nil {
				return nil, err
			}
		}
	}
	for i := range changes {
		c := &changes[i]
		// Every command is notified, changes or not: the watchers' indexes
		// must reach each acknowledged command's.
		if m.hooks.notify != nil {
			slices.Sort(c.inos) // a rename puts its directory twice
			m.hooks.notify(first+uint64(i), slices.Compact(c.inos))
		}
		if c.server != nil && m.hooks.server != nil {
			m.hooks.server(*c.server)
		}
		if c.reclaim && m.hooks.reclaim != nil {
			m.hooks.reclaim()
		}
	}
	return outs, nil
}

// applyOne applies one command and returns its reply (op + payload). An
// error is returned only for failures other than an errno refusal.
func applyOne(btx *bolt.Tx, raw []byte, ch *change) ([]byte, error) {
	c, err := decodeCommand(raw)
	if err != nil {
		return nil, err
	}
	t := tx{Tx: btx, now: c.Now, ch: ch}
	var key []byte
	var sum uint64
	if c.Client != 0 {
		key = binary.BigEndian.AppendUint64(u64key(c.Client), c.Seq)
		sum = reqSum(c.Req)
		if refusal, err := t.seenClient(c); err != nil || refusal != nil {
			if err != nil {
				return nil, err
			}
			return encodeMsg(proto.ErrorReply(refusal)), nil
		}
		if old := btx.Bucket(bClient).Get(key); len(old) >= 8 {
			if binary.BigEndian.Uint64(old) != sum {
				return encodeMsg(proto.ErrorReply(proto.Errorf(syscall.EINVAL, fmt.Sprintf(
					"request ID %d/%d reused for another request", c.Client, c.Seq)))), nil
			}
			return append([]byte(nil), old[8:]...), nil // a retry: the first reply, nothing applied again
		}
	}
	r, err := t.apply(c)
	var re *proto.RemoteError
	switch {
	case err != nil && !errors.As(err, &re):
		return nil, err
	case err != nil:
		r = proto.ErrorReply(err)
	case r == nil:
		r = &proto.OK{}
	}
	reply := encodeMsg(r)
	if key != nil {
		if err := btx.Bucket(bClient).Put(key, append(u64key(sum), reply...)); err != nil {
			return nil, err
		}
	}
	return reply, nil
}

// reqSum identifies a request's content (FNV-64a of op + payload): a
// stored reply answers a retry of the same request only.
func reqSum(m proto.Msg) uint64 {
	h := fnv.New64a()
	if m != nil {
		h.Write(encodeMsg(m))
	}
	return h.Sum64()
}

// clientRec is what the store keeps per client ID (bClientSeen): its last
// command time, its low watermark (every seq below it is retired: its reply
// is forgotten, so a late duplicate must be refused, not applied again),
// the highest seq seen, and whether the client was expired (a tombstone:
// replies gone, low = high+1). An 8-byte value (the time only) is read
// with low and high 0.
type clientRec struct {
	seen      int64
	low, high uint64
	retired   bool
}

func getClient(btx *bolt.Tx, id uint64) (clientRec, bool) {
	v := btx.Bucket(bClientSeen).Get(u64key(id))
	if len(v) < 8 {
		return clientRec{}, false
	}
	r := clientRec{seen: int64(binary.BigEndian.Uint64(v))}
	if len(v) >= 25 {
		r.low, r.high, r.retired = binary.BigEndian.Uint64(v[8:]), binary.BigEndian.Uint64(v[16:]), v[24] != 0
	}
	return r, true
}

func putClient(btx *bolt.Tx, id uint64, r clientRec) error {
	v := binary.BigEndian.AppendUint64(u64key(uint64(r.seen)), r.low)
	v = binary.BigEndian.AppendUint64(v, r.high)
	v = append(v, 0)
	if r.retired {
		v[24] = 1
	}
	return btx.Bucket(bClientSeen).Put(u64key(id), v)
}

// errRetired answers a request ID below its client's low watermark.
func errRetired(c *command) error {
	return proto.Errorf(syscall.ESTALE, fmt.Sprintf("request ID %d/%d already retired (its reply was forgotten; a late duplicate?)", c.Client, c.Seq))
}

// seenClient records the client's command: a seq below the low watermark
// is refused (the refusal is the result); else the time, the highest seq
// and the watermark advance and the replies below it are forgotten.
// Done means the client holds every reply of seq < Done, but it is trusted
// only up to the command's own seq (a Done above Seq would forget the very
// reply this request may be a retry of).
// A client unknown here (new, or its tombstone gone, see expireClients) is
// accepted whatever its seq.
func (t tx) seenClient(c *command) (refusal error, err error) {
	r, _ := getClient(t.Tx, c.Client)
	if c.Seq < r.low {
		return errRetired(c), nil
	}
	r.seen, r.retired = c.Now, false
	r.high = max(r.high, c.Seq)
	if w := min(c.Done, c.Seq); w > r.low {
		r.low = w
		if err := t.dropReplies(c.Client, w); err != nil {
			return nil, err
		}
	}
	return nil, putClient(t.Tx, c.Client, r)
}

// dropReplies deletes client's stored replies of sequence numbers < below.
func (t tx) dropReplies(client, below uint64) error {
	cur := t.Bucket(bClient).Cursor()
	prefix := u64key(client)
	for k, _ := cur.Seek(prefix); k != nil && len(k) == 16 && string(k[:8]) == string(prefix); k, _ = cur.Seek(prefix) {
		if binary.BigEndian.Uint64(k[8:]) >= below {
			break
		}
		if err := cur.Delete(); err != nil {
			return err
		}
	}
	return nil
}

func encodeMsg(m proto.Msg) []byte {
	e := proto.Enc{B: []byte{uint8(m.Op())}}
	m.Encode(&e)
	return e.B
}

// decodeResult splits what Apply returned for one command: its log index
// and its reply.
func decodeResult(b []byte) (uint64, proto.Msg, error) {
	if len(b) < 9 {
		return 0, nil, fmt.Errorf("metadata command result of %d bytes: too short", len(b))
	}
	m, err := proto.Decode(proto.Op(b[8]), b[9:])
	if err != nil && proto.Op(b[8]) == proto.OpAttr {
		m, err = decodeAttrReplyV1(b[9:], err)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("metadata command result: %w", err)
	}
	return binary.LittleEndian.Uint64(b), m, nil
}

// A snapshot is framed so that Restore can tell a whole image from a cut
// or foreign one before it touches the store: magic, the image length
// (u64, big endian), the bbolt image, its CRC-32C (u32, big endian).
var snapMagic = []byte("CORRALMETASNAP01")

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// maxSnapshot bounds the length a snapshot header may claim (1 TiB).
const maxSnapshot = 1 << 40

// Snapshot implements replog.StateMachine: bbolt's consistent copy of a
// read transaction, the applied index included, framed (see snapMagic).
// The copy goes to a local temporary file first and is streamed from
// there: a read transaction held for a slow transfer would keep the
// leader's store from growing its mapping (writers wait for it).
func (m *machine) Snapshot(w io.Writer) error {
	f, err := os.CreateTemp(filepath.Dir(m.path), filepath.Base(m.path)+".snapshot-*")
	if err != nil {
		return fmt.Errorf("metadata snapshot: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := crc32.New(crc32c)
	var size int64
	err = m.view(func(btx *bolt.Tx) error {
		size = btx.Size()
		_, err := btx.WriteTo(io.MultiWriter(f, h))
		return err
	})
	if err != nil {
		return fmt.Errorf("metadata snapshot to %s: %w", f.Name(), err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	hdr := binary.BigEndian.AppendUint64(append([]byte(nil), snapMagic...), uint64(size))
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	if n, err := io.Copy(w, f); err != nil || n != size {
		if err == nil {
			err = fmt.Errorf("%s holds %d bytes, the copy wrote %d", f.Name(), n, size)
		}
		return fmt.Errorf("metadata snapshot: %w", err)
	}
	_, err = w.Write(binary.BigEndian.AppendUint32(nil, h.Sum32()))
	return err
}

// Restore implements replog.StateMachine: the image goes to a temporary
// file, synced, is checked (frame, checksum, bbolt's own consistency
// check) and only then replaces the store, so a cut or corrupt image
// leaves the old store in service and a crash leaves either store whole.
func (m *machine) Restore(r io.Reader) error {
	tmp := m.path + ".restore"
	defer os.Remove(tmp) // gone after a successful rename: harmless
	if err := receiveSnapshot(tmp, r); err != nil {
		return fmt.Errorf("restore metadata snapshot (store %s kept): %w", m.path, err)
	}
	m.mu.Lock()
	err := m.swap(tmp)
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("restore metadata snapshot into %s: %w", m.path, err)
	}
	if m.hooks.restored != nil {
		m.hooks.restored()
	}
	return nil
}

// receiveSnapshot writes the framed image r to path and verifies it.
func receiveSnapshot(path string, r io.Reader) error {
	hdr := make([]byte, len(snapMagic)+8)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return fmt.Errorf("snapshot header: %w", err)
	}
	if !bytes.Equal(hdr[:len(snapMagic)], snapMagic) {
		return fmt.Errorf("not a metadata snapshot (header %q)", hdr[:len(snapMagic)])
	}
	n := binary.BigEndian.Uint64(hdr[len(snapMagic):])
	if n == 0 || n > maxSnapshot {
		return fmt.Errorf("snapshot header claims %d bytes of image", n)
	}
	h := crc32.New(crc32c)
	if err := writeSynced(path, io.TeeReader(io.LimitReader(r, int64(n)), h), int64(n)); err != nil {
		return err
	}
	var sum [4]byte
	if _, err := io.ReadFull(r, sum[:]); err != nil {
		return fmt.Errorf("snapshot checksum: %w (image cut short?)", err)
	}
	if got := binary.BigEndian.Uint32(sum[:]); got != h.Sum32() {
		return fmt.Errorf("snapshot checksum %08x, image hashes to %08x: corrupt", got, h.Sum32())
	}
	return checkStore(path)
}

// checkStore opens the bbolt file at path and runs its consistency check
// (every page reachable once, free pages not in use); the first problem
// is the error.
func checkStore(path string) error {
	db, err := openDB(path, 0)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(func(btx *bolt.Tx) error {
		// Drain the channel whole: Check's goroutine reads the mapped file
		// until it closes it, so the transaction must outlive it.
		var first error
		for err := range btx.Check() {
			if first == nil {
				first = fmt.Errorf("snapshot image inconsistent: %w", err)
			}
		}
		return first
	})
}

func (m *machine) swap(tmp string) error {
	// Deferred: the old store is made durable whole and its checkpoint
	// removed first, so that a cut leaves either store, synced, and no
	// checkpoint of one applied to the other.
	deferred := m.deferred
	if err := m.undefer(); err != nil {
		return err
	}
	mmap := 0
	if deferred {
		mmap = mmapSize
	}
	redefer := func() error {
		if !deferred {
			return nil
		}
		m.db.NoSync = true
		if err := m.checkpoint(); err != nil {
			m.db.NoSync = false
			return err
		}
		m.deferred = true
		return nil
	}
	if err := m.db.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, m.path); err != nil {
		// The old store is still in place: serve it again.
		db, oerr := openDB(m.path, mmap)
		if oerr != nil {
			return fmt.Errorf("%w; reopen the old store: %v", err, oerr)
		}
		m.db = db
		if derr := redefer(); derr != nil {
			return fmt.Errorf("%w; %v", err, derr)
		}
		return err
	}
	serr := durable.SyncDir(filepath.Dir(m.path))
	db, err := openDB(m.path, mmap)
	if err != nil {
		return err
	}
	m.db = db
	m.applied.Store(readApplied(db))
	if err := redefer(); err != nil {
		return err
	}
	// Not durable, the swap could be undone by a cut after what follows
	// it was acknowledged.
	return serr
}

// writeSynced writes the n bytes of r to path and syncs it; fewer is an
// error.
func writeSynced(path string, r io.Reader, n int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if got, err := io.Copy(f, r); err != nil || got != n {
		f.Close()
		if err == nil {
			err = fmt.Errorf("snapshot image cut short: %d of %d bytes", got, n)
		}
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// decodeAttrReplyV1 reads an attribute reply stored (for retries) before
// the replica fields: the old attributes, then Created. orig is the error
// of reading it as a current one.
func decodeAttrReplyV1(b []byte, orig error) (proto.Msg, error) {
	d := proto.Dec{B: b}
	r := &proto.AttrReply{}
	r.Attr.DecodeV1(&d)
	r.Created = d.Bool()
	if d.Err() != nil {
		return nil, orig
	}
	return r, nil
}

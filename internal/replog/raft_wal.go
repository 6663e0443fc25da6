package replog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/corral-cluster/corral/internal/durable"
)

// The Raft engine's write-ahead log: one file of records
//
//	[u32 length of type+data][u32 CRC-32C of type+data][u8 type][data]
//
// appended per Ready batch with one fsync (group commit). A torn tail (a
// crash in the middle of a batch, never acknowledged) fails its CRC or
// length and is cut off on open. When a snapshot compacts the log the file
// is rewritten (temp file, fsync, rename) holding the snapshot marker, the
// hard state and the entries after the snapshot: replay on restart is
// bounded by the snapshot interval. etcd's wal package would do the same
// with segments; it pulls in etcd's server module, so this is ~200 lines.
const (
	recEntry    = 1 // a raftpb.Entry
	recState    = 2 // a raftpb.HardState
	recSnapshot = 3 // a raftpb.Snapshot whose Data is a snapshot marker
	recBase     = 4 // u64: the state machine's command index at log index 0
)

const walName = "raft.wal"

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// walState is what a log file holds.
type walState struct {
	snap  raftpb.Snapshot
	hs    raftpb.HardState
	ents  []raftpb.Entry // after snap, in index order
	base  uint64
	empty bool // no record at all: a new member
}

type wal struct {
	dir string
	f   *os.File
	buf []byte
}

// openWAL reads dir's log and opens it for appending, cutting a torn tail.
func openWAL(dir string) (*wal, walState, error) {
	st := walState{empty: true}
	// The log holds every file name and attribute: owner only.
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return nil, st, err
	}
	path := filepath.Join(dir, walName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, st, err
	}
	good, err := readWAL(bufio.NewReaderSize(f, 1<<20), &st)
	if err != nil {
		f.Close()
		return nil, st, fmt.Errorf("raft log %s: %w", path, err)
	}
	if fi, err := f.Stat(); err == nil && fi.Size() > good {
		// A batch cut by a crash was never fsynced, so never acknowledged:
		// cut it. But a damaged record followed by good ones is damage to
		// acknowledged entries: cutting them would make this member forget
		// what it promised the others.
		rest := make([]byte, fi.Size()-good)
		if _, err := f.ReadAt(rest, good); err != nil {
			f.Close()
			return nil, st, fmt.Errorf("raft log %s: %w", path, err)
		}
		if at := validRecordIn(rest[1:]); at >= 0 {
			f.Close()
			return nil, st, fmt.Errorf("raft log %s is damaged at offset %d with good records after it (at %d): this member cannot trust its log; remove it from the group (corral fs meta remove), empty its data directory and add it again (--join)", path, good, good+1+int64(at))
		}
		if err := f.Truncate(good); err != nil {
			f.Close()
			return nil, st, fmt.Errorf("raft log %s: cutting the torn tail at %d: %w", path, good, err)
		}
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, st, err
	}
	if st.empty {
		// A new log: its directory entry must survive a power cut before
		// any entry in it is acknowledged.
		if err := durable.SyncDir(dir); err != nil {
			f.Close()
			return nil, st, fmt.Errorf("raft log %s: %w", path, err)
		}
	}
	return &wal{dir: dir, f: f}, st, nil
}

// readWAL reads records until the end or the first damaged one and returns
// the offset after the last good record. Errors are for records that are
// whole but cannot be understood (a bug, not a crash).
func readWAL(r io.Reader, st *walState) (int64, error) {
	var off int64
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return off, nil
		}
		n := binary.LittleEndian.Uint32(hdr[:4])
		if n == 0 || n > 1<<30 {
			return off, nil
		}
		rec := make([]byte, n)
		if _, err := io.ReadFull(r, rec); err != nil {
			return off, nil
		}
		if crc32.Checksum(rec, crcTable) != binary.LittleEndian.Uint32(hdr[4:]) {
			return off, nil
		}
		if err := st.add(rec[0], rec[1:]); err != nil {
			return off, fmt.Errorf("record at offset %d: %w", off, err)
		}
		st.empty = false
		off += 8 + int64(n)
	}
}

// validRecordIn returns the offset of the first whole record with a good
// CRC in b, or -1.
func validRecordIn(b []byte) int {
	for i := 0; i+9 <= len(b); i++ {
		n := binary.LittleEndian.Uint32(b[i:])
		if n == 0 || uint64(n) > uint64(len(b)-i-8) {
			continue
		}
		rec := b[i+8 : i+8+int(n)]
		if rec[0] >= recEntry && rec[0] <= recBase && crc32.Checksum(rec, crcTable) == binary.LittleEndian.Uint32(b[i+4:]) {
			return i
		}
	}
	return -1
}

func (st *walState) add(typ byte, data []byte) error {
	switch typ {
	case recEntry:
		var e raftpb.Entry
		if err := e.Unmarshal(data); err != nil {
			return err
		}
		if e.Index <= st.snap.Metadata.Index {
			return nil
		}
		// A later append at an index overwrites the tail from there (a new
		// leader replaced entries this member had not committed).
		for len(st.ents) > 0 && st.ents[len(st.ents)-1].Index >= e.Index {
			st.ents = st.ents[:len(st.ents)-1]
		}
		st.ents = append(st.ents, e)
	case recState:
		return st.hs.Unmarshal(data)
	case recSnapshot:
		var s raftpb.Snapshot
		if err := s.Unmarshal(data); err != nil {
			return err
		}
		st.snap = s
		i := 0
		for i < len(st.ents) && st.ents[i].Index <= s.Metadata.Index {
			i++
		}
		st.ents = st.ents[i:]
	case recBase:
		if len(data) != 8 {
			return errors.New("base record of the wrong size")
		}
		st.base = binary.LittleEndian.Uint64(data)
	default:
		return fmt.Errorf("unknown record type %d", typ)
	}
	return nil
}

type marshaler interface {
	Size() int
	MarshalTo([]byte) (int, error)
}

func (w *wal) record(typ byte, m marshaler) {
	n := 1 + m.Size()
	start := len(w.buf)
	w.buf = append(w.buf, make([]byte, 8+n)...)
	rec := w.buf[start+8:]
	rec[0] = typ
	m.MarshalTo(rec[1:])
	binary.LittleEndian.PutUint32(w.buf[start:], uint32(n))
	binary.LittleEndian.PutUint32(w.buf[start+4:], crc32.Checksum(rec, crcTable))
}

func (w *wal) rawRecord(typ byte, data []byte) {
	n := 1 + len(data)
	w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(n))
	rec := append([]byte{typ}, data...)
	w.buf = binary.LittleEndian.AppendUint32(w.buf, crc32.Checksum(rec, crcTable))
	w.buf = append(w.buf, rec...)
}

// save appends one Ready's entries, hard state and snapshot with one write
// and, when sync, one fsync.
func (w *wal) save(snap raftpb.Snapshot, ents []raftpb.Entry, hs raftpb.HardState, sync bool) error {
	w.buf = w.buf[:0]
	if snap.Metadata.Index > 0 {
		w.record(recSnapshot, &snap)
	}
	for i := range ents {
		w.record(recEntry, &ents[i])
	}
	if hs.Term != 0 || hs.Vote != 0 || hs.Commit != 0 {
		w.record(recState, &hs)
	}
	if len(w.buf) == 0 {
		return nil
	}
	if _, err := w.f.Write(w.buf); err != nil {
		return fmt.Errorf("raft log %s: %w", w.f.Name(), err)
	}
	walBytes.Add(float64(len(w.buf)))
	if sync || snap.Metadata.Index > 0 {
		t := time.Now()
		err := w.f.Sync()
		walFsync.Observe(since(t))
		if err != nil {
			return fmt.Errorf("raft log %s: fsync: %w", w.f.Name(), err)
		}
	}
	return nil
}

// saveBase records the state machine's command index before the first entry
// (a store seeded by restore) and syncs.
func (w *wal) saveBase(base uint64) error {
	w.buf = w.buf[:0]
	w.rawRecord(recBase, binary.LittleEndian.AppendUint64(nil, base))
	if _, err := w.f.Write(w.buf); err != nil {
		return err
	}
	return w.f.Sync()
}

// rewrite replaces the log by snap, hs and ents (all after snap): the
// compaction behind a snapshot. Crash-safe: the old file stays until the
// new one is whole and synced.
func (w *wal) rewrite(snap raftpb.Snapshot, hs raftpb.HardState, ents []raftpb.Entry) error {
	w.buf = w.buf[:0]
	w.record(recSnapshot, &snap)
	w.record(recState, &hs)
	for i := range ents {
		w.record(recEntry, &ents[i])
	}
	path := filepath.Join(w.dir, walName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(w.buf); err != nil {
		f.Close()
		return fmt.Errorf("raft log %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("raft log %s: fsync: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		return err
	}
	w.f.Close()
	w.f = f
	// Appends go to the new file from now on: until the rename is
	// durable a cut could bring the old one back without them.
	if err := durable.SyncDir(w.dir); err != nil {
		return fmt.Errorf("raft log %s: %w", path, err)
	}
	return nil
}

func (w *wal) close() error { return w.f.Close() }

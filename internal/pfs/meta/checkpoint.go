package meta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/corral-cluster/corral/internal/durable"
	bolt "go.etcd.io/bbolt"
)

// Deferred store sync (under the Raft engine, whose log is durable before
// a command is applied): the store commits without fsync and is made
// durable at checkpoints the engine asks for (Sync, before it compacts the
// log); after a crash or power cut the store is put back to its last
// checkpoint and the log replays what follows.
//
// bbolt is only consistent after a power cut if a commit's pages reach
// the disk before its meta page and no page of the last durable state is
// overwritten; without fsync neither holds. Two measures make the last
// checkpoint recoverable whatever of the later writes reached the disk:
//
//   - a read transaction stays open on the checkpointed state until the
//     next checkpoint, so bbolt frees none of its pages for reuse: later
//     commits write only to pages that state does not use;
//   - the checkpoint's meta page is copied to a side file (synced); on
//     open it is written back over both meta slots before bbolt reads
//     them, so a later meta page that reached the disk ahead of its data
//     is never used.
//
// The store's applied index is therefore only trusted up to the last
// checkpoint: everything after it is replayed from the log, which the
// engine never compacts past a checkpoint.

const (
	ckptSuffix = ".ckpt"
	ckptMagic  = "CORRAL-META-CKPT1"
	// mmapSize: bbolt remaps when the file outgrows its mapping, which
	// waits for every read transaction, the pinned one included: map far
	// more than a metadata store grows to (address space, not memory).
	mmapSize = 16 << 30
	// deferLimit: past this size the store goes back to a sync per commit
	// (a remap under the pin would wait forever).
	deferLimit = mmapSize / 2
	// ckptEvery: store commits between checkpoints besides the engine's
	// (each commit copies a few pages the pin keeps from reuse, and
	// every begin of a write transaction walks the pages freed since the
	// pin, bbolt's pending list: the profile showed it).
	ckptEvery = 250
)

// bbolt's meta page: a 16-byte page header, then magic, version, page size,
// flags (u32 each), root bucket (two u64), freelist, high water mark,
// txid, checksum (u64 each), native byte order (little-endian here).
const (
	metaTxidOff = 16 + 16 + 16 + 8 + 8
	metaMagic   = 0xED0CDAED
)

var errCkpt = errors.New("metadata store checkpoint")

// checkpoint makes everything applied durable and records it as the state
// a restart goes back to (m.mu read-held or Apply's goroutine).
func (m *machine) checkpoint() error {
	if err := m.db.Sync(); err != nil {
		return fmt.Errorf("%w: fsync %s: %v", errCkpt, m.path, err)
	}
	pin, err := m.db.Begin(false)
	if err != nil {
		return fmt.Errorf("%w: %v", errCkpt, err)
	}
	page, err := metaPage(m.path, m.db.Info().PageSize, uint64(pin.ID()))
	if err == nil {
		err = writeCkpt(m.path+ckptSuffix, page)
	}
	if err != nil {
		pin.Rollback()
		return err
	}
	if m.pin != nil {
		m.pin.Rollback()
	}
	m.pin = pin
	m.commits = 0
	return nil
}

// metaPage reads the meta page of commit txid from the file.
func metaPage(path string, pageSize int, txid uint64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errCkpt, err)
	}
	defer f.Close()
	page := make([]byte, pageSize)
	if _, err := f.ReadAt(page, int64(txid%2)*int64(pageSize)); err != nil {
		return nil, fmt.Errorf("%w: reading the meta page of %s: %v", errCkpt, path, err)
	}
	if err := checkMeta(page, txid); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errCkpt, path, err)
	}
	return page, nil
}

// checkMeta verifies that page is bbolt's meta page of commit txid.
func checkMeta(page []byte, txid uint64) error {
	if len(page) < metaTxidOff+16 {
		return fmt.Errorf("meta page of %d bytes", len(page))
	}
	if mg := binary.LittleEndian.Uint32(page[16:]); mg != metaMagic {
		return fmt.Errorf("meta page magic %#x (bbolt's format changed?)", mg)
	}
	if got := binary.LittleEndian.Uint64(page[metaTxidOff:]); got != txid {
		return fmt.Errorf("meta page of commit %d where %d was expected (bbolt's format changed?)", got, txid)
	}
	return nil
}

// A checkpoint file: magic, u64 txid, u32 page length, the meta page,
// CRC-32C of everything before it.
func writeCkpt(path string, page []byte) error {
	b := append([]byte(ckptMagic), make([]byte, 12)...)
	binary.LittleEndian.PutUint64(b[len(ckptMagic):], binary.LittleEndian.Uint64(page[metaTxidOff:]))
	binary.LittleEndian.PutUint32(b[len(ckptMagic)+8:], uint32(len(page)))
	b = append(b, page...)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32c))
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err == nil {
		if _, err = f.Write(b); err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = durable.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("%w: writing %s: %v", errCkpt, path, err)
	}
	return nil
}

func readCkpt(path string) (txid uint64, page []byte, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, nil, err
	}
	n := len(ckptMagic) + 12
	if len(b) < n+4 || !bytes.Equal(b[:len(ckptMagic)], []byte(ckptMagic)) {
		return 0, nil, fmt.Errorf("%w %s: not a checkpoint file", errCkpt, path)
	}
	txid = binary.LittleEndian.Uint64(b[len(ckptMagic):])
	size := int(binary.LittleEndian.Uint32(b[len(ckptMagic)+8:]))
	if size > 1<<20 || len(b) != n+size+4 {
		return 0, nil, fmt.Errorf("%w %s: %d bytes for a page of %d", errCkpt, path, len(b), size)
	}
	if crc32.Checksum(b[:n+size], crc32c) != binary.LittleEndian.Uint32(b[n+size:]) {
		return 0, nil, fmt.Errorf("%w %s: checksum mismatch", errCkpt, path)
	}
	page = b[n : n+size]
	if err := checkMeta(page, txid); err != nil {
		return 0, nil, fmt.Errorf("%w %s: %v", errCkpt, path, err)
	}
	return txid, page, nil
}

// rollBack puts the store at path back to its checkpoint, if it has one:
// the checkpoint's meta page goes into both meta slots (page IDs 0 and
// 1), synced, before bbolt opens the file.
func rollBack(path string) error {
	_, page, err := readCkpt(path + ckptSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // none: the store was synced at every commit
	}
	if err != nil {
		return fmt.Errorf("%v (the store's last durable state is unknown: restore it from a backup, or empty this member's data directory and add it again)", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("%w: %v", errCkpt, err)
	}
	defer f.Close()
	// bbolt's own lock: never write under a server that has the store open.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("open %s: locked by another process (is a metadata server already running on this directory?)", path)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	for slot := uint64(0); slot < 2; slot++ {
		p := append([]byte(nil), page...)
		binary.LittleEndian.PutUint64(p, slot)
		if _, err := f.WriteAt(p, int64(slot)*int64(len(p))); err != nil {
			return fmt.Errorf("%w: restoring the meta page of %s: %v", errCkpt, path, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("%w: fsync %s: %v", errCkpt, path, err)
	}
	return nil
}

// deferSync switches the store to commits without fsync (the engine's
// log is the durable record; see Sync). It takes the first checkpoint.
func (m *machine) deferSync() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.deferred {
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

// undefer goes back to a sync per commit: everything is made durable, the
// checkpoint (now stale) is removed, the pin released (m.mu write-held).
func (m *machine) undefer() error {
	if !m.deferred {
		return nil
	}
	if err := m.db.Sync(); err != nil {
		return fmt.Errorf("%w: fsync %s: %v", errCkpt, m.path, err)
	}
	if err := os.Remove(m.path + ckptSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %v", errCkpt, err)
	}
	if err := durable.SyncDir(filepath.Dir(m.path)); err != nil {
		return fmt.Errorf("%w: %v", errCkpt, err)
	}
	if m.pin != nil {
		m.pin.Rollback()
		m.pin = nil
	}
	m.db.NoSync = false
	m.deferred = false
	return nil
}

// Sync implements replog.Syncer: a checkpoint, before the engine compacts
// its log.
func (m *machine) Sync() error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.deferred {
		return nil
	}
	return m.checkpoint()
}

var _ interface{ Sync() error } = (*machine)(nil)

// pinned reports whether a checkpoint's pages are held (tests).
func (m *machine) pinnedTx() *bolt.Tx { return m.pin }

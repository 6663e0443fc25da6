package iod

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/durable"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"golang.org/x/sys/unix"
)

// Checksums: every object file F has a sidecar F.crc holding one CRC32C
// (Castagnoli, little-endian) per 64 KiB block of F. A block's sum covers
// the block padded with zeros to 64 KiB, so growing a file (its new bytes
// read as zeros) never changes an old sum. A sum of 0 means "never
// written": the block must read as zeros (holes, punched blocks, the
// sidecar's own holes when a write lands far past its end). Data are
// written before their sums: a write torn by a crash leaves a block whose
// sum is old, found on the next read or scrub. An object file without a
// sidecar (written before checksums existed) is served unchecked until its
// first change, which computes the sums of all its blocks.
const csBlock = 64 << 10

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	zeroBlock  = make([]byte, csBlock)
	zeroSum    = crc32.Checksum(zeroBlock, castagnoli)
)

func blockSum(b []byte) uint32 {
	c := crc32.Update(0, castagnoli, b)
	if len(b) < csBlock {
		c = crc32.Update(c, castagnoli, zeroBlock[:csBlock-len(b)])
	}
	return c
}

func sumMatches(stored, got uint32) bool {
	return got == stored || (stored == 0 && got == zeroSum)
}

func sumPath(p string) string { return p + ".crc" }

// badBlock is a block of a local object file whose sum does not match.
type badBlock struct{ off int64 }

func (e badBlock) Error() string { return fmt.Sprintf("checksum mismatch at local offset %d", e.off) }

// ofile is one local object file and its sidecar (c nil: no sidecar, the
// file is served unchecked).
type ofile struct {
	f, c *os.File
}

func (o *ofile) close() {
	if o == nil {
		return
	}
	o.f.Close()
	if o.c != nil {
		o.c.Close()
	}
}

// read reads at off into p, verifying every block it returns; short at
// the file's end.
func (o *ofile) read(p []byte, off int64) (int, error) {
	if o.c == nil {
		n, err := o.f.ReadAt(p, off)
		if err == io.EOF {
			err = nil
		}
		return n, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	start := off &^ (csBlock - 1)
	end := off + int64(len(p))
	aend := (end + csBlock - 1) &^ (csBlock - 1)
	buf := p
	if start != off || aend != end {
		bp := getBuf(int(aend - start))
		defer putBuf(bp)
		buf = *bp
	}
	got, err := o.f.ReadAt(buf, start)
	if err != nil && err != io.EOF {
		return 0, err
	}
	if int64(got) <= off-start {
		return 0, nil
	}
	nb := (got + csBlock - 1) / csBlock
	sums := make([]byte, nb*4) // past the sidecar's end: 0, never written
	if _, err := o.c.ReadAt(sums, start/csBlock*4); err != nil && err != io.EOF {
		return 0, err
	}
	for i := 0; i < nb; i++ {
		blk := buf[i*csBlock : min((i+1)*csBlock, got)]
		if !sumMatches(binary.LittleEndian.Uint32(sums[i*4:]), blockSum(blk)) {
			return 0, badBlock{start + int64(i)*csBlock}
		}
	}
	if &buf[0] == &p[0] {
		return got, nil
	}
	return copy(p, buf[off-start:got]), nil
}

// resum recomputes the sums of blocks [first, last] from the file.
func (o *ofile) resum(first, last int64) error {
	if last < first {
		return nil
	}
	bp := getBuf(csBlock)
	defer putBuf(bp)
	sums := make([]byte, 0, min(last-first+1, 1024)*4)
	flush := func(at int64) error {
		_, err := o.c.WriteAt(sums, at*4)
		sums = sums[:0]
		return err
	}
	at := first
	for b := first; b <= last; b++ {
		n, err := o.f.ReadAt(*bp, b*csBlock)
		if err != nil && err != io.EOF {
			return err
		}
		sums = binary.LittleEndian.AppendUint32(sums, blockSum((*bp)[:n]))
		if len(sums) == cap(sums) {
			if err := flush(at); err != nil {
				return err
			}
			at = b + 1
		}
	}
	return flush(at)
}

// verify checks the old bytes of every block of [off, end) that a change
// of that range leaves partly in place, before the change: re-summing such
// a block from the file would give rotted bytes a valid sum for good. A
// block whose kept bytes are all of its bytes up to the file's end is not
// kept in part; nor is one the range covers whole.
func (o *ofile) verify(off, end int64) error {
	size, err := o.size()
	if err != nil || end <= off {
		return err
	}
	bp := getBuf(csBlock)
	defer putBuf(bp)
	for _, b := range []int64{off / csBlock, (end - 1) / csBlock} {
		bs := b * csBlock
		be := min(bs+csBlock, size)
		if be <= bs || (off <= bs && end >= be) {
			continue // nothing old there, or nothing old kept
		}
		if _, err := o.read((*bp)[:be-bs], bs); err != nil {
			return err
		}
		if off/csBlock == (end-1)/csBlock {
			break
		}
	}
	return nil
}

// write writes data at off and then the sums of the blocks it touched. A
// block it covers only in part has its old bytes read and checked first
// (re-summing them unchecked would give rot a valid sum for good), and its
// new sum is computed from them with data laid over.
func (o *ofile) write(data []byte, off int64) error {
	if o.c == nil || len(data) == 0 {
		_, err := o.f.WriteAt(data, off)
		return err
	}
	end := off + int64(len(data))
	first, last := off/csBlock, (end-1)/csBlock
	size, err := o.size()
	if err != nil {
		return err
	}
	sums := make([]byte, (last-first+1)*4)
	for b := first; b <= last; b++ {
		bs := b * csBlock
		if bs >= off && bs+csBlock <= end {
			binary.LittleEndian.PutUint32(sums[(b-first)*4:], blockSum(data[bs-off:bs-off+csBlock]))
			continue
		}
		if b != first && b != last {
			continue // only the edge blocks are covered in part
		}
		bp := getBuf(csBlock)
		blk := (*bp)[:csBlock]
		n, oldEnd := 0, min(bs+csBlock, size) // old bytes: [bs, oldEnd)
		if oldEnd > bs && (off > bs || end < oldEnd) {
			// Some old bytes stay: they must check.
			if n, err = o.read(blk[:oldEnd-bs], bs); err != nil {
				putBuf(bp)
				return err
			}
		}
		clear(blk[n:])
		ws, we := max(off, bs), min(end, bs+csBlock)
		copy(blk[ws-bs:], data[ws-off:we-off])
		binary.LittleEndian.PutUint32(sums[(b-first)*4:], blockSum(blk[:max(int64(n), we-bs)]))
		putBuf(bp)
	}
	if _, err := o.f.WriteAt(data, off); err != nil {
		return err
	}
	_, err = o.c.WriteAt(sums, first*4)
	return err
}

func (o *ofile) size() (int64, error) {
	fi, err := o.f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func blocksOf(size int64) int64 { return (size + csBlock - 1) / csBlock }

// truncate sets the size; the sidecar follows, and a new partial last
// block gets its sum again (once its kept bytes are checked).
func (o *ofile) truncate(size int64) error {
	if o.c != nil && size%csBlock != 0 {
		// The bytes of the new last block before size are kept.
		if err := o.verify(size, size+1); err != nil {
			return err
		}
	}
	if err := o.f.Truncate(size); err != nil {
		return err
	}
	if o.c == nil {
		return nil
	}
	if err := o.c.Truncate(blocksOf(size) * 4); err != nil {
		return err
	}
	if size%csBlock != 0 {
		return o.resum(size/csBlock, size/csBlock)
	}
	return nil
}

// punch frees [off, off+n): it reads as zeros, the size stays. Whole
// blocks get sum 0 (never written), partial ones their new sum.
func (o *ofile) punch(off, n int64) error {
	if o.c != nil {
		// The blocks punched in part keep bytes that get a new sum.
		if err := o.verify(off, off+n); err != nil {
			return err
		}
	}
	err := unix.Fallocate(int(o.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	size, serr := o.size()
	if serr != nil {
		return serr
	}
	end := min(off+n, size)
	if errors.Is(err, unix.EOPNOTSUPP) {
		// A file system without hole punching: zeros read the same, only
		// the space stays in use.
		for at := off; at < end; at += csBlock {
			if _, err := o.f.WriteAt(zeroBlock[:min(csBlock, end-at)], at); err != nil {
				return err
			}
		}
	} else if err != nil {
		return err
	}
	if o.c == nil || end <= off {
		return nil
	}
	first, last := off/csBlock, (end-1)/csBlock
	if off%csBlock != 0 {
		if err := o.resum(first, first); err != nil {
			return err
		}
		first++
	}
	if last >= first && end%csBlock != 0 && end < size {
		if err := o.resum(last, last); err != nil {
			return err
		}
		last--
	}
	if last >= first {
		if _, err := o.c.WriteAt(make([]byte, (last-first+1)*4), first*4); err != nil {
			return err
		}
	}
	return nil
}

func (o *ofile) alloc(off, n int64) error {
	return unix.Fallocate(int(o.f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
}

// sync makes data and sums durable.
func (o *ofile) sync() error {
	t := time.Now()
	defer func() { objectFsync.Observe(time.Since(t).Seconds()) }()
	if err := o.f.Sync(); err != nil {
		return err
	}
	if o.c != nil {
		return o.c.Sync()
	}
	return nil
}

// scrub checks every block: the local offsets of the bad ones.
func (o *ofile) scrub() (size int64, bad []int64, err error) {
	size, err = o.size()
	if err != nil || o.c == nil {
		return size, nil, err
	}
	bp := getBuf(csBlock)
	defer putBuf(bp)
	for b := int64(0); b < blocksOf(size); b++ {
		if _, err := o.read((*bp)[:min(csBlock, size-b*csBlock)], b*csBlock); err != nil {
			var bb badBlock
			if !errors.As(err, &bb) {
				return size, bad, err
			}
			bad = append(bad, bb.off)
		}
	}
	return size, bad, nil
}

// openFile opens the object file at p and its sidecar. With write, a
// missing object is created (created true) with an empty sidecar, and an
// object without one gets its sums computed first. Without write, a
// missing object is (nil, nil).
func openFile(p string, write bool) (o *ofile, created bool, err error) {
	flag := os.O_RDONLY
	if write {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(p, flag, 0)
	if errors.Is(err, os.ErrNotExist) && write {
		// A new bucket's entry in objects/ is synced here; the object's
		// own entry in the bucket is synced with its data (Store.Sync).
		if err := durable.MkdirAll(dirOf(p), 0o700); err != nil {
			return nil, false, err
		}
		f, err = os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
		created = err == nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	o = &ofile{f: f}
	c, err := os.OpenFile(sumPath(p), flag, 0)
	if created && err == nil {
		// A sidecar left by a removal cut short belongs to the old object.
		c.Close()
		c, err = nil, os.ErrNotExist
	}
	switch {
	case err == nil:
		o.c = c
	case !errors.Is(err, os.ErrNotExist):
		f.Close()
		return nil, false, err
	case write:
		// A new object, or one from before checksums: its sums now.
		if o.c, err = os.OpenFile(sumPath(p), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
			f.Close()
			return nil, false, err
		}
		size, err := o.size()
		if err == nil {
			err = o.resum(0, blocksOf(size)-1)
		}
		if err != nil {
			o.close()
			return nil, false, err
		}
	}
	return o, created, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func dirOf(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return "."
}

// mismatch is the error a read answers for a bad block at (global) offset
// off of object k.
func (s *Store) mismatch(k objKey, off int64) error {
	s.csErrors.Add(1)
	id, _ := s.identity()
	s.log.Error("checksum mismatch", "server", id.id, "file", k.ino, "stripe", k.idx, "offset", off)
	return proto.Errorf(syscall.EBADMSG, fmt.Sprintf("I/O server %d: file %d stripe %d: checksum mismatch at offset %d", id.id, k.ino, k.idx, off))
}

// badChange is the error of a change (write, truncate, punch) of object k
// that met a bad block it would keep in part: EBADMSG, as a read answers,
// so the client marks this copy stale and heal rewrites the block whole.
func (s *Store) badChange(k objKey, err error) error {
	var bb badBlock
	if errors.As(err, &bb) {
		return s.mismatch(k, bb.off)
	}
	return err
}

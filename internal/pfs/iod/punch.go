package iod

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	"golang.org/x/sys/unix"
)

func checkRange(op string, off, n uint64) error {
	if n == 0 || off > 1<<62 || n > 1<<62-off {
		return proto.Errorf(syscall.EINVAL, fmt.Sprintf("%s of [%d, +%d): empty or beyond the largest object size", op, off, n))
	}
	return nil
}

// punch frees an object range: it reads as zeros afterwards and the size
// stays. A missing object is all hole already.
func (s *Store) punch(m *proto.Punch) error {
	if err := checkRange("punch", m.Off, m.Len); err != nil {
		return err
	}
	k := objKey{m.Handle, m.Index}
	f, err := s.openExisting(k, os.O_RDWR)
	if errors.Is(err, os.ErrNotExist) {
		// All hole already, unless the object was lost with its disk.
		return s.missing(k, "punch")
	}
	if err != nil {
		return err
	}
	defer f.Close()
	err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(m.Off), int64(m.Len))
	if !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	// A data directory on a file system without hole punching: zeros read
	// the same, only the space stays in use.
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	end := min(int64(m.Off+m.Len), fi.Size())
	zero := make([]byte, 1<<20)
	for off := int64(m.Off); off < end; off += int64(len(zero)) {
		if _, err := f.WriteAt(zero[:min(int64(len(zero)), end-off)], off); err != nil {
			return err
		}
	}
	return nil
}

// alloc reserves space for an object range without changing its size, so
// later writes there do not fail for lack of space.
func (s *Store) alloc(m *proto.Alloc) error {
	if err := checkRange("allocate", m.Off, m.Len); err != nil {
		return err
	}
	f, err := s.open(objKey{m.Handle, m.Index}, "allocate")
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, int64(m.Off), int64(m.Len))
}

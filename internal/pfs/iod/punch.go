package iod

import (
	"fmt"
	"syscall"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

func checkRange(op string, off, n uint64) error {
	if n == 0 || off > 1<<62 || n > 1<<62-off {
		return proto.Errorf(syscall.EINVAL, fmt.Sprintf("%s of [%d, +%d): empty or beyond the largest object size", op, off, n))
	}
	return nil
}

// punch frees an object range: it reads as zeros afterwards (and its
// checksums say so) and the size stays. A missing object is all hole
// already.
func (s *Store) punch(m *proto.Punch) error {
	if err := checkRange("punch", m.Off, m.Len); err != nil {
		return err
	}
	k := objKey{m.Handle, m.Index}
	l := s.olock(k)
	l.Lock()
	defer l.Unlock()
	if s.mode == RAID0 {
		return s.punch0(k, int64(m.Off), int64(m.Len))
	}
	ok, err := s.exists(k)
	if err != nil {
		return err
	}
	if !ok {
		// All hole already, unless the object was lost with its disk.
		return s.missing(k, "punch")
	}
	return s.badChange(k, s.eachWriter(k, func(o *ofile) error { return o.punch(int64(m.Off), int64(m.Len)) }))
}

// alloc reserves space for an object range without changing its size, so
// later writes there do not fail for lack of space.
func (s *Store) alloc(m *proto.Alloc) error {
	if err := checkRange("allocate", m.Off, m.Len); err != nil {
		return err
	}
	k := objKey{m.Handle, m.Index}
	l := s.olock(k)
	l.Lock()
	defer l.Unlock()
	if err := s.mayCreate(k, "allocate"); err != nil {
		return err
	}
	if s.mode == RAID0 {
		return s.alloc0(k, int64(m.Off), int64(m.Len))
	}
	return s.eachWriter(k, func(o *ofile) error { return o.alloc(int64(m.Off), int64(m.Len)) })
}

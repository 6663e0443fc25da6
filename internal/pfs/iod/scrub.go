package iod

import (
	"errors"
	"slices"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// scrub checks every block of object k against its checksum. On RAID-1 a
// block bad in one directory but good in another is repaired from it;
// only blocks bad everywhere are reported (they need a replica on another
// server: Heal).
func (s *Store) scrub(k objKey) (*proto.ScrubReply, error) {
	l := s.olock(k)
	l.Lock() // repairs write
	defer l.Unlock()
	r := &proto.ScrubReply{}
	var bad []int64
	if s.mode == RAID0 {
		fs, err := s.open0(k, false)
		if err != nil {
			return nil, err
		}
		defer closeAll(fs)
		if fs[0] == nil {
			return r, s.missing(k, "scrub")
		}
		size, err := s.size0(fs)
		if err != nil {
			return nil, err
		}
		r.Size, r.Exists = uint64(size), true
		for m, o := range fs {
			if o == nil {
				continue
			}
			_, b, err := o.scrub()
			if err != nil {
				return nil, s.raidErr(m, err)
			}
			for _, off := range b {
				bad = append(bad, s.globalOff(m, off))
			}
		}
	} else {
		rs := s.readers()
		badIn := map[int64]int{} // block offset -> members where it is bad
		for _, m := range rs {
			o, err := s.openIn(m, k, false)
			if err != nil {
				return nil, s.raidErr(m, err)
			}
			if o == nil {
				return r, s.missing(k, "scrub")
			}
			size, b, err := o.scrub()
			o.close()
			if err != nil {
				return nil, s.raidErr(m, err)
			}
			r.Size, r.Exists = uint64(size), true
			for _, off := range b {
				badIn[off]++
				if len(rs) > 1 && s.repairBlock(k, m, rs, off) {
					continue
				}
				if badIn[off] == 1 {
					bad = append(bad, off)
				}
			}
		}
	}
	s.csErrors.Add(uint64(len(bad)))
	slices.Sort(bad)
	for _, off := range bad {
		if n := len(r.Bad); n > 0 && r.Bad[n-1].Off+r.Bad[n-1].Len == uint64(off) {
			r.Bad[n-1].Len += csBlock
			continue
		}
		r.Bad = append(r.Bad, proto.Extent{Off: uint64(off), Len: csBlock})
	}
	// The last block may be short.
	if n := len(r.Bad); n > 0 && r.Bad[n-1].Off+r.Bad[n-1].Len > r.Size {
		r.Bad[n-1].Len = r.Size - r.Bad[n-1].Off
	}
	return r, nil
}

// repairBlock copies the block at off of object k into member m from a
// mirror where it checks (under the object's lock).
func (s *Store) repairBlock(k objKey, m int, rs []int, off int64) bool {
	buf := make([]byte, csBlock)
	for _, src := range rs {
		if src == m {
			continue
		}
		o, err := s.openIn(src, k, false)
		if err != nil || o == nil {
			continue
		}
		n, err := o.read(buf, off)
		o.close()
		var bb badBlock
		if errors.As(err, &bb) || err != nil {
			continue
		}
		d, err := s.openIn(m, k, true)
		if err != nil {
			continue
		}
		err = d.write(buf[:n], off)
		d.close()
		if err == nil {
			s.log.Warn("RAID-1: block repaired from a mirror", "file", k.ino, "stripe", k.idx, "offset", off,
				"dir", s.members[m].dir, "from", s.members[src].dir)
			return true
		}
	}
	return false
}

package iod

import "github.com/corral-cluster/corral/internal/pfs/proto"

// scrub reports object k's size and existence. TEMPORARY (helper B): the
// checksum-checking scrub (helper A) replaces this file at merge.
func (s *Store) scrub(k objKey) (*proto.ScrubReply, error) {
	size, ok, err := s.objSize(k)
	if err != nil {
		return nil, err
	}
	return &proto.ScrubReply{Size: uint64(size), Exists: ok}, nil
}

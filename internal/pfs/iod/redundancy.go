package iod

import (
	"context"
	"syscall"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// handleRedundancy serves the replica requests (ReplWrite, Scrub, Heal);
// ok is false for any other request.
func (s *Store) handleRedundancy(ctx context.Context, req proto.Msg) (r proto.Msg, err error, ok bool) {
	switch req.(type) {
	case *proto.ReplWrite, *proto.Scrub, *proto.Heal:
		return nil, proto.Errorf(syscall.EOPNOTSUPP, "not built yet"), true
	}
	return nil, nil, false
}

package meta

import (
	"context"
	"syscall"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// handleRedundancy serves the data-redundancy requests (ops 86-89: stale
// records, lost servers); ok is false for any other request.
func (s *Service) handleRedundancy(ctx context.Context, req proto.Msg) (r proto.Msg, err error, ok bool) {
	switch req.(type) {
	case *proto.MarkStale, *proto.GetStale, *proto.LoseServer:
		return nil, proto.Errorf(syscall.EOPNOTSUPP, "not built yet"), true
	}
	return nil, nil, false
}

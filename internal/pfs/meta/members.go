package meta

import (
	"context"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// handleMembers serves the membership and backup requests (ops 61-65);
// ok is false for any other request.
func (s *Service) handleMembers(ctx context.Context, req proto.Msg) (r proto.Msg, err error, ok bool) {
	return nil, nil, false
}

package meta

import (
	"context"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// notify is called on every member after a command applied at index
// changed the inodes inos (attributes, entries of a directory, layout).
func (s *Service) notify(index uint64, inos []uint64) {}

// awaitInvalidated returns once every client caching metadata has dropped
// what the command at index changed (or lost its lease), so a reply never
// precedes the invalidation (close-to-open across clients).
func (s *Service) awaitInvalidated(ctx context.Context, index uint64) {}

// handleWatch serves the watch requests (ops 66-67); ok is false for any
// other request.
func (s *Service) handleWatch(ctx context.Context, req proto.Msg) (r proto.Msg, err error, ok bool) {
	return nil, nil, false
}

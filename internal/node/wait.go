package node

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// watchMeta waits in the background until the metadata server answers:
// a node may start before it. It logs "waiting for meta at ADDR" once, then
// retries quietly with backoff (up to 3 s); requests meanwhile fail with an
// error page instead of the node exiting.
func (s *Server) watchMeta(ctx context.Context) {
	log := s.cfg.Log
	if log == nil {
		log = slog.Default()
	}
	wait := 100 * time.Millisecond
	for logged := false; ; {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.fs.Statfs(cctx)
		cancel()
		if err == nil || !(errors.Is(err, proto.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)) {
			if logged {
				log.Info("metadata server reachable", "meta", s.cfg.Meta)
			}
			return
		}
		if !logged {
			log.Warn("waiting for meta at "+s.cfg.Meta, "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(wait*2, 3*time.Second)
	}
}

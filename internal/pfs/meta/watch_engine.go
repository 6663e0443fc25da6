package meta

import "time"

// The engine's view of leadership, as the cache invalidation of watch.go
// needs it.

// isLeader reports whether this member leads (answers Watch).
func (s *Service) isLeader() bool { return s.leaderSince.Load() != 0 }

// leaderFrom is when this member's term as the leader began: a younger
// leader waits until the leases of the previous leader's watchers have
// ended before it acknowledges a change. The zero time when no earlier
// leader can have had watchers: this member initialised a new file system.
func (s *Service) leaderFrom() time.Time {
	if s.firstLeader.Load() {
		return time.Time{}
	}
	return time.Unix(0, s.leaderSince.Load())
}

// leaderAddr is the leader's address as far as this member knows.
func (s *Service) leaderAddr() string { return s.eng.Status().LeaderAddr() }

package mgmt

import (
	"context"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// What the store gives the dashboard, uploads and rollouts (bodies: the
// station core; signatures agreed).

// current is the current configuration version (with YAML).
func (s *Station) current(ctx context.Context) (api.Version, error) { return api.Version{}, nil }

// members is every member's last report, Up set by MemberTimeout.
func (s *Station) members(ctx context.Context) ([]api.MemberStatus, error) { return nil, nil }

// drained is the names of drained nodes.
func (s *Station) drained(ctx context.Context) ([]string, error) { return nil, nil }

// setDrain drains or undrains a node (who: for the audit log); members
// see it through Desired.Drained.
func (s *Station) setDrain(ctx context.Context, node string, drain bool, who string) error {
	return nil
}

// setBinary sets (or clears, o nil) the binary order of one member;
// members see it through Desired.Binary.
func (s *Station) setBinary(ctx context.Context, member string, o *api.BinaryOrder) error { return nil }

// audit appends an entry to the audit log.
func (s *Station) audit(ctx context.Context, e api.AuditEntry) error { return nil }

// event records an event (kept, last 200, for the dashboard; logged).
func (s *Station) event(e api.Event) {}

// recentEvents is the last n events, oldest first.
func (s *Station) recentEvents(n int) []api.Event { return nil }

// subscribe gets every event from now on until cancel.
func (s *Station) subscribe() (<-chan api.Event, func()) { return nil, func() {} }

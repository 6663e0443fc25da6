// Package agent is a member's side of the management station: it joins
// with a token (or the credential saved by an earlier join), long-polls the
// station for what it should run, hands each new configuration to the
// role's Apply (an Apply that fails leaves the old configuration running
// and reports the error), reports every second (version applied, health,
// build, a role-specific report) and carries out rolling-upgrade orders.
// Used by `corral director|node|meta|iod --join STATION --token T`.
package agent

import (
	"context"
	"errors"
	"github.com/corral-cluster/corral/internal/mgmt/api"

	"github.com/corral-cluster/corral/internal/clustercfg"
)

// Options configure an agent.
type Options struct {
	// Stations are the station API URLs (https://127.0.0.1:7600); tried in turn.
	Stations []string
	// Token is the join token (used once, when no saved credential works).
	Token string
	// State is the directory where the join's credential, the station's CA
	// and the file-system credential are kept (0600), so a restart does
	// not need the token again.
	State string
	// CAFile, if set, is the station's CA (else the join reply's, pinned
	// on first join by the token's CA hash; see docs/mgmt.md).
	CAFile string
	// Role, Name, Addr describe the member (api.Role*, its name, where it serves).
	Role, Name, Addr string
	// Metrics is the URL of the member's /metrics (for Prometheus discovery).
	Metrics string
	// Apply applies a configuration version; drained are node names to
	// give weight 0. An error leaves the old one running; it is reported.
	Apply func(ctx context.Context, cfg *clustercfg.Config, version int64, drained []string) error
	// Health says whether the member works (nil: healthy).
	Health func() error
	// Report returns the role-specific report (JSON-encodable) or nil.
	Report func() any
}

// Agent is a joined member's link to the station.
type Agent struct {
	opt Options
}

// Join joins (or reuses the saved credential) and returns the agent and
// the join reply (file-system credential, meta members, CA).
func Join(ctx context.Context, opt Options) (*Agent, *api.JoinReply, error) {
	return nil, nil, errors.New("agent: not built yet")
}

// Run long-polls, applies and reports until ctx ends.
func (a *Agent) Run(ctx context.Context) error { return errors.New("agent: not built yet") }

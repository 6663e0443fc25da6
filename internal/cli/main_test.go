package cli

import (
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// TestMain gives every cluster the tests start one shared secret (see
// pfstest.SecretMain).
func TestMain(m *testing.M) { pfstest.SecretMain(m, nil) }

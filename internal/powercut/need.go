package powercut

import (
	"testing"

	"github.com/corral-cluster/corral/internal/lab"
)

// Need gates a power-cut test on root and /dev/fuse (the harness mounts
// FUSE with mount(2)): it skips without them, and fails under
// $CORRAL_CI=1 (lab.Need), so that CI cannot pass by skipping.
func Need(t testing.TB) {
	t.Helper()
	lab.Need(t, lab.FUSE)
}

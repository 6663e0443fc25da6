package cli

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/corral-cluster/corral/internal/launch"
)

// A role started by launch (corral up, the tests) dies with its parent:
// launch asks the kernel for that (Pdeathsig), but the kernel keeps the
// setting on one thread, and a member that replaced its binary (a rolling
// upgrade's exec, made from another thread) has lost it. So the binary sets
// it again at start, when its parent is still the one launch named; a
// process further down that inherited the variable has another parent and
// leaves it alone.
func init() {
	v := os.Getenv(launch.PdeathsigEnv)
	if v == "" {
		return
	}
	if ppid, err := strconv.Atoi(v); err == nil && ppid == os.Getppid() {
		_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	}
}

package powercut

import (
	"os"
	"testing"
)

// NeedEnv names the variable that turns a missing requirement from a skip
// into a failure (set it in CI, where the power-cut tests must run).
const NeedEnv = "CORRAL_NEED_ALL"

// Need skips the test, saying why, when the harness cannot mount here (not
// root, no /dev/fuse); with $CORRAL_NEED_ALL set it fails instead, so that
// CI cannot pass by skipping.
func Need(t testing.TB) {
	t.Helper()
	var why string
	if os.Geteuid() != 0 {
		why = "power-cut tests need root (the harness mounts FUSE with mount(2))"
	} else if _, err := os.Stat("/dev/fuse"); err != nil {
		why = "power-cut tests need /dev/fuse: " + err.Error()
	}
	if why == "" {
		return
	}
	if os.Getenv(NeedEnv) != "" {
		t.Fatal(why + " ($" + NeedEnv + " is set)")
	}
	t.Skip(why)
}

package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// bench pfs --profile relies on every corral process started with
// ProfileEnv set writing its profiles there, named after its command and
// --listen address.
func TestProfileEnvWritesProfiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "profile")
	t.Setenv(ProfileEnv, dir)
	stop := startProfile([]string{"iod", "--listen", "127.0.0.1:7410", "--data", "/x"})
	stop()
	for _, kind := range []string{"cpu", "block", "mutex"} {
		m, _ := filepath.Glob(filepath.Join(dir, "iod-127.0.0.1_7410-*."+kind+".pprof"))
		if len(m) != 1 {
			ls, _ := os.ReadDir(dir)
			t.Fatalf("%s profile: found %v in %s (%v)", kind, m, dir, ls)
		}
		if st, err := os.Stat(m[0]); err != nil || st.Size() == 0 {
			t.Fatalf("%s: empty or missing: %v", m[0], err)
		}
	}
}

func TestProfileEnvUnsetWritesNothing(t *testing.T) {
	t.Setenv(ProfileEnv, "")
	startProfile([]string{"iod"})()
}

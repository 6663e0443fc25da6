package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// TestMain gives every cluster the tests start one shared secret, in a file
// that lives as long as the test binary: launch adopts it instead of pointing
// the environment at a cluster's own file, which goes when its test ends and
// would break the commands later tests run.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "corral-cli-")
	if err != nil {
		panic(err)
	}
	f := filepath.Join(dir, proto.SecretFileName)
	if _, err := proto.EnsureSecretFile(f); err != nil {
		panic(err)
	}
	os.Setenv(proto.SecretEnv, f)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

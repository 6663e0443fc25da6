package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// TestMain gives every cluster the tests start one shared secret (see
// pfstest.SecretMain), and the tests and the commands they run a client
// configuration home of their own (empty), never the user's.
func TestMain(m *testing.M) {
	pfstest.SecretMain(m, func(secret string) {
		os.Setenv("XDG_CONFIG_HOME", filepath.Join(filepath.Dir(secret), "config")) // removed with the secret
	})
}

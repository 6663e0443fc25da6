package cli

import (
	"os"
	"path/filepath"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// defaultMeta is the metadata server's address when none is given: where
// `corral meta` listens, where every --meta points (unless CORRAL_META says
// otherwise) and where `corral up` runs meta, so that after `corral up` the
// other commands find the file system with no flag or variable.
const defaultMeta = "127.0.0.1:7400"

// metaFlagDefault is the default of every --meta flag.
func metaFlagDefault() string { return envOr("CORRAL_META", defaultMeta) }

// upSecretFile is where `corral up` (with its default --data) keeps the
// cluster secret.
var upSecretFile = filepath.Join("corral-data", "meta", proto.SecretFileName)

// secretFileDefault is the default of --secret-file: $CORRAL_SECRET_FILE,
// else the secret of a `corral up` cluster run from this directory when
// there is one.
func secretFileDefault() string {
	if v := os.Getenv(proto.SecretEnv); v != "" {
		return v
	}
	if _, err := os.Stat(upSecretFile); err == nil {
		return upSecretFile
	}
	return ""
}

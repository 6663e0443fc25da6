package cli

import (
	"os"

	"github.com/corral-cluster/corral/internal/clientcfg"
	"path/filepath"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// defaultMeta is the metadata server's address when none is given: where
// `corral meta` listens and where `corral up` runs its first member.
const defaultMeta = "127.0.0.1:7400"

// defaultMetaMembers is where every --meta points (unless CORRAL_META says
// otherwise): the members `corral up` runs by default, defaultMeta first, so
// that after `corral up` the other commands find the file system with no
// flag or variable. A lone `corral meta` on defaultMeta is found too (the
// first member answers; the others are asked only when it does not).
const defaultMetaMembers = defaultMeta + ",127.0.0.1:7401,127.0.0.1:7402"

// metaFlagDefault is the default of every --meta flag.
func metaFlagDefault() string { return envOr("CORRAL_META", defaultMetaMembers) }

// metaFlagHelp is the help of every --meta flag.
const metaFlagHelp = "comma-separated list of metadata members (env CORRAL_META)"

// metaClientDefault is the default of a client's --meta (fs, mount):
// $CORRAL_META, else the client configuration's (corral up records its
// members there), else defaultMetaMembers. Daemons do not read the
// per-user client configuration (metaFlagDefault).
func metaClientDefault() string { return clientcfg.Meta.Value() }

// metaClientHelp is the help of a client's --meta flag.
const metaClientHelp = "comma-separated list of metadata members (env CORRAL_META; else the client configuration's meta, which corral up writes)"

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

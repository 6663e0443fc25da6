//go:build noetcd

package bench

import "errors"

const etcdBuilt = false

var errNoEtcd = errors.New("this corral was built with -tags noetcd (without the etcd baseline)")

type etcdCluster struct{ Endpoints []string }

func startEtcd(dir string, n int) (*etcdCluster, error) { return nil, errNoEtcd }

func (ec *etcdCluster) stop() {}

func newEtcdOps(c MetaWorkerConfig) (metaOps, error) { return nil, errNoEtcd }

//go:build noetcd

package bench

type haEtcd struct{}

func startHAEtcd(dir, client, peer string) (*haEtcd, error) { return nil, errNoEtcd }

func (h *haEtcd) stop() {}

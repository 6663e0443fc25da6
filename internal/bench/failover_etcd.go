//go:build !noetcd

package bench

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// haEtcd is the election's etcd for an HA test bed: one embedded member in
// this process, listening on the machine's own address on the bed (the
// bridge), where every director reaches it through its link, so that
// pulling a director's link also cuts it from etcd. It stands in for the
// management station's etcd (the station serves the same etcd package);
// plain http, as the bed is a private segment this process made.
type haEtcd struct{ e *embed.Etcd }

func startHAEtcd(dir, client, peer string) (*haEtcd, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "ha"
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	cu := url.URL{Scheme: "http", Host: client}
	pu := url.URL{Scheme: "http", Host: peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = "ha=" + pu.String()
	cfg.InitialClusterToken = "corral-bench-failover"
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd for the HA bed on %s: %w", client, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return &haEtcd{e}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd for the HA bed: %w", err)
	case <-time.After(30 * time.Second):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("etcd for the HA bed on %s not ready within 30s (log: %s)", client, cfg.LogOutputs[0])
	}
}

func (h *haEtcd) stop() {
	h.e.Server.Stop()
	h.e.Close()
}

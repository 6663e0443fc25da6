package bench

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

func nopZap() *zap.Logger { return zap.NewNop() }

// etcdCluster is the embedded etcd baseline: n members in this process, each
// on its own loopback ports, with its data (WAL fsync'ed as etcd does by
// default) under dir.
type etcdCluster struct {
	members   []*embed.Etcd
	Endpoints []string // client URLs
}

// startEtcd starts n etcd members and waits (at most 30 s) until they serve.
func startEtcd(dir string, n int) (*etcdCluster, error) {
	type urls struct{ peer, client url.URL }
	us := make([]urls, n)
	var initial []string
	for i := range us {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		c, err := freePort()
		if err != nil {
			return nil, err
		}
		us[i] = urls{url.URL{Scheme: "http", Host: p}, url.URL{Scheme: "http", Host: c}}
		initial = append(initial, fmt.Sprintf("e%d=%s", i+1, us[i].peer.String()))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ec := &etcdCluster{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, n)
	// Members start together: each waits for the others to elect a leader.
	for i := range us {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := embed.NewConfig()
			cfg.Name = fmt.Sprintf("e%d", i+1)
			cfg.Dir = filepath.Join(dir, cfg.Name)
			cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{us[i].peer}, []url.URL{us[i].peer}
			cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{us[i].client}, []url.URL{us[i].client}
			cfg.InitialCluster = strings.Join(initial, ",")
			cfg.InitialClusterToken = "corral-bench-meta"
			cfg.LogLevel = "error"
			cfg.LogOutputs = []string{filepath.Join(dir, cfg.Name+".log")}
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				errs[i] = fmt.Errorf("etcd member %s: %w", cfg.Name, err)
				return
			}
			mu.Lock()
			ec.members = append(ec.members, e)
			mu.Unlock()
			select {
			case <-e.Server.ReadyNotify():
			case err := <-e.Err():
				errs[i] = fmt.Errorf("etcd member %s: %w", cfg.Name, err)
			case <-time.After(30 * time.Second):
				errs[i] = fmt.Errorf("etcd member %s not ready within 30s (log: %s)", cfg.Name, cfg.LogOutputs[0])
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			ec.stop()
			return nil, err
		}
	}
	for _, u := range us {
		ec.Endpoints = append(ec.Endpoints, u.client.String())
	}
	return ec, nil
}

func (ec *etcdCluster) stop() {
	for _, e := range ec.members {
		e.Close()
	}
}

//go:build !noetcd

package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// The etcd baseline makes the corral binary about 20 MB larger (etcd's
// server, gRPC, OpenTelemetry): `go build -tags noetcd` leaves it out
// (benchmetaetcd_no.go) and bench meta then skips it, saying so.

const etcdBuilt = true

func newEtcdOps(c MetaWorkerConfig) (metaOps, error) {
	cl, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.Etcd, ","), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("worker %d: etcd client for %s: %w", c.ID, c.Etcd, err)
	}
	return &etcdOps{c: c, cl: cl, prefix: strings.TrimSuffix(c.Dir, "/") + "/" + c.subdir() + "/"}, nil
}

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

// etcdOps is the replicated key-value baseline: one put per create (the
// file's bytes as the value), a get per stat (keys only) and per read, a
// delete per remove.
type etcdOps struct {
	c      MetaWorkerConfig
	cl     *clientv3.Client
	prefix string
}

func (o *etcdOps) key(i int) string { return o.prefix + o.c.fileName(i) }

func (o *etcdOps) create(ctx context.Context, i int, data []byte) error {
	_, err := o.cl.Put(ctx, o.key(i), string(data))
	return err
}

func (o *etcdOps) stat(ctx context.Context, i int) error {
	r, err := o.cl.Get(ctx, o.key(i), clientv3.WithKeysOnly())
	if err == nil && r.Count != 1 {
		err = fmt.Errorf("etcd: %s not found", o.key(i))
	}
	return err
}

func (o *etcdOps) read(ctx context.Context, i int, buf []byte) error {
	r, err := o.cl.Get(ctx, o.key(i))
	if err != nil {
		return err
	}
	if len(r.Kvs) != 1 || len(r.Kvs[0].Value) != len(buf) {
		return fmt.Errorf("etcd: %s: want one value of %d bytes", o.key(i), len(buf))
	}
	copy(buf, r.Kvs[0].Value)
	return nil
}

func (o *etcdOps) remove(ctx context.Context, i int) error {
	r, err := o.cl.Delete(ctx, o.key(i))
	if err == nil && r.Deleted != 1 {
		err = fmt.Errorf("etcd: delete %s: not found", o.key(i))
	}
	return err
}
func (o *etcdOps) close() { o.cl.Close() }

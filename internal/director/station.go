package director

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/config"
)

// A director that joined a management station (`corral director --join`)
// has no configuration file: it starts with no services and takes each
// version the station hands out through ApplyCluster.

// ApplyView applies a configuration the station cut for this director
// and records the outcome under source ("station version 7") as the last
// load, which `corral ctl status` shows. A configuration Apply refuses
// leaves the running one as it was.
func (d *Director) ApplyView(cfg *config.Director, source string) error {
	if a, _ := d.admin.Load().(string); a != "" {
		// The admin listener is the command line's; moving it needs a
		// restart, so a version never fails on it.
		cfg.Admin = a
	}
	err := d.Apply(cfg)
	st := &ReloadStatus{Time: time.Now(), OK: err == nil, File: source}
	if err != nil {
		st.Error = err.Error()
		var all config.Errors
		if errors.As(err, &all) {
			for _, e := range all {
				d.log.Error("configuration rejected; the running one stays", "from", source, "err", e)
			}
		} else {
			d.log.Error("configuration rejected; the running one stays", "from", source, "err", err)
		}
	} else {
		d.log.Info("configuration applied", "from", source, "services", len(cfg.Services))
	}
	d.reload.Store(st)
	return err
}

// ApplyCluster applies version of the cluster configuration c as the
// director named name: its view (clustercfg.DirectorView) with the nodes
// in drained at weight 0. ha is what the director's join saved for an HA
// group (etcd URLs, TLS and key files; nil when it has none).
func (d *Director) ApplyCluster(c *clustercfg.Config, version int64, name string, drained []string, ha *clustercfg.HAState) error {
	view, err := clustercfg.DirectorViewHA(c, name, drained, ha)
	if err != nil {
		err = fmt.Errorf("version %d: %w", version, err)
		d.reload.Store(&ReloadStatus{Time: time.Now(), File: fmt.Sprintf("station version %d", version), Error: err.Error()})
		return err
	}
	return d.ApplyView(view, fmt.Sprintf("station version %d", version))
}

// Serve runs d's admin API on admin (the token in tokenFile, made if
// missing) until ctx ends, for a director whose configuration comes from
// the station. ready gets the admin address once it listens.
func Serve(ctx context.Context, d *Director, admin, tokenFile string, ready func(admin string)) error {
	stop, err := d.serveAdmin(ctx, admin, tokenFile, ready)
	if err != nil {
		return err
	}
	defer stop()
	<-ctx.Done()
	return nil
}

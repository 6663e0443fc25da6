package director

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/corral-cluster/corral/internal/config"
)

// notFound: the service or real server named does not exist (404).
type notFound string

func (e notFound) Error() string { return string(e) }

// AddServer adds a real server to a running service (corral ctl add, like
// ipvsadm -a). It copies the running configuration, changes it and applies
// the copy, so the change goes through the same path as a reload. The
// configuration file is not written: the next reload of the file replaces
// run-time additions and removals, as a keepalived reload replaces
// ipvsadm's changes.
func (d *Director) AddServer(service, addr string, weight int) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || ap.Port() == 0 {
		return fmt.Errorf("server %q: want ADDRESS:PORT", addr)
	}
	if weight < 0 || weight > 65535 {
		return fmt.Errorf("weight %d: want 0..65535", weight)
	}
	return d.changeServers(service, func(sc *config.Service) error {
		for _, r := range sc.Servers {
			if r.Addr == ap {
				return fmt.Errorf("service %s already has real server %s", service, ap)
			}
		}
		if sc.Dataplane == "xdp" {
			// Direct routing rewrites only MACs (config.validate says the
			// same for the file).
			if ap.Port() != sc.VIP.Port() {
				return fmt.Errorf("server %s: with dataplane xdp a real server listens on the VIP's port %d", ap, sc.VIP.Port())
			}
			if len(sc.Servers) >= 64 {
				return fmt.Errorf("service %s: dataplane xdp takes at most 64 real servers", service)
			}
		}
		sc.Servers = append(sc.Servers, config.RealServer{Addr: ap, Weight: weight})
		return nil
	})
}

// RemoveServer takes a real server out of a running service (corral ctl
// remove, like ipvsadm -d). Its established connections finish on their
// own; see AddServer for how long the change lasts.
func (d *Director) RemoveServer(service, addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("server %q: want ADDRESS:PORT", addr)
	}
	return d.changeServers(service, func(sc *config.Service) error {
		i := slices.IndexFunc(sc.Servers, func(r config.RealServer) bool { return r.Addr == ap })
		if i < 0 {
			return notFound(fmt.Sprintf("service %q has no real server %s", service, ap))
		}
		sc.Servers = slices.Delete(slices.Clone(sc.Servers), i, i+1)
		return nil
	})
}

// changeServers applies change to a copy of the running configuration of
// one service and makes the copy the running configuration. It reads,
// changes and applies under d.mu, as a reload applies: a reload between
// the read and the apply would otherwise be undone by a copy of the
// configuration before it.
func (d *Director) changeServers(service string, change func(*config.Service) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	cur := d.cfg.Load()
	next := *cur
	next.Services = slices.Clone(cur.Services)
	sc := findService(&next, service)
	if sc == nil {
		return notFound(fmt.Sprintf("no service %q", service))
	}
	sc.Servers = slices.Clone(sc.Servers)
	if err := change(sc); err != nil {
		return err
	}
	if err := config.Validate(&next); err != nil {
		return err
	}
	return d.applyLocked(&next)
}

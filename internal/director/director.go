// Package director holds the virtual services: their pools of real servers,
// schedulers, health checks, persistence, the user-space dataplanes (l4:
// TCP/UDP proxy; l7: HTTP proxy), live reconfiguration and the admin API.
//
// The shapes the XDP dataplane plugs into are the service (VIP, pool,
// scheduler) and the real server's counters; the proxies are one dataplane
// among others.
package director

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/health"
	"github.com/corral-cluster/corral/internal/sched"
)

// Director runs the services of one configuration at a time.
type Director struct {
	log *slog.Logger

	mu       sync.Mutex // serialises Apply and ctl add/remove (runtime.go)
	cfg      atomic.Pointer[config.Director]
	services atomic.Pointer[map[string]*service]

	// openSizes opens a SizeSource for a meta address (set by the command,
	// which knows the file-system client); nil: sizes unknown.
	openSizes func(meta string) SizeSource
	// insecureSync: HA sync streams in plain text (--insecure).
	insecureSync atomic.Bool
	fsMu         sync.Mutex
	fs           SizeSource // for request sizes (mwlc), nil without meta
	fsMeta       string
	sizes        sizeCache

	reload atomic.Pointer[ReloadStatus]
	// admin is the admin API's address once it listens (a string); a
	// configuration from the station keeps it (station.go).
	admin atomic.Value

	// now is the clock of the connection tables (tests move it).
	now func() time.Time

	xdp atomic.Pointer[xdpPlane] // set (under mu) while an xdp service runs or HA is on

	// applied: a configuration has been applied (under mu); from then on
	// the ha block may not change (ha.go).
	applied bool
	// haTest, if set, stands for the HA node (tests of the admin API and
	// metrics without etcd and BPF).
	haTest atomic.Pointer[haNode]

	rates   rates          // admin API: counters per second (rates.go)
	drains  sync.WaitGroup // closed l7 proxies finishing their requests (l7.go)
	metrics *metrics       // /metrics: reads the counters above at scrape time

	// fb is the feedback monitor while a feedback block is configured
	// (feedback.go); set under mu.
	fb atomic.Pointer[fbMonitor]
	// sfb holds the weights the management station publishes, for a
	// director it feeds (feedback_station.go).
	sfb stationFeedback
	// ovr: run-time weights kept across restarts (overrides.go).
	ovr overrides
}

// SizeSource tells the size of a file in the shared file system: mwlc
// schedules a request by the bytes it will send.
type SizeSource interface {
	Size(ctx context.Context, path string) (int64, error)
	Close()
}

// SetSizeSource sets how the director opens a SizeSource for the
// configuration's meta address; call it before the first Apply.
func (d *Director) SetSizeSource(open func(meta string) SizeSource) { d.openSizes = open }

// pokeXDP gets a health or weight change into the kernel now.
func (d *Director) pokeXDP() {
	if p := d.xdp.Load(); p != nil {
		p.poke()
	}
}

// New returns a director with no services.
func New(log *slog.Logger) *Director {
	if log == nil {
		log = slog.Default()
	}
	d := &Director{log: log, now: time.Now}
	d.metrics = newMetrics(d)
	m := map[string]*service{}
	d.services.Store(&m)
	d.cfg.Store(&config.Director{})
	return d
}

// real is one real server of a service.
type real struct {
	addr      string
	cfgWeight atomic.Int64
	override  atomic.Int64 // -1: none; set by ctl weight/drain
	fb        atomic.Int64 // -1: none; the feedback controller's weight (feedback.go)
	healthy   atomic.Bool
	checker   *health.Checker
	check     config.Check

	active, inactive        atomic.Int64
	conns, requests, failed atomic.Int64
	bytesIn, bytesOut       atomic.Int64
	pending                 atomic.Int64 // bytes still to send (mwlc)
	packets                 atomic.Int64 // xdp: frames forwarded to it
}

// weight is the scheduling weight: 0 while unhealthy or drained.
func (r *real) weight() int {
	if !r.healthy.Load() {
		return 0
	}
	if o := r.override.Load(); o >= 0 {
		return int(o)
	}
	if f := r.fb.Load(); f >= 0 {
		return int(f)
	}
	return int(r.cfgWeight.Load())
}

type persistEntry struct {
	r     *real
	conns int
	until time.Time
}

// service is one virtual service and its running dataplane.
type service struct {
	d   *Director
	cfg atomic.Pointer[config.Service]

	mu      sync.Mutex // guards sched, reals, persist
	sched   sched.Scheduler
	reals   []*real
	persist map[netip.Addr]*persistEntry

	table connTable
	lim   flowLimits // l4: live flows against max-conns (limits.go)

	newConns, drops atomic.Int64
	xdp             atomic.Pointer[XDPCounters] // dataplane xdp: kernel counters
	plane           dataplane
	qos             atomic.Pointer[qosState] // l7: request classes and admission (qos.go)
}

// dataplane moves a service's traffic.
type dataplane interface {
	// close stops accepting; established connections finish on their own.
	close()
}

// Apply makes cfg the running configuration, or changes nothing and says
// why. Services are matched by name: a service whose VIP, protocol and
// dataplane are unchanged is updated in place, so its established
// connections are untouched; its real servers are matched by address and
// keep their counters and health.
//
// The new state is built aside first: the configuration is validated, new
// services' schedulers made and their VIPs bound. A new service whose VIP
// an outgoing one holds takes it over only then, and the outgoing one is
// started again if that fails. Only when everything stands is the new
// service map swapped in; the running map is never written, as the admin
// API reads it concurrently.
func (d *Director) Apply(cfg *config.Director) error {
	if err := config.Validate(cfg); err != nil {
		return err
	}
	sec, err := readFeedbackSecrets(cfg)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkHAReload(cfg); err != nil {
		return err
	}
	if err := d.applyLocked(cfg); err != nil {
		return err
	}
	d.applied = true
	d.syncFeedback(cfg, sec)
	return nil
}

// applyLocked is Apply with cfg validated and d.mu held.
func (d *Director) applyLocked(cfg *config.Director) error {
	old := *d.services.Load()

	// Plan: which services stay (updated in place), which are new, which go.
	stay := map[string]*service{}
	scheds := map[string]sched.Scheduler{} // new schedulers of staying services
	var fresh []*service
	for i := range cfg.Services {
		sc := &cfg.Services[i]
		if s, ok := old[sc.Name]; ok && sameShape(s.cfg.Load(), sc) {
			stay[sc.Name] = s
			if s.cfg.Load().Scheduler != sc.Scheduler {
				sch, err := sched.New(sc.Scheduler)
				if err != nil {
					return fmt.Errorf("service %s: %w", sc.Name, err)
				}
				scheds[sc.Name] = sch
			}
			continue
		}
		sch, err := sched.New(sc.Scheduler)
		if err != nil {
			return fmt.Errorf("service %s: %w", sc.Name, err)
		}
		s := &service{d: d, persist: map[netip.Addr]*persistEntry{}, sched: sch}
		s.mu.Lock()
		// Its pool only: the health checks start at commit, so that a
		// rejected configuration leaves none probing behind it.
		s.setPoolLocked(sc)
		s.mu.Unlock()
		fresh = append(fresh, s)
	}
	var going []*service
	for name, s := range old {
		if stay[name] == nil {
			going = append(going, s)
		}
	}
	if err := d.prepareXDP(cfg); err != nil {
		return err
	}

	// Start the new services' dataplanes. One whose VIP an outgoing
	// service holds waits for the second round.
	var started, later []*service
	var paused []*service // outgoing services whose dataplanes were closed
	undo := func(err error) error {
		for _, s := range started {
			s.stop()
		}
		for _, s := range paused {
			if e := s.start(); e != nil {
				d.log.Error("restarting a service after a rejected configuration", "service", s.cfg.Load().Name, "err", e)
			}
		}
		d.settleXDP(old)
		return err
	}
	holder := func(s *service) *service {
		c := s.cfg.Load()
		for _, o := range going {
			oc := o.cfg.Load()
			if oc.VIP == c.VIP && oc.Protocol == c.Protocol {
				return o
			}
		}
		return nil
	}
	for _, s := range fresh {
		if holder(s) != nil {
			later = append(later, s)
			continue
		}
		if err := s.start(); err != nil {
			return undo(fmt.Errorf("service %s: %w", s.cfg.Load().Name, err))
		}
		started = append(started, s)
	}
	for _, s := range later {
		if o := holder(s); o != nil && !slices.Contains(paused, o) {
			o.closePlane()
			paused = append(paused, o)
		}
		if err := s.start(); err != nil {
			return undo(fmt.Errorf("service %s: %w", s.cfg.Load().Name, err))
		}
		started = append(started, s)
	}
	// HA: join the group once the services are in the kernel (the
	// program stays fenced until internal/ha opens it).
	if p := d.xdp.Load(); cfg.HA != nil && p != nil && p.node == nil {
		if err := p.startHA(cfg.HA); err != nil {
			return undo(err)
		}
	}

	// Everything stands: commit.
	next := map[string]*service{}
	for _, s := range started {
		s.mu.Lock()
		s.startChecksLocked()
		s.mu.Unlock()
		next[s.cfg.Load().Name] = s
	}
	for name, s := range stay {
		s.mu.Lock()
		if sch := scheds[name]; sch != nil {
			s.sched = sch
		}
		s.updateLocked(findService(cfg, name))
		s.mu.Unlock()
		next[name] = s
	}
	d.cfg.Store(cfg)
	d.services.Store(&next)
	d.ovr.apply(next)
	for _, s := range going {
		if !slices.Contains(paused, s) {
			s.closePlane()
		}
		s.stopChecks()
	}
	d.settleXDP(next)
	d.fsMu.Lock()
	if d.fs != nil && d.fsMeta != cfg.Meta {
		d.fs.Close()
		d.fs, d.fsMeta = nil, ""
	}
	if d.fs == nil && cfg.Meta != "" && d.openSizes != nil {
		d.fs, d.fsMeta = d.openSizes(cfg.Meta), cfg.Meta
	}
	d.fsMu.Unlock()
	return nil
}

// Close stops every service and waits for the requests in flight of its
// l7 services (and of those closed before) to finish, each for at most
// drainTimeout.
func (d *Director) Close() {
	d.mu.Lock()
	if m := d.fb.Load(); m != nil {
		m.stop()
		d.fb.Store(nil)
	}
	d.StopStationFeedback()
	if p := d.xdp.Load(); p != nil {
		// Leave the HA group while the services still forward: an active
		// director hands over first, so a clean stop loses no flow.
		p.closeHA()
	}
	d.cfg.Store(&config.Director{}) // no ha block: settleXDP may detach
	d.applied = false
	for _, s := range *d.services.Load() {
		s.stop()
	}
	empty := map[string]*service{}
	d.services.Store(&empty)
	d.settleXDP(empty)
	d.fsMu.Lock()
	if d.fs != nil {
		d.fs.Close()
	}
	d.fsMu.Unlock()
	d.mu.Unlock()
	d.drains.Wait()
}

// prepareXDP attaches the XDP program before the first xdp service starts.
func (d *Director) prepareXDP(cfg *config.Director) error {
	want := cfg.HA != nil // HA: the program is the fence even with no service
	for _, s := range cfg.Services {
		want = want || s.Dataplane == "xdp"
	}
	p := d.xdp.Load()
	switch {
	case !want:
		return nil
	case p != nil && p.ifname != cfg.Interface:
		return fmt.Errorf("interface: moving the XDP dataplane from %s to %s needs a restart", p.ifname, cfg.Interface)
	case p == nil:
		p, err := startXDPPlane(d, cfg)
		if err != nil {
			return err
		}
		d.xdp.Store(p)
	}
	return nil
}

// settleXDP detaches the XDP program once no service uses it, and
// otherwise pushes the new pools now.
func (d *Director) settleXDP(running map[string]*service) {
	p := d.xdp.Load()
	if p == nil {
		return
	}
	if d.cfg.Load().HA != nil {
		p.poke()
		return
	}
	for _, s := range running {
		if s.cfg.Load().Dataplane == "xdp" {
			p.poke()
			return
		}
	}
	d.xdp.Store(nil)
	p.close()
}

func findService(cfg *config.Director, name string) *config.Service {
	for i := range cfg.Services {
		if cfg.Services[i].Name == name {
			return &cfg.Services[i]
		}
	}
	return nil
}

func sameShape(a, b *config.Service) bool {
	return a.VIP == b.VIP && a.Protocol == b.Protocol && a.Dataplane == b.Dataplane
}

// updateLocked applies a service's configuration to its pool (s.mu held):
// servers are matched by address and keep their counters and health; a
// server whose check changed gets a new checker.
func (s *service) updateLocked(sc *config.Service) {
	s.setPoolLocked(sc)
	s.startChecksLocked()
}

// setPoolLocked makes sc's servers the pool (s.mu held), matching them by
// address. It starts no health check: a server whose check changed, or a
// new one, is left without a checker for startChecksLocked; a removed
// server's checker is stopped.
func (s *service) setPoolLocked(sc *config.Service) {
	s.cfg.Store(sc) // before the checks start: they log the service's name
	byAddr := map[string]*real{}
	for _, r := range s.reals {
		byAddr[r.addr] = r
	}
	var reals []*real
	for _, rs := range sc.Servers {
		addr := rs.Addr.String()
		r := byAddr[addr]
		delete(byAddr, addr)
		if r == nil {
			r = &real{addr: addr}
			r.override.Store(-1)
			r.fb.Store(-1)
			r.healthy.Store(true)
		}
		r.cfgWeight.Store(int64(rs.Weight))
		if r.checker != nil && !reflect.DeepEqual(r.check, sc.Check) {
			r.checker.Stop()
			r.checker = nil
		}
		r.check = sc.Check
		reals = append(reals, r)
	}
	for _, r := range byAddr { // removed from the pool: their connections go on
		if r.checker != nil {
			r.checker.Stop()
			r.checker = nil
		}
	}
	s.reals = reals
}

// startChecksLocked starts a checker for each server of the pool that has
// none (s.mu held).
func (s *service) startChecksLocked() {
	for _, r := range s.reals {
		if r.checker == nil {
			s.startCheck(r)
		}
	}
}

// startCheck starts r's checker from r's present state: a new server
// counts as up until its check fails (fall), one already known to be down
// stays down until it passes (rise), so that a reload which only edits the
// check brings no dead server back. Without a check a server is up.
func (s *service) startCheck(r *real) {
	svc := s.cfg.Load()
	name := ""
	if svc != nil {
		name = svc.Name
	}
	if r.check.Type == "none" {
		r.healthy.Store(true)
	}
	r.checker = &health.Checker{Check: health.Check(r.check), Addr: r.addr, Down: !r.healthy.Load(), OnChange: func(up bool, err error) {
		r.healthy.Store(up)
		s.d.pokeXDP()
		if up {
			s.d.log.Info("real server up", "service", name, "server", r.addr)
		} else {
			s.d.log.Warn("real server down", "service", name, "server", r.addr, "err", err)
		}
	}}
	r.checker.Start()
}

func (s *service) stopChecks() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.reals {
		if r.checker != nil {
			r.checker.Stop()
			r.checker = nil
		}
	}
}

func (s *service) stop() {
	s.closePlane()
	s.stopChecks()
}

// closePlane stops the dataplane accepting; start opens it again.
func (s *service) closePlane() {
	if s.plane != nil {
		s.plane.close()
		s.plane = nil
	}
}

func (s *service) start() error {
	cfg := s.cfg.Load()
	var err error
	switch {
	case cfg.Dataplane == "xdp":
		s.plane, err = s.d.xdp.Load().add(s)
	case cfg.Protocol == "udp":
		s.plane, err = startUDP(s)
	case cfg.Dataplane == "l7":
		s.plane, err = startL7(s)
	default:
		s.plane, err = startTCP(s)
	}
	return err
}

// errNoServer: every real server is down, drained or refused.
var errNoServer = errors.New("no real server available")

// pick chooses a real server for a new flow from src, skipping those in
// exclude (already failed for this request). The flow counts as active on
// the server (and its size as pending) from this moment, as LVS counts a
// connection when it schedules it: flows picked at the same instant then see
// each other. The caller undoes that if the flow fails to start. pick also
// takes a persistence reference; call done when the flow ends.
//
// The service counts a client's flow (an l4 connection, a UDP flow, an l7
// request) once, on its first pick (exclude empty), in newConns when it
// gets a server, whether by persistence or by the scheduler, and in drops
// when none is available: a pick again after a failure (exclude not
// empty: a refused connect, an l7 retry or resume) is the same flow.
func (s *service) pick(src netip.Addr, size int64, exclude map[*real]bool) (*real, error) {
	cfg := s.cfg.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.d.now()
	s.expireConns(now)
	if cfg.Persistence > 0 {
		if e := s.persist[src]; e != nil && (e.conns > 0 || now.Before(e.until)) && e.r.weight() > 0 && !exclude[e.r] && s.inPool(e.r) {
			e.conns++
			e.r.active.Add(1)
			e.r.pending.Add(size)
			if len(exclude) == 0 {
				s.newConns.Add(1)
			}
			return e.r, nil
		}
	}
	view := make([]sched.Server, len(s.reals))
	for i, r := range s.reals {
		w := r.weight()
		if exclude[r] {
			w = 0
		}
		view[i] = sched.Server{Key: r.addr, Weight: w, Active: int(r.active.Load()), Inactive: int(r.inactive.Load()), Pending: r.pending.Load()}
	}
	i := s.sched.Pick(view, sched.Flow{Src: src, Size: size})
	if i < 0 {
		if len(exclude) == 0 {
			s.drops.Add(1)
		}
		return nil, errNoServer
	}
	r := s.reals[i]
	r.active.Add(1)
	r.pending.Add(size)
	if cfg.Persistence > 0 {
		s.persist[src] = &persistEntry{r: r, conns: 1}
		if len(s.persist) > 100000 {
			s.expirePersist(now)
		}
	}
	if len(exclude) == 0 {
		s.newConns.Add(1)
	}
	return r, nil
}

func (s *service) inPool(r *real) bool {
	for _, x := range s.reals {
		if x == r {
			return true
		}
	}
	return false
}

// done releases a flow's persistence reference.
func (s *service) done(src netip.Addr) {
	cfg := s.cfg.Load()
	if cfg.Persistence <= 0 {
		return
	}
	s.mu.Lock()
	if e := s.persist[src]; e != nil && e.conns > 0 {
		e.conns--
		e.until = s.d.now().Add(cfg.Persistence)
	}
	s.mu.Unlock()
}

func (s *service) expirePersist(now time.Time) {
	for k, e := range s.persist {
		if e.conns == 0 && now.After(e.until) {
			delete(s.persist, k)
		}
	}
}

package director

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/dataplane/xdp"
	"github.com/corral-cluster/corral/internal/ha"
	"github.com/corral-cluster/corral/internal/safefile"
)

// High availability (the `ha { }` block, docs/ha.md): the director is one
// of a group. Its XDP program is the fence: it forwards VIP traffic and
// answers ARP for the VIPs only while internal/ha keeps it open, so the
// VIPs are never put on the interface (the kernel would answer ARP for
// them even after a kill -9). internal/ha elects the active director
// through the station's etcd and streams the connection table between the
// directors; this file wires it to the XDP plane and the admin API.

// haNode is what the director uses of an *ha.Node; a seam so that the
// admin API and metrics can be tested without etcd and BPF.
type haNode interface {
	Status() ha.Status
	Handover(ctx context.Context, to string) error
	Close() error
	SetVIPs(vips []netip.Addr)
}

// startHA joins the group; tests replace it.
var startHA = func(ctx context.Context, cfg ha.Config, dp ha.Dataplane) (haNode, error) {
	n, err := ha.Start(ctx, cfg, dp)
	if err != nil {
		return nil, err
	}
	return n, nil
}

// haStartTimeout bounds ha.Start (registering in etcd): a director whose
// station does not answer says so instead of hanging at start.
const haStartTimeout = 15 * time.Second

// haDataplane adapts the XDP dataplane and its change stream to
// ha.Dataplane.
type haDataplane struct {
	*xdp.Dataplane
	ev *xdp.Events
}

func (h haDataplane) Changes() <-chan []xdp.ConnEvent { return h.ev.C }
func (h haDataplane) Lost() uint64                    { return h.ev.Lost() }

// haMode is the XDP program's mode for an ha block.
func haMode(h *config.HA) xdp.HAMode {
	if h.Mode == ha.ActiveActive {
		return xdp.HAActiveActive
	}
	return xdp.HAFenced
}

// MinHAKey is the shortest group key accepted.
const MinHAKey = 16

// maxHAKey bounds what is read of the key file.
const maxHAKey = 4096

// ReadHAKey reads the group's shared secret: the file's bytes, a trailing
// newline dropped (so `openssl rand -hex 32 > ha.key` works). A file others
// can read is refused, as the admin token is: whoever holds the key can
// feed a director connections.
func ReadHAKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ha: key-file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("ha: key-file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("ha: key-file %s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("ha: key-file %s has mode %#o; others can read it: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxHAKey+1))
	if err != nil {
		return nil, fmt.Errorf("ha: key-file %s: %w", path, err)
	}
	if len(b) > maxHAKey {
		return nil, fmt.Errorf("ha: key-file %s: longer than %d bytes; want a secret of 16 to %d bytes", path, maxHAKey, maxHAKey)
	}
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	if len(b) < MinHAKey {
		return nil, fmt.Errorf("ha: key-file %s: %d bytes; want at least %d (e.g. openssl rand -hex 32 > %s; the same file on every director of the group)", path, len(b), MinHAKey, path)
	}
	return b, nil
}

// etcdTLS is the client TLS for the station's etcd (nil without the files).
func etcdTLS(h *config.HA) (*tls.Config, error) {
	if h.EtcdCA == "" && h.EtcdCert == "" && h.EtcdKey == "" {
		return nil, nil
	}
	ca, err := os.ReadFile(h.EtcdCA)
	if err != nil {
		return nil, fmt.Errorf("ha: etcd-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("ha: etcd-ca %s: no PEM certificate in it", h.EtcdCA)
	}
	if err := safefile.CheckSecret(h.EtcdKey); err != nil {
		return nil, fmt.Errorf("ha: etcd-key: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(h.EtcdCert, h.EtcdKey)
	if err != nil {
		return nil, fmt.Errorf("ha: etcd-cert %s / etcd-key %s: %w", h.EtcdCert, h.EtcdKey, err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// haConfig builds ha.Config from the block (reading the key and TLS files).
func haConfig(h *config.HA, ifname string) (ha.Config, error) {
	key, err := ReadHAKey(h.KeyFile)
	if err != nil {
		return ha.Config{}, err
	}
	tc, err := etcdTLS(h)
	if err != nil {
		return ha.Config{}, err
	}
	name := h.Name
	if name == "" {
		if name, err = os.Hostname(); err != nil {
			return ha.Config{}, fmt.Errorf("ha: no name in the block and no host name: %w", err)
		}
	}
	return ha.Config{Name: name, Group: h.Group, Mode: h.Mode, Priority: h.Priority, Etcd: h.Etcd, EtcdTLS: tc,
		LeaseTTL: h.LeaseTTL, SyncListen: h.Sync, Key: key, Interface: ifname}, nil
}

// startHA joins the group once the services are in the kernel: the
// program is fenced (closed) since it was loaded, so nothing is forwarded
// before internal/ha opens the fence.
func (p *xdpPlane) startHA(h *config.HA) error {
	cfg, err := haConfig(h, p.ifname)
	if err != nil {
		return err
	}
	p.mu.Lock()
	cfg.MAC, cfg.VIPs, cfg.Log = p.mac0, p.vipList(), p.d.log.With("ha", h.Group)
	if cfg.Insecure = p.d.insecureSync.Load(); cfg.Insecure {
		cfg.Log.Warn("--insecure: HA sync streams are plain text; anyone on the path can read the connection table")
	}
	p.mu.Unlock()
	ev, err := p.dp.StartEvents()
	if err != nil {
		return fmt.Errorf("ha: the XDP program's connection changes: %w", err)
	}
	// The context bounds Start while it registers, and is otherwise left
	// alive until the group is left (closeHA), in case the node ties its
	// goroutines to it.
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(haStartTimeout, cancel)
	node, err := startHA(ctx, cfg, haDataplane{p.dp, ev})
	inTime := timer.Stop()
	if err != nil {
		cancel()
		ev.Close()
		if !inTime || errors.Is(err, context.Canceled) {
			err = fmt.Errorf("%w: etcd at %v did not answer in %v (is the station running, with --etcd-client on the directors' link?)", err, h.Etcd, haStartTimeout)
		}
		return fmt.Errorf("ha: joining group %s as %s: %w", h.Group, cfg.Name, err)
	}
	p.mu.Lock()
	p.events, p.node, p.haCancel = ev, node, cancel
	p.mu.Unlock()
	p.d.log.Info("ha: joined the group", "group", h.Group, "name", cfg.Name, "mode", h.Mode, "priority", h.Priority, "sync", h.Sync)
	return nil
}

// closeHA leaves the group: an active director hands over first (ha.Node
// Close), while the program still forwards, so that a clean stop loses no
// flow. Then the change stream stops.
func (p *xdpPlane) closeHA() {
	p.mu.Lock()
	node, ev, cancel := p.node, p.events, p.haCancel
	p.node, p.events, p.haCancel = nil, nil, nil
	p.mu.Unlock()
	if node != nil {
		if err := node.Close(); err != nil {
			p.d.log.Warn("ha: leaving the group", "err", err)
		}
	}
	if cancel != nil {
		cancel()
	}
	if ev != nil {
		ev.Close()
	}
}

// vipList is the VIPs of the services the plane carries, sorted.
func (p *xdpPlane) vipList() []netip.Addr {
	var out []netip.Addr
	for s := range p.svcs {
		if a := s.cfg.Load().VIP.Addr(); !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// haVIPsLocked tells the program and internal/ha the VIP set after a
// service came or went (p.mu held): the program answers ARP for exactly
// these while the fence is open, and a new active announces them.
func (p *xdpPlane) haVIPsLocked() error {
	vips := p.vipList()
	if slices.Equal(vips, p.haVIPs) {
		return nil
	}
	if err := p.dp.SetARP(p.mac0, vips); err != nil {
		return fmt.Errorf("ha: ARP answers for %v: %w", vips, err)
	}
	p.haVIPs = vips
	if p.node != nil {
		p.node.SetVIPs(vips)
	}
	return nil
}

// haNode is the running node, nil without HA.
// SetInsecureSync makes the HA sync streams of groups joined from now on
// plain text (the peers must accept it: --insecure on them too).
func (d *Director) SetInsecureSync(b bool) { d.insecureSync.Store(b) }

func (d *Director) haNode() haNode {
	if n := d.haTest.Load(); n != nil {
		return *n
	}
	p := d.xdp.Load()
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.node
}

// errHAOff answers the HA calls of a director without an ha block.
var errHAOff = notFound("HA is off: this director's configuration has no ha { } block (see docs/ha.md)")

// HAStatus is the group as this director sees it.
func (d *Director) HAStatus() (ha.Status, error) {
	n := d.haNode()
	if n == nil {
		return ha.Status{}, errHAOff
	}
	return n.Status(), nil
}

// HandoverResult is what a handover did.
type HandoverResult struct {
	From string        `json:"from"`
	To   string        `json:"to"`   // the new active ("" if none showed in time)
	Took time.Duration `json:"took"` // from the call to the new active showing
}

// handoverWait bounds how long Handover waits for the new active to show
// in the status after ha.Node.Handover returned.
const handoverWait = 3 * time.Second

// Handover hands the VIPs to another in-sync director (to "" = the best by
// priority); only the active may.
func (d *Director) Handover(ctx context.Context, to string) (HandoverResult, error) {
	n := d.haNode()
	if n == nil {
		return HandoverResult{}, errHAOff
	}
	st := n.Status()
	if st.Mode == ha.ActiveActive {
		return HandoverResult{}, fmt.Errorf("handover: group %s is active-active: every director forwards, there is nothing to hand over", st.Group)
	}
	if st.State != ha.StateActive {
		return HandoverResult{}, fmt.Errorf("handover: %s is %s, not active; ask the active director (%s)", st.Name, st.State, orNone(st.Active))
	}
	start := time.Now()
	if err := n.Handover(ctx, to); err != nil {
		return HandoverResult{}, fmt.Errorf("handover from %s: %w", st.Name, err)
	}
	res := HandoverResult{From: st.Name}
	deadline := time.Now().Add(handoverWait)
	for {
		if a := n.Status().Active; a != "" && a != st.Name {
			res.To = a
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	res.Took = time.Since(start)
	d.log.Info("ha: handed over", "from", res.From, "to", res.To, "took", res.Took)
	return res, nil
}

func orNone(s string) string {
	if s == "" {
		return "none yet"
	}
	return s
}

// haHealth is the HA part of /healthz: a line for the body, and whether
// the director is unhealthy. A fenced director (lost its lease or etcd) is
// unhealthy; a standby is healthy (it is ready to take over).
func (d *Director) haHealth() (line string, bad bool) {
	n := d.haNode()
	if n == nil {
		return "", false
	}
	st := n.Status()
	line = fmt.Sprintf("ha: group %s, %s is %s", st.Group, st.Name, st.State)
	if st.Active != "" {
		line += ", active " + st.Active
	}
	if st.State == ha.StateFenced {
		reason := st.LastReason
		if reason == "" {
			reason = "lost its etcd lease"
		}
		return line + ": not forwarding: " + reason, true
	}
	return line, false
}

func (d *Director) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	line, bad := d.haHealth()
	if bad {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "unhealthy\n%s\n", line)
		return
	}
	w.Write([]byte("ok\n"))
	if line != "" {
		fmt.Fprintln(w, line)
	}
}

// checkHAReload refuses a configuration that changes the ha block: the
// director's place in its group (name, sync address, etcd, key) is fixed
// while it runs. d.mu held.
func (d *Director) checkHAReload(cfg *config.Director) error {
	if !d.applied {
		return nil
	}
	old := d.cfg.Load().HA
	if config.SameHA(old, cfg.HA) {
		return nil
	}
	if cfg.HA == nil {
		return fmt.Errorf("%s: ha: removing the ha block needs a restart (the running director stays in group %s)", orStation(cfg.File), old.Group)
	}
	msg := "changing ha needs a restart"
	if old == nil {
		msg = "adding an ha block needs a restart"
	}
	if cfg.HA.Line == 0 { // built, not read from a file (the station's view)
		return fmt.Errorf("%s: ha: %s", orStation(cfg.File), msg)
	}
	return config.Errors{&config.Error{File: cfg.File, Line: cfg.HA.Line, Field: "ha", Msg: msg}}
}

// handoverTimeout bounds a handover asked through the admin API.
const handoverTimeout = 10 * time.Second

func orStation(file string) string {
	if file == "" {
		return "the station's configuration"
	}
	return file
}

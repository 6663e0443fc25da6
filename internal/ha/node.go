package ha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/corral-cluster/corral/internal/dataplane/xdp"
)

// Timing (docs/ha-internals.md has the budget).
const (
	tick           = 20 * time.Millisecond // the control loop's period
	rankDelay      = 50 * time.Millisecond // per rank before a campaign
	failbackSynced = time.Second           // a better peer in sync this long takes the VIPs back
	failbackRetry  = 3 * time.Second       // after a failed fail-back
	handoverAck    = 2 * time.Second       // the target's last ack, else the handover aborts
	etcdOp         = 2 * time.Second       // bound on one etcd request
	garpCount      = 3
	garpSpan       = time.Second
)

// member is a director's record under /corral/ha/GROUP/members/NAME, on its
// lease: it vanishes with the director.
type member struct {
	Name     string `json:"name"`
	Sync     string `json:"sync"`
	Priority int    `json:"priority"`
	State    string `json:"state"`
	Lease    int64  `json:"lease"`
	InSync   bool   `json:"insync"`
}

// window is a span in which this director's fence was open (for tests and
// for the log): from when SetHA opened it to its deadline, cut short by a
// later SetHA.
type setHACall struct {
	at    time.Duration // xdp.MonoNow at the call
	mode  xdp.HAMode
	until time.Duration
}

// Node is one director's membership of its group.
type Node struct {
	cfg    Config
	dp     Dataplane
	log    *slog.Logger
	cli    *clientv3.Client
	ln     net.Listener
	prefix string
	ttl    time.Duration // configured TTL
	guard  time.Duration // TTL/4: the fence closes this long before etcd may expire the lease

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{}

	mu          sync.Mutex
	state       string
	lease       clientv3.LeaseID
	grantedTTL  time.Duration
	deadline    time.Duration // MonoNow deadline from the last acknowledged keep-alive
	fenceUntil  time.Duration // what the fence was last set to (0: closed)
	published   member        // the record last written to etcd
	publishAt   time.Time     // not before: a refused write is retried after guard
	members     map[string]member
	active      string // the holder of the active key ("" none)
	activeLease clientv3.LeaseID
	lastActive  string    // the last director seen holding it
	noActiveAt  time.Time // when the key was last seen absent after being held (or start)
	campaignAt  time.Time // a pending campaign's time (rank delay)
	syncedFrom  string    // whose full table (and changes after) this director holds
	lastLost    uint64
	transitions uint64
	syncErrors  uint64
	resyncs     uint64
	lastTrans   time.Time
	lastReason  string
	vips        []netip.Addr
	out         map[string]*outStream
	in          map[string]*inStream
	// preauth bounds sync connections not yet past the handshake: each
	// costs a goroutine and a TLS handshake, and strangers may open many.
	preauth     chan struct{}
	handingOver bool
	// failbackAfter: no fail-back attempt before (one just failed).
	failbackAfter time.Time
	closed        bool
	// crashed (tests): the process is gone; nothing more is sent or written.
	crashed bool
	// frozen (tests) stands for SIGSTOP: no goroutine of the node acts,
	// sockets stay open.
	frozen atomic.Bool
}

// Start joins the group: registers in etcd, opens the sync listener and
// streams, and campaigns once in sync. It returns when registered; the rest
// runs until Close.
func Start(ctx context.Context, cfg Config, dp Dataplane) (*Node, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:     cfg,
		dp:      dp,
		log:     cfg.Log.With("ha", cfg.Group, "name", cfg.Name),
		prefix:  "/corral/ha/" + cfg.Group + "/",
		ttl:     cfg.LeaseTTL,
		guard:   cfg.LeaseTTL / 4,
		kick:    make(chan struct{}, 1),
		state:   StateStarting,
		members: map[string]member{},
		out:     map[string]*outStream{},
		in:      map[string]*inStream{},
		preauth: make(chan struct{}, maxPreauth),
		vips:    append([]netip.Addr(nil), cfg.VIPs...),
	}
	mode := xdp.HAFenced
	if cfg.Mode == ActiveActive {
		mode = xdp.HAActiveActive
	}
	// Closed until this director wins: a restarted director must not
	// forward on a fence a previous run left open.
	if err := dp.SetHA(mode, 0); err != nil {
		return nil, fmt.Errorf("ha: group %s: closing the fence at start: %w", cfg.Group, err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Etcd,
		TLS:         cfg.EtcdTLS,
		DialTimeout: etcdOp,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("ha: group %s: etcd %v: %w", cfg.Group, cfg.Etcd, err)
	}
	ln, err := net.Listen("tcp", cfg.SyncListen)
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("ha: group %s: sync listener on %s: %w", cfg.Group, cfg.SyncListen, err)
	}
	n.cli, n.ln = cli, ln
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.noActiveAt = time.Now()
	if err := n.register(ctx); err != nil {
		n.cancel()
		ln.Close()
		cli.Close()
		return nil, err
	}
	if cfg.Mode == ActiveActive {
		n.transition(StateActive, "active-active member registered")
	} else {
		n.transition(StateSyncing, "registered")
	}
	n.publish()
	n.wg.Add(5)
	go n.acceptLoop()
	go n.watchLoop()
	go n.keepAliveLoop()
	go n.changesLoop()
	go n.controlLoop()
	return n, nil
}

func (c *Config) fill() error {
	if c.Name == "" || c.Group == "" {
		return fmt.Errorf("ha: a director needs a name and a group (name %q, group %q)", c.Name, c.Group)
	}
	if strings.ContainsAny(c.Name+c.Group, "/ ") {
		return fmt.Errorf("ha: name %q and group %q may not hold '/' or spaces", c.Name, c.Group)
	}
	if c.Mode == "" {
		c.Mode = ActiveStandby
	}
	if c.Mode != ActiveStandby && c.Mode != ActiveActive {
		return fmt.Errorf("ha: group %s: mode %q (%s or %s)", c.Group, c.Mode, ActiveStandby, ActiveActive)
	}
	if c.Priority == 0 {
		c.Priority = 100
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 2 * time.Second
	}
	if c.LeaseTTL < time.Second || c.LeaseTTL%time.Second != 0 {
		return fmt.Errorf("ha: group %s: lease TTL %v (whole seconds, at least 1 s)", c.Group, c.LeaseTTL)
	}
	if len(c.Etcd) == 0 {
		return fmt.Errorf("ha: group %s: no etcd endpoints", c.Group)
	}
	if len(c.Key) < 16 {
		return fmt.Errorf("ha: group %s: the group key has %d bytes (at least 16)", c.Group, len(c.Key))
	}
	if c.SyncListen == "" {
		return fmt.Errorf("ha: group %s: no sync address", c.Group)
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// register grants a new lease and writes the member record on it.
func (n *Node) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, etcdOp)
	defer cancel()
	send := xdp.MonoNow()
	g, err := n.cli.Grant(ctx, int64(n.ttl/time.Second))
	if err != nil {
		return fmt.Errorf("ha: group %s: lease grant on etcd %v: %w", n.cfg.Group, n.cfg.Etcd, err)
	}
	n.mu.Lock()
	n.lease = g.ID
	n.grantedTTL = time.Duration(g.TTL) * time.Second
	n.deadline = send + n.grantedTTL - n.guard
	n.published = member{}
	n.mu.Unlock()
	return nil
}

// record is this director's member record as it should be now.
func (n *Node) recordLocked() member {
	return member{
		Name:     n.cfg.Name,
		Sync:     n.ln.Addr().String(),
		Priority: n.cfg.Priority,
		State:    n.state,
		Lease:    int64(n.lease),
		InSync:   n.inSyncLocked(time.Now()),
	}
}

// publish writes the member record when it changed.
func (n *Node) publish() {
	n.mu.Lock()
	rec := n.recordLocked()
	if rec == n.published || n.lease == 0 || n.crashed || time.Now().Before(n.publishAt) {
		n.mu.Unlock()
		return
	}
	n.mu.Unlock()
	b, _ := json.Marshal(rec)
	// Short: the control loop waits for it (the fence itself is the
	// kernel's, but state changes should not lag a cut etcd by long).
	ctx, cancel := context.WithTimeout(n.ctx, n.guard)
	defer cancel()
	if _, err := n.cli.Put(ctx, n.prefix+"members/"+n.cfg.Name, string(b), clientv3.WithLease(clientv3.LeaseID(rec.Lease))); err != nil {
		n.log.Warn("ha: member record not written", "err", err, "retry_in", n.guard)
		n.mu.Lock()
		n.publishAt = time.Now().Add(n.guard)
		n.mu.Unlock()
		return
	}
	n.mu.Lock()
	n.published = rec
	n.mu.Unlock()
}

// transition records and logs a state change.
func (n *Node) transition(state, reason string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.transitionLocked(state, reason)
}

func (n *Node) transitionLocked(state, reason string) {
	if n.state == state {
		return
	}
	n.log.Info("ha: transition", "from", n.state, "to", state, "reason", reason)
	n.state = state
	n.transitions++
	n.lastTrans = time.Now()
	n.lastReason = reason
	n.kickLocked()
	// Streams switch role (start or stop carrying our table) now, not at
	// their next heartbeat.
	for _, o := range n.out {
		select {
		case o.notify <- struct{}{}:
		default:
		}
	}
}

func (n *Node) kickLocked() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// setFenceLocked drives the program's fence (HAFenced; 0 closes it).
func (n *Node) setFenceLocked(until time.Duration) error {
	if n.crashed || n.cfg.Mode == ActiveActive {
		return nil
	}
	if err := n.dp.SetHA(xdp.HAFenced, until); err != nil {
		n.log.Error("ha: setting the fence", "until", until, "err", err)
		return err
	}
	n.fenceUntil = until
	return nil
}

// fenceLocked stops forwarding at once and drops the lease: the director
// re-registers with a new one and campaigns again once in sync.
func (n *Node) fenceLocked(reason string) {
	n.setFenceLocked(0)
	n.transitionLocked(StateFenced, reason)
	n.lease = 0
	n.campaignAt = time.Time{}
}

// keepAliveLoop renews the lease every TTL/4, and re-registers after a
// fence. A renewal's deadline counts from its send time: etcd extends the
// lease from when it receives the request, which is later.
func (n *Node) keepAliveLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.guard)
	defer t.Stop()
	var old clientv3.LeaseID
	for {
		if n.frozen.Load() {
			if !sleepCtx(n.ctx, tick) {
				return
			}
			continue
		}
		n.mu.Lock()
		lease, state := n.lease, n.state
		if lease != 0 {
			old = lease
		}
		n.mu.Unlock()
		if lease == 0 && n.ctx.Err() == nil {
			// Fenced: the old lease (it may still hold the active key
			// after a partition) goes, a new one comes.
			if old != 0 {
				ctx, cancel := context.WithTimeout(n.ctx, n.guard)
				n.cli.Revoke(ctx, old)
				cancel()
				old = 0
			}
			if err := n.register(n.ctx); err == nil {
				n.transition(StateSyncing, "re-registered with a new lease")
				n.publish()
			}
		} else if lease != 0 {
			ctx, cancel := context.WithTimeout(n.ctx, n.guard)
			send := xdp.MonoNow()
			r, err := n.cli.KeepAliveOnce(ctx, lease)
			cancel()
			n.mu.Lock()
			switch {
			case err == nil && lease == n.lease:
				n.grantedTTL = time.Duration(r.TTL) * time.Second
				n.deadline = send + n.grantedTTL - n.guard
				if n.state == StateActive && !n.handingOver {
					n.setFenceLocked(n.deadline)
				}
			case errors.Is(err, rpctypes.ErrLeaseNotFound) && lease == n.lease:
				n.fenceLocked("lease " + fmt.Sprintf("%x", int64(lease)) + " not found in etcd")
			case err != nil && n.ctx.Err() == nil:
				n.log.Debug("ha: keep-alive failed", "state", state, "err", err)
			}
			n.mu.Unlock()
		}
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchLoop follows the group's keys: members and the active key.
func (n *Node) watchLoop() {
	defer n.wg.Done()
	for n.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(n.ctx, etcdOp)
		r, err := n.cli.Get(ctx, n.prefix, clientv3.WithPrefix())
		cancel()
		if err != nil {
			sleepCtx(n.ctx, 100*time.Millisecond)
			continue
		}
		n.mu.Lock()
		n.members = map[string]member{}
		active, alease := "", clientv3.LeaseID(0)
		for _, kv := range r.Kvs {
			if string(kv.Key) == n.prefix+"active" {
				active, alease = string(kv.Value), clientv3.LeaseID(kv.Lease)
			} else {
				n.applyMemberLocked(string(kv.Key), kv.Value)
			}
		}
		n.setActiveLocked(active, alease)
		n.mu.Unlock()
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(n.ctx))
		for wr := range n.cli.Watch(wctx, n.prefix, clientv3.WithPrefix(), clientv3.WithRev(r.Header.Revision+1)) {
			if wr.Err() != nil {
				break
			}
			n.mu.Lock()
			for _, ev := range wr.Events {
				key := string(ev.Kv.Key)
				del := ev.Type == clientv3.EventTypeDelete
				switch {
				case key == n.prefix+"active" && del:
					n.setActiveLocked("", 0)
				case key == n.prefix+"active":
					n.setActiveLocked(string(ev.Kv.Value), clientv3.LeaseID(ev.Kv.Lease))
				case del:
					delete(n.members, strings.TrimPrefix(key, n.prefix+"members/"))
				default:
					n.applyMemberLocked(key, ev.Kv.Value)
				}
			}
			n.kickLocked()
			n.mu.Unlock()
		}
		wcancel()
	}
}

func (n *Node) applyMemberLocked(key string, v []byte) {
	name, ok := strings.CutPrefix(key, n.prefix+"members/")
	if !ok {
		return
	}
	var m member
	if json.Unmarshal(v, &m) != nil || m.Name != name {
		n.log.Warn("ha: unreadable member record", "key", key)
		return
	}
	n.members[name] = m
}

func (n *Node) setActiveLocked(name string, lease clientv3.LeaseID) {
	if name == n.active && lease == n.activeLease {
		return
	}
	if name == "" && n.active != "" {
		n.noActiveAt = time.Now()
	}
	if name != "" {
		n.lastActive = name
	}
	n.log.Info("ha: active key", "active", name, "was", n.active)
	n.active, n.activeLease = name, lease
	n.campaignAt = time.Time{}
}

// inSyncLocked: this director holds the current (or, when none, the last)
// active's full table and the changes after it, or no active has existed
// for 2×TTL (a group starting cold).
func (n *Node) inSyncLocked(now time.Time) bool {
	if n.cfg.Mode == ActiveActive || n.state == StateActive {
		return true
	}
	want := n.active
	if want == "" {
		if now.Sub(n.noActiveAt) >= 2*n.ttl {
			return true
		}
		want = n.lastActive
		if want == "" {
			return false
		}
	}
	if want == n.cfg.Name {
		// Our own key, or we were the last active: we had the table.
		return true
	}
	return n.syncedFrom == want
}

// controlLoop runs the election: campaigns, takeover, fail-back, the
// fence's deadline, and the sync streams' set.
func (n *Node) controlLoop() {
	defer n.wg.Done()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		case <-n.kick:
		}
		if !n.frozen.Load() {
			n.step()
		}
	}
}

func (n *Node) step() {
	now := time.Now()
	mono := xdp.MonoNow()
	n.mu.Lock()
	if n.closed || n.crashed {
		n.mu.Unlock()
		return
	}
	n.manageStreamsLocked()
	if n.lease != 0 && mono >= n.deadline && n.state == StateActive {
		// No renewal acknowledged in time: etcd may expire the lease
		// soon, so this director must already have stopped. (A standby
		// keeps its lease until etcd says it is gone; it just may not
		// campaign meanwhile.)
		n.fenceLocked("fence deadline passed without a lease renewal")
		n.mu.Unlock()
		return
	}
	if n.cfg.Mode == ActiveActive {
		if n.lease != 0 && n.state != StateActive {
			n.transitionLocked(StateActive, "active-active member registered")
		}
		n.mu.Unlock()
		n.publish()
		return
	}
	var takeover, campaign bool
	var failback string
	switch {
	case n.lease == 0:
	case n.state == StateActive:
		if n.active != n.cfg.Name || n.activeLease != n.lease {
			// The key is gone or someone else's (our lease was revoked, a
			// handover completed): stop at once.
			n.setFenceLocked(0)
			n.transitionLocked(StateStandby, fmt.Sprintf("the active key is now %q", n.active))
		} else if !n.handingOver && now.After(n.failbackAfter) {
			failback = n.failbackTargetLocked(now)
		}
	case n.active == n.cfg.Name && n.activeLease == n.lease:
		takeover = true
	case n.active == "" && n.inSyncLocked(now) && mono < n.deadline:
		if n.campaignAt.IsZero() {
			n.campaignAt = now.Add(time.Duration(n.rankLocked()) * rankDelay)
		}
		campaign = !now.Before(n.campaignAt)
	default:
		st := StateSyncing
		if n.inSyncLocked(now) {
			st = StateStandby
		}
		if n.state != st {
			n.transitionLocked(st, "sync state")
		}
	}
	lease := n.lease
	n.mu.Unlock()
	switch {
	case takeover:
		n.takeOver("the active key names this director")
	case campaign:
		n.campaign(lease)
	case failback != "":
		ctx, cancel := context.WithTimeout(n.ctx, handoverAck+etcdOp)
		if err := n.Handover(ctx, failback); err != nil {
			// Each attempt closes the fence for up to handoverAck: a
			// peer that cannot take over must not cut the VIP off again
			// and again.
			n.mu.Lock()
			n.failbackAfter = time.Now().Add(failbackRetry)
			n.mu.Unlock()
			n.log.Warn("ha: fail-back handover failed", "to", failback, "err", err, "retry_in", failbackRetry)
		}
		cancel()
	}
	n.publish()
}

// rankLocked is this director's place among the live in-sync members:
// priority descending, then name. A director that has never seen an
// active (a group starting cold) ranks among every live member: the others
// become in sync at about the same time, before their records say so.
func (n *Node) rankLocked() int {
	type c struct {
		name string
		prio int
	}
	cold := n.lastActive == ""
	cs := []c{{n.cfg.Name, n.cfg.Priority}}
	for name, m := range n.members {
		if name != n.cfg.Name && (m.InSync || cold) && m.State != StateFenced {
			cs = append(cs, c{name, m.Priority})
		}
	}
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].prio != cs[j].prio {
			return cs[i].prio > cs[j].prio
		}
		return cs[i].name < cs[j].name
	})
	for i, x := range cs {
		if x.name == n.cfg.Name {
			return i
		}
	}
	return len(cs)
}

// campaign takes the active key if nobody holds it.
func (n *Node) campaign(lease clientv3.LeaseID) {
	key := n.prefix + "active"
	ctx, cancel := context.WithTimeout(n.ctx, etcdOp)
	defer cancel()
	r, err := n.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, n.cfg.Name, clientv3.WithLease(lease))).
		Commit()
	n.mu.Lock()
	n.campaignAt = time.Time{}
	if err != nil {
		// Not again on the next tick (50 a second): etcd may be down, or
		// refuse this director for good (its credential was revoked).
		n.campaignAt = time.Now().Add(n.guard)
		if errors.Is(err, rpctypes.ErrPermissionDenied) && n.state != StateFenced {
			n.transitionLocked(StateFenced, "etcd refuses this director (permission denied: its credential revoked?)")
		}
	}
	n.mu.Unlock()
	if err != nil {
		n.log.Warn("ha: campaign failed", "err", err, "retry_in", n.guard)
		return
	}
	if r.Succeeded {
		n.mu.Lock()
		n.active, n.activeLease, n.lastActive = n.cfg.Name, lease, n.cfg.Name
		n.mu.Unlock()
		n.takeOver("won the election")
	}
}

// takeOver opens the fence on a fresh renewal and announces the VIPs.
func (n *Node) takeOver(reason string) {
	n.mu.Lock()
	lease := n.lease
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(n.ctx, n.guard)
	send := xdp.MonoNow()
	r, err := n.cli.KeepAliveOnce(ctx, lease)
	cancel()
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil || lease != n.lease || n.active != n.cfg.Name || n.crashed || n.closed {
		if err != nil {
			n.log.Warn("ha: takeover: lease renewal failed; not forwarding", "err", err)
		}
		return
	}
	n.grantedTTL = time.Duration(r.TTL) * time.Second
	n.deadline = send + n.grantedTTL - n.guard
	n.setFenceLocked(n.deadline)
	n.transitionLocked(StateActive, reason)
	vips := append([]netip.Addr(nil), n.vips...)
	n.wg.Add(1)
	go n.announce(vips)
}

// announce sends gratuitous ARP / neighbour advertisements garpCount
// times over garpSpan, the first at once.
func (n *Node) announce(vips []netip.Addr) {
	defer n.wg.Done()
	if n.cfg.Interface == "" || len(vips) == 0 {
		return
	}
	for i := 0; i < garpCount; i++ {
		if i > 0 && !sleepCtx(n.ctx, garpSpan/(garpCount-1)) {
			return
		}
		n.mu.Lock()
		still := n.state == StateActive && !n.crashed
		n.mu.Unlock()
		if !still {
			return
		}
		if err := SendGARP(n.cfg.Interface, n.cfg.MAC, vips); err != nil {
			n.log.Warn("ha: gratuitous ARP", "err", err)
		}
	}
}

// failbackTargetLocked names a peer of strictly higher priority that has
// been in sync (snapshot and every change acknowledged) for a second.
func (n *Node) failbackTargetLocked(now time.Time) string {
	best, bestPrio := "", n.cfg.Priority
	for name, o := range n.out {
		m, ok := n.members[name]
		if !ok || m.Priority <= bestPrio {
			continue
		}
		if o.caughtUpLocked() && now.Sub(o.syncedSince) >= failbackSynced {
			best, bestPrio = name, m.Priority
		}
	}
	return best
}

// ErrNotActive is returned by Handover on a director that is not active.
var ErrNotActive = errors.New("ha: not the active director")

// Handover hands the VIPs to another in-sync director (to "" = the best by
// priority) without losing a flow: the last changes reach it, this director
// stops forwarding, then the election passes to it. Only the active may.
func (n *Node) Handover(ctx context.Context, to string) error {
	n.mu.Lock()
	if n.cfg.Mode == ActiveActive || n.state != StateActive || n.active != n.cfg.Name || n.handingOver {
		n.mu.Unlock()
		return ErrNotActive
	}
	if to == "" {
		to = n.bestPeerLocked()
		if to == "" {
			n.mu.Unlock()
			return fmt.Errorf("ha: group %s: no peer in sync to hand over to", n.cfg.Group)
		}
	}
	o, ok := n.out[to]
	m, mok := n.members[to]
	if !ok || !mok || !o.syncedLocked() {
		n.mu.Unlock()
		return fmt.Errorf("ha: group %s: %q is not in sync with %s", n.cfg.Group, to, n.cfg.Name)
	}
	if err := n.setFenceLocked(0); err != nil {
		// Still forwarding until the deadline: the target must not start.
		n.mu.Unlock()
		return fmt.Errorf("ha: handover to %s: closing the fence: %w", to, err)
	}
	n.handingOver = true
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.handingOver = false
		n.mu.Unlock()
	}()
	reopen := func(err error) error {
		n.mu.Lock()
		if n.state == StateActive && n.active == n.cfg.Name && xdp.MonoNow() < n.deadline {
			n.setFenceLocked(n.deadline)
		}
		n.mu.Unlock()
		return err
	}
	// The program no longer forwards: what it did last is in Changes.
	n.drainChanges()
	wait, cancel := context.WithTimeout(ctx, handoverAck)
	defer cancel()
	for {
		n.mu.Lock()
		done := o.caughtUpLocked() && o.conn != nil
		n.mu.Unlock()
		if done {
			break
		}
		if !sleepCtx(wait, 5*time.Millisecond) {
			return reopen(fmt.Errorf("ha: handover to %s: its acknowledgement of the last changes did not come within %v", to, handoverAck))
		}
	}
	key := n.prefix + "active"
	ectx, ecancel := context.WithTimeout(ctx, etcdOp)
	r, err := n.cli.Txn(ectx).
		If(clientv3.Compare(clientv3.Value(key), "=", n.cfg.Name)).
		Then(clientv3.OpPut(key, to, clientv3.WithLease(clientv3.LeaseID(m.Lease)))).
		Commit()
	ecancel()
	if err != nil {
		// The put may have happened: only reopen if the key is still ours.
		gctx, gcancel := context.WithTimeout(n.ctx, etcdOp)
		g, gerr := n.cli.Get(gctx, key)
		gcancel()
		if gerr == nil && len(g.Kvs) == 1 && string(g.Kvs[0].Value) == n.cfg.Name {
			return reopen(fmt.Errorf("ha: handover to %s: %w", to, err))
		}
		n.mu.Lock()
		n.fenceLocked("handover to " + to + " ended in doubt")
		n.mu.Unlock()
		return fmt.Errorf("ha: handover to %s: %w (fenced: the outcome is unknown)", to, err)
	}
	if !r.Succeeded {
		return reopen(fmt.Errorf("ha: handover to %s: this director no longer holds the active key", to))
	}
	n.mu.Lock()
	n.active, n.activeLease = to, clientv3.LeaseID(m.Lease)
	n.setFenceLocked(0)
	n.transitionLocked(StateStandby, "handed over to "+to)
	n.mu.Unlock()
	return nil
}

// bestPeerLocked is the in-sync peer (it holds our snapshot) of the
// highest priority, then name.
func (n *Node) bestPeerLocked() string {
	best, prio := "", 0
	for name, o := range n.out {
		m, ok := n.members[name]
		if !ok || !o.syncedLocked() {
			continue
		}
		if best == "" || m.Priority > prio || m.Priority == prio && name < best {
			best, prio = name, m.Priority
		}
	}
	return best
}

// Status reports the group as this director sees it.
func (n *Node) Status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := Status{
		Name: n.cfg.Name, Group: n.cfg.Group, Mode: n.cfg.Mode, State: n.state,
		Priority: n.cfg.Priority, Active: n.active, LeaseTTL: n.grantedTTL,
		LastTransition: n.lastTrans, LastReason: n.lastReason, Transitions: n.transitions,
		SyncErrors: n.syncErrors, Resyncs: n.resyncs,
	}
	if n.state == StateActive && n.cfg.Mode == ActiveStandby {
		if left := n.fenceUntil - xdp.MonoNow(); left > 0 {
			s.FenceLeft = left
		}
	}
	names := map[string]bool{}
	for k := range n.members {
		names[k] = true
	}
	for k := range n.out {
		names[k] = true
	}
	for k := range n.in {
		names[k] = true
	}
	delete(names, n.cfg.Name)
	now := time.Now()
	for name := range names {
		p := PeerStatus{Name: name}
		if m, ok := n.members[name]; ok {
			p.Sync, p.State, p.Priority = m.Sync, m.State, m.Priority
		}
		if o := n.out[name]; o != nil {
			p.OutConnected = o.conn != nil
			p.OutSent, p.OutAcked = o.sentEvents, o.ackedEvents
			p.Lag = o.lagLocked(now)
		}
		if i := n.in[name]; i != nil {
			p.InConnected, p.InSynced = true, i.synced
			p.InApplied, p.InSkipped = i.applied, i.skipped
		}
		s.Peers = append(s.Peers, p)
	}
	sort.Slice(s.Peers, func(i, j int) bool { return s.Peers[i].Name < s.Peers[j].Name })
	return s
}

// SetVIPs replaces the group's addresses (a reload changed the services):
// an active director sends gratuitous ARP for the new ones.
func (n *Node) SetVIPs(vips []netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	old := map[netip.Addr]bool{}
	for _, v := range n.vips {
		old[v] = true
	}
	var added []netip.Addr
	for _, v := range vips {
		if !old[v] {
			added = append(added, v)
		}
	}
	n.vips = append([]netip.Addr(nil), vips...)
	if n.state == StateActive && len(added) > 0 && !n.closed && !n.crashed {
		n.wg.Add(1)
		go n.announce(added)
	}
}

// Close leaves the group: an active director hands over first when an
// in-sync peer exists, then stops forwarding and revokes its lease.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed || n.crashed {
		n.mu.Unlock()
		return nil
	}
	active := n.state == StateActive && n.cfg.Mode == ActiveStandby
	peer := n.bestPeerLocked()
	n.mu.Unlock()
	if active && peer != "" {
		ctx, cancel := context.WithTimeout(context.Background(), handoverAck+etcdOp)
		if err := n.Handover(ctx, peer); err != nil {
			n.log.Warn("ha: handover at close failed", "to", peer, "err", err)
		}
		cancel()
	}
	n.mu.Lock()
	n.closed = true
	if n.cfg.Mode == ActiveStandby {
		n.setFenceLocked(0)
	}
	lease := n.lease
	n.transitionLocked(StateStarting, "closed")
	for _, o := range n.out {
		o.byeLocked("closing")
	}
	for _, i := range n.in {
		i.byeLocked("closing")
	}
	n.mu.Unlock()
	if lease != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), etcdOp)
		n.cli.Revoke(ctx, lease)
		cancel()
	}
	n.shutdown()
	return nil
}

// shutdown stops every goroutine and closes the sockets.
func (n *Node) shutdown() {
	// The listener first: a peer that sees a stream end probes it.
	n.ln.Close()
	n.cancel()
	n.mu.Lock()
	for _, o := range n.out {
		o.stopLocked()
	}
	for _, i := range n.in {
		i.conn.Close()
	}
	n.mu.Unlock()
	n.wg.Wait()
	n.cli.Close()
}

// crash (tests) ends the node as a kill -9 would: no Bye, no revoke, no
// handover, sockets closed by the "kernel".
func (n *Node) crash() {
	n.mu.Lock()
	n.crashed = true
	n.mu.Unlock()
	n.shutdown()
}

// waitThawed (tests) blocks while the node is frozen.
func (n *Node) waitThawed() {
	for n.frozen.Load() && sleepCtx(n.ctx, tick) {
	}
}

// sleepCtx sleeps d unless ctx ends first (false then).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

package bench

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/ha"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/testbed"
)

// FailoverConfig sizes `corral bench failover`.
type FailoverConfig struct {
	Bin, Dir, Out string
	// Conns long-lived keep-alive connections, each requesting Chunk bytes
	// every Interval; Rate new connections per second (open loop).
	Conns    int
	Chunk    int
	Interval time.Duration
	Rate     int
	// Corral, Keepalived and ActiveActive select the parts.
	Corral, Keepalived, ActiveActive bool
	// AADuration is each active-active measurement; AAConns its
	// connections.
	AADuration time.Duration
	AAConns    int
	LeaseTTL   time.Duration
	// Quick checks behaviour (survival >= 99 %, no two forwarders) and
	// fails the run when it is wrong.
	Quick bool
	Log   io.Writer
}

// EventRow is one event's figures.
type EventRow struct {
	System string `json:"system"`
	Event  string `json:"event"`
	From   string `json:"from"`
	To     string `json:"to"`
	// TakeoverMs: from the event (the kill, the cable pulled, the
	// handover command, the restart) to the first frame the new director
	// forwarded, seen on the wire. GapMs: from the old director's last
	// forwarded frame to the new one's first (no director forwarded).
	TakeoverMs float64 `json:"takeover_ms"`
	GapMs      float64 `json:"gap_ms"`
	// The keep-alive connections alive when the event began, and those of
	// them that completed a response after the takeover on the same TCP
	// connection.
	Established int      `json:"established"`
	Survived    int      `json:"survived"`
	Idle        int      `json:"idle"` // alive, but no response completed since the takeover
	SurvivedPct float64  `json:"survived_pct"`
	ConnErrors  []string `json:"conn_errors,omitempty"`
	// New connections offered from the event until the takeover, and
	// after it (until the next event).
	NewDuring       int     `json:"new_during"`
	NewFailedDuring int     `json:"new_failed_during"`
	NewAfter        int     `json:"new_after"`
	NewFailedAfter  int     `json:"new_failed_after"`
	NewSlowAfter    int     `json:"new_slow_after"`
	NewP99ms        float64 `json:"new_p99_ms_after"`
	// Bytes the keep-alive connections did not get compared with the 2 s
	// before (until back to 90 % over 200 ms), the longest 10 ms-bucket
	// run with no byte at all, the time to recover.
	BaseMBps    float64 `json:"base_mb_per_s"`
	StalledMB   float64 `json:"stalled_mb"`
	NoByteMs    float64 `json:"no_byte_ms"`
	RecoveredMs float64 `json:"recovered_ms"`
	// SplitBrain counts frames one director forwarded inside another's
	// forwarding run (both forwarding at once); Near counts frames of two
	// directors within 10 ms of each other (a fast clean change shows
	// there too).
	SplitBrain int      `json:"split_brain"`
	Near       int      `json:"near_10ms"`
	Overlaps   []string `json:"overlaps,omitempty"`
	Error      string   `json:"error,omitempty"`
}

// AARow is one active-active measurement.
type AARow struct {
	Directors int     `json:"directors"`
	ReqPerS   float64 `json:"req_per_s"`
	Ratio     float64 `json:"ratio_to_n_times_one"`
	// PerDirector is each director's share of the forwarded frames.
	PerDirector map[string]int `json:"frames_per_director"`
	Error       string         `json:"error,omitempty"`
}

// FailoverResult is the scenario's output.
type FailoverResult struct {
	Scenario string     `json:"scenario"`
	When     time.Time  `json:"when"`
	Quick    bool       `json:"quick"`
	Conns    int        `json:"conns"`
	Rate     int        `json:"new_per_s"`
	Events   []EventRow `json:"events"`
	AA       []AARow    `json:"active_active"`
	// AAMoves is the flow movement through the router's route when a
	// director leaves and joins (resilient group, and the plain route).
	AAMoves  []testbed.ECMPMovement `json:"active_active_flow_movement,omitempty"`
	Skipped  []string               `json:"skipped,omitempty"`
	Problems []string               `json:"problems,omitempty"`
	Notes    []string               `json:"notes"`
}

// failoverSettle is how long the load runs after a takeover before the
// event is judged: a connection whose segments were lost during a 3 s
// outage retransmits after TCP's doubling timeouts (0.2, 0.4, ... 3.2 s:
// 6.2 s in all), so a shorter wait would count live connections as idle.
const failoverSettle = 8 * time.Second

// Subnets of the scenario's beds (tests use 10.84.0.0/24).
var (
	failoverSubnet = netip.MustParsePrefix("10.83.0.0/24")
)

// RunFailover runs the scenario.
func RunFailover(ctx context.Context, cfg FailoverConfig) (*FailoverResult, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format, a...) }
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	res := &FailoverResult{Scenario: "failover", When: time.Now().UTC(), Quick: cfg.Quick, Conns: cfg.Conns, Rate: cfg.Rate}
	if cfg.Corral || cfg.Keepalived {
		rows, skipped, err := failoverEvents(ctx, cfg, logf)
		res.Events, res.Skipped = rows, append(res.Skipped, skipped...)
		if err != nil {
			res.Problems = append(res.Problems, err.Error())
		}
	}
	if cfg.ActiveActive {
		// Needs no director binary: plain hosts behind the router.
		moves, err := failoverAAMoves(ctx, logf)
		res.AAMoves = moves
		if err != nil {
			res.Problems = append(res.Problems, "active-active flow movement: "+err.Error())
		}
	}
	if cfg.ActiveActive {
		rows, err := failoverAA(ctx, cfg, logf)
		res.AA = rows
		if err != nil {
			res.Problems = append(res.Problems, "active-active: "+err.Error())
		}
	}
	for _, e := range res.Events {
		if e.Error != "" {
			continue
		}
		if e.SplitBrain > 0 && e.System != "corral" {
			// The baseline's behaviour is a figure, not a failure.
			res.Notes = append(res.Notes, fmt.Sprintf("observed: %s, %s: %d frames forwarded by two directors at once (%s)", e.System, e.Event, e.SplitBrain, strings.Join(e.Overlaps, "; ")))
		} else if e.SplitBrain > 0 {
			res.Problems = append(res.Problems, fmt.Sprintf("%s, %s: %d frames forwarded by two directors at once (%s)", e.System, e.Event, e.SplitBrain, strings.Join(e.Overlaps, "; ")))
		}
		if cfg.Quick && e.System == "corral" && e.SurvivedPct < 99 {
			res.Problems = append(res.Problems, fmt.Sprintf("corral, %s: %.1f%% of established connections survived, want >= 99%%", e.Event, e.SurvivedPct))
		}
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("test bed: client, router, directors d1..d3, 3 nodes (direct routing: replies go from the nodes to the client), meta, iod1; one L2 segment; the VIP is reached by ARP (active-standby) or through the router's ECMP route (active-active)"),
		fmt.Sprintf("established connections: %d keep-alive connections from the client host, each a raw HTTP/1.1 connection never redialled, requesting %d bytes (a Range of /big.bin) every %v; one survives an event if it was alive when the event began and completed a response after the takeover on the same TCP connection", cfg.Conns, cfg.Chunk, cfg.Interval),
		fmt.Sprintf("new connections: an open-loop generator, %d per second, one request each (GET /, Connection: close), 3 s timeout for the whole exchange", cfg.Rate),
		"takeover and split brain are measured on the wire: an AF_PACKET socket on each director's bridge-side veth (in the machine's namespace) keeps the TCP frames to the VIP that the director sends (it forwards by rewriting the destination MAC to a node's), with the kernel's receive timestamps; the event's time is taken just before the kill(2), the link change or the command",
		"split brain: a frame forwarded by one director between two frames of another that are at most 10 ms apart (both forwarding at the same moment); 'near' counts frames of two directors within 10 ms of each other, which a fast clean change also shows",
		"stalled bytes: the keep-alive connections' received bytes in 10 ms buckets; from the event to 2 s after the takeover, the bytes not received compared with the mean rate of the 2 s before the event (net of any catch-up); 'no byte' is the longest run of empty buckets in that window",
		"Corral: the group's etcd is one member embedded in the benchmark process on the machine's address on the bed, standing in for the management station's (same etcd package); lease TTL "+cfg.LeaseTTL.String(),
		"keepalived: VRRP (advert_int 1, priorities 200/100, preemption on, Debian's defaults otherwise); forwarding by an nftables rule at each director's netdev ingress (VIP tcp/80: source MAC the director's, destination MAC a node's by jhash of the client address and port with a fixed seed, fwd back out of eth0): direct routing as IPVS would do it (this kernel has no IPVS); the rule is on both directors, so a flow hashes to the same node on either (stateless; no table to sync)",
		"keepalived 'kill -9': keepalived killed with SIGKILL and, at the same instant, its forwarding rule and the VIP removed (the director machine gone); 'handover': SIGTERM, after which keepalived sends a priority-0 advert; 'fail-back': keepalived started again on d1 (priority 200 preempts)",
		"active-active flow movement: a separate bed (client, router, d1..d3 as plain hosts serving the VIP on port 80 and answering their name); 600 connections from source ports 20000..20599 made over d1..d3, again after d3 left the router's route, again after it joined; a flow 'moved' if it reached another host than in the round before; the router hashes the 5-tuple (fib_multipath_hash_policy 3, fields 0x37); resilient group: nexthop objects, type resilient, 128 buckets, idle_timer 0, members replaced in place",
		"everything shares this machine's CPUs (2, with other work); figures are for this bed, not for hardware")
	if cfg.Quick {
		res.Notes = append(res.Notes, "quick mode: fewer connections and a shorter run; it checks behaviour (survival >= 99 %, no two forwarders) and prints figures")
	}
	if err := writeJSONMD(cfg.Out, res, res.Markdown()); err != nil {
		return res, err
	}
	if len(res.Problems) > 0 && cfg.Quick {
		return res, fmt.Errorf("failover: %s", strings.Join(res.Problems, "; "))
	}
	return res, nil
}

// failoverEvents runs the events on Corral's directors, then the same on
// keepalived, on one bed.
func failoverEvents(ctx context.Context, cfg FailoverConfig, logf func(string, ...any)) ([]EventRow, []string, error) {
	scratch, cleanup, err := scratchDir(cfg.Out, cfg.Dir, "failover")
	if err != nil {
		return nil, nil, err
	}
	defer cleanup()
	var skipped []string
	var rows []EventRow
	hb, err := StartHABed(ctx, HABedConfig{Bin: cfg.Bin, Data: scratch, Name: "h4fo", Subnet: failoverSubnet, Directors: 2,
		Mode: ha.ActiveStandby, LeaseTTL: cfg.LeaseTTL, NoDirectors: true, Log: logf})
	if err != nil {
		return nil, nil, err
	}
	defer hb.Close()
	var problem error
	if cfg.Corral {
		r, err := corralEvents(ctx, hb, cfg, logf)
		rows = append(rows, r...)
		if err != nil {
			logf("corral HA: %v\n", err)
			problem = fmt.Errorf("corral HA: %w", err)
		}
		hb.StopDirectors()
	}
	if cfg.Keepalived {
		ver, err := KeepalivedVersion()
		if err != nil {
			skipped = append(skipped, "keepalived: "+err.Error())
		} else {
			r, err := keepalivedEvents(ctx, hb, cfg, ver, logf)
			rows = append(rows, r...)
			if err != nil {
				logf("keepalived: %v\n", err)
				skipped = append(skipped, "keepalived: "+err.Error())
			}
		}
	}
	return rows, skipped, problem
}

// load is the measurement running over a series of events.
type load struct {
	hb    *HABed
	capt  *Capture
	fleet *Fleet
	ol    *OpenLoop
}

func startLoad(ctx context.Context, hb *HABed, cfg FailoverConfig, span time.Duration) (*load, error) {
	capt, err := StartCapture(hb.Bed, hb.VIP.Addr(), hb.Names()...)
	if err != nil {
		return nil, err
	}
	dial := hb.Bed.DialContext("client")
	fleet, err := StartFleet(ctx, FleetConfig{Dial: dial, Target: hb.VIP.String(), Path: "/big.bin", Host: launch.SampleDomain,
		Conns: cfg.Conns, Chunk: cfg.Chunk, Interval: cfg.Interval, Timeout: 10 * time.Second, Span: span})
	if err != nil {
		capt.Close()
		return nil, err
	}
	ol := StartOpenLoop(ctx, dial, hb.VIP.String(), launch.SampleDomain, "/", cfg.Rate, 3*time.Second, span)
	return &load{hb: hb, capt: capt, fleet: fleet, ol: ol}, nil
}

// Names names every director of the bed (captured whether running or
// not).
func (hb *HABed) Names() []string {
	var out []string
	for _, d := range hb.Directors {
		out = append(out, d.Name)
	}
	return out
}

func (l *load) stop() {
	l.ol.Stop()
	l.fleet.Stop()
	l.capt.Close()
}

// event performs do (which returns the event's moment), waits (at most
// wait) for a director other than old to forward, lets the load run for
// settle, and measures.
func (l *load) event(system, name, old string, wait, settle time.Duration, logf func(string, ...any), do func() (time.Time, error)) EventRow {
	row := EventRow{System: system, Event: name, From: old}
	t, err := do()
	if err != nil {
		row.Error = err.Error()
		logf("%-10s %-24s error: %v\n", system, name, err)
		return row
	}
	var first time.Time
	deadline := time.Now().Add(wait)
	for {
		at, who, ok := l.capt.First(t, old)
		if ok {
			first, row.To = at, who
			break
		}
		if time.Now().After(deadline) {
			row.Error = fmt.Sprintf("no other director forwarded within %v of the event", wait)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(settle)
	end := time.Now()
	if !first.IsZero() {
		row.TakeoverMs = msOf(first.Sub(t))
		if last, ok := l.capt.Last(old, first); ok {
			row.GapMs = msOf(first.Sub(last))
		}
	} else {
		first = end
	}
	s := l.fleet.Survival(t, first)
	row.Established, row.Survived, row.Idle, row.SurvivedPct, row.ConnErrors = s.Established, s.Survived, s.Idle, s.Pct(), s.Errors
	during := l.ol.Count(t, first)
	// Attempts still within their timeout are not judged yet.
	after := l.ol.Count(first, end.Add(-3*time.Second))
	row.NewDuring, row.NewFailedDuring = during.Tried, during.Failed
	row.NewAfter, row.NewFailedAfter, row.NewSlowAfter, row.NewP99ms = after.Tried, after.Failed, after.Slow, after.P99ms
	base, gap, stalled, rec := l.fleet.Bytes.Stall(t, first)
	row.BaseMBps, row.NoByteMs, row.StalledMB, row.RecoveredMs = base/1e6, msOf(gap), stalled/1e6, msOf(rec)
	ov, near := l.capt.SplitBrain(t.Add(-time.Second), end, 10*time.Millisecond)
	row.SplitBrain, row.Near = len(ov), near
	for i, o := range ov {
		if i == 3 {
			break
		}
		row.Overlaps = append(row.Overlaps, o.String())
	}
	logf("%-10s %-24s %s->%s takeover %7.1f ms gap %7.1f ms  survived %d/%d (%.2f%%)  new failed %d during, %d/%d after  stalled %.1f MB  split-brain %d\n",
		system, name, old, row.To, row.TakeoverMs, row.GapMs, row.Survived, row.Established, row.SurvivedPct,
		row.NewFailedDuring, row.NewFailedAfter, row.NewAfter, row.StalledMB, row.SplitBrain)
	return row
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// corralEvents: kill -9 of the active, fail-back, clean handover, the
// active's link pulled.
func corralEvents(ctx context.Context, hb *HABed, cfg FailoverConfig, logf func(string, ...any)) ([]EventRow, error) {
	for _, d := range hb.Directors {
		if err := hb.StartDirector(ctx, d.Name); err != nil {
			return nil, err
		}
	}
	active, err := hb.WaitSettled(ctx, 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%w%s", err, hb.Logs(3))
	}
	if err := hb.WaitServing(ctx, 20*time.Second); err != nil {
		return nil, err
	}
	settle := failoverSettle + 2*cfg.Interval
	l, err := startLoad(ctx, hb, cfg, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	defer l.stop()
	time.Sleep(3 * time.Second) // the baseline rate
	var rows []EventRow
	const sys = "corral"
	rows = append(rows, l.event(sys, "kill -9 of the active", active, 15*time.Second, settle, logf, func() (time.Time, error) {
		return hb.Kill(active)
	}))
	now, err := hb.WaitSettled(ctx, 30*time.Second)
	if err != nil {
		return rows, err
	}
	killed := active
	rows = append(rows, l.event(sys, "fail-back (restart)", now, 30*time.Second, settle, logf, func() (time.Time, error) {
		t := time.Now()
		return t, hb.StartDirector(ctx, killed)
	}))
	if active, err = hb.WaitSettled(ctx, 30*time.Second); err != nil {
		return rows, err
	}
	rows = append(rows, l.event(sys, "handover (ctl handover)", active, 15*time.Second, settle, logf, func() (time.Time, error) {
		t := time.Now()
		return t, hb.Handover(ctx, active, "")
	}))
	if active, err = hb.WaitSettled(ctx, 30*time.Second); err != nil {
		return rows, err
	}
	rows = append(rows, l.event(sys, "link down (active)", active, 15*time.Second, settle, logf, func() (time.Time, error) {
		t := time.Now()
		return t, hb.Bed.LinkDown(active)
	}))
	if err := hb.Bed.LinkUp(active); err != nil {
		return rows, err
	}
	_, err = hb.WaitSettled(ctx, 30*time.Second)
	return rows, err
}

// keepalivedEvents: the same events on keepalived.
func keepalivedEvents(ctx context.Context, hb *HABed, cfg FailoverConfig, ver string, logf func(string, ...any)) ([]EventRow, error) {
	k := NewKeepalived(hb)
	defer k.Close()
	for _, d := range []string{"d1", "d2"} {
		if err := k.Start(ctx, d); err != nil {
			return nil, err
		}
	}
	if err := k.WaitMaster("d1", 15*time.Second); err != nil {
		return nil, err
	}
	if err := hb.WaitServing(ctx, 20*time.Second); err != nil {
		return nil, err
	}
	settle := failoverSettle + 2*cfg.Interval
	l, err := startLoad(ctx, hb, cfg, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	defer l.stop()
	time.Sleep(3 * time.Second)
	sys := "keepalived"
	if f := strings.Fields(ver); len(f) > 1 {
		sys += " " + strings.TrimPrefix(f[1], "v")
	}
	var rows []EventRow
	rows = append(rows, l.event(sys, "kill -9 of the active", "d1", 15*time.Second, settle, logf, func() (time.Time, error) {
		return k.Kill("d1")
	}))
	if err := k.WaitMaster("d2", 15*time.Second); err != nil {
		return rows, err
	}
	rows = append(rows, l.event(sys, "fail-back (restart)", "d2", 15*time.Second, settle, logf, func() (time.Time, error) {
		t := time.Now()
		return t, k.Start(ctx, "d1")
	}))
	if err := k.WaitMaster("d1", 15*time.Second); err != nil {
		return rows, err
	}
	rows = append(rows, l.event(sys, "handover (SIGTERM)", "d1", 15*time.Second, settle, logf, func() (time.Time, error) {
		return k.Stop("d1")
	}))
	if err := k.WaitMaster("d2", 15*time.Second); err != nil {
		return rows, err
	}
	// d1 back (it preempts), then its cable pulled.
	if err := k.Start(ctx, "d1"); err != nil {
		return rows, err
	}
	if err := k.WaitMaster("d1", 15*time.Second); err != nil {
		return rows, err
	}
	time.Sleep(2 * time.Second)
	rows = append(rows, l.event(sys, "link down (active)", "d1", 15*time.Second, settle, logf, func() (time.Time, error) {
		t := time.Now()
		return t, hb.Bed.LinkDown("d1")
	}))
	return rows, hb.Bed.LinkUp("d1")
}

// failoverAA measures requests/s through 1, 2 and 3 active-active
// directors whose links are shaped to 100 Mbit/s: each request carries an
// 8 KiB header, so that what the clients send through the directors (DR
// replies bypass them) bounds the rate.
func failoverAA(ctx context.Context, cfg FailoverConfig, logf func(string, ...any)) ([]AARow, error) {
	scratch, cleanup, err := scratchDir(cfg.Out, cfg.Dir, "failover-aa")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	hb, err := StartHABed(ctx, HABedConfig{Bin: cfg.Bin, Data: scratch, Name: "h4aa", Subnet: failoverSubnet, Directors: 3,
		Mode: ha.ActiveActive, DirectorRate: "100mbit", LeaseTTL: cfg.LeaseTTL, Log: logf})
	if err != nil {
		return nil, err
	}
	defer hb.Close()
	if _, err := hb.WaitSettled(ctx, 30*time.Second); err != nil {
		return nil, fmt.Errorf("%w%s", err, hb.Logs(3))
	}
	if err := hb.WaitServing(ctx, 20*time.Second); err != nil {
		return nil, err
	}
	var rows []AARow
	for n := 1; n <= 3; n++ {
		names := hb.Names()[:n]
		if err := hb.Bed.SetECMP("router", hb.VIP.Addr(), names...); err != nil {
			return rows, err
		}
		capt, err := StartCapture(hb.Bed, hb.VIP.Addr(), hb.Names()...)
		if err != nil {
			return rows, err
		}
		fleet, err := StartFleet(ctx, FleetConfig{Dial: hb.Bed.DialContext("client"), Target: hb.VIP.String(), Path: "/", Host: launch.SampleDomain,
			Conns: cfg.AAConns, Chunk: 1024, Interval: time.Microsecond, Timeout: 10 * time.Second, Span: cfg.AADuration + 30*time.Second, Pad: 8 << 10})
		if err != nil {
			capt.Close()
			rows = append(rows, AARow{Directors: n, Error: err.Error()})
			continue
		}
		time.Sleep(time.Second)
		r0, t0 := fleet.Requests(), time.Now()
		time.Sleep(cfg.AADuration)
		r1, t1 := fleet.Requests(), time.Now()
		fleet.Stop()
		capt.Close()
		row := AARow{Directors: n, ReqPerS: float64(r1-r0) / t1.Sub(t0).Seconds(), PerDirector: map[string]int{}}
		for _, d := range hb.Names() {
			row.PerDirector[d] = capt.Frames(d, t0, t1)
		}
		if n == 1 {
			row.Ratio = 1
		} else if rows[0].ReqPerS > 0 {
			row.Ratio = row.ReqPerS / (float64(n) * rows[0].ReqPerS)
		}
		logf("active-active %d director(s): %8.0f req/s  ratio to %d x one %.2f  frames %v\n", n, row.ReqPerS, n, row.Ratio, row.PerDirector)
		rows = append(rows, row)
	}
	return rows, nil
}

// failoverAAMoves measures which flows move when one of three directors
// leaves the router's route and joins it again, for the resilient nexthop
// group and for the plain multipath route: 600 flows from fixed source
// ports, each reaching a server on the director that answers its name
// (the routing decision alone is measured; no director binary runs).
func failoverAAMoves(ctx context.Context, logf func(string, ...any)) ([]testbed.ECMPMovement, error) {
	const name = "h4mv"
	spec := testbed.NewSpecOn(name, failoverSubnet, []string{"client", "router", "d1", "d2", "d3"}, "")
	testbed.Down(name)
	b, err := testbed.Up(spec)
	if err != nil {
		return nil, err
	}
	defer testbed.Down(name)
	vip := spec.Subnet.Masked().Addr()
	for range 100 { // an address inside the subnet past the hosts'
		vip = vip.Next()
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var out []testbed.ECMPMovement
	for _, resilient := range []bool{true, false} {
		m, err := b.MeasureECMPMovement(ctx, "router", "client", vip, []string{"d1", "d2", "d3"}, 600, resilient)
		if err != nil {
			return out, err
		}
		logf("active-active flow movement (resilient %v): leave moved %d of the others' %d; join moved %d of %d\n",
			resilient, m.OthersMoved, m.Others, m.JoinMoved, m.Flows)
		out = append(out, m)
	}
	return out, nil
}

// Markdown renders the result.
func (r *FailoverResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# failover, %s\n\n", r.When.Format(time.RFC3339))
	if len(r.Events) > 0 {
		fmt.Fprintf(&b, "## Events\n\n%d keep-alive connections downloading; %d new connections per second.\n\n", r.Conns, r.Rate)
		b.WriteString("| system | event | from → to | takeover ms | gap ms | established survived | new failed during / after (of) | stalled MB | no byte ms | split brain (near 10 ms) |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, e := range r.Events {
			if e.Error != "" {
				fmt.Fprintf(&b, "| %s | %s | %s → ? | error: %s | | | | | | |\n", e.System, e.Event, e.From, e.Error)
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s → %s | %.1f | %.1f | %d/%d (%.2f %%) | %d / %d (%d) | %.2f | %.0f | %d (%d) |\n",
				e.System, e.Event, e.From, e.To, e.TakeoverMs, e.GapMs, e.Survived, e.Established, e.SurvivedPct,
				e.NewFailedDuring, e.NewFailedAfter, e.NewAfter, e.StalledMB, e.NoByteMs, e.SplitBrain, e.Near)
		}
		b.WriteString("\n")
	}
	if len(r.AA) > 0 {
		b.WriteString("## Active-active (100 Mbit/s director links)\n\n| directors | req/s | ratio to N × one | frames per director |\n|---|---|---|---|\n")
		for _, a := range r.AA {
			if a.Error != "" {
				fmt.Fprintf(&b, "| %d | error: %s | | |\n", a.Directors, a.Error)
				continue
			}
			fmt.Fprintf(&b, "| %d | %.0f | %.2f | %v |\n", a.Directors, a.ReqPerS, a.Ratio, a.PerDirector)
		}
		b.WriteString("\n")
	}
	if len(r.AAMoves) > 0 {
		b.WriteString("## Active-active: flows moved when a director leaves and joins\n\n| router's route | N | flows | moved on leave (of the others' flows) | leaving director's flows went to | moved on join | 1/N |\n|---|---|---|---|---|---|---|\n")
		for _, m := range r.AAMoves {
			kind := "plain multipath (hash-threshold)"
			if m.Resilient {
				kind = fmt.Sprintf("resilient group, %d buckets", testbed.ECMPBuckets)
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %d of %d | %v | %d (%.1f %%) | %.1f %% |\n", kind, m.Directors, m.Flows,
				m.OthersMoved, m.Others, m.Spread, m.JoinMoved, 100*float64(m.JoinMoved)/float64(max(m.Flows, 1)), 100/float64(max(m.Directors, 1)))
		}
		b.WriteString("\n")
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(&b, "- not measured: %s\n", s)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "- PROBLEM: %s\n", p)
	}
	b.WriteString("\nNotes:\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

package mgmt

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/dataplane/xdp"
	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/ha"
	"github.com/corral-cluster/corral/internal/mgmt/agent"
	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// stationDP stands for a director's XDP program in TestHAThroughStation:
// the fence calls are taken, the table is a map. The program itself is
// tested in internal/dataplane/xdp and internal/director.
type stationDP struct {
	mu    sync.Mutex
	until time.Duration // the fence's deadline (MonoNow terms) last set
	table map[string]xdp.Conn
	ch    chan []xdp.ConnEvent
}

func newStationDP() *stationDP {
	return &stationDP{table: map[string]xdp.Conn{}, ch: make(chan []xdp.ConnEvent, 64)}
}

func stationConnKey(c xdp.Conn) string {
	return c.Proto + " " + c.Client.String() + " " + c.VIP.String()
}

func (f *stationDP) SetHA(_ xdp.HAMode, until time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.until = until
	return nil
}

// open: the program would forward now.
func (f *stationDP) open() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return xdp.MonoNow() < f.until
}

func (f *stationDP) ExportConns() ([]xdp.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var cs []xdp.Conn
	for _, c := range f.table {
		cs = append(cs, c)
	}
	return cs, nil
}

func (f *stationDP) ApplyConns(evs []xdp.ConnEvent) (int, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range evs {
		if ev.Op == xdp.OpDelete {
			delete(f.table, stationConnKey(ev.Conn))
		} else {
			f.table[stationConnKey(ev.Conn)] = ev.Conn
		}
	}
	return len(evs), 0, nil
}

func (f *stationDP) Changes() <-chan []xdp.ConnEvent { return f.ch }
func (f *stationDP) Lost() uint64                    { return 0 }

// haConfigFromState builds the ha.Config a joined director builds from its
// saved HA state (internal/director's haConfig does the same from the ha
// block DirectorViewHA makes of it): etcd URLs, client TLS from the saved
// CA, certificate and key, and the group key from the saved key file.
func haConfigFromState(t *testing.T, state, name string, prio int, sync string) ha.Config {
	t.Helper()
	st, err := agent.LoadHAState(state)
	if err != nil || st == nil {
		t.Fatalf("%s: LoadHAState: %+v %v", name, st, err)
	}
	key, err := director.ReadHAKey(st.KeyFile)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	caPEM, err := os.ReadFile(st.EtcdCA)
	if err != nil {
		t.Fatalf("%s: etcd CA: %v", name, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s: etcd CA %s: no PEM certificate", name, st.EtcdCA)
	}
	cert, err := tls.LoadX509KeyPair(st.EtcdCert, st.EtcdKey)
	if err != nil {
		t.Fatalf("%s: etcd client certificate: %v", name, err)
	}
	return ha.Config{
		Name: name, Group: "web", Mode: ha.ActiveStandby, Priority: prio, Etcd: st.Etcd,
		EtcdTLS:  &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12},
		LeaseTTL: 2 * time.Second, SyncListen: sync, Key: key,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)).With("node", name),
	}
}

// tlsAccepted opens one TLS connection to the etcd client URL u with tc
// sends the HTTP/2 client preface and an empty SETTINGS frame, and reads
// the server's answer: nil if the server took the certificate, else the
// handshake's or the alert's error (TLS 1.3 reports a refused client
// certificate only on the first read).
func tlsAccepted(u string, tc *tls.Config) error {
	host := strings.TrimPrefix(u, "https://")
	tc = tc.Clone()
	tc.NextProtos = []string{"h2"}
	d := &net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.91.1")}}
	c, err := tls.DialWithDialer(d, "tcp", host, tc)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")); err != nil {
		return err
	}
	_, err = c.Read(make([]byte, 1))
	return err
}

// waitCond polls cond every 10 ms for at most within.
func waitCond(within time.Duration, cond func() bool) bool {
	end := time.Now().Add(within)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}

// TestHAThroughStation: two directors join a station whose etcd takes
// TLS with client certificates and etcd auth, through the agent as the
// director role does; each builds its ha.Config from what the agent saved
// and starts internal/ha on it. Exactly one becomes active, the other an
// in-sync standby; closing the active hands over within 2 s; revoking
// d2's credential through the station's API takes its etcd access away.
func TestHAThroughStation(t *testing.T) {
	opt := stationOpts("127.0.91.1", t.TempDir())
	ts := startStation(t, opt)
	haGroups(t, ts, map[string]string{"d1": "web", "d2": "web"})

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	creds, states := map[string]string{}, map[string]string{}
	nodes := map[string]*ha.Node{}
	dps := map[string]*stationDP{}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
	for i, name := range []string{"d1", "d2"} {
		tok := mkToken(t, ts, api.TokenRequest{Role: api.RoleDirector, TTL: time.Hour})
		state := t.TempDir()
		_, jr, err := agent.Join(ctx, agent.Options{Stations: []string{ts.url}, Token: tok.Secret, State: state, Role: api.RoleDirector, Name: name})
		if err != nil {
			t.Fatalf("%s: join: %v", name, err)
		}
		creds[name], states[name] = jr.Credential, state
		cfg := haConfigFromState(t, state, name, 200-100*i, "127.0.91.1:"+[]string{"7710", "7711"}[i])
		if len(cfg.Etcd) != 1 || !strings.HasPrefix(cfg.Etcd[0], "https://127.0.91.1:") {
			t.Fatalf("%s: etcd URLs %v: want the station's TLS listener", name, cfg.Etcd)
		}
		dps[name] = newStationDP()
		n, err := ha.Start(ctx, cfg, dps[name])
		if err != nil {
			t.Fatalf("%s: ha.Start through the station's etcd: %v", name, err)
		}
		nodes[name] = n
	}

	// Exactly one active; the other a standby that has the active's table
	// (its stream in sync), seen from both sides.
	var active, standby string
	ok := waitCond(10*time.Second, func() bool {
		active, standby = "", ""
		for name, n := range nodes {
			switch n.Status().State {
			case ha.StateActive:
				if active != "" {
					t.Fatalf("two actives: %s and %s", active, name)
				}
				active = name
			case ha.StateStandby:
				standby = name
			}
		}
		if active == "" || standby == "" {
			return false
		}
		var seenByActive, seenByStandby bool
		for _, p := range nodes[active].Status().Peers {
			seenByActive = seenByActive || (p.Name == standby && p.State == ha.StateStandby && p.OutConnected)
		}
		st := nodes[standby].Status()
		for _, p := range st.Peers {
			seenByStandby = seenByStandby || (p.Name == active && p.InConnected && p.InSynced)
		}
		return seenByActive && seenByStandby && st.Active == active && dps[active].open() && !dps[standby].open()
	})
	if !ok {
		for name, n := range nodes {
			t.Logf("%s: %+v", name, n.Status())
		}
		t.Fatalf("no single active with an in-sync standby in 10 s (active %q, standby %q)", active, standby)
	}
	t.Logf("active %s, in-sync standby %s", active, standby)

	// The active leaves (Close: a clean handover): the standby is active
	// within 2 s.
	start := time.Now()
	if err := nodes[active].Close(); err != nil {
		t.Fatalf("%s: Close: %v", active, err)
	}
	delete(nodes, active)
	if !waitCond(2*time.Second-time.Since(start), func() bool {
		return nodes[standby].Status().State == ha.StateActive && dps[standby].open()
	}) {
		t.Fatalf("%s not active within 2 s of %s's Close: %+v", standby, active, nodes[standby].Status())
	}
	t.Logf("%s active %v after %s's Close", standby, time.Since(start).Round(time.Millisecond), active)

	// Revoking d2's credential through the station's API deletes its etcd
	// user (live connections too) and lists its certificate in the CRL
	// (new connections). d2's own keep-alives are then refused, so its
	// fence closes within the lease's TTL and it does not forward again;
	// a client with d2's certificate is refused under /corral/ha/.
	d2cfg := haConfigFromState(t, states["d2"], "d2", 100, "")
	probe := "/corral/ha/web/probe"
	if err := etcdTry(d2cfg.Etcd, d2cfg.EtcdTLS, probe); err != nil {
		t.Fatalf("d2's certificate refused before the revocation: %v", err)
	}
	if err := tlsAccepted(d2cfg.Etcd[0], d2cfg.EtcdTLS); err != nil {
		t.Fatalf("a TLS connection with d2's certificate before the revocation: %v", err)
	}
	id, _, _ := strings.Cut(creds["d2"], ".")
	if err := ts.client(t, ts.admin).Do(ctxT(t), "DELETE", api.RouteToken+id, nil, nil); err != nil {
		t.Fatalf("revoking d2's credential: %v", err)
	}
	revoked := time.Now()
	if !waitCond(3*time.Second, func() bool { return !dps["d2"].open() && nodes["d2"].Status().State != ha.StateActive }) {
		t.Fatalf("d2 still forwards 3 s after its credential was revoked: %+v", nodes["d2"].Status())
	}
	fenced := time.Since(revoked)
	if waitCond(time.Second, func() bool { return dps["d2"].open() || nodes["d2"].Status().State == ha.StateActive }) {
		t.Fatalf("d2 forwards again without etcd access: %+v", nodes["d2"].Status())
	}
	// A new connection: refused in the TLS handshake once the CRL is
	// rewritten (at once, by crlLoop); etcd's answer to a request is then
	// a retry until the deadline, or "permission denied" if the request
	// made it in before the CRL.
	var tlsErr error
	if !waitCond(5*time.Second, func() bool { tlsErr = tlsAccepted(d2cfg.Etcd[0], d2cfg.EtcdTLS); return tlsErr != nil }) {
		t.Fatal("the station's etcd still takes TLS connections with d2's revoked certificate after 5 s")
	}
	err := etcdTry(d2cfg.Etcd, d2cfg.EtcdTLS, probe)
	if err == nil {
		t.Fatal("d2's certificate still writes under /corral/ha/ after its credential was revoked")
	}
	st := nodes["d2"].Status()
	t.Logf("revoked d2: its fence closed %v later; it is now %s (%s); a new TLS connection: %v; a put: %v",
		fenced.Round(time.Millisecond), st.State, st.LastReason, tlsErr, err)
}

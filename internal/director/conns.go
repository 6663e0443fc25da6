package director

import (
	"container/list"
	"net/netip"
	"sort"
	"sync"
	"time"
)

// ConnInfo is one entry of a service's connection table, as ipvsadm -Lnc
// shows it. State is ESTABLISHED, FIN_WAIT (one side has ended) or
// TIME_WAIT for l4 TCP connections; ESTABLISHED or CLOSED for l7 requests;
// UDP for l4 UDP flows. Expires is the time left before a closed entry
// (or an idle UDP flow) is forgotten; 0 for live TCP connections, which
// end when their peers end them.
type ConnInfo struct {
	Service, Proto, Client, VIP, Real, State string
	Expires                                  time.Duration
}

// Conns is the connection table of every user-space service (l4, l7).
// XDP services' flows live in the kernel's table and are not listed.
func (d *Director) Conns() []ConnInfo {
	now := d.now()
	var out []ConnInfo
	for _, s := range *d.services.Load() {
		cfg := s.cfg.Load()
		if cfg.Dataplane == "xdp" {
			continue
		}
		s.expireConns(now)
		t := &s.table
		t.mu.Lock()
		add := func(c *conn) {
			ci := ConnInfo{Service: cfg.Name, Proto: c.proto, Client: c.client.String(), VIP: cfg.VIP.String(), Real: c.r.addr, State: c.state}
			if !c.expires.IsZero() {
				ci.Expires = max(c.expires.Sub(now), 0)
			}
			out = append(out, ci)
		}
		for c := range t.live {
			add(c)
		}
		for e := t.closed.Front(); e != nil; e = e.Next() {
			add(e.Value.(*conn))
		}
		t.mu.Unlock()
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Service != out[j].Service {
			return out[i].Service < out[j].Service
		}
		return out[i].Client < out[j].Client
	})
	return out
}

// connTable is a service's live connections and those recently closed.
// A closed connection counts as inactive on its real server for the
// service's inactive-timeout, as IPVS keeps a TIME_WAIT entry: lc and wlc
// (overhead = active*256 + inactive) then see the short connections a
// server has just served, and a run of sequential connections spreads
// instead of all going to the first server.
type connTable struct {
	mu     sync.Mutex
	live   map[*conn]struct{}
	closed list.List // of *conn, oldest first
}

// maxClosed bounds a service's remembered closed connections; the oldest
// go first.
const maxClosed = 65536

type conn struct {
	client  netip.AddrPort
	proto   string
	r       *real
	state   string
	expires time.Time
}

// track enters a new connection (or l7 request, or UDP flow) to r.
func (s *service) track(client netip.AddrPort, r *real, proto, state string) *conn {
	c := &conn{client: client, proto: proto, r: r, state: state}
	t := &s.table
	t.mu.Lock()
	if t.live == nil {
		t.live = map[*conn]struct{}{}
	}
	t.live[c] = struct{}{}
	t.mu.Unlock()
	return c
}

// setState changes a live entry's state; with a non-zero expires, the time
// it ends (UDP flows).
func (s *service) setState(c *conn, state string, expires time.Time) {
	s.table.mu.Lock()
	c.state, c.expires = state, expires
	s.table.mu.Unlock()
}

// moveConn moves a live entry to another real server (l7 resumes a
// response from another node).
func (s *service) moveConn(c *conn, r *real) {
	s.table.mu.Lock()
	c.r = r
	s.table.mu.Unlock()
}

// untrack ends a connection. With a state (TIME_WAIT, CLOSED) it is kept
// as inactive on its server for the service's inactive-timeout; with ""
// it is forgotten now.
func (s *service) untrack(c *conn, state string) {
	timeout := s.cfg.Load().InactiveTimeout
	now := s.d.now()
	t := &s.table
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.live, c)
	if state == "" || timeout <= 0 {
		return
	}
	c.state, c.expires = state, now.Add(timeout)
	c.r.inactive.Add(1)
	t.closed.PushBack(c)
	for t.closed.Len() > maxClosed {
		t.closed.Remove(t.closed.Front()).(*conn).r.inactive.Add(-1)
	}
}

// expireConns forgets the closed connections whose time is up.
func (s *service) expireConns(now time.Time) {
	t := &s.table
	t.mu.Lock()
	defer t.mu.Unlock()
	for e := t.closed.Front(); e != nil; {
		c := e.Value.(*conn)
		if c.expires.After(now) {
			break // oldest first: the rest are later (a reload may shorten the timeout: they wait their turn)
		}
		next := e.Next()
		t.closed.Remove(e)
		c.r.inactive.Add(-1)
		e = next
	}
}

package director

import (
	"net/netip"
	"sync"
	"sync/atomic"
)

// flowLimits counts an l4 service's live flows (TCP connections, UDP
// flows), in all and per client address, so that a new one past
// max-conns or max-conns-per-source is refused before it costs a socket,
// a goroutine or a scheduler decision. Established flows are never cut
// by a cap, even one lowered by a reload.
type flowLimits struct {
	mu    sync.Mutex
	n     int
	bySrc map[netip.Addr]int

	refusedService, refusedSource atomic.Int64
	idleClosed                    atomic.Int64 // TCP connections ended by tcp-timeout or tcp-fin-timeout
}

// sourceKey is what max-conns-per-source counts by: the client's IPv4
// address, or its IPv6 /64 (one host, or one site, is given a whole /64:
// counted by address, it would have 2^64 sources).
func sourceKey(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// admit takes a slot for a new flow from src, or counts the refusal and
// says no.
func (l *flowLimits) admit(src netip.Addr, perService, perSource int) bool {
	src = sourceKey(src)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n >= perService {
		l.refusedService.Add(1)
		return false
	}
	if l.bySrc[src] >= perSource {
		l.refusedSource.Add(1)
		return false
	}
	if l.bySrc == nil {
		l.bySrc = map[netip.Addr]int{}
	}
	l.n++
	l.bySrc[src]++
	return true
}

// release gives back the slot of an admitted flow.
func (l *flowLimits) release(src netip.Addr) {
	src = sourceKey(src)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n--
	if c := l.bySrc[src] - 1; c > 0 {
		l.bySrc[src] = c
	} else {
		delete(l.bySrc, src)
	}
}

// L4Status is an l4 service's flows against its caps, and its timeouts, in
// the admin API.
type L4Status struct {
	Flows          int   `json:"flows"`                // live TCP connections or UDP flows
	MaxConns       int   `json:"max_conns"`            // the service's cap
	Sources        int   `json:"sources"`              // client addresses (IPv6: /64s) with a live flow
	Busiest        int   `json:"busiest_source_flows"` // the live flows of the busiest of them
	MaxPerSource   int   `json:"max_conns_per_source"` // the cap per client address
	RefusedService int64 `json:"refused_service_limit"`
	RefusedSource  int64 `json:"refused_source_limit"`
	IdleClosed     int64 `json:"idle_closed"` // TCP: connections ended idle
	// The idle timeouts in force: TCP established and after a half-close;
	// UDP.
	TCPTimeout    string `json:"tcp_timeout,omitempty"`
	TCPFinTimeout string `json:"tcp_fin_timeout,omitempty"`
	UDPTimeout    string `json:"udp_timeout,omitempty"`
}

// l4Status reads s's flow counts; nil unless it runs on the l4 dataplane.
func (s *service) l4Status() *L4Status {
	cfg := s.cfg.Load()
	if cfg.Dataplane != "l4" {
		return nil
	}
	st := &L4Status{RefusedService: s.lim.refusedService.Load(), RefusedSource: s.lim.refusedSource.Load(), IdleClosed: s.lim.idleClosed.Load()}
	st.MaxConns, st.MaxPerSource = cfg.ConnLimits()
	tcp, fin, udp := cfg.L4Timeouts()
	if cfg.Protocol == "udp" {
		st.UDPTimeout = udp.String()
	} else {
		st.TCPTimeout, st.TCPFinTimeout = tcp.String(), fin.String()
	}
	s.lim.mu.Lock()
	st.Flows, st.Sources = s.lim.n, len(s.lim.bySrc)
	for _, n := range s.lim.bySrc {
		st.Busiest = max(st.Busiest, n)
	}
	s.lim.mu.Unlock()
	return st
}

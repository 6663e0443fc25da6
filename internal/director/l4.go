package director

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

// tcpProxy is the l4 dataplane for TCP: a connection to the VIP is joined to
// one to the chosen real server; bytes move with splice(2) (io.Copy between
// TCP sockets), and each direction's end is passed on as a half-close.
type tcpProxy struct {
	s  *service
	ln net.Listener
	wg sync.WaitGroup
}

func startTCP(s *service) (dataplane, error) {
	ln, err := net.Listen("tcp", s.cfg.Load().VIP.String())
	if err != nil {
		return nil, err
	}
	p := &tcpProxy{s: s, ln: ln}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *tcpProxy) close() {
	p.ln.Close()
	p.wg.Wait()
}

func (p *tcpProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors
			continue
		}
		go p.handle(c.(*net.TCPConn))
	}
}

func srcAddr(a net.Addr) netip.AddrPort {
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap
	}
	return netip.AddrPort{}
}

// handle connects a client to a real server. A server that refuses the
// connection is skipped for this client (the health check will catch up).
func (p *tcpProxy) handle(c *net.TCPConn) {
	src := srcAddr(c.RemoteAddr()).Addr()
	tried := map[*real]bool{}
	for {
		r, err := p.s.pick(src, 0, tried)
		if err != nil {
			c.Close()
			return
		}
		up, err := net.DialTimeout("tcp", r.addr, 3*time.Second)
		if err != nil {
			r.active.Add(-1)
			r.failed.Add(1)
			p.s.done(src)
			tried[r] = true
			continue
		}
		r.conns.Add(1)
		cn := p.s.track(srcAddr(c.RemoteAddr()), r, "TCP", "ESTABLISHED")
		splice(c, up.(*net.TCPConn), r, func() { p.s.setState(cn, "FIN_WAIT", time.Time{}) })
		p.s.untrack(cn, "TIME_WAIT") // counts as inactive a while yet (lc, wlc)
		p.s.done(src)
		return
	}
}

// splice moves bytes both ways until both directions have ended. The
// connection counts as active until either side half-closes, then as
// inactive until both have (LVS's states, roughly); half is called then.
func splice(c, up *net.TCPConn, r *real, half func()) {
	var once sync.Once
	halfDone := func() {
		once.Do(func() {
			r.active.Add(-1)
			r.inactive.Add(1)
			half()
		})
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		n, _ := io.Copy(up, c)
		r.bytesIn.Add(n)
		up.CloseWrite()
		halfDone()
	}()
	n, _ := io.Copy(c, up)
	r.bytesOut.Add(n)
	c.CloseWrite()
	halfDone()
	wg.Wait()
	c.Close()
	up.Close()
	r.inactive.Add(-1)
}

// udpProxy is the l4 dataplane for UDP: each client address is a flow with
// its own socket to the chosen real server; replies go back from the VIP; a
// flow idle for the service's udp-timeout ends.
type udpProxy struct {
	s    *service
	pc   *net.UDPConn
	mu   sync.Mutex
	fl   map[netip.AddrPort]*udpFlow
	done chan struct{}
	wg   sync.WaitGroup
}

type udpFlow struct {
	up   *net.UDPConn
	r    *real
	c    *conn
	last time.Time
}

func startUDP(s *service) (dataplane, error) {
	pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(s.cfg.Load().VIP))
	if err != nil {
		return nil, err
	}
	p := &udpProxy{s: s, pc: pc, fl: map[netip.AddrPort]*udpFlow{}, done: make(chan struct{})}
	p.wg.Add(2)
	go p.serve()
	go p.expire()
	return p, nil
}

func (p *udpProxy) close() {
	close(p.done)
	p.pc.Close()
	p.wg.Wait()
	p.mu.Lock()
	for k, f := range p.fl {
		p.end(k, f)
	}
	p.mu.Unlock()
}

func (p *udpProxy) serve() {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, src, err := p.pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		f := p.fl[src]
		p.mu.Unlock()
		if f == nil {
			if f = p.open(src); f == nil {
				continue
			}
		}
		p.mu.Lock()
		f.last = time.Now()
		p.mu.Unlock()
		f.r.bytesIn.Add(int64(n))
		f.up.Write(buf[:n])
	}
}

func (p *udpProxy) open(src netip.AddrPort) *udpFlow {
	r, err := p.s.pick(src.Addr(), 0, nil)
	if err != nil {
		return nil
	}
	up, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(r.addr)))
	if err != nil {
		r.active.Add(-1)
		r.failed.Add(1)
		p.s.done(src.Addr())
		return nil
	}
	f := &udpFlow{up: up, r: r, last: time.Now()}
	f.c = p.s.track(src, r, "UDP", "UDP")
	p.s.setState(f.c, "UDP", f.last.Add(p.s.cfg.Load().UDPTimeout))
	r.conns.Add(1)
	p.mu.Lock()
	p.fl[src] = f
	p.mu.Unlock()
	go func() {
		b := make([]byte, 64<<10)
		for {
			n, err := up.Read(b)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue // e.g. ICMP port unreachable: keep the flow until it times out
			}
			r.bytesOut.Add(int64(n))
			p.pc.WriteToUDPAddrPort(b[:n], src)
			p.mu.Lock()
			f.last = time.Now()
			p.mu.Unlock()
		}
	}()
	return f
}

// end closes a flow; called with p.mu held.
func (p *udpProxy) end(k netip.AddrPort, f *udpFlow) {
	f.up.Close()
	f.r.active.Add(-1)
	p.s.untrack(f.c, "")
	delete(p.fl, k)
	p.s.done(k.Addr())
}

func (p *udpProxy) expire() {
	defer p.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
		}
		timeout := p.s.cfg.Load().UDPTimeout
		p.mu.Lock()
		for k, f := range p.fl {
			if time.Since(f.last) > timeout {
				p.end(k, f)
			} else {
				p.s.setState(f.c, "UDP", f.last.Add(timeout))
			}
		}
		p.mu.Unlock()
	}
}

package director

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// tcpProxy is the l4 dataplane for TCP: a connection to the VIP is joined to
// one to the chosen real server; bytes move with splice(2) (io.Copy between
// TCP sockets), and each direction's end is passed on as a half-close. A
// connection past the service's caps is reset at once; one that moves no
// byte for tcp-timeout (tcp-fin-timeout once half-closed) is ended.
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
		tc := c.(*net.TCPConn)
		src := srcAddr(c.RemoteAddr()).Addr()
		perService, perSource := p.s.cfg.Load().ConnLimits()
		if !p.s.lim.admit(src, perService, perSource) {
			// Accepted and reset rather than left in the backlog, where
			// it would hold up the clients behind it; a reset leaves no
			// TIME_WAIT here and tells the client at once.
			tc.SetLinger(0)
			tc.Close()
			continue
		}
		go func() {
			defer p.s.lim.release(src)
			p.handle(tc)
		}()
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
		w := newIdleWatch(p.s, c, up.(*net.TCPConn))
		splice(w, r, func() {
			w.halfClosed()
			p.s.setState(cn, "FIN_WAIT", time.Time{})
		})
		if w.expired.Load() {
			p.s.lim.idleClosed.Add(1)
		}
		p.s.untrack(cn, "TIME_WAIT") // counts as inactive a while yet (lc, wlc)
		p.s.done(src)
		return
	}
}

// idleWatch ends a relayed connection that moves no byte either way for
// its limit: tcp-timeout while established, tcp-fin-timeout once one side
// has ended, as the XDP dataplane's connection table does (and, as there,
// the service's current values: a reload applies to established
// connections). Each direction looks at the clock every limit/8 (at most
// 15 s): the copy (splice(2)) stops at a read deadline and resumes where it
// stopped, so an idle connection ends between its limit and a period later.
type idleWatch struct {
	s       *service
	c, up   *net.TCPConn
	half    atomic.Bool  // one side has ended: tcp-fin-timeout
	last    atomic.Int64 // Unix nanoseconds: when a direction last saw bytes moved
	expired atomic.Bool
}

func newIdleWatch(s *service, c, up *net.TCPConn) *idleWatch {
	w := &idleWatch{s: s, c: c, up: up}
	w.last.Store(time.Now().UnixNano())
	return w
}

func (w *idleWatch) limit() time.Duration {
	tcp, fin, _ := w.s.cfg.Load().L4Timeouts()
	if w.half.Load() {
		return fin
	}
	return tcp
}

// halfClosed switches to tcp-fin-timeout; idleness counts from now.
func (w *idleWatch) halfClosed() {
	w.last.Store(time.Now().UnixNano())
	w.half.Store(true)
}

func checkPeriod(limit time.Duration) time.Duration {
	return min(max(limit/8, 10*time.Millisecond), 15*time.Second)
}

// pump copies src to dst until src ends, either fails or the connection
// is idle; it returns the bytes copied. A write that waits for the limit
// (the peer stopped reading) ends the connection too: splice(2) may then
// hold bytes it read and could not pass on, so the copy cannot resume.
func (w *idleWatch) pump(dst, src *net.TCPConn) int64 {
	var total int64
	for {
		start := time.Now()
		limit := w.limit()
		src.SetReadDeadline(start.Add(checkPeriod(limit)))
		dst.SetWriteDeadline(start.Add(limit))
		n, err := io.Copy(dst, src)
		total += n
		now := time.Now()
		if n > 0 {
			w.last.Store(now.UnixNano())
		}
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || w.expired.Load() {
			return total
		}
		stalled := now.Sub(start) >= limit
		if !stalled && now.Sub(time.Unix(0, w.last.Load())) < w.limit() {
			continue
		}
		if w.expired.CompareAndSwap(false, true) {
			// Closing both ends the other direction too, even one
			// stuck writing to a peer that stopped reading.
			w.c.Close()
			w.up.Close()
		}
		return total
	}
}

// splice moves bytes both ways until both directions have ended or the
// connection is idle. The connection counts as active until either side
// half-closes, then as inactive until both have (LVS's states, roughly);
// half is called then.
func splice(w *idleWatch, r *real, half func()) {
	c, up := w.c, w.up
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
		r.bytesIn.Add(w.pump(up, c))
		up.CloseWrite()
		halfDone()
	}()
	r.bytesOut.Add(w.pump(c, up))
	c.CloseWrite()
	halfDone()
	wg.Wait()
	c.Close()
	up.Close()
	r.inactive.Add(-1)
}

// udpProxy is the l4 dataplane for UDP: each client address is a flow with
// its own socket to the chosen real server; replies go back from the VIP; a
// flow idle for the service's udp-timeout ends. A datagram that would start
// a flow past max-conns or max-conns-per-source is dropped (and counted):
// a flood of spoofed sources fills the service's flows, not the
// director's descriptors and memory, and established flows go on.
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
			perService, perSource := p.s.cfg.Load().ConnLimits()
			if !p.s.lim.admit(src.Addr(), perService, perSource) {
				continue
			}
			if f = p.open(src); f == nil {
				p.s.lim.release(src.Addr())
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

// open starts a flow from src (admitted by the caller); nil if no server
// takes it.
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
	rc, err := up.SyscallConn()
	if err != nil {
		up.Close()
		r.active.Add(-1)
		r.failed.Add(1)
		p.s.done(src.Addr())
		return nil
	}
	f := &udpFlow{up: up, r: r, last: time.Now()}
	f.c = p.s.track(src, r, "UDP", "UDP")
	_, _, udpTimeout := p.s.cfg.Load().L4Timeouts()
	p.s.setState(f.c, "UDP", f.last.Add(udpTimeout))
	r.conns.Add(1)
	p.mu.Lock()
	p.fl[src] = f
	p.mu.Unlock()
	go func() {
		for {
			b, n, err := readPooled(rc)
			if err != nil {
				if errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EBADF) {
					return
				}
				continue // e.g. ICMP port unreachable: keep the flow until it times out
			}
			r.bytesOut.Add(int64(n))
			p.pc.WriteToUDPAddrPort((*b)[:n], src)
			udpBufs.Put(b)
			p.mu.Lock()
			f.last = time.Now()
			p.mu.Unlock()
		}
	}()
	return f
}

// udpBufs are the flows' reply buffers: 64 KiB, the largest datagram.
var udpBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// readPooled reads one datagram from a flow's socket into a buffer from
// udpBufs, taken only once a datagram is there: a waiting flow holds none
// (10,000 idle flows held 640 MiB when each had its own). The caller puts
// the buffer back.
func readPooled(rc syscall.RawConn) (*[]byte, int, error) {
	var (
		b    *[]byte
		n    int
		rerr error
	)
	err := rc.Read(func(fd uintptr) bool {
		b = udpBufs.Get().(*[]byte)
		for {
			n, rerr = syscall.Read(int(fd), *b)
			if rerr != syscall.EINTR {
				break
			}
		}
		if rerr == syscall.EAGAIN {
			udpBufs.Put(b)
			b = nil
			return false // wait until readable
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		if b != nil {
			udpBufs.Put(b)
		}
		return nil, 0, err
	}
	return b, n, nil
}

// end closes a flow; called with p.mu held.
func (p *udpProxy) end(k netip.AddrPort, f *udpFlow) {
	f.up.Close()
	f.r.active.Add(-1)
	p.s.untrack(f.c, "")
	delete(p.fl, k)
	p.s.done(k.Addr())
	p.s.lim.release(k.Addr())
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
		_, _, timeout := p.s.cfg.Load().L4Timeouts()
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

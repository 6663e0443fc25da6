package proto

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultTimeout bounds one call when the caller's context has no deadline.
const DefaultTimeout = 30 * time.Second

// ErrUnavailable wraps failures to reach a server (dial failed, connection
// lost, no answer in time). Callers may retry idempotent requests on it.
var ErrUnavailable = errors.New("server unavailable")

// Conn is a client connection carrying many concurrent calls.
type Conn struct {
	addr string
	nc   net.Conn

	wmu sync.Mutex
	bw  *bufio.Writer

	mu      sync.Mutex
	pending map[uint32]*call
	nextID  uint32
	err     error // set once the connection is dead
	dead    atomic.Bool
}

type reply struct {
	m   Msg
	err error
}

// call is a request waiting for its reply. into, if set, receives the data
// of a Data reply straight from the socket.
type call struct {
	ch   chan reply
	into []byte
}

// errNotSent marks calls failed by a server's goodbye on an idle
// connection: the server read none of them, so any may be resent.
var errNotSent = errors.New("connection closed by the server as idle before the request was read")

// Dial connects to a server and runs the handshake: sec.Cred is proved to
// the server and the server must prove it back. A failed handshake is an
// error wrapping ErrAuth that says who refused whom.
func Dial(ctx context.Context, addr string, sec Security) (*Conn, error) {
	return dial(ctx, addr, addr, sec)
}

// dial is Dial with who naming the server in handshake errors.
func dial(ctx context.Context, addr, who string, sec Security) (*Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, addr, err)
	}
	if tc, ok := raw.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	dl := time.Now().Add(DefaultHandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	raw.SetDeadline(dl)
	// A caller that gives up (a cancelled ctx, not only its deadline) ends
	// the handshake too: a stopped server accepts connections in the
	// kernel and then says nothing.
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Now()) })
	defer stop()
	nc := raw
	var bind []byte
	if !sec.Insecure || sec.TLSClient != nil {
		cfg := sec.TLSClient
		if cfg == nil {
			cfg = defaultClientTLS()
		} else if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		hc := &headConn{Conn: raw}
		tc := tls.Client(hc, cfg)
		err := tc.HandshakeContext(ctx)
		if err == nil {
			bind, err = binding(tc)
		}
		hc.done = true
		if err != nil {
			defer raw.Close()
			if rerr := plainRefusal(hc, who); rerr != nil {
				return nil, rerr
			}
			if isResetOrEOF(err) {
				return nil, fmt.Errorf("%w: TLS with %s: %v (a server of an older version, or one given --insecure?)", ErrUnavailable, addr, err)
			}
			return nil, fmt.Errorf("%w: TLS with %s: %v", ErrAuth, addr, err)
		}
		nc = tc
	}
	br := bufio.NewReaderSize(nc, 256<<10)
	bw := bufio.NewWriterSize(nc, 256<<10)
	if err := clientHandshake(br, bw, sec.Cred, who, bind); err != nil {
		raw.Close()
		return nil, err
	}
	if !stop() {
		raw.Close() // ctx ended just as the handshake did
		return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, addr, ctx.Err())
	}
	raw.SetDeadline(time.Time{})
	c := &Conn{addr: addr, nc: nc, bw: bw, pending: map[uint32]*call{}}
	go c.readLoop(br)
	return c, nil
}

// Addr is the server's address.
func (c *Conn) Addr() string { return c.addr }

// Dead reports whether the connection has failed.
func (c *Conn) Dead() bool { return c.dead.Load() }

func (c *Conn) readLoop(br *bufio.Reader) {
	for {
		op, id, n, err := readHeader(br)
		if err != nil {
			c.fail(fmt.Errorf("%w: connection to %s lost: %v", ErrUnavailable, c.addr, err))
			return
		}
		if op == OpGoAway && id == 0 && n == 0 {
			c.fail(fmt.Errorf("%w: %s: %w", ErrUnavailable, c.addr, errNotSent))
			return
		}
		c.mu.Lock()
		cl := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		m, err := c.readReply(br, op, n, cl)
		if err != nil {
			err = fmt.Errorf("%w: reply from %s: %v", ErrUnavailable, c.addr, err)
			if cl != nil {
				cl.ch <- reply{err: err}
			}
			c.fail(err)
			return
		}
		if cl != nil {
			cl.ch <- reply{m: m}
		}
	}
}

// readReply reads one reply's payload. Data for a call that brought its own
// buffer goes straight there: no allocation, no extra copy.
func (c *Conn) readReply(br *bufio.Reader, op Op, n uint32, cl *call) (Msg, error) {
	if op == OpData && cl != nil && cl.into != nil && n >= 4 {
		var lb [4]byte
		if err := readPayload(br, lb[:]); err != nil {
			return nil, err
		}
		if l := binary.LittleEndian.Uint32(lb[:]); l == n-4 && int(l) <= len(cl.into) {
			if err := readPayload(br, cl.into[:l]); err != nil {
				return nil, err
			}
			return &DataReply{Data: cl.into[:l]}, nil
		}
		rest, err := readPayloadN(br, n-4)
		if err != nil {
			return nil, err
		}
		return Decode(op, append(lb[:], rest...))
	}
	// A hostile or broken server's announced length is not allocated up
	// front either.
	payload, err := readPayloadN(br, n)
	if err != nil {
		return nil, err
	}
	return Decode(op, payload)
}

func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.dead.Store(true)
	p := c.pending
	c.pending = map[uint32]*call{}
	c.mu.Unlock()
	c.nc.Close()
	for _, cl := range p {
		cl.ch <- reply{err: err}
	}
}

// Close ends the connection; calls in flight fail.
func (c *Conn) Close() error {
	c.fail(fmt.Errorf("%w: connection to %s closed", ErrUnavailable, c.addr))
	return nil
}

// Call sends req and waits for its reply. A server-side failure comes back as
// a *RemoteError; a lost or silent server as an error wrapping
// ErrUnavailable that names the server.
func (c *Conn) Call(ctx context.Context, req Msg) (Msg, error) {
	return c.CallInto(ctx, req, nil)
}

// CallInto is Call for a request answered with data: the data lands in
// into when it fits (the reply's Data then aliases into), so a reader need
// not copy it again.
func (c *Conn) CallInto(ctx context.Context, req Msg, into []byte) (Msg, error) {
	cl := &call{ch: make(chan reply, 1), into: into}
	ch := cl.ch
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = cl
	c.mu.Unlock()

	c.wmu.Lock()
	err := WriteFrame(c.bw, id, req)
	if err == nil {
		err = c.bw.Flush()
	}
	c.wmu.Unlock()
	if err != nil {
		c.fail(fmt.Errorf("%w: send to %s: %v", ErrUnavailable, c.addr, err))
	}

	timeout := DefaultTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		if e, ok := r.m.(*Error); ok {
			return nil, e.Err()
		}
		return r.m, nil
	case <-ctx.Done():
		if !c.forget(id) {
			<-ch // the reply is being read into our buffer: let it finish
		}
		return nil, fmt.Errorf("%s to %s: %w", opName(req.Op()), c.addr, ctx.Err())
	case <-t.C:
		// A server that does not answer in time is treated as gone: the
		// connection is dropped so the next call dials afresh.
		err := fmt.Errorf("%w: %s did not answer %s within %v", ErrUnavailable, c.addr, opName(req.Op()), timeout.Round(time.Millisecond))
		c.fail(err)
		<-ch // fail answers every pending call; readLoop the one it holds
		return nil, err
	}
}

// forget drops a pending call; false if the reply is already being read.
func (c *Conn) forget(id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}

// Pool keeps a few connections per server and redials broken ones.
type Pool struct {
	// PerServer is the number of connections per server (default 2); more
	// than one keeps one large transfer from queueing small requests.
	PerServer int
	// Security is what every connection proves and how it is protected.
	Security Security
	// Name, if set, names a server in handshake errors ("meta at ADDR").
	Name func(addr string) string
	// Observe, if set, is told of every call: its operation, how long it
	// took (retry included) and its error (metrics). Set it while no call is
	// in progress.
	Observe func(op Op, d time.Duration, err error)

	mu    sync.Mutex
	conns map[string][]*Conn
	next  map[string]int
	dials map[slot]*dialing
}

func (p *Pool) get(ctx context.Context, addr string) (*Conn, error) {
	n := p.PerServer
	if n <= 0 {
		n = 2
	}
	p.mu.Lock()
	if p.conns == nil {
		p.conns = map[string][]*Conn{}
		p.next = map[string]int{}
	}
	cs := p.conns[addr]
	if len(cs) < n {
		cs = append(cs, make([]*Conn, n-len(cs))...)
		p.conns[addr] = cs
	}
	i := p.next[addr] % n
	p.next[addr] = i + 1
	c := cs[i]
	if c != nil && !c.Dead() {
		p.mu.Unlock()
		return c, nil
	}
	// One dial per slot at a time; the others wait for its result, so a
	// burst of calls does not open (and authenticate) a connection each.
	k := slot{addr, i}
	if d := p.dials[k]; d != nil {
		p.mu.Unlock()
		select {
		case <-d.done:
			return d.c, d.err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, addr, ctx.Err())
		}
	}
	if p.dials == nil {
		p.dials = map[slot]*dialing{}
	}
	d := &dialing{done: make(chan struct{})}
	p.dials[k] = d
	p.mu.Unlock()
	who := addr
	if p.Name != nil {
		who = p.Name(addr)
	}
	d.c, d.err = dial(ctx, addr, who, p.Security)
	p.mu.Lock()
	delete(p.dials, k)
	if d.err == nil {
		if cs := p.conns[addr]; len(cs) > i {
			cs[i] = d.c
		} else { // the pool was closed meanwhile
			d.c.Close()
		}
	}
	p.mu.Unlock()
	close(d.done)
	return d.c, d.err
}

type slot struct {
	addr string
	i    int
}

type dialing struct {
	done chan struct{}
	c    *Conn
	err  error
}

// Call sends req to the server at addr. Requests that are safe to repeat are
// tried once more on a fresh connection when the first attempt finds the
// server unreachable (it may just have restarted).
func (p *Pool) Call(ctx context.Context, addr string, req Msg) (Msg, error) {
	return p.CallInto(ctx, addr, req, nil)
}

// CallInto is Call with a buffer for the reply's data (see Conn.CallInto).
func (p *Pool) CallInto(ctx context.Context, addr string, req Msg, into []byte) (Msg, error) {
	if p.Observe == nil {
		return p.callInto(ctx, addr, req, into)
	}
	start := time.Now()
	m, err := p.callInto(ctx, addr, req, into)
	op := req.Op()
	if w, ok := req.(*Idem); ok && w.Req != nil {
		op = w.Req.Op() // metrics name the change, not its request-ID wrapper
	}
	p.Observe(op, time.Since(start), err)
	return m, err
}

func (p *Pool) callInto(ctx context.Context, addr string, req Msg, into []byte) (Msg, error) {
	c, err := p.get(ctx, addr)
	if err == nil {
		var m Msg
		m, err = c.CallInto(ctx, req, into)
		// A request the server never read (its idle goodbye crossed our
		// send) is safe to resend whatever it does.
		retry := Idempotent(req.Op()) || errors.Is(err, errNotSent)
		if err == nil || !errors.Is(err, ErrUnavailable) || !retry || ctx.Err() != nil {
			return m, err
		}
	}
	if c, err = p.get(ctx, addr); err != nil {
		return nil, notSentError{err} // no connection: the request never left
	}
	return c.CallInto(ctx, req, into)
}

// notSentError is a call that failed before its request was sent (no
// connection, a failed handshake): safe to send elsewhere, whatever it is.
type notSentError struct{ error }

func (e notSentError) Unwrap() []error { return []error{e.error, errNotSent} }

// NotSent reports whether err is a call whose request the server never
// read (no connection could be made, or the server's idle goodbye crossed
// it): another server may be asked without risk of a second effect.
func NotSent(err error) bool { return errors.Is(err, errNotSent) }

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cs := range p.conns {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	}
	p.conns = nil
}

// Idempotent reports whether a request may be sent twice with the same effect.
func Idempotent(op Op) bool {
	switch op {
	case OpLookup, OpWalk, OpWalkBeneath, OpGetAttr, OpSetAttr, OpReaddir, OpReadlink, OpStatfs,
		OpServers, OpRegister, OpSetLayout,
		OpRead, OpWrite, OpTruncate, OpSync, OpRemove, OpObjStat,
		OpGetXattr, OpListXattr, OpRenewOrphans, OpPunch, OpAlloc,
		OpIdem: // a retry is answered with the first reply (meta keeps it)
		return true
	}
	return false
}

var opNames = map[Op]string{
	OpLookup: "lookup", OpWalk: "walk", OpWalkBeneath: "walk beneath", OpGetAttr: "getattr", OpSetAttr: "setattr",
	OpCreate: "create", OpMkdir: "mkdir", OpSymlink: "symlink", OpLink: "link",
	OpUnlink: "unlink", OpRmdir: "rmdir", OpRename: "rename", OpReaddir: "readdir",
	OpReadlink: "readlink", OpSetLayout: "setlayout", OpStatfs: "statfs",
	OpRegister: "register", OpServers: "servers", OpRead: "read", OpWrite: "write",
	OpTruncate: "truncate", OpSync: "sync", OpRemove: "remove", OpObjStat: "objstat",
	OpMknod: "mknod", OpSetXattr: "setxattr", OpGetXattr: "getxattr", OpListXattr: "listxattr",
	OpRemoveXattr: "removexattr", OpUnlinkOpen: "unlink-open", OpReleaseOrphan: "release-orphan",
	OpRenewOrphans: "renew-orphans", OpPunch: "punch", OpAlloc: "alloc",
}

func opName(op Op) string {
	if n, ok := opNames[op]; ok {
		return n
	}
	return fmt.Sprintf("op %d", op)
}

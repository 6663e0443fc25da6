package proto

import (
	"bufio"
	"context"
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
	pending map[uint32]chan reply
	nextID  uint32
	err     error // set once the connection is dead
	dead    atomic.Bool
}

type reply struct {
	m   Msg
	err error
}

// Dial connects to a server.
func Dial(ctx context.Context, addr string) (*Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c := &Conn{addr: addr, nc: nc, bw: bufio.NewWriterSize(nc, 256<<10), pending: map[uint32]chan reply{}}
	go c.readLoop()
	return c, nil
}

// Addr is the server's address.
func (c *Conn) Addr() string { return c.addr }

// Dead reports whether the connection has failed.
func (c *Conn) Dead() bool { return c.dead.Load() }

func (c *Conn) readLoop() {
	br := bufio.NewReaderSize(c.nc, 256<<10)
	for {
		op, id, payload, err := ReadFrame(br)
		if err != nil {
			c.fail(fmt.Errorf("%w: connection to %s lost: %v", ErrUnavailable, c.addr, err))
			return
		}
		m, err := Decode(op, payload)
		if err != nil {
			c.fail(fmt.Errorf("bad reply from %s: %v", c.addr, err))
			return
		}
		c.mu.Lock()
		ch := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if ch != nil {
			ch <- reply{m: m}
		}
	}
}

func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.dead.Store(true)
	p := c.pending
	c.pending = map[uint32]chan reply{}
	c.mu.Unlock()
	c.nc.Close()
	for _, ch := range p {
		ch <- reply{err: err}
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
	ch := make(chan reply, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = ch
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
		c.forget(id)
		return nil, fmt.Errorf("%s to %s: %w", opName(req.Op()), c.addr, ctx.Err())
	case <-t.C:
		// A server that does not answer in time is treated as gone: the
		// connection is dropped so the next call dials afresh.
		err := fmt.Errorf("%w: %s did not answer %s within %v", ErrUnavailable, c.addr, opName(req.Op()), timeout.Round(time.Millisecond))
		c.fail(err)
		return nil, err
	}
}

func (c *Conn) forget(id uint32) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// Pool keeps a few connections per server and redials broken ones.
type Pool struct {
	// PerServer is the number of connections per server (default 2); more
	// than one keeps one large transfer from queueing small requests.
	PerServer int

	mu    sync.Mutex
	conns map[string][]*Conn
	next  map[string]int
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
	p.mu.Unlock()
	if c != nil && !c.Dead() {
		return c, nil
	}
	nc, err := Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if cur := p.conns[addr][i]; cur != nil && cur != c && !cur.Dead() {
		// someone else redialled meanwhile
		p.mu.Unlock()
		nc.Close()
		return cur, nil
	}
	p.conns[addr][i] = nc
	p.mu.Unlock()
	return nc, nil
}

// Call sends req to the server at addr. Requests that are safe to repeat are
// tried once more on a fresh connection when the first attempt finds the
// server unreachable (it may just have restarted).
func (p *Pool) Call(ctx context.Context, addr string, req Msg) (Msg, error) {
	c, err := p.get(ctx, addr)
	if err == nil {
		var m Msg
		m, err = c.Call(ctx, req)
		if err == nil || !errors.Is(err, ErrUnavailable) || !Idempotent(req.Op()) || ctx.Err() != nil {
			return m, err
		}
	}
	if c, err = p.get(ctx, addr); err != nil {
		return nil, err
	}
	return c.Call(ctx, req)
}

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
	case OpLookup, OpWalk, OpGetAttr, OpSetAttr, OpReaddir, OpReadlink, OpStatfs,
		OpServers, OpRegister, OpSetLayout,
		OpRead, OpWrite, OpTruncate, OpSync, OpRemove, OpObjStat:
		return true
	}
	return false
}

var opNames = map[Op]string{
	OpLookup: "lookup", OpWalk: "walk", OpGetAttr: "getattr", OpSetAttr: "setattr",
	OpCreate: "create", OpMkdir: "mkdir", OpSymlink: "symlink", OpLink: "link",
	OpUnlink: "unlink", OpRmdir: "rmdir", OpRename: "rename", OpReaddir: "readdir",
	OpReadlink: "readlink", OpSetLayout: "setlayout", OpStatfs: "statfs",
	OpRegister: "register", OpServers: "servers", OpRead: "read", OpWrite: "write",
	OpTruncate: "truncate", OpSync: "sync", OpRemove: "remove", OpObjStat: "objstat",
}

func opName(op Op) string {
	if n, ok := opNames[op]; ok {
		return n
	}
	return fmt.Sprintf("op %d", op)
}

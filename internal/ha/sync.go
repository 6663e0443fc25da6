package ha

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corral-cluster/corral/internal/dataplane/xdp"
)

// Sync streams: every director dials every other member's sync address.
// A stream carries the dialer's own table (snapshot, then batches of
// changes) while the dialer is active (or in active-active mode), else
// only Hello and heartbeats. The receiver applies and acknowledges.

const (
	heartbeat  = 200 * time.Millisecond
	silence    = time.Second // a stream silent this long is dead
	maxQueue   = 64 << 10    // events queued per peer before a resync
	redial     = 100 * time.Millisecond
	ioDeadline = time.Second
	// probeTimeout bounds the liveness probe after a stream ended
	// without Bye (the kill -9 path waits for its answer).
	probeTimeout = 100 * time.Millisecond
	// probeWindow bounds the retries of a probe that timed out (well
	// under a lease TTL: past it the lease is as quick).
	probeWindow = 600 * time.Millisecond
)

var (
	errRole  = errors.New("ha: stream role changed")
	errProbe = errors.New("ha: liveness probe")
)

// outStream is this director's stream to one peer. Fields other than
// name, addr, ctx, cancel, notify and wmu are guarded by Node.mu.
type outStream struct {
	name, addr string
	ctx        context.Context
	cancel     context.CancelFunc
	notify     chan struct{}
	wmu        sync.Mutex // one writer at a time on conn

	conn     net.Conn // nil while not connected (and authenticated)
	source   bool     // this connection carries our table
	queueing bool
	pending  []xdp.ConnEvent
	overflow bool
	// extra raises the queue's bound by the snapshot's size while it is
	// sent: changes made meanwhile wait, and a big table under churn
	// would otherwise overflow on every attempt.
	extra       int
	seq, acked  uint64
	snapSent    bool
	snapEnd     uint64
	snapAcked   bool
	syncedSince time.Time
	unacked     []sentBatch
	sentEvents  uint64
	ackedEvents uint64
}

type sentBatch struct {
	seq uint64
	at  time.Time
	n   int
}

// caughtUpLocked: the peer acknowledged our snapshot and every change.
func (o *outStream) caughtUpLocked() bool {
	return o.conn != nil && o.source && o.snapAcked && len(o.pending) == 0 && o.acked == o.seq
}

// syncedLocked: the peer holds our snapshot; changes may be in flight.
func (o *outStream) syncedLocked() bool {
	return o.conn != nil && o.source && o.snapAcked
}

func (o *outStream) lagLocked(now time.Time) time.Duration {
	if len(o.unacked) == 0 {
		return 0
	}
	return now.Sub(o.unacked[0].at)
}

func (o *outStream) stopLocked() {
	o.cancel()
	if o.conn != nil {
		o.conn.Close()
	}
}

func (o *outStream) byeLocked(reason string) {
	if o.conn != nil {
		o.wmu.Lock()
		writeConn(o.conn, byeFrame(reason))
		o.wmu.Unlock()
	}
}

// inStream is a peer's stream to this director.
type inStream struct {
	name     string
	conn     net.Conn
	wmu      sync.Mutex
	synced   bool
	applied  uint64
	skipped  uint64
	replaced bool
}

func (i *inStream) byeLocked(reason string) {
	i.wmu.Lock()
	writeConn(i.conn, byeFrame(reason))
	i.wmu.Unlock()
}

func writeConn(c net.Conn, b []byte) error {
	c.SetWriteDeadline(time.Now().Add(ioDeadline))
	_, err := c.Write(b)
	return err
}

func (n *Node) isSourceLocked() bool { return n.state == StateActive && !n.crashed && !n.closed }

// manageStreamsLocked keeps one outgoing stream per member.
func (n *Node) manageStreamsLocked() {
	for name, m := range n.members {
		if name == n.cfg.Name || m.Sync == "" {
			continue
		}
		if o := n.out[name]; o != nil && o.addr == m.Sync {
			continue
		} else if o != nil {
			o.stopLocked()
		}
		o := &outStream{name: name, addr: m.Sync, notify: make(chan struct{}, 1)}
		o.ctx, o.cancel = context.WithCancel(n.ctx)
		n.out[name] = o
		n.wg.Add(1)
		go n.runOut(o)
	}
	for name, o := range n.out {
		if _, ok := n.members[name]; !ok {
			o.stopLocked()
			delete(n.out, name)
		}
	}
}

func (n *Node) runOut(o *outStream) {
	defer n.wg.Done()
	for o.ctx.Err() == nil {
		err := n.outSession(o)
		n.mu.Lock()
		o.conn, o.source, o.queueing, o.pending, o.overflow, o.extra = nil, false, false, nil, false, 0
		o.snapSent, o.snapAcked, o.syncedSince, o.unacked = false, false, time.Time{}, nil
		n.mu.Unlock()
		if errors.Is(err, errRole) {
			continue
		}
		if err != nil && o.ctx.Err() == nil {
			n.log.Debug("ha: sync stream ended", "peer", o.name, "err", err)
		}
		sleepCtx(o.ctx, redial)
	}
}

// outSession is one connection of an outgoing stream.
func (n *Node) outSession(o *outStream) error {
	d := net.Dialer{Timeout: ioDeadline}
	raw, err := d.DialContext(o.ctx, "tcp", o.addr)
	if err != nil {
		return err
	}
	defer raw.Close()
	conn, bind, err := n.secureDial(raw)
	if err != nil {
		n.countSyncError()
		return err
	}
	defer conn.Close()
	if _, err := n.handshake(conn, true, o.name, bind, false); err != nil {
		n.countSyncError()
		return err
	}
	n.mu.Lock()
	if o.ctx.Err() != nil {
		n.mu.Unlock()
		return o.ctx.Err()
	}
	source := n.isSourceLocked()
	o.conn, o.source, o.seq, o.acked = conn, source, 0, 0
	if source {
		// Queue from now: changes racing the export below come twice,
		// which applying tolerates; none is missed.
		o.queueing, o.pending, o.overflow = true, nil, false
	}
	n.mu.Unlock()

	readDone := make(chan error, 1)
	go func() { readDone <- n.readAcks(o, conn) }()
	send := func(b []byte) error {
		o.wmu.Lock()
		defer o.wmu.Unlock()
		return writeConn(conn, b)
	}
	byeSent := false
	bye := func(reason string) {
		byeSent = true
		send(byeFrame(reason))
	}
	defer func() {
		// A stream that ends without Bye tells the peer this process is
		// gone: say it whenever the process is not (best effort: a full
		// socket buffer may swallow it; the peer then probes).
		n.mu.Lock()
		crashed := n.crashed
		n.mu.Unlock()
		if !byeSent && !crashed {
			bye("stream closed")
		}
		conn.Close()
		<-readDone
	}()

	sendEvents := func(evs []xdp.ConnEvent) error {
		for len(evs) > 0 {
			k := min(len(evs), maxBatch)
			n.mu.Lock()
			o.seq++
			seq := o.seq
			o.unacked = append(o.unacked, sentBatch{seq, time.Now(), k})
			o.sentEvents += uint64(k)
			n.mu.Unlock()
			if err := send(batchFrame(seq, evs[:k])); err != nil {
				return err
			}
			evs = evs[k:]
		}
		return nil
	}
	if source {
		conns, err := n.dp.ExportConns()
		if err != nil {
			return fmt.Errorf("ha: exporting the table for %s: %w", o.name, err)
		}
		n.mu.Lock()
		o.extra = len(conns)
		n.mu.Unlock()
		evs := make([]xdp.ConnEvent, len(conns))
		for i, c := range conns {
			evs[i] = xdp.ConnEvent{Op: xdp.OpNew, Conn: c}
		}
		if err := send(appendFrame(nil, frameSnapshotBegin, nil)); err != nil {
			return err
		}
		if err := sendEvents(evs); err != nil {
			return err
		}
		n.mu.Lock()
		end := o.seq
		o.snapEnd, o.snapSent, o.extra = end, true, 0
		n.mu.Unlock()
		if err := send(seqFrame(frameSnapshotEnd, end)); err != nil {
			return err
		}
	}
	t := time.NewTicker(heartbeat)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-o.ctx.Done():
			return o.ctx.Err()
		case err := <-readDone:
			readDone <- err
			return err
		case <-o.notify:
		case <-t.C:
		}
		n.waitThawed()
		n.mu.Lock()
		if n.isSourceLocked() != source {
			n.mu.Unlock()
			bye("role change")
			return errRole
		}
		if o.overflow {
			n.resyncs++
			n.mu.Unlock()
			bye("resync")
			n.log.Info("ha: resync", "peer", o.name, "reason", "queue overflow or lost changes")
			return errRole
		}
		evs := o.pending
		o.pending = nil
		n.mu.Unlock()
		if len(evs) > 0 {
			if err := sendEvents(evs); err != nil {
				return err
			}
			last = time.Now()
		} else if time.Since(last) >= heartbeat {
			if err := send(appendFrame(nil, frameHeartbeat, nil)); err != nil {
				return err
			}
			last = time.Now()
		}
	}
}

// readAcks reads the receiver's acks and heartbeats.
func (n *Node) readAcks(o *outStream, conn net.Conn) error {
	buf := make([]byte, 64)
	for {
		conn.SetReadDeadline(time.Now().Add(silence))
		typ, p, err := readFrame(conn, buf)
		if err != nil {
			return err
		}
		f, err := decodeFrame(typ, p)
		if err != nil {
			n.countSyncError()
			return fmt.Errorf("ha: from %s: %w", o.name, err)
		}
		switch f.typ {
		case frameAck:
			n.mu.Lock()
			if f.seq > o.seq {
				n.mu.Unlock()
				n.countSyncError()
				return fmt.Errorf("ha: %s acknowledged batch %d of %d sent", o.name, f.seq, o.seq)
			}
			o.acked = f.seq
			for len(o.unacked) > 0 && o.unacked[0].seq <= f.seq {
				o.ackedEvents += uint64(o.unacked[0].n)
				o.unacked = o.unacked[1:]
			}
			if o.snapSent && !o.snapAcked && f.seq >= o.snapEnd {
				o.snapAcked, o.syncedSince = true, time.Now()
			}
			n.mu.Unlock()
		case frameHeartbeat:
		case frameBye:
			return fmt.Errorf("ha: %s said bye: %s", o.name, f.reason)
		default:
			n.countSyncError()
			return fmt.Errorf("ha: %s sent frame type %d on a return path", o.name, f.typ)
		}
	}
}

func (n *Node) countSyncError() {
	n.mu.Lock()
	n.syncErrors++
	n.mu.Unlock()
}

// handshake: Hello both ways, then Auth both ways (HMAC over both names,
// both nonces, the side and the TLS binding). The dialer names who it
// expects. probeOnly (a plain-text peer of a listener that requires TLS)
// answers liveness probes and refuses streams.
func (n *Node) handshake(conn net.Conn, dialer bool, expect string, bind []byte, probeOnly bool) (peer string, err error) {
	conn.SetDeadline(time.Now().Add(ioDeadline))
	defer conn.SetDeadline(time.Time{})
	mine := make([]byte, nonceLen)
	rand.Read(mine)
	buf := make([]byte, 0, 600)
	readHello := func() (frame, error) {
		typ, p, err := readFrame(conn, buf)
		if err != nil {
			return frame{}, err
		}
		f, err := decodeFrame(typ, p)
		if err != nil {
			return f, err
		}
		if f.typ == frameBye {
			return f, fmt.Errorf("ha: sync handshake with %s: refused: %s", conn.RemoteAddr(), f.reason)
		}
		if f.typ != frameHello {
			return f, fmt.Errorf("ha: sync handshake from %s: frame type %d before hello", conn.RemoteAddr(), f.typ)
		}
		if !dialer && f.group == n.cfg.Group && f.name == "" {
			return f, errProbe
		}
		if f.group != n.cfg.Group || f.name == n.cfg.Name || f.name == "" || expect != "" && f.name != expect {
			return f, fmt.Errorf("ha: sync handshake from %s: group %q name %q (want group %q, name %q)", conn.RemoteAddr(), f.group, f.name, n.cfg.Group, expect)
		}
		return f, nil
	}
	readAuth := func() ([]byte, error) {
		typ, p, err := readFrame(conn, buf)
		if err != nil {
			return nil, err
		}
		f, err := decodeFrame(typ, p)
		if err != nil {
			return nil, err
		}
		if f.typ != frameAuth {
			return nil, fmt.Errorf("ha: sync handshake from %s: frame type %d instead of auth", conn.RemoteAddr(), f.typ)
		}
		return f.mac, nil
	}
	var theirs frame
	if dialer {
		if err := writeConn(conn, helloFrame(n.cfg.Group, n.cfg.Name, mine)); err != nil {
			return "", err
		}
		if theirs, err = readHello(); err != nil {
			return "", err
		}
		me := authMAC(n.cfg.Key, 'd', n.cfg.Group, n.cfg.Name, theirs.name, mine, theirs.nonce, bind)
		if err := writeConn(conn, appendFrame(nil, frameAuth, func(b []byte) []byte { return append(b, me...) })); err != nil {
			return "", err
		}
		mac, err := readAuth()
		if err != nil {
			return "", err
		}
		if !hmac.Equal(mac, authMAC(n.cfg.Key, 'l', n.cfg.Group, n.cfg.Name, theirs.name, mine, theirs.nonce, bind)) {
			return "", fmt.Errorf("ha: sync peer %s at %s does not hold the group key", theirs.name, conn.RemoteAddr())
		}
		return theirs.name, nil
	}
	if theirs, err = readHello(); errors.Is(err, errProbe) {
		writeConn(conn, helloFrame(n.cfg.Group, n.cfg.Name, mine))
		return "", err
	} else if err != nil {
		return "", err
	}
	if probeOnly {
		writeConn(conn, byeFrame(errPlainSync.Error()))
		return "", errPlainSync
	}
	if err := writeConn(conn, helloFrame(n.cfg.Group, n.cfg.Name, mine)); err != nil {
		return "", err
	}
	mac, err := readAuth()
	if err != nil {
		return "", err
	}
	if !hmac.Equal(mac, authMAC(n.cfg.Key, 'd', n.cfg.Group, theirs.name, n.cfg.Name, theirs.nonce, mine, bind)) {
		return "", fmt.Errorf("ha: sync peer %s at %s does not hold the group key", theirs.name, conn.RemoteAddr())
	}
	me := authMAC(n.cfg.Key, 'l', n.cfg.Group, theirs.name, n.cfg.Name, theirs.nonce, mine, bind)
	return theirs.name, writeConn(conn, appendFrame(nil, frameAuth, func(b []byte) []byte { return append(b, me...) }))
}

func (n *Node) acceptLoop() {
	defer n.wg.Done()
	for {
		conn, err := n.ln.Accept()
		if err != nil {
			if n.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			n.log.Warn("ha: sync listener", "err", err)
			if !sleepCtx(n.ctx, redial) {
				return
			}
			continue
		}
		select {
		case n.preauth <- struct{}{}:
		default:
			// Past the bound: strangers (or a flood) hold every slot.
			// Peers redial; the established streams are not affected.
			n.countSyncError()
			conn.Close()
			continue
		}
		n.wg.Add(1)
		go n.serveIn(conn)
	}
}

// maxPreauth is the most sync connections handled at once before their
// handshake completes (a group has a handful of peers).
const maxPreauth = 64

// serveIn receives one peer's stream.
func (n *Node) serveIn(raw net.Conn) {
	defer n.wg.Done()
	defer raw.Close()
	authed := false
	release := func() {
		if !authed {
			authed = true
			<-n.preauth
		}
	}
	defer release()
	n.waitThawed()
	conn, bind, plain, err := n.secureAccept(raw)
	if errors.Is(err, io.EOF) {
		return // a port scan
	}
	if err != nil {
		n.countSyncError()
		n.log.Warn("ha: sync stream refused", "from", raw.RemoteAddr(), "err", err)
		return
	}
	defer conn.Close()
	name, err := n.handshake(conn, false, "", bind, plain && !n.cfg.Insecure)
	if errors.Is(err, errProbe) || errors.Is(err, io.EOF) {
		return // a liveness probe (probeDead), or a port scan
	}
	if err != nil {
		n.countSyncError()
		n.log.Warn("ha: sync stream refused", "from", conn.RemoteAddr(), "err", err)
		return
	}
	release()
	st := &inStream{name: name, conn: conn}
	n.mu.Lock()
	if n.ctx.Err() != nil {
		n.mu.Unlock()
		return
	}
	if old := n.in[name]; old != nil {
		old.replaced = true
		old.conn.Close()
	}
	n.in[name] = st
	n.mu.Unlock()

	hbDone := make(chan struct{})
	defer close(hbDone)
	go func() {
		t := time.NewTicker(heartbeat)
		defer t.Stop()
		for {
			select {
			case <-hbDone:
				return
			case <-t.C:
				n.waitThawed()
				st.wmu.Lock()
				err := writeConn(conn, appendFrame(nil, frameHeartbeat, nil))
				st.wmu.Unlock()
				if err != nil {
					return
				}
			}
		}
	}()
	ack := func(seq uint64) error {
		st.wmu.Lock()
		defer st.wmu.Unlock()
		return writeConn(conn, seqFrame(frameAck, seq))
	}
	bye, err := n.receive(st, ack)

	n.mu.Lock()
	if n.in[name] == st {
		delete(n.in, name)
	}
	var ne net.Error
	timeout := errors.As(err, &ne) && ne.Timeout()
	dead := !bye && !timeout && !st.replaced && !n.closed && !n.crashed && n.ctx.Err() == nil &&
		n.cfg.Mode == ActiveStandby && n.active == name
	lease, addr := n.members[name].Lease, n.members[name].Sync
	n.mu.Unlock()
	if dead && lease != 0 && n.probeDead(addr) {
		// The active's process is gone (it never drops a stream without
		// Bye while it forwards, and its kernel refuses connections to
		// its sync port): its lease goes now rather than after a TTL.
		ctx, cancel := context.WithTimeout(n.ctx, etcdOp)
		_, rerr := n.cli.Revoke(ctx, leaseID(lease))
		cancel()
		n.log.Info("ha: the active's stream ended without bye; revoked its lease", "active", name, "stream_err", err, "revoke_err", rerr)
	} else if err != nil && !bye && n.ctx.Err() == nil {
		n.log.Debug("ha: inbound stream ended", "peer", name, "err", err)
	}
}

// receive applies frames until Bye (true) or an error.
func (n *Node) receive(st *inStream, ack func(uint64) error) (bool, error) {
	var buf []byte
	var last uint64
	for {
		n.waitThawed()
		st.conn.SetReadDeadline(time.Now().Add(silence))
		typ, p, err := readFrame(st.conn, buf)
		if err != nil {
			return false, err
		}
		buf = p[:0]
		f, err := decodeFrame(typ, p)
		if err != nil {
			n.countSyncError()
			return false, fmt.Errorf("ha: from %s: %w", st.name, err)
		}
		switch f.typ {
		case frameSnapshotBegin:
			n.mu.Lock()
			st.synced = false
			if n.syncedFrom == st.name {
				n.syncedFrom = ""
			}
			n.mu.Unlock()
		case frameBatch:
			if f.seq != last+1 {
				n.countSyncError()
				return false, fmt.Errorf("ha: from %s: batch %d after %d", st.name, f.seq, last)
			}
			last = f.seq
			a, s, err := n.dp.ApplyConns(f.events)
			n.mu.Lock()
			st.applied += uint64(a)
			st.skipped += uint64(s)
			if err != nil {
				n.syncErrors++
			}
			n.mu.Unlock()
			if err := ack(f.seq); err != nil {
				return false, err
			}
		case frameSnapshotEnd:
			if f.seq != last {
				n.countSyncError()
				return false, fmt.Errorf("ha: from %s: snapshot ends at %d after batch %d", st.name, f.seq, last)
			}
			n.mu.Lock()
			st.synced = true
			n.syncedFrom = st.name
			n.kickLocked()
			n.mu.Unlock()
			if err := ack(f.seq); err != nil {
				return false, err
			}
		case frameHeartbeat:
		case frameBye:
			return true, nil
		default:
			n.countSyncError()
			return false, fmt.Errorf("ha: from %s: unexpected frame type %d", st.name, f.typ)
		}
	}
}

// changesLoop fans this director's own changes out to the streams.
func (n *Node) changesLoop() {
	defer n.wg.Done()
	ch := n.dp.Changes()
	for {
		select {
		case <-n.ctx.Done():
			return
		case evs, ok := <-ch:
			if !ok {
				return
			}
			n.enqueue(evs)
		}
	}
}

// enqueue queues changes for every stream that carries our table; lost
// changes or a full queue make that stream resync.
func (n *Node) enqueue(evs []xdp.ConnEvent) {
	lost := n.dp.Lost()
	n.mu.Lock()
	defer n.mu.Unlock()
	resync := lost > n.lastLost
	n.lastLost = lost
	for _, o := range n.out {
		if !o.queueing {
			continue
		}
		if resync || len(o.pending)+len(evs) > maxQueue+o.extra {
			o.overflow, o.queueing, o.pending = true, false, nil
		} else {
			o.pending = append(o.pending, evs...)
		}
		select {
		case o.notify <- struct{}{}:
		default:
		}
	}
}

// drainChanges takes what the program queued before the fence closed.
func (n *Node) drainChanges() {
	ch := n.dp.Changes()
	for i := 0; i < 1000; i++ {
		select {
		case evs, ok := <-ch:
			if !ok {
				return
			}
			n.enqueue(evs)
		case <-time.After(10 * time.Millisecond):
			return
		}
	}
}

// probeDead: the peer's process is gone if its sync port refuses a
// connection, or accepts one (from the backlog of a listener being closed)
// and then resets or closes it without answering a probe Hello. A timeout
// (partition, frozen process) is not proof: the lease's TTL decides those.
// A probe that times out is tried again until probeWindow has passed: on a
// loaded machine a dying process's listener may outlive its streams by
// more than one probe, or our own goroutine may wake late, and either
// would otherwise leave a kill -9 to the lease.
func (n *Node) probeDead(addr string) bool {
	if addr == "" {
		return false
	}
	end := time.Now().Add(probeWindow)
	for {
		dead, sure := n.probeOnce(addr)
		if sure {
			return dead
		}
		if time.Now().After(end) || !sleepCtx(n.ctx, probeTimeout/2) {
			return false
		}
	}
}

// probeOnce is one probe: sure is false when it timed out (no answer
// either way).
func (n *Node) probeOnce(addr string) (dead, sure bool) {
	c, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return true, true
		}
		return false, false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(probeTimeout))
	nonce := make([]byte, nonceLen)
	if err := writeConn(c, helloFrame(n.cfg.Group, "", nonce)); err != nil {
		return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE), !isTimeout(err)
	}
	_, _, err = readFrame(c, nil)
	switch {
	case err == nil:
		return false, true // a live peer answers with its Hello
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		return true, true
	}
	return false, !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func leaseID(v int64) clientv3.LeaseID { return clientv3.LeaseID(v) }

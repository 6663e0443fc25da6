package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/qos"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// Request classes on the node (docs/qos.md). The l7 director tags each
// request with its class (qos.Header: name, priority, nice). A node with
// Config.QoSWorkers > 0:
//
//   - believes the tag only from peers in Config.QoSTrust (the directors'
//     addresses); anyone else's tag is ignored, so a client that reaches
//     the node directly cannot claim a class;
//   - serves at most QoSWorkers requests at once, the waiting ones highest
//     priority first (untagged requests have priority 0);
//   - runs each request on a worker goroutine locked to an OS thread whose
//     nice value is the class's (setpriority(PRIO_PROCESS, tid, nice):
//     Linux's nice is per thread), so the kernel too gives the CPU to the
//     higher classes first. A worker only ever raises its own nice (what
//     any process may do), never lowers it: the node needs no privilege.

// maxNodeWaiters bounds the requests waiting for a worker; beyond it, 503.
const maxNodeWaiters = 4096

// nodeQoS is the node's priority semaphore and its worker pools.
type nodeQoS struct {
	trust   []netip.Prefix
	workers int
	base    int // the process's nice at start: classes add to it
	log     *slog.Logger

	markWarned atomic.Bool // warned once that markConn fails

	mu      sync.Mutex
	running int
	waiting []*nodeWaiter // highest priority first, FIFO within one
	pools   map[int]*nicePool
	closed  bool
}

type nodeWaiter struct {
	prio  int
	ready chan struct{}
	done  bool
}

// nicePool is the worker goroutines of one nice value.
type nicePool struct {
	jobs chan func()
	n    int // workers started
}

// workerIdle is how long a worker waits for a job before it ends (and
// its thread with it).
const workerIdle = 30 * time.Second

func newNodeQoS(trust []netip.Prefix, workers int, log *slog.Logger) *nodeQoS {
	base, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err == nil {
		base = 20 - base // the raw system call returns 20 - nice
	} else {
		base = 0
	}
	return &nodeQoS{trust: trust, workers: workers, base: base, log: log, pools: map[int]*nicePool{}}
}

// tagOf is req's class if a trusted peer sent it (ok false: untagged).
func (q *nodeQoS) tagOf(r *http.Request) (qos.Tag, bool) {
	v := r.Header.Get(qos.Header)
	if v == "" {
		return qos.Tag{}, false
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return qos.Tag{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !slices.ContainsFunc(q.trust, func(p netip.Prefix) bool { return p.Contains(a.Unmap()) }) {
		return qos.Tag{}, false
	}
	t, err := qos.ParseTag(v)
	if err != nil {
		return qos.Tag{}, false
	}
	return t, true
}

// acquire waits for a worker slot, higher priorities first.
func (q *nodeQoS) acquire(ctx context.Context, prio int) error {
	q.mu.Lock()
	if q.running < q.workers && len(q.waiting) == 0 {
		q.running++
		q.mu.Unlock()
		return nil
	}
	if len(q.waiting) >= maxNodeWaiters || q.closed {
		q.mu.Unlock()
		return fmt.Errorf("node busy: %d requests waiting", maxNodeWaiters)
	}
	w := &nodeWaiter{prio: prio, ready: make(chan struct{})}
	i, _ := slices.BinarySearchFunc(q.waiting, prio, func(x *nodeWaiter, p int) int {
		if x.prio >= p {
			return -1 // equal priorities keep arrival order
		}
		return 1
	})
	q.waiting = slices.Insert(q.waiting, i, w)
	q.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.done {
		q.releaseLocked()
		return ctx.Err()
	}
	if i := slices.Index(q.waiting, w); i >= 0 {
		q.waiting = slices.Delete(q.waiting, i, i+1)
	}
	return ctx.Err()
}

func (q *nodeQoS) release() {
	q.mu.Lock()
	q.releaseLocked()
	q.mu.Unlock()
}

func (q *nodeQoS) releaseLocked() {
	if len(q.waiting) > 0 {
		w := q.waiting[0]
		q.waiting = q.waiting[1:]
		w.done = true
		close(w.ready) // the slot passes to it
		return
	}
	q.running--
}

// run runs job on a worker of the given nice and waits for it.
func (q *nodeQoS) run(nice int, job func()) {
	nice = min(19, q.base+nice)
	q.mu.Lock()
	p := q.pools[nice]
	if p == nil {
		p = &nicePool{jobs: make(chan func())}
		q.pools[nice] = p
	}
	q.mu.Unlock()
	done := make(chan struct{})
	var panicked any
	wrapped := func() {
		defer func() {
			// A handler's panic (http.ErrAbortHandler) goes back to the
			// request's goroutine, where net/http recovers it.
			panicked = recover()
			close(done)
		}()
		job()
	}
	select {
	case p.jobs <- wrapped: // an idle worker took it
	default:
		q.mu.Lock()
		p.n++
		q.mu.Unlock()
		go q.worker(p, nice, wrapped)
	}
	<-done
	if panicked != nil {
		panic(panicked)
	}
}

// worker locks itself to a thread, sets the thread's nice and runs jobs
// until idle for workerIdle. It never unlocks: when it ends, its thread
// (with its nice) ends with it instead of going back to the runtime.
func (q *nodeQoS) worker(p *nicePool, nice int, first func()) {
	runtime.LockOSThread()
	tid := unix.Gettid()
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
		q.log.Warn("qos: cannot set a worker thread's nice; it runs at the process's", "nice", nice, "err", err)
	}
	defer func() {
		q.mu.Lock()
		p.n--
		q.mu.Unlock()
	}()
	job := first
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		job()
		idle.Reset(workerIdle)
		select {
		case job = <-p.jobs:
		case <-idle.C:
			return
		}
	}
}

// serveQoS serves r through the priority semaphore and the class's
// worker; false if QoS is off on this node.
func (s *Server) serveQoS(w http.ResponseWriter, r *http.Request, serve func()) bool {
	q := s.qos
	if q == nil {
		return false
	}
	tag, ok := q.tagOf(r)
	tos, prio := wireMark(tag, ok)
	if !ok {
		tag = qos.Tag{Name: "untagged"} // priority 0, nice 0: as without classes
	}
	if err := markConn(r, tos, prio); err != nil && !q.markWarned.Swap(true) {
		q.log.Warn("qos: cannot mark a connection with its class (TOS, SO_PRIORITY); responses go out unmarked", "err", err)
	}
	if err := q.acquire(r.Context(), tag.Priority); err != nil {
		if r.Context().Err() == nil {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "503 node busy", http.StatusServiceUnavailable)
		}
		return true
	}
	defer q.release()
	q.run(tag.Nice, serve)
	return true
}

// registerQoSMetrics adds the worker slots' gauges (0 with --qos-workers off).
func registerQoSMetrics(reg prometheus.Registerer, q *nodeQoS) {
	read := func(f func(*nodeQoS) int) func() float64 {
		return func() float64 {
			if q == nil {
				return 0
			}
			q.mu.Lock()
			defer q.mu.Unlock()
			return float64(f(q))
		}
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corral_node_qos_running",
			Help: "requests holding one of the --qos-workers slots"}, read(func(q *nodeQoS) int { return q.running })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corral_node_qos_waiting",
			Help: "requests waiting for a --qos-workers slot, highest class first"}, read(func(q *nodeQoS) int { return len(q.waiting) })))
}

// Priority on the wire (docs/qos.md, "The class on the wire"): the node
// marks each response's packets with its class, so that the node's egress
// qdisc (the operator's tc recipe) can send the top class's packets ahead
// of the responses already queued. The admission on the director and the
// worker slots here end where the link begins; this carries the priority
// onto it (paper 003's kernel-level approach).
const (
	// TOSTop is the top class's IP TOS byte: DSCP EF (46) << 2.
	TOSTop = 46 << 2
	// SockPrioTop is its SO_PRIORITY: TC_PRIO_INTERACTIVE, the highest
	// an unprivileged socket may set (pfifo_fast's first band; an htb or
	// prio qdisc can classify on it too).
	SockPrioTop = 6
)

type connCtxKey struct{}

// connContext keeps each accepted connection in its requests' context
// (http.Server.ConnContext), for markConn.
func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connCtxKey{}, c)
}

// wireMark is the TOS byte and socket priority of a request's class: the
// top class (nice 0, not the default class) EF and 6, everything else 0.
func wireMark(tag qos.Tag, trusted bool) (tos, prio int) {
	if trusted && tag.Nice == 0 && tag.Name != "default" {
		return TOSTop, SockPrioTop
	}
	return 0, 0
}

// markConn sets the connection's TOS (or IPv6 traffic class) and
// SO_PRIORITY before the response is written. Every request sets them,
// the default class's to 0 too: a keep-alive connection from the director
// carries requests of every class, one at a time (HTTP/1.1 without
// pipelining), so the previous response is on the wire by the time the
// next request arrives.
func markConn(r *http.Request, tos, prio int) error {
	c, ok := r.Context().Value(connCtxKey{}).(net.Conn)
	if !ok {
		return nil
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	v6 := false
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok && a.IP.To4() == nil {
		v6 = true
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		if v6 {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tos)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos)
		}
		if serr == nil {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PRIORITY, prio)
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// Package node is the cluster node's web server: virtual domains served
// read-only from the parallel file system (Host -> DOCROOT/HOST), with
// Range, ETag/Last-Modified and conditional requests. Its internal
// endpoints (/healthz, /load) are on a separate admin listener, never on
// the service port that a director's VIP forwards to.
//
// Memory per request is bounded: a file streams through a 32 KiB copy
// buffer and a read-ahead window of ReadAhead bytes, whatever its size and
// however many clients fetch it (paper 000's nodes grew as 0.001*P*S).
package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/obs"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/vhost"
)

// ReadAhead is each request's read-ahead window: enough to keep a few
// stripe requests in flight, small enough that many slow clients cost little.
const ReadAhead = 512 << 10

// DefaultReadAheadBudget bounds the read-ahead windows of all requests at
// once (64 windows, 32 MiB: 64 concurrent large downloads keep theirs,
// fewer cut their latency's tail badly; more cost memory under many stalled
// clients, which hold their windows until the write timeout): requests beyond it read without read-ahead, so many slow or
// stalled clients hold no more than their copy buffers and the node's
// memory stays bounded however many there are.
const DefaultReadAheadBudget = 64 * ReadAhead

// Defaults and limits.
const (
	// DefaultAdminPort is the admin listener's port when --admin is not
	// given: the service address's host with this port.
	DefaultAdminPort = 9080
	// DefaultWriteTimeout closes a connection whose client stopped
	// reading: no byte accepted for this long.
	DefaultWriteTimeout = 60 * time.Second
	// DefaultIdleTimeout closes a kept-alive connection with no request,
	// and bounds reading a request's header.
	DefaultIdleTimeout = 60 * time.Second
	// MaxPath is the longest URL path served (PATH_MAX); longer is 414.
	MaxPath = 4096
	// healthTTL is how long a /healthz probe's answer is reused, so
	// frequent health checks cost meta one walk a second at most.
	healthTTL = time.Second
	// logMax bounds a URL or path in a log line.
	logMax = 256
)

// Config configures a node.
type Config struct {
	Meta    string // metadata members' addresses, comma-separated (requests follow the leader)
	Docroot string // default /www
	// DefaultDomain serves requests whose Host has no directory (e.g. a
	// bare IP address). Empty: such requests get 404.
	DefaultDomain string
	AccessLog     io.Writer // nil: no access log
	Log           *slog.Logger
	// DRVIP makes the node a direct-routing real server for this VIP
	// (SetupDR) and serves it too, on the listen address's port.
	DRVIP netip.Addr
	// Security is the file-system credential (the read-only one suffices;
	// nil Cred: $CORRAL_SECRET_FILE) and optional TLS.
	Security proto.Security
	// Admin is the address of the admin listener (/healthz, /load; more
	// handlers through AdminMux). Empty: DefaultAdminAddr(listen).
	Admin string
	// HealthzOnService answers /healthz on the service port too, for
	// checkers that cannot reach the admin listener (several nodes sharing
	// one address with free ports, as in tests). It is then reachable
	// through a VIP: off by default. /load never is.
	HealthzOnService bool
	// LoadInterface is the interface /load reports octets of (the
	// feedback agent source, equation 3). Empty: the one holding the
	// service address, else the first up non-loopback one.
	LoadInterface string
	// ReadAheadBudget: zero takes DefaultReadAheadBudget.
	ReadAheadBudget int64
	// DataCache is the size in bytes of the in-memory cache of small
	// files (datacache.go); zero or less: no cache (the CLI's default is
	// DefaultDataCache). CacheFileMax is the largest file it holds (zero:
	// DefaultCacheFileMax).
	DataCache, CacheFileMax int64
	// DataCacheMaxAge is how long a cached copy is used before the file
	// is read again though its attributes are unchanged (content written
	// without a close shows within it): zero takes DefaultDataCacheMaxAge,
	// less than zero is no limit.
	DataCacheMaxAge time.Duration
	// WriteTimeout and IdleTimeout: zero takes the defaults above.
	WriteTimeout, IdleTimeout time.Duration
	// Now is the clock (nil: time.Now); tests step it.
	Now func() time.Time
	// QoSWorkers > 0 serves at most this many requests at once, highest
	// class first, each on a thread with its class's nice (qos.go);
	// QoSTrust are the peers (the directors) whose class tag is believed.
	QoSWorkers int
	QoSTrust   []netip.Prefix
}

// Server serves the virtual domains.
type Server struct {
	cfg      Config
	fs       *client.Client
	active   atomic.Int64 // requests in progress
	inflight atomic.Int64 // bytes still to send
	served   atomic.Int64
	raUsed   atomic.Int64 // bytes of ReadAheadBudget taken
	name     string       // this node's address, sent as X-Served-By
	admin    *http.ServeMux
	metrics  *nodeMetrics
	cache    *dataCache // nil: off
	// fill reads a whole file for the cache: readWhole (tests count or
	// fail the reads through it).
	fill func(context.Context, proto.Attr) ([]byte, error)
	// adminAddr is the admin listener's address (a string) once serving.
	adminAddr atomic.Value

	qos *nodeQoS // nil: no request classes

	// sites are the domains' directories (sites.go), read once per request.
	sites atomic.Pointer[Sites]

	cgMu   sync.Mutex // guards cgIdle (feedback.go)
	cgIdle uint64

	hmu  sync.Mutex // one probe at a time; guards hAt, hErr
	hAt  time.Time
	hErr error
}

// New returns a node server using the file system at cfg.Meta.
func New(cfg Config) *Server {
	if cfg.Docroot == "" {
		cfg.Docroot = "/www"
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ReadAheadBudget <= 0 {
		cfg.ReadAheadBudget = DefaultReadAheadBudget
	}
	s := &Server{cfg: cfg, fs: client.New(cfg.Meta, client.WithSecurity(cfg.Security), client.WithCache())}
	s.cache = newDataCache(cfg.DataCache, cfg.CacheFileMax)
	if s.cache != nil {
		s.cache.now = cfg.Now
		switch {
		case cfg.DataCacheMaxAge == 0:
			s.cache.maxAge = DefaultDataCacheMaxAge
		case cfg.DataCacheMaxAge > 0:
			s.cache.maxAge = cfg.DataCacheMaxAge
		}
		// A fifth of the age left for the background read: the copy is
		// replaced before it is too old, and a hot file is read again about
		// once per 4/5 of the age rather than once per age.
		s.cache.refreshAfter = s.cache.maxAge - s.cache.maxAge/5
	}
	s.fill = s.readWhole
	if cfg.QoSWorkers > 0 {
		s.qos = newNodeQoS(cfg.QoSTrust, cfg.QoSWorkers, cfg.Log)
	}
	s.sites.Store(&Sites{Docroot: cfg.Docroot, DefaultDomain: cfg.DefaultDomain})
	s.metrics = newNodeMetrics(s)
	s.admin = http.NewServeMux()
	s.admin.HandleFunc("GET /healthz", s.serveHealth)
	s.admin.HandleFunc("GET /load", s.serveLoad) // feedback.go
	s.admin.Handle("GET /metrics", s.MetricsHandler())
	obs.AddProfile(s.admin)
	return s
}

// AdminMux is the admin listener's handler: /healthz, /load and /metrics,
// and whatever else a caller registers on it before serving.
func (s *Server) AdminMux() *http.ServeMux { return s.admin }

// Close drops the file-system connections.
func (s *Server) Close() { s.fs.Close() }

// DefaultAdminAddr is the default admin address for a service address: its host
// with DefaultAdminPort (127.0.0.21:8080 -> 127.0.0.21:9080), the address
// the director's checks and feedback poll. A service on the wildcard
// address (":8080", "0.0.0.0:8080", "[::]:8080") gets loopback instead:
// /load and /metrics answer without credentials, so they reach the
// network only when an address is named. A service port of 0 (a test's
// free port) gives 0 too, so nodes sharing a host do not collide.
func DefaultAdminAddr(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("--listen %q: %w", listen, err)
	}
	switch ip := net.ParseIP(host); {
	case host == "" || ip != nil && ip.To4() != nil && ip.IsUnspecified():
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	if port == "0" {
		return net.JoinHostPort(host, "0"), nil
	}
	return net.JoinHostPort(host, strconv.Itoa(DefaultAdminPort)), nil
}

// Load is the node's load report.
type Load struct {
	Active        int64   `json:"active"`
	BytesInFlight int64   `json:"bytes_in_flight"`
	Served        int64   `json:"served"`
	Load1         float64 `json:"load1"`
	CPUs          int     `json:"cpus"`
}

// Load is the node's load now (what /load answers).
func (s *Server) Load() Load { return s.load() }

func (s *Server) load() Load {
	l := Load{Active: s.active.Load(), BytesInFlight: s.inflight.Load(), Served: s.served.Load(), CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscanf(string(b), "%f", &l.Load1)
	}
	return l
}

// Health reports whether the node can serve content: the file system
// answers a walk of the docroot (meta reachable, credential accepted, the
// docroot there). The answer is reused for healthTTL.
func (s *Server) Health() error {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if !s.hAt.IsZero() && s.cfg.Now().Sub(s.hAt) < healthTTL {
		return s.hErr
	}
	// Not the request's context: a checker that gives up must not leave
	// a cancellation cached as the node's health.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	docroot := s.sites.Load().Docroot
	_, err := s.fs.Stat(ctx, docroot)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = fmt.Errorf("docroot %s missing in the file system", docroot)
	case err != nil:
		err = fmt.Errorf("file system unreachable: %w", err)
	}
	s.hAt, s.hErr = s.cfg.Now(), err
	return err
}

func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	if err := s.Health(); err != nil {
		http.Error(w, "503 "+trunc(err.Error()), http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ok\n"))
}

// trunc bounds s for a log line.
func trunc(s string) string {
	if len(s) <= logMax {
		return s
	}
	return s[:logMax] + "..."
}

// statusWriter records what was sent, for the access log, and pushes the
// write deadline out as bytes move: a client that stops reading is cut
// off after WriteTimeout, one that reads slowly is not.
type statusWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	status  int
	bytes   int64
}

func (w *statusWriter) WriteHeader(c int) { w.status = c; w.ResponseWriter.WriteHeader(c) }
func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = 200
	}
	w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// resetListener hands out connections that reset (SO_LINGER 0) instead of
// closing gracefully once a write timed out: the client stopped reading,
// and a graceful close would leave the kernel holding megabytes of unsent
// data (FIN-WAIT-1) for a peer that will not take them. It must happen in
// Write itself: net/http closes the connection before the handler sees
// the error.
type resetListener struct{ net.Listener }

func (l resetListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		return resetConn{tc}, nil
	}
	return c, err
}

type resetConn struct{ *net.TCPConn }

func (c resetConn) Write(b []byte) (int, error) {
	n, err := c.TCPConn.Write(b)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		c.SetLinger(0)
	}
	return n, err
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout}
	// A deadline from this connection's previous request must not cut
	// this one short: a fresh one for the header and small bodies.
	sw.rc.SetWriteDeadline(start.Add(s.cfg.WriteTimeout))
	if s.name != "" {
		sw.Header().Set("X-Served-By", s.name)
	}
	s.active.Add(1)
	defer func() {
		s.active.Add(-1)
		s.served.Add(1)
		s.metrics.observe(sw.status, sw.bytes, start)
		if s.cfg.AccessLog != nil {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			fmt.Fprintf(s.cfg.AccessLog, "%s - - [%s] %q %d %d %q %q %.3f\n", host, start.Format("02/Jan/2006:15:04:05 -0700"),
				r.Method+" "+trunc(r.RequestURI)+" "+r.Proto, sw.status, sw.bytes, trunc(r.Host), trunc(r.UserAgent()), time.Since(start).Seconds())
		}
	}()
	if r.ContentLength != 0 {
		// A body on a GET/HEAD means nothing here, and net/http would
		// wait, without any deadline, for it to arrive (to keep the
		// connection) before sending the header: answer, then close.
		sw.Header().Set("Connection", "close")
	}
	if s.cfg.HealthzOnService && r.URL.Path == "/healthz" {
		s.admin.ServeHTTP(sw, r)
		return
	}
	if len(r.URL.Path) > MaxPath {
		http.Error(sw, "414 URI too long", http.StatusRequestURITooLong)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		sw.Header().Set("Allow", "GET, HEAD")
		http.Error(sw, "405 method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if s.serveQoS(sw, r, func() { s.serveFile(sw, r) }) {
		return
	}
	s.serveFile(sw, r)
}

func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	dom, ok := vhost.Domain(r.Host)
	if !ok {
		http.Error(w, "400 bad Host header", http.StatusBadRequest)
		return
	}
	upath := vhost.Clean(r.URL.Path)
	rel := vhost.Rel(upath)
	sites := s.sites.Load()
	root := sites.root(dom)
	// Links resolve inside the domain's directory only: one leading out
	// (an absolute target, ".." above it) is EXDEV, a 404 below.
	a, err := s.fs.StatBeneath(ctx, root, rel)
	if errors.Is(err, fs.ErrNotExist) && sites.DefaultDomain != "" {
		if _, derr := s.fs.Stat(ctx, root); errors.Is(derr, fs.ErrNotExist) {
			root = sites.root(sites.DefaultDomain)
			a, err = s.fs.StatBeneath(ctx, root, rel)
		}
	}
	if err == nil && a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		// A directory without a trailing slash: redirect, as web servers
		// do, to the cleaned path: always one leading slash, so never
		// to another host (//evil.example/... is protocol-relative).
		if !strings.HasSuffix(upath, "/") {
			// The query goes along, as nginx keeps it.
			w.Header().Set("Location", (&url.URL{Path: upath + "/", RawQuery: r.URL.RawQuery}).String())
			w.WriteHeader(http.StatusMovedPermanently)
			return
		}
		err = fs.ErrNotExist // no listings
	}
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EXDEV), errors.Is(err, syscall.ELOOP):
			http.Error(w, "404 not found", http.StatusNotFound)
		case errors.Is(err, syscall.ENAMETOOLONG):
			http.Error(w, "414 URI too long", http.StatusRequestURITooLong)
		default:
			s.cfg.Log.Warn("file system error", "err", trunc(err.Error()))
			http.Error(w, "503 file system unavailable", http.StatusServiceUnavailable)
		}
		return
	}
	p := root + rel
	mtime := time.Unix(0, a.Mtime)
	etag := fmt.Sprintf(`"%x-%x-%x"`, a.Ino, a.Size, a.Mtime)
	// The content: the cached copy of this very version of the file, or
	// the file itself. Either way the answer below is made the same way.
	content, err := s.cached(ctx, r, a, etag, mtime)
	switch {
	case err != nil && ctx.Err() != nil:
		// The client left while another request read the file: nobody
		// to answer, and no read to start (nginx logs this as 499).
		w.WriteHeader(StatusClientClosed)
		return
	case err != nil:
		// The read the cache shared failed: every request that waited
		// for it fails at once rather than all reading again.
		s.cfg.Log.Warn("read failed", "path", trunc(p), "err", trunc(err.Error()))
		http.Error(w, "503 file system unavailable", http.StatusServiceUnavailable)
		return
	}
	if content == nil {
		f, err := s.fs.OpenAttr(ctx, a)
		if err != nil {
			s.cfg.Log.Warn("open failed", "path", trunc(p), "err", trunc(err.Error()))
			http.Error(w, "503 file system unavailable", http.StatusServiceUnavailable)
			return
		}
		defer f.Close() // nothing to write back: drops the client's state of the inode
		if s.raUsed.Add(ReadAhead) <= s.cfg.ReadAheadBudget {
			f.SetReadAhead(ReadAhead)
			defer s.raUsed.Add(-ReadAhead)
		} else {
			s.raUsed.Add(-ReadAhead)
			f.SetReadAhead(-1)
		}
		content = f
	}
	w.Header().Set("ETag", etag)
	size := int64(a.Size)
	if c, ok := content.(cachedFile); ok && plainGet(r) {
		// A cached file, whole, unconditionally: its bytes in one write
		// from the cached copy (no read into a copy buffer, as
		// http.ServeContent's io.CopyN does), with the headers it sends.
		s.writeCached(w, p, mtime, c.data)
		return
	}
	fixRange(r, size)
	s.inflight.Add(size)
	cr := &countingReader{r: io.NewSectionReader(content, 0, size), left: size, s: s}
	defer func() { s.inflight.Add(-cr.left) }()
	http.ServeContent(w, r, p, mtime, cr)
}

// cached returns the content of the file a describes from the data cache:
// a hit, or for a GET a miss read once (for all concurrent misses of this
// version) and offered to the cache. nil and no error: serve it from the
// file system (no cache, a file too large or not regular, a HEAD or a
// request answered 304 that missed, a Range the cache would not take). An
// error: the shared read failed, or ctx ended while waiting for it.
func (s *Server) cached(ctx context.Context, r *http.Request, a proto.Attr, etag string, mtime time.Time) (io.ReaderAt, error) {
	if !s.cache.cacheable(a.Size) || a.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, nil
	}
	v := version{ino: a.Ino, size: a.Size, mtime: a.Mtime, ctime: a.Ctime}
	if r.Method != http.MethodGet || notModified(r, etag, mtime) {
		// No body to send: a copy is used, none is read.
		if data, ok := s.cache.lookup(v); ok {
			return cachedFile{bytes.NewReader(data), data}, nil
		}
		return nil, nil
	}
	// A Range request reads the whole file only for a copy the cache
	// would take: otherwise only the part it asks for.
	partial := r.Header.Get("Range") != ""
	data, err := s.cache.get(ctx, v, partial, func() ([]byte, error) { return s.fill(ctx, a) })
	switch {
	case errors.Is(err, errNotAdmitted):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return cachedFile{bytes.NewReader(data), data}, nil
}

// plainGet reports whether r is a GET whose answer is the whole file with
// a 200 whatever the file: no Range, no precondition. Any other request
// goes through http.ServeContent, which implements them.
func plainGet(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	for _, h := range []string{"Range", "If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since", "If-Range"} {
		if _, ok := r.Header[h]; ok {
			return false
		}
	}
	return true
}

// writeCached answers a plain GET from the cached bytes in b, with the
// headers http.ServeContent would send (Last-Modified, Content-Type by the
// name's extension or sniffed, Accept-Ranges, Content-Length).
func (s *Server) writeCached(w http.ResponseWriter, name string, mtime time.Time, data []byte) {
	size := int64(len(data))
	h := w.Header()
	if !mtime.IsZero() && !mtime.Equal(time.Unix(0, 0)) {
		h.Set("Last-Modified", mtime.UTC().Format(http.TimeFormat))
	}
	if _, ok := h["Content-Type"]; !ok {
		ctype := mime.TypeByExtension(path.Ext(name))
		if ctype == "" {
			ctype = http.DetectContentType(data[:min(len(data), 512)])
		}
		h.Set("Content-Type", ctype)
	}
	h.Set("Accept-Ranges", "bytes")
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	s.inflight.Add(size)
	w.Write(data) // a failed write ends the connection; nothing to answer
	s.inflight.Add(-size)
}

// cachedFile is a file's content from the data cache: its bytes (never
// written after admission: a new version is a new slice) and a reader
// over them.
type cachedFile struct {
	*bytes.Reader
	data []byte
}

// StatusClientClosed is the status logged (and counted) for a request
// whose client left before its answer (nginx's 499); nothing is sent.
const StatusClientClosed = 499

// notModified reports whether r's answer will be 304 Not Modified (RFC
// 9110 13.2.2: If-None-Match decides, else If-Modified-Since), so that a
// miss is not read whole for an answer without a body. Only a guess for
// the cache: http.ServeContent makes the answer.
func notModified(r *http.Request, etag string, mtime time.Time) bool {
	if inm := r.Header.Get("If-None-Match"); inm != "" {
		for _, t := range strings.Split(inm, ",") {
			if t = strings.TrimSpace(t); t == "*" || strings.TrimPrefix(t, "W/") == etag {
				return true
			}
		}
		return false
	}
	t, err := http.ParseTime(r.Header.Get("If-Modified-Since"))
	return err == nil && !mtime.Truncate(time.Second).After(t)
}

// readWhole reads the file a describes, all a.Size bytes of it, for the
// cache. Not cut short by the request's end: others may wait for it.
func (s *Server) readWhole(ctx context.Context, a proto.Attr) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.WriteTimeout)
	defer cancel()
	f, err := s.fs.OpenAttr(ctx, a)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	f.SetReadAhead(-1) // the one read below asks for the whole file
	data := make([]byte, a.Size)
	n, err := f.ReadAt(data, 0)
	if n == len(data) {
		return data, nil
	}
	if err == nil || err == io.EOF {
		err = fmt.Errorf("inode %d: read %d of %d bytes", a.Ino, n, len(data))
	}
	return nil, err
}

// fixRange drops suffix ranges of length zero ("bytes=-0"), which select
// nothing (RFC 9110 14.1.1: unsatisfiable) but which net/http answers with
// a 206 and an invalid Content-Range. If none is left, the header becomes
// one net/http finds unsatisfiable too, so the answer is 416 with
// "Content-Range: bytes */SIZE" (If-Range still applies first).
//
// A Range in another unit is ignored (RFC 9110 14.2: MUST), where net/http
// would answer 416.
func fixRange(r *http.Request, size int64) {
	h := r.Header.Get("Range")
	if h == "" {
		return
	}
	if r.Method != http.MethodGet {
		// RFC 9110 14.2: Range is defined for GET only; HEAD answers
		// as the GET without it would.
		r.Header.Del("Range")
		return
	}
	unit, spec, _ := strings.Cut(h, "=")
	if !strings.EqualFold(strings.TrimSpace(unit), "bytes") {
		r.Header.Del("Range")
		return
	}
	r.Header.Set("Range", "bytes="+spec) // net/http wants the unit so
	var keep []string
	dropped := false
	for _, ra := range strings.Split(spec, ",") {
		t := strings.TrimSpace(ra)
		if n, isSuffix := strings.CutPrefix(t, "-"); isSuffix && strings.Trim(n, "0") == "" && n != "" {
			dropped = true
			continue
		}
		keep = append(keep, ra)
	}
	switch {
	case !dropped:
	case len(keep) == 0:
		r.Header.Set("Range", fmt.Sprintf("bytes=%d-", size))
	default:
		r.Header.Set("Range", "bytes="+strings.Join(keep, ","))
	}
}

// countingReader lowers the node's bytes-in-flight as the file is read.
type countingReader struct {
	r    *io.SectionReader
	left int64
	s    *Server
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	d := min(int64(n), c.left)
	c.left -= d
	c.s.inflight.Add(-d)
	return n, err
}

func (c *countingReader) Seek(off int64, whence int) (int64, error) { return c.r.Seek(off, whence) }

// Run serves on listen, and the admin endpoints on cfg.Admin, until ctx
// ends. ready gets the service address once both listen.
func Run(ctx context.Context, listen string, cfg Config, ready func(addr string)) error {
	s := New(cfg)
	defer s.Close()
	return s.Serve(ctx, listen, ready)
}

// Serve is Run for a Server made with New (handlers may be added to
// AdminMux first). The admin address listened on is in s.AdminAddr once
// ready is called.
func (s *Server) Serve(ctx context.Context, listen string, ready func(addr string)) error {
	cfg := s.cfg
	adminAddr := cfg.Admin
	if adminAddr == "" {
		var err error
		if adminAddr, err = DefaultAdminAddr(listen); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	aln, err := net.Listen("tcp", adminAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("admin listener (--admin): %w", err)
	}
	s.name = ln.Addr().String()
	s.adminAddr.Store(aln.Addr().String())
	srv := &http.Server{Handler: s, ReadHeaderTimeout: cfg.IdleTimeout, IdleTimeout: cfg.IdleTimeout}
	if s.qos != nil {
		srv.ConnContext = connContext // markConn marks each response with its class
	}
	asrv := &http.Server{Handler: s.admin, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: cfg.IdleTimeout,
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	if cfg.DRVIP.IsValid() {
		undo, err := SetupDR(cfg.DRVIP)
		if err != nil {
			ln.Close()
			aln.Close()
			return fmt.Errorf("direct routing: %w", err)
		}
		defer undo()
		port := ln.Addr().(*net.TCPAddr).Port
		vln, err := net.Listen("tcp", netip.AddrPortFrom(cfg.DRVIP, uint16(port)).String())
		if err != nil {
			ln.Close()
			aln.Close()
			return fmt.Errorf("direct routing: %w", err)
		}
		go srv.Serve(resetListener{vln}) // Shutdown closes it
	}
	go asrv.Serve(aln)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		asrv.Shutdown(sctx)
		srv.Shutdown(sctx)
	}()
	go s.watchMeta(ctx)
	cfg.Log.Info("admin endpoints (/healthz, /load)", "admin", aln.Addr().String())
	if ready != nil {
		ready(ln.Addr().String())
	}
	if err := srv.Serve(resetListener{ln}); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// AdminAddr is the admin listener's address once serving ("" before).
func (s *Server) AdminAddr() string {
	a, _ := s.adminAddr.Load().(string)
	return a
}

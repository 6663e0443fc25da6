// Package node is the cluster node's web server: virtual domains served
// read-only from the parallel file system (Host -> DOCROOT/HOST), with
// Range, ETag/Last-Modified and conditional requests, and a load report for
// the director.
//
// Memory per request is bounded: a file streams through a 32 KiB copy
// buffer and a read-ahead window of ReadAhead bytes, whatever its size and
// however many clients fetch it (paper 000's nodes grew as 0.001*P*S).
package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/vhost"
)

// ReadAhead is each request's read-ahead window: enough to keep a few
// stripe requests in flight, small enough that many slow clients cost little.
const ReadAhead = 512 << 10

// Config configures a node.
type Config struct {
	Meta    string
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
}

// Server serves the virtual domains.
type Server struct {
	cfg      Config
	fs       *client.Client
	active   atomic.Int64 // requests in progress
	inflight atomic.Int64 // bytes still to send
	served   atomic.Int64
	name     string // this node's address, sent as X-Served-By
	metrics  *nodeMetrics
}

// New returns a node server using the file system at cfg.Meta.
func New(cfg Config) *Server {
	if cfg.Docroot == "" {
		cfg.Docroot = "/www"
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Server{cfg: cfg, fs: client.New(cfg.Meta, client.WithSecurity(cfg.Security))}
	s.metrics = newNodeMetrics(s)
	return s
}

// Close drops the file-system connections.
func (s *Server) Close() { s.fs.Close() }

// Load is the node's load report.
type Load struct {
	Active        int64   `json:"active"`
	BytesInFlight int64   `json:"bytes_in_flight"`
	Served        int64   `json:"served"`
	Load1         float64 `json:"load1"`
	CPUs          int     `json:"cpus"`
}

func (s *Server) load() Load {
	l := Load{Active: s.active.Load(), BytesInFlight: s.inflight.Load(), Served: s.served.Load(), CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscanf(string(b), "%f", &l.Load1)
	}
	return l
}

// statusWriter records what was sent, for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(c int) { w.status = c; w.ResponseWriter.WriteHeader(c) }
func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = 200
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
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
				r.Method+" "+r.RequestURI+" "+r.Proto, sw.status, sw.bytes, r.Host, r.UserAgent(), time.Since(start).Seconds())
		}
	}()
	switch r.URL.Path {
	case "/healthz":
		sw.Write([]byte("ok\n"))
		return
	case "/metrics": // with /healthz and /load: internal, for the admin listener
		s.MetricsHandler().ServeHTTP(sw, r)
		return
	case "/load":
		sw.Header().Set("Content-Type", "application/json")
		json.NewEncoder(sw).Encode(s.load())
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		sw.Header().Set("Allow", "GET, HEAD")
		http.Error(sw, "405 method not allowed", http.StatusMethodNotAllowed)
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
	p := vhost.File(s.cfg.Docroot, dom, r.URL.Path)
	a, err := s.fs.Stat(ctx, p)
	if errors.Is(err, fs.ErrNotExist) && s.cfg.DefaultDomain != "" {
		if _, derr := s.fs.Stat(ctx, s.cfg.Docroot+"/"+dom); errors.Is(derr, fs.ErrNotExist) {
			p = vhost.File(s.cfg.Docroot, s.cfg.DefaultDomain, r.URL.Path)
			a, err = s.fs.Stat(ctx, p)
		}
	}
	if err == nil && a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		// A directory without a trailing slash: redirect, as web servers do.
		if !strings.HasSuffix(r.URL.Path, "/") {
			http.Redirect(w, r, r.URL.Path+"/", http.StatusMovedPermanently)
			return
		}
		err = fs.ErrNotExist // no listings
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			http.Error(w, "404 not found", http.StatusNotFound)
			return
		}
		s.cfg.Log.Warn("file system error", "path", p, "err", err)
		http.Error(w, "503 file system unavailable", http.StatusServiceUnavailable)
		return
	}
	f, err := s.fs.OpenAttr(ctx, a)
	if err != nil {
		s.cfg.Log.Warn("open failed", "path", p, "err", err)
		http.Error(w, "503 file system unavailable", http.StatusServiceUnavailable)
		return
	}
	f.SetReadAhead(ReadAhead)
	mtime := time.Unix(0, a.Mtime)
	w.Header().Set("ETag", fmt.Sprintf(`"%x-%x-%x"`, a.Ino, a.Size, a.Mtime))
	size := int64(a.Size)
	s.inflight.Add(size)
	cr := &countingReader{r: io.NewSectionReader(f, 0, size), left: size, s: s}
	defer func() { s.inflight.Add(-cr.left) }()
	http.ServeContent(w, r, p, mtime, cr)
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

// Run serves on listen until ctx ends.
func Run(ctx context.Context, listen string, cfg Config, ready func(addr string)) error {
	s := New(cfg)
	defer s.Close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	s.name = ln.Addr().String()
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second}
	if cfg.DRVIP.IsValid() {
		undo, err := SetupDR(cfg.DRVIP)
		if err != nil {
			ln.Close()
			return fmt.Errorf("direct routing: %w", err)
		}
		defer undo()
		port := ln.Addr().(*net.TCPAddr).Port
		vln, err := net.Listen("tcp", netip.AddrPortFrom(cfg.DRVIP, uint16(port)).String())
		if err != nil {
			ln.Close()
			return fmt.Errorf("direct routing: %w", err)
		}
		go srv.Serve(vln) // Shutdown closes it
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	go s.watchMeta(ctx)
	if ready != nil {
		ready(ln.Addr().String())
	}
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

package director

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-cluster/corral/internal/vhost"
)

// httpProxy is the l7 dataplane: an HTTP/1.1 reverse proxy with keep-alive
// on both sides. Each request is scheduled on its own (mwlc learns its size
// from the file system), and a GET or HEAD whose node fails before answering
// is sent to another node: the client never sees that failure (paper 001's
// "lost request").
type httpProxy struct {
	s   *service
	srv *http.Server
	ln  net.Listener
	tr  *http.Transport
	wg  sync.WaitGroup
}

func startL7(s *service) (dataplane, error) {
	ln, err := net.Listen("tcp", s.cfg.Load().VIP.String())
	if err != nil {
		return nil, err
	}
	p := &httpProxy{s: s, ln: ln, tr: &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		DisableCompression:    true,
	}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.srv.Serve(ln)
	}()
	return p, nil
}

// drainTimeout bounds how long a closed l7 service's requests in flight
// may go on; then their connections are cut.
const drainTimeout = 30 * time.Second

// close frees the VIP at once (a reload may bind it again straight away)
// and lets the requests in flight finish in the background, for at most
// drainTimeout: Apply, which calls it under d.mu, never waits for a slow
// response.
func (p *httpProxy) close() {
	p.ln.Close()
	p.wg.Wait() // Serve has returned: nothing more is accepted
	d := p.s.d
	d.drains.Add(1) // Director.Close waits for the drain
	go func() {
		defer d.drains.Done()
		ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		defer cancel()
		if p.srv.Shutdown(ctx) != nil {
			p.srv.Close()
		}
		p.tr.CloseIdleConnections()
	}()
}

// Hop-by-hop headers are not forwarded (RFC 9110 7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// internalPaths are a node's own endpoints. Nodes serve them on their
// admin port, but an older node, or another real server, may answer them
// on its content port: the proxy does not pass them from clients unless the
// service says pass-internal on.
var internalPaths = []string{"/load", "/healthz", "/metrics"}

func (p *httpProxy) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	defer p.s.d.metrics.observeRequest(p.s, time.Now())
	src := srcAddr(stringAddr(req.RemoteAddr))
	cfg := p.s.cfg.Load()
	if req.Host == "" {
		// As the node does: with no Host there is no virtual domain.
		http.Error(w, "400 bad request: missing Host", http.StatusBadRequest)
		return
	}
	if !cfg.PassInternal && slices.Contains(internalPaths, req.URL.Path) {
		http.NotFound(w, req)
		return
	}
	release, ok := p.s.admit(w, req, src.Addr())
	if !ok {
		return
	}
	defer release()
	retry, file := classify(req, p.s.d.cfg.Load().Docroot)
	var size int64
	if file != "" && cfg.Scheduler == "mwlc" {
		size = p.s.d.fileSize(req.Context(), file)
	}
	tried := map[*real]bool{}
	for {
		r, err := p.s.pick(src.Addr(), size, tried)
		if err != nil {
			http.Error(w, "503 no server available", http.StatusServiceUnavailable)
			return
		}
		cn := p.s.track(src, r, "TCP", "ESTABLISHED")
		out, wrote := traced(outgoing(req, r, src.Addr()))
		body := &countingBody{ReadCloser: out.Body}
		if out.Body != nil && out.Body != http.NoBody {
			out.Body = body
		}
		resp, err := p.tr.RoundTrip(out)
		var counted int64
		if err == nil || wrote.Load() {
			// Only what reached the node: a refused connect sent nothing.
			counted = body.n.Load()
			r.bytesIn.Add(headerBytes(out) + counted)
		}
		if err != nil {
			r.active.Add(-1)
			r.pending.Add(-size)
			r.failed.Add(1)
			p.s.untrack(cn, "")
			p.s.done(src.Addr())
			if retry && req.Context().Err() == nil {
				tried[r] = true
				continue // nothing reached the client yet: try another node
			}
			// The detail (a node's address) is for the log, not the client.
			p.s.d.log.Warn("l7 request failed", "service", cfg.Name, "server", r.addr, "err", err)
			http.Error(w, "502 bad gateway", http.StatusBadGateway)
			return
		}
		r.requests.Add(1)
		r.conns.Add(1)
		last := p.relay(w, req, resp, r, size, src.Addr(), tried, cn)
		r.bytesIn.Add(body.n.Load() - counted) // body the node read after answering (or all of it)
		last.active.Add(-1)
		p.s.untrack(cn, "CLOSED") // counts as inactive a while yet (lc, wlc)
		p.s.done(src.Addr())
		return
	}
}

// outgoing is req as it goes to real server r: hop-by-hop headers
// dropped, the client's address appended to X-Forwarded-For. Every
// request the proxy sends for a client (a retry, a resume) is made here.
func outgoing(req *http.Request, r *real, src netip.Addr) *http.Request {
	out := req.Clone(req.Context())
	out.URL.Scheme, out.URL.Host = "http", r.addr
	out.RequestURI = ""
	out.Host = req.Host
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	if c := req.Header.Get("Connection"); c != "" {
		for _, f := range strings.Split(c, ",") {
			out.Header.Del(strings.TrimSpace(f))
		}
	}
	if src.IsValid() {
		ip := src.String()
		if prior := req.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		out.Header.Set("X-Forwarded-For", ip)
	}
	return out
}

// traced returns out with a trace that sets wrote once the whole request
// has been written to the node's connection: bytes_in counts what reached
// a node, and a failed round trip may have sent nothing.
func traced(out *http.Request) (*http.Request, *atomic.Bool) {
	wrote := new(atomic.Bool)
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			wrote.Store(true)
		}
	}}
	return out.WithContext(httptrace.WithClientTrace(out.Context(), trace)), wrote
}

// headerBytes is the size of a request's line and header as sent.
func headerBytes(r *http.Request) int64 {
	n := len(r.Method) + 1 + len(r.URL.RequestURI()) + len(" HTTP/1.1\r\n") + len("Host: \r\n") + len(r.Host) + 2
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return int64(n)
}

// countingBody counts a request body's bytes as the node reads them.
type countingBody struct {
	io.ReadCloser
	n atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// relay copies a node's response to the client, lowering the node's
// pending bytes as they go out. If the node fails in the middle of a GET's
// body, the rest is fetched from another node with a Range request bound to
// the same ETag (every node serves the same file from the shared file
// system), so the client still gets the whole, identical body.
//
// r comes counted as active with size pending; relay returns the server
// that is counted active when it ends (the one that sent the last bytes),
// with no pending bytes left charged to any.
func (p *httpProxy) relay(w http.ResponseWriter, req *http.Request, resp *http.Response, r *real, size int64, src netip.Addr, tried map[*real]bool, cn *conn) *real {
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	resumable := req.Method == http.MethodGet && resp.StatusCode == http.StatusOK && resp.ContentLength > 0 &&
		resp.Header.Get("ETag") != "" && req.Header.Get("Range") == ""
	etag, total := resp.Header.Get("ETag"), resp.ContentLength
	left := size // pending bytes charged to r
	var sent int64
	for {
		n, err := p.copyBody(w, resp.Body, r, &left)
		resp.Body.Close()
		sent += n
		if err == nil || !resumable || sent >= total || req.Context().Err() != nil {
			if err != nil {
				r.failed.Add(1)
			}
			break
		}
		// The node failed mid-body.
		r.failed.Add(1)
		tried[r] = true
		next, nresp := p.resume(req, src, tried, etag, sent, total)
		if nresp == nil {
			break // the client sees a short body, as with any proxy
		}
		// The rest is next's to send: move the flow and what it still
		// owes from r to next (resume's pick counted next active).
		r.active.Add(-1)
		r.pending.Add(-left)
		next.pending.Add(left)
		p.s.moveConn(cn, next)
		next.requests.Add(1)
		r, resp = next, nresp
	}
	r.pending.Add(-left)
	return r
}

// copyBody streams a body to the client; *left counts down the pending
// bytes charged to r.
func (p *httpProxy) copyBody(w http.ResponseWriter, body io.Reader, r *real, left *int64) (int64, error) {
	buf := make([]byte, 32<<10)
	var sent int64
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return sent, nil // the client went away: nothing to resume
			}
			sent += int64(n)
			r.bytesOut.Add(int64(n))
			if dec := min(int64(n), *left); dec > 0 {
				r.pending.Add(-dec)
				*left -= dec
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return sent, nil
			}
			return sent, err
		}
	}
}

// resume asks another node for bytes [from, total) of the same entity. The
// server it returns is counted active (by pick).
func (p *httpProxy) resume(req *http.Request, src netip.Addr, tried map[*real]bool, etag string, from, total int64) (*real, *http.Response) {
	for {
		r, err := p.s.pick(src, 0, tried)
		if err != nil {
			return nil, nil
		}
		out, wrote := traced(outgoing(req, r, src))
		out.Header.Set("Range", "bytes="+strconv.FormatInt(from, 10)+"-")
		out.Header.Set("If-Range", etag)
		resp, err := p.tr.RoundTrip(out)
		if err == nil || wrote.Load() {
			r.bytesIn.Add(headerBytes(out))
		}
		p.s.done(src)
		if err == nil && resp.StatusCode == http.StatusPartialContent && resp.Header.Get("ETag") == etag &&
			strings.HasPrefix(resp.Header.Get("Content-Range"), "bytes "+strconv.FormatInt(from, 10)+"-") {
			return r, resp
		}
		if err == nil {
			resp.Body.Close()
		}
		r.active.Add(-1)
		r.failed.Add(1)
		tried[r] = true
	}
}

// classify decides how the proxy treats a request: whether it may be sent
// again to another node when the first fails before answering (GET and HEAD
// without a body: they change nothing), and which file of the virtual
// domains it asks for ("" when that is not a file fetch).
func classify(req *http.Request, docroot string) (retry bool, file string) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		return false, ""
	}
	retry = req.ContentLength == 0 && req.Header.Get("Transfer-Encoding") == ""
	if dom, ok := vhost.Domain(req.Host); ok && req.URL != nil {
		file = vhost.File(docroot, dom, req.URL.Path)
	}
	return retry, file
}

type stringAddr string

func (s stringAddr) Network() string { return "tcp" }
func (s stringAddr) String() string  { return string(s) }

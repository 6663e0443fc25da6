package director

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
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

func (p *httpProxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.srv.Shutdown(ctx)
	p.wg.Wait()
	p.tr.CloseIdleConnections()
}

// Hop-by-hop headers are not forwarded (RFC 9110 7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *httpProxy) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	defer p.s.d.metrics.observeRequest(p.s, time.Now())
	src := srcAddr(stringAddr(req.RemoteAddr)).Addr()
	retry, file := classify(req, p.s.d.cfg.Load().Docroot)
	var size int64
	if file != "" && p.s.cfg.Load().Scheduler == "mwlc" {
		size = p.s.d.fileSize(req.Context(), file)
	}
	tried := map[*real]bool{}
	for {
		r, err := p.s.pick(src, size, tried)
		if err != nil {
			http.Error(w, "503 no server available", http.StatusServiceUnavailable)
			return
		}
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
		if ip := src.String(); src.IsValid() {
			if prior := out.Header.Values("X-Forwarded-For"); len(prior) > 0 {
				ip = strings.Join(prior, ", ") + ", " + ip
			}
			out.Header.Set("X-Forwarded-For", ip)
		}
		resp, err := p.tr.RoundTrip(out)
		if err != nil {
			r.active.Add(-1)
			r.pending.Add(-size)
			r.failed.Add(1)
			p.s.done(src)
			if retry && req.Context().Err() == nil {
				tried[r] = true
				continue // nothing reached the client yet: try another node
			}
			http.Error(w, "502 bad gateway: "+err.Error(), http.StatusBadGateway)
			return
		}
		r.requests.Add(1)
		r.conns.Add(1)
		p.relay(w, req, resp, r, size, src, tried)
		r.active.Add(-1)
		p.s.done(src)
		return
	}
}

// relay copies a node's response to the client, lowering the node's
// pending bytes as they go out. If the node fails in the middle of a GET's
// body, the rest is fetched from another node with a Range request bound to
// the same ETag (every node serves the same file from the shared file
// system), so the client still gets the whole, identical body.
func (p *httpProxy) relay(w http.ResponseWriter, req *http.Request, resp *http.Response, r *real, size int64, src netip.Addr, tried map[*real]bool) {
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
	var sent int64
	for {
		n, err := p.copyBody(w, resp.Body, r, &size)
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
		r.active.Add(-1)
		r, resp = next, nresp // resume's pick counted it active
	}
	r.pending.Add(-size)
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

// resume asks another node for bytes [from, total) of the same entity.
func (p *httpProxy) resume(req *http.Request, src netip.Addr, tried map[*real]bool, etag string, from, total int64) (*real, *http.Response) {
	for {
		r, err := p.s.pick(src, 0, tried)
		if err != nil {
			return nil, nil
		}
		out := req.Clone(req.Context())
		out.URL.Scheme, out.URL.Host, out.RequestURI, out.Host = "http", r.addr, "", req.Host
		for _, h := range hopHeaders {
			out.Header.Del(h)
		}
		out.Header.Set("Range", "bytes="+strconv.FormatInt(from, 10)+"-")
		out.Header.Set("If-Range", etag)
		resp, err := p.tr.RoundTrip(out)
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

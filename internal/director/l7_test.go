package director

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// webNode is a fake real server for the l7 dataplane: it serves one body
// with an ETag and Range support, or (dies) sends half of it and drops the
// connection. It records the X-Forwarded-For of each request.
type webNode struct {
	srv  *httptest.Server
	mu   sync.Mutex
	xff  []string
	hits int
}

func newWebNode(t *testing.T, body []byte, dies bool) *webNode {
	n := &webNode{}
	n.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.mu.Lock()
		n.xff = append(n.xff, r.Header.Get("X-Forwarded-For"))
		n.hits++
		n.mu.Unlock()
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("X-Served-By", n.srv.Listener.Addr().String())
		if dies {
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			w.WriteHeader(200)
			w.Write(body[:len(body)/2])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the node fails mid-body
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	}))
	t.Cleanup(n.srv.Close)
	return n
}

func (n *webNode) addr() string { return n.srv.Listener.Addr().String() }

func (n *webNode) seen() (int, []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hits, append([]string(nil), n.xff...)
}

func httpGet(t *testing.T, u string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestL7MidBodyFailure: a node failing in the middle of a body is resumed
// from another node; the client gets the whole body, the resume request
// keeps X-Forwarded-For, and every counter comes back to zero. Before the
// fix the first node's active count went to -1 and the second's stayed
// at 1 for good, its pending bytes below zero, and the resume request had
// no X-Forwarded-For.
func TestL7MidBodyFailure(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	dying, good := newWebNode(t, body, true), newWebNode(t, body, false)
	vip := freeAddr(t, "tcp")
	d := start(t, fmt.Sprintf("service w {\n vip %s\n dataplane l7\n scheduler rr\n check none\n server %s\n server %s\n}\n", vip, dying.addr(), good.addr()))
	resp, got := httpGet(t, "http://"+vip+"/big", map[string]string{"X-Forwarded-For": "192.0.2.7"})
	if resp.StatusCode != 200 || !bytes.Equal(got, body) {
		t.Fatalf("status %d, %d bytes (want %d)", resp.StatusCode, len(got), len(body))
	}
	if n, xff := good.seen(); n != 1 || !strings.HasPrefix(xff[0], "192.0.2.7, 127.") {
		t.Fatalf("resume request: %d requests, X-Forwarded-For %q", n, xff)
	}
	for _, r := range d.Status()[0].Servers {
		if r.Active != 0 || r.Pending != 0 {
			t.Errorf("%s: active %d, pending %d after the request", r.Addr, r.Active, r.Pending)
		}
	}
}

// TestL7RetryKeepsXFF: a node refusing the request before answering is
// skipped; the node that answers sees the client in X-Forwarded-For.
func TestL7RetryKeepsXFF(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	good := newWebNode(t, []byte("hello"), false)
	vip := freeAddr(t, "tcp")
	start(t, fmt.Sprintf("service w {\n vip %s\n dataplane l7\n scheduler rr\n check none\n server %s\n server %s\n}\n", vip, dead, good.addr()))
	resp, got := httpGet(t, "http://"+vip+"/", nil)
	if resp.StatusCode != 200 || string(got) != "hello" {
		t.Fatalf("%d %q", resp.StatusCode, got)
	}
	if _, xff := good.seen(); len(xff) != 1 || !strings.HasPrefix(xff[0], "127.") {
		t.Fatalf("X-Forwarded-For after a retry: %q", xff)
	}
}

// TestL7BytesIn: what clients send through an l7 service is counted.
// Before the fix bytes_in stayed 0 for l7.
func TestL7BytesIn(t *testing.T) {
	n := newWebNode(t, []byte("hello"), false)
	vip := freeAddr(t, "tcp")
	d := start(t, fmt.Sprintf("service w {\n vip %s\n dataplane l7\n check none\n server %s\n}\n", vip, n.addr()))
	httpGet(t, "http://"+vip+"/some/path", map[string]string{"X-Long": strings.Repeat("x", 1000)})
	if in := d.Status()[0].Servers[0].BytesIn; in < 1000+int64(len("GET /some/path HTTP/1.1\r\n")) {
		t.Fatalf("bytes in %d after a request with a 1000-byte header", in)
	}
}

// raw sends a request as bytes and returns the status line.
func raw(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, req)
	line, _ := bufioLine(c)
	return line
}

func bufioLine(c net.Conn) (string, error) {
	var b []byte
	one := make([]byte, 1)
	for {
		if _, err := c.Read(one); err != nil {
			return string(b), err
		}
		if one[0] == '\n' {
			return strings.TrimSpace(string(b)), nil
		}
		b = append(b, one[0])
	}
}

// TestL7NoHostAndInternalPaths: a request without a Host is a 400, as the
// node answers; a node's own endpoints are not reachable through the VIP
// unless the service passes them. Before the fix both got the node's 200.
func TestL7NoHostAndInternalPaths(t *testing.T) {
	n := newWebNode(t, []byte("node says ok"), false)
	vip, vip2 := freeAddr(t, "tcp"), freeAddr(t, "tcp")
	start(t, fmt.Sprintf("service w {\n vip %s\n dataplane l7\n check none\n server %s\n}\nservice p {\n vip %s\n dataplane l7\n pass-internal on\n check none\n server %s\n}\n", vip, n.addr(), vip2, n.addr()))
	for _, req := range []string{"GET / HTTP/1.0\r\n\r\n", "GET / HTTP/1.1\r\nHost:\r\n\r\n", "GET / HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n"} {
		if got := raw(t, vip, req); !strings.Contains(got, " 400 ") {
			t.Errorf("%q: %q, want 400", req, got)
		}
	}
	if got := raw(t, vip, "GET / HTTP/1.0\r\nHost: www.example.test\r\n\r\n"); !strings.Contains(got, " 200 ") {
		t.Errorf("with a Host: %q", got)
	}
	for _, p := range internalPaths {
		if resp, _ := httpGet(t, "http://"+vip+p, nil); resp.StatusCode != 404 {
			t.Errorf("%s through the VIP: %d, want 404", p, resp.StatusCode)
		}
		if resp, _ := httpGet(t, "http://"+vip2+p, nil); resp.StatusCode != 200 {
			t.Errorf("%s through a pass-internal VIP: %d, want the node's 200", p, resp.StatusCode)
		}
	}
}

// TestSequentialSpreads: one connection after another through wlc, l4 and
// l7, spreads over the servers: closed connections count as inactive a
// while (LVS's TIME_WAIT). Before the fix every connection went to the
// first server.
func TestSequentialSpreads(t *testing.T) {
	t.Run("l4", func(t *testing.T) {
		servers := []string{tcpName(t), tcpName(t), tcpName(t)}
		vip := freeAddr(t, "tcp")
		d := start(t, fmt.Sprintf("service w {\n vip %s\n scheduler wlc\n check none\n server %s\n server %s\n server %s\n}\n", vip, servers[0], servers[1], servers[2]))
		count := map[string]int{}
		for i := 0; i < 30; i++ {
			got, err := ask(vip)
			if err != nil {
				t.Fatal(err)
			}
			count[got]++
			// The director ends its side a moment after the client: wait
			// for this connection to count as closed.
			waitFor(t, "connection closed", 5*time.Second, func() bool {
				for _, c := range d.Conns() {
					if c.State != "TIME_WAIT" {
						return false
					}
				}
				return true
			})
		}
		for _, s := range servers {
			if count[s] != 10 {
				t.Fatalf("30 sequential connections: %v", count)
			}
		}
		tw := 0
		for _, c := range d.Conns() {
			if c.State == "TIME_WAIT" && c.Expires > 50*time.Second && c.Proto == "TCP" {
				tw++
			}
		}
		if tw != 30 {
			t.Fatalf("%d TIME_WAIT entries, want 30: %+v", tw, d.Conns())
		}
	})
	t.Run("l7", func(t *testing.T) {
		nodes := []*webNode{newWebNode(t, []byte("a"), false), newWebNode(t, []byte("b"), false), newWebNode(t, []byte("c"), false)}
		vip := freeAddr(t, "tcp")
		start(t, fmt.Sprintf("service w {\n vip %s\n dataplane l7\n scheduler wlc\n check none\n server %s\n server %s\n server %s\n}\n", vip, nodes[0].addr(), nodes[1].addr(), nodes[2].addr()))
		for i := 0; i < 30; i++ {
			httpGet(t, "http://"+vip+"/", nil)
		}
		for _, n := range nodes {
			if hits, _ := n.seen(); hits != 10 {
				t.Fatalf("30 sequential requests: %d on %s", hits, n.addr())
			}
		}
	})
}

// TestInactiveExpires: a closed connection stops counting after the
// service's inactive-timeout (a moved clock, no sleeping).
func TestInactiveExpires(t *testing.T) {
	a := tcpName(t)
	vip := freeAddr(t, "tcp")
	var mu sync.Mutex
	now := time.Unix(1e9, 0)
	d := New(quiet)
	d.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	if err := d.Apply(mustParse(t, fmt.Sprintf("service w {\n vip %s\n inactive-timeout 30s\n check none\n server %s\n}\n", vip, a))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	if _, err := ask(vip); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "connection closed", 5*time.Second, func() bool {
		c := d.Conns()
		return len(c) == 1 && c[0].State == "TIME_WAIT"
	})
	if r := d.Status()[0].Servers[0]; r.Active != 0 || r.Inactive != 1 {
		t.Fatalf("active %d inactive %d", r.Active, r.Inactive)
	}
	if c := d.Conns(); len(c) != 1 || c[0].State != "TIME_WAIT" || c[0].Expires != 30*time.Second || c[0].Real != a || c[0].VIP != vip {
		t.Fatalf("conns %+v", c)
	}
	mu.Lock()
	now = now.Add(31 * time.Second)
	mu.Unlock()
	if r := d.Status()[0].Servers[0]; r.Inactive != 0 || len(d.Conns()) != 0 {
		t.Fatalf("after the timeout: inactive %d, conns %+v", r.Inactive, d.Conns())
	}
}

// TestSizeCacheBoundedInBytes: 10^5 unique long URLs keep the mwlc size
// cache within its byte budget. Before the fix the cache held up to 50000
// entries whatever their length (about 1 MB per long URL in the node's
// words; here ~2.5 KiB each, over 100 MiB).
func TestSizeCacheBoundedInBytes(t *testing.T) {
	var c sizeCache
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	key := make([]byte, 4096)
	for i := range key {
		key[i] = 'a' + byte(i%26)
	}
	for i := 0; i < 100000; i++ {
		n := 1024 + i%3072
		k := fmt.Sprintf("/www/example/%08d/", i) + string(key[:n])
		if got := c.get(k, func() int64 { return int64(n) }); got != int64(n) {
			t.Fatalf("size %d, want %d", got, n)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if b, _ := c.accounted(); b > defaultSizeCacheBytes {
		t.Fatalf("cache accounts %d bytes, over its %d", b, defaultSizeCacheBytes)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 2*defaultSizeCacheBytes {
		t.Fatalf("heap grew %d MiB for a cache of %d MiB", grew>>20, defaultSizeCacheBytes>>20)
	}
	runtime.KeepAlive(&c)
	// The most recent entry is still there, the first long gone.
	hit := false
	k := fmt.Sprintf("/www/example/%08d/", 99999) + string(key[:1024+99999%3072])
	c.get(k, func() int64 { hit = true; return 0 })
	if hit {
		t.Fatal("the most recent entry was dropped")
	}
}

// TestL7RefusedNodeCountsNothing: a node that refused the connection got
// no bytes, and the request retried on another node is one new connection
// of the service. Before the fix the refused node was counted the request's
// header as bytes_in, and the retry counted as another new connection.
func TestL7RefusedNodeCountsNothing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	good := newWebNode(t, []byte("hello"), false)
	vip := freeAddr(t, "tcp")
	d := start(t, fmt.Sprintf("service w {\n vip %s\n dataplane l7\n scheduler rr\n check none\n server %s\n server %s\n}\n", vip, dead, good.addr()))
	for i := 0; i < 4; i++ {
		if resp, got := httpGet(t, "http://"+vip+"/", nil); resp.StatusCode != 200 || string(got) != "hello" {
			t.Fatalf("%d %q", resp.StatusCode, got)
		}
	}
	st := d.Status()[0]
	for _, r := range st.Servers {
		switch r.Addr {
		case dead:
			if r.Failed == 0 || r.BytesIn != 0 {
				t.Errorf("refused node %s: failed %d, bytes_in %d (want some failures, 0 bytes)", dead, r.Failed, r.BytesIn)
			}
		default:
			if r.BytesIn == 0 || r.Requests != 4 {
				t.Errorf("node %s: bytes_in %d, requests %d", r.Addr, r.BytesIn, r.Requests)
			}
		}
	}
	if st.NewConns != 4 {
		t.Errorf("4 requests (some retried): the service counts %d new connections", st.NewConns)
	}
}

// TestL7BadGatewayHidesNodes: a 502 tells the client nothing of the nodes
// behind the VIP. Before the fix its body was the transport's error, with
// the node's address in it.
func TestL7BadGatewayHidesNodes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	vip := freeAddr(t, "tcp")
	start(t, fmt.Sprintf("service w {\n vip %s\n dataplane l7\n check none\n server %s\n}\n", vip, dead))
	// A POST is not retried: it gets the node's failure as a 502.
	resp, err := http.Post("http://"+vip+"/", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_, port, _ := net.SplitHostPort(dead)
	if resp.StatusCode != http.StatusBadGateway || strings.Contains(string(b), port) || strings.Contains(string(b), "dial") {
		t.Fatalf("%d %q: want a 502 that names no node", resp.StatusCode, b)
	}
}

// TestL7ReshapeFreesVIPAtOnce: reshaping an l7 service (l7 to l4 on the
// same VIP) while a slow response is in flight takes the VIP over at once,
// and the response in flight still completes. Before the fix Apply waited
// (holding the director's lock) for the old proxy's Shutdown, up to 30 s,
// with nothing listening on the VIP meanwhile.
func TestL7ReshapeFreesVIPAtOnce(t *testing.T) {
	release := make(chan struct{})
	inFlight := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		w.WriteHeader(200)
		w.Write([]byte("01234"))
		w.(http.Flusher).Flush()
		close(inFlight)
		<-release
		w.Write([]byte("56789"))
	}))
	t.Cleanup(slow.Close)
	a := tcpName(t)
	vip := freeAddr(t, "tcp")
	d := start(t, fmt.Sprintf("service w {\n vip %s\n dataplane l7\n check none\n server %s\n}\n", vip, slow.Listener.Addr()))
	var once sync.Once // before d.Close, which waits for the drain
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	l4 := mustParse(t, fmt.Sprintf("service w {\n vip %s\n check none\n server %s\n}\n", vip, a))
	type result struct {
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + vip + "/")
		if err != nil {
			got <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- result{string(b), err}
	}()
	<-inFlight
	applied := make(chan error, 1)
	go func() {
		applied <- d.Apply(l4)
	}()
	select {
	case err := <-applied:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second): // the old drain took 30 s
		t.Fatal("Apply waits for the old l7 proxy's response in flight")
	}
	if who, err := ask(vip); err != nil || who != a {
		t.Fatalf("the VIP after the reshape: %q %v, want the l4 service's %s", who, err, a)
	}
	once.Do(func() { close(release) })
	if r := <-got; r.err != nil || r.body != "0123456789" {
		t.Fatalf("the response in flight during the reshape: %q %v", r.body, r.err)
	}
}

// TestL7CloseLetsResponseFinish: Close still lets an l7 response in
// flight finish (close drains in the background now; Close waits for it).
func TestL7CloseLetsResponseFinish(t *testing.T) {
	release := make(chan struct{})
	inFlight := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		w.WriteHeader(200)
		w.Write([]byte("01234"))
		w.(http.Flusher).Flush()
		close(inFlight)
		<-release
		w.Write([]byte("56789"))
	}))
	t.Cleanup(slow.Close)
	vip := freeAddr(t, "tcp")
	d := start(t, fmt.Sprintf("service w {\n vip %s\n dataplane l7\n check none\n server %s\n}\n", vip, slow.Listener.Addr()))
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + vip + "/")
		if err != nil {
			got <- err.Error()
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b = append(b, " "+err.Error()...)
		}
		got <- string(b)
	}()
	<-inFlight
	closed := make(chan struct{})
	go func() { d.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned with a response in flight")
	case <-time.After(300 * time.Millisecond):
	}
	once.Do(func() { close(release) })
	if b := <-got; b != "0123456789" {
		t.Fatalf("the response in flight during Close: %q", b)
	}
	<-closed
}

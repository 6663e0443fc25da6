package node

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/qos"
	"golang.org/x/sys/unix"
)

// threadNice is the calling thread's nice, from /proc (field 19 of stat).
func threadNice(t *testing.T) int {
	b, err := os.ReadFile("/proc/thread-self/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // after the command name
	n, err := strconv.Atoi(f[16])                            // field 19 counted from 1, 3 fields before f[0]
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestQoSThreadNice: a class's request runs on a thread with its nice;
// the thread serving a nice-0 class is not nice.
func TestQoSThreadNice(t *testing.T) {
	q := newNodeQoS(nil, 4, slog.Default())
	var mu sync.Mutex
	seen := map[int]int{} // nice asked -> nice of the thread that ran the job
	for _, nice := range []int{0, 5, 19, 5} {
		q.run(nice, func() {
			n := threadNice(t)
			mu.Lock()
			seen[nice] = n
			mu.Unlock()
		})
	}
	for nice, got := range seen {
		if want := min(19, q.base+nice); got != want {
			t.Errorf("class nice %d ran on a thread with nice %d, want %d", nice, got, want)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("seen %v", seen)
	}
	// This goroutine's own thread is untouched.
	if n := threadNice(t); n != q.base {
		t.Errorf("the caller's thread has nice %d, want %d", n, q.base)
	}
}

// TestQoSTrust: only a trusted peer's tag counts, and only a well-formed one.
func TestQoSTrust(t *testing.T) {
	q := newNodeQoS([]netip.Prefix{netip.MustParsePrefix("127.0.0.5/32")}, 1, slog.Default())
	for _, tc := range []struct {
		peer, hdr string
		ok        bool
	}{
		{"127.0.0.5:1234", "gold; priority=10; nice=0", true},
		{"127.0.0.6:1234", "gold; priority=10; nice=0", false},
		{"127.0.0.5:1234", "gold; priority=10", false},
		{"127.0.0.5:1234", "", false},
		{"[::ffff:127.0.0.5]:1234", "gold; priority=10; nice=0", true},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.peer
		if tc.hdr != "" {
			r.Header.Set(qos.Header, tc.hdr)
		}
		tag, ok := q.tagOf(r)
		if ok != tc.ok || (ok && tag.Name != "gold") {
			t.Errorf("%s %q: %+v %v", tc.peer, tc.hdr, tag, ok)
		}
	}
}

// TestQoSPriorityOrder: with every worker busy, a higher priority waiter
// gets the next slot though a lower one waited longer.
func TestQoSPriorityOrder(t *testing.T) {
	q := newNodeQoS(nil, 1, slog.Default())
	if err := q.acquire(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 3)
	var wg sync.WaitGroup
	waiting := func(n int) {
		for i := 0; i < 2000; i++ {
			q.mu.Lock()
			l := len(q.waiting)
			q.mu.Unlock()
			if l == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatalf("never %d waiting", n)
	}
	for i, p := range []int{1, 1, 10} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := q.acquire(context.Background(), p); err != nil {
				t.Error(err)
				return
			}
			order <- p*10 + i
			q.release()
		}()
		waiting(i + 1)
	}
	q.release()
	wg.Wait()
	close(order)
	var got []int
	for v := range order {
		got = append(got, v)
	}
	if len(got) != 3 || got[0] != 102 || got[1] != 10 || got[2] != 11 {
		t.Fatalf("order %v, want [102 10 11] (priority 10 first, then 1s in arrival order)", got)
	}
	// A waiter whose client left gives up its place.
	if err := q.acquire(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.acquire(ctx, 5); err == nil {
		t.Fatal("a canceled waiter was admitted")
	}
	q.release()
	if q.running != 0 || len(q.waiting) != 0 {
		t.Fatalf("running %d waiting %d", q.running, len(q.waiting))
	}
}

// TestQoSWireMark: on a real TCP connection, the node sets the socket's
// TOS (IPv6: traffic class) and SO_PRIORITY for each request's class
// before writing the response: the top class EF and 6, a lower class, an
// untrusted or an untagged request 0, also when they follow a gold request
// on the same keep-alive connection. Over IPv4, IPv6 (::1) and an IPv6
// listener that takes an IPv4 client (v4-mapped: the IPv4 TOS applies).
func TestQoSWireMark(t *testing.T) {
	for _, tc := range []struct{ name, listen, dial string }{
		{"ipv4", "127.0.72.1:0", ""},
		{"ipv6", "[::1]:0", ""},
		{"v4-mapped", "[::]:0", "127.0.72.1"},
	} {
		t.Run(tc.name, func(t *testing.T) { testWireMark(t, tc.listen, tc.dial) })
	}
}

func testWireMark(t *testing.T, listen, dialHost string) {
	s := &Server{qos: newNodeQoS([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}, 2, slog.Default())}
	type mark struct{ tos, prio int }
	got := make(chan mark, 1)
	srv := &http.Server{ConnContext: connContext, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serveQoS(w, r, func() {
			// What the kernel holds for this socket as the response is written.
			c := r.Context().Value(connCtxKey{}).(net.Conn)
			raw, err := c.(syscall.Conn).SyscallConn()
			if err != nil {
				t.Error(err)
				return
			}
			var m mark
			raw.Control(func(fd uintptr) {
				if a := c.LocalAddr().(*net.TCPAddr); a.IP.To4() == nil {
					m.tos, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS)
				} else {
					m.tos, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS)
				}
				m.prio, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PRIORITY)
			})
			got <- m
			w.Write([]byte("ok"))
		})
	})}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		lab.Need(t, lab.Err("listen "+listen, err))
	}
	go srv.Serve(ln)
	defer srv.Close()
	addr := ln.Addr().String()
	if dialHost != "" {
		addr = net.JoinHostPort(dialHost, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1} // one keep-alive connection for all
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for _, tc := range []struct {
		hdr  string
		want mark
	}{
		{"gold; priority=10; nice=0", mark{TOSTop, SockPrioTop}},
		{"bulk; priority=1; nice=5", mark{0, 0}},
		{"gold; priority=10; nice=0", mark{TOSTop, SockPrioTop}},
		{"", mark{0, 0}},
		{"gold; priority=10; nice=0", mark{TOSTop, SockPrioTop}},
		{"default; priority=0; nice=10", mark{0, 0}},
		{"gold; priority=10", mark{0, 0}}, // malformed: untagged
	} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		if tc.hdr != "" {
			req.Header.Set(qos.Header, tc.hdr)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if m := <-got; m != tc.want {
			t.Errorf("%q: TOS %#x priority %d, want %#x %d", tc.hdr, m.tos, m.prio, tc.want.tos, tc.want.prio)
		}
	}
	// An untrusted peer's gold tag marks nothing.
	s.qos.trust = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Header.Set(qos.Header, "gold; priority=10; nice=0")
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if m := <-got; m != (mark{}) {
		t.Errorf("untrusted gold: %+v, want unmarked", m)
	}
}

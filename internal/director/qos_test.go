package director

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/qos"
)

// h8Addr is a free port on this helper's loopback range 127.0.89.0/24.
func h8Addr(t *testing.T, host int) string {
	t.Helper()
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.89.%d:0", host))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// gateNode is a real server that holds each request until the test lets
// it go, and records the class each arrived with.
type gateNode struct {
	srv     *httptest.Server
	mu      sync.Mutex
	classes []string
	gate    chan struct{}
}

func newGateNode(t *testing.T) *gateNode {
	n := &gateNode{gate: make(chan struct{})}
	l, err := net.Listen("tcp", "127.0.89.2:0")
	if err != nil {
		t.Fatal(err)
	}
	n.srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.mu.Lock()
		n.classes = append(n.classes, r.Header.Get(qos.Header))
		n.mu.Unlock()
		select {
		case <-n.gate:
		case <-time.After(10 * time.Second):
		}
		w.Write([]byte("ok"))
	})}}
	n.srv.Start()
	t.Cleanup(func() { close(n.gate); n.srv.Close() })
	return n
}

func (n *gateNode) seen() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.classes...)
}

func (n *gateNode) release() { n.gate <- struct{}{} }

func qosStats(t *testing.T, d *Director, svc string) map[string]qos.Stats {
	s := (*d.services.Load())[svc]
	st := s.qos.Load()
	if st == nil || st.adm == nil {
		return nil
	}
	cs, _, _ := st.adm.Stats()
	out := map[string]qos.Stats{}
	for _, c := range cs {
		out[c.Name] = c
	}
	return out
}

type reply struct {
	status     int
	retryAfter string
	err        error
}

func qget(vip string, hdr map[string]string) chan reply {
	ch := make(chan reply, 1)
	go func() {
		req, _ := http.NewRequest("GET", "http://"+vip+"/x", nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 15 * time.Second}
		resp, err := cl.Do(req)
		if err != nil {
			ch <- reply{err: err}
			return
		}
		resp.Body.Close()
		ch <- reply{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	}()
	return ch
}

// TestL7QoS: with the pool's one slot taken, a gold request that came
// after a best-effort one is sent first; a reject class is shed at once
// and a queued one at its deadline, both with 503 and their Retry-After;
// a client's own X-Corral-Class never reaches the node.
func TestL7QoS(t *testing.T) {
	n := newGateNode(t)
	vip := h8Addr(t, 1)
	d := start(t, fmt.Sprintf(`
qos gold { priority 10; header X-Tier: gold }
qos bulk { priority 1; prefix /bulk; overload reject retry-after=9 }
qos short { priority 2; prefix /short; overload queue deadline=50ms retry-after=4 }
qos default { overload queue deadline=10s retry-after=2 }
service w {
    vip %s
    dataplane l7
    scheduler rr
    check none
    qos-inflight 1
    server %s
}
`, vip, n.srv.Listener.Addr()))
	waitSeen := func(k int) {
		t.Helper()
		for i := 0; i < 2000 && len(n.seen()) < k; i++ {
			time.Sleep(time.Millisecond)
		}
		if len(n.seen()) < k {
			t.Fatalf("the node saw %d requests, want %d", len(n.seen()), k)
		}
	}
	waitWaiting := func(class string, k int) {
		t.Helper()
		for i := 0; i < 2000 && qosStats(t, d, "w")[class].Waiting < k; i++ {
			time.Sleep(time.Millisecond)
		}
		if got := qosStats(t, d, "w")[class].Waiting; got < k {
			t.Fatalf("%d %s requests waiting, want %d", got, class, k)
		}
	}
	a := qget(vip, map[string]string{qos.Header: "gold; priority=99; nice=0"}) // a forged tag
	waitSeen(1)
	b := qget(vip, nil)
	waitWaiting("default", 1)
	c := qget(vip, map[string]string{"X-Tier": "gold"})
	waitWaiting("gold", 1)

	// Over the limit: bulk is shed at once, short at its deadline.
	bulk := qget2(vip, "/bulk/f")
	short := qget2(vip, "/short/f")
	for _, x := range []struct {
		ch   chan reply
		ra   string
		name string
	}{{bulk, "9", "bulk"}, {short, "4", "short"}} {
		r := <-x.ch
		if r.err != nil || r.status != 503 || r.retryAfter != x.ra {
			t.Errorf("%s over the limit: %+v, want 503 with Retry-After %s", x.name, r, x.ra)
		}
	}

	n.release() // a ends: the slot goes to gold (c), not to b that waited longer
	waitSeen(2)
	n.release()
	waitSeen(3)
	n.release()
	for _, ch := range []chan reply{a, b, c} {
		if r := <-ch; r.err != nil || r.status != 200 {
			t.Errorf("reply %+v", r)
		}
	}
	seen := n.seen()
	want := []string{"default; priority=0; nice=15", "gold; priority=10; nice=0", "default; priority=0; nice=15"}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("the node saw classes %q, want %q", seen, want)
		}
	}
	st := qosStats(t, d, "w")
	if st["bulk"].Shed[qos.ShedBusy] < 1 || st["short"].Shed[qos.ShedDeadline] != 1 || st["gold"].Admitted != 1 || st["default"].Admitted != 2 {
		t.Errorf("stats %+v", st)
	}
}

func qget2(vip, path string) chan reply {
	ch := make(chan reply, 1)
	go func() {
		cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 15 * time.Second}
		resp, err := cl.Get("http://" + vip + path)
		if err != nil {
			ch <- reply{err: err}
			return
		}
		resp.Body.Close()
		ch <- reply{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	}()
	return ch
}

// TestL7QoSReserve: with qos-reserve 1 of qos-per-server 2 (one server),
// a best-effort request waits while one is in flight, though a slot is
// free, and a gold request that came after it is sent at once; while
// either of the two is still in flight the best-effort one keeps
// waiting (the one free slot is gold's); once both end it goes.
func TestL7QoSReserve(t *testing.T) {
	n := newGateNode(t)
	vip := h8Addr(t, 2)
	d := start(t, fmt.Sprintf(`
qos gold { priority 10; header X-Tier: gold }
qos default { overload queue deadline=10s retry-after=2 }
service w {
    vip %s
    dataplane l7
    scheduler rr
    check none
    qos-per-server 2
    qos-reserve 1
    server %s
}
`, vip, n.srv.Listener.Addr()))
	waitSeen := func(k int) {
		t.Helper()
		for i := 0; i < 2000 && len(n.seen()) < k; i++ {
			time.Sleep(time.Millisecond)
		}
		if len(n.seen()) < k {
			t.Fatalf("the node saw %d requests, want %d", len(n.seen()), k)
		}
	}
	a := qget(vip, nil)
	waitSeen(1)
	b := qget(vip, nil)
	for i := 0; i < 2000 && qosStats(t, d, "w")["default"].Waiting < 1; i++ {
		time.Sleep(time.Millisecond)
	}
	if st := qosStats(t, d, "w")["default"]; st.Waiting != 1 || st.InFlight != 1 {
		t.Fatalf("default: %+v, want one in flight and one waiting (the second slot is gold's)", st)
	}
	c := qget(vip, map[string]string{"X-Tier": "gold"})
	waitSeen(2)
	if s := n.seen(); s[1] != "gold; priority=10; nice=0" {
		t.Fatalf("the node saw %q, want gold second", s)
	}
	// One of the two in flight ends (the gate lets either go): one slot
	// is free, but it is the reserved one, so b still waits.
	n.release()
	second := c
	select {
	case r := <-a:
		if r.err != nil || r.status != 200 {
			t.Fatalf("a: %+v", r)
		}
	case r := <-c:
		if r.err != nil || r.status != 200 {
			t.Fatalf("c: %+v", r)
		}
		second = a
	}
	time.Sleep(50 * time.Millisecond)
	if st := qosStats(t, d, "w")["default"]; st.Waiting != 1 || len(n.seen()) != 2 {
		t.Fatalf("with one slot free: default %+v, the node saw %d: best-effort took the reserved slot", st, len(n.seen()))
	}
	// The other ends: two free, b goes.
	n.release()
	if r := <-second; r.err != nil || r.status != 200 {
		t.Fatalf("second: %+v", r)
	}
	waitSeen(3)
	n.release()
	if r := <-b; r.err != nil || r.status != 200 {
		t.Errorf("b: %+v", r)
	}
	if s := n.seen(); s[2] != "default; priority=0; nice=5" {
		t.Errorf("the node saw %q, want the waiting default third", s)
	}
}

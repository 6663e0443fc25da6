package health

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

func TestRiseFall(t *testing.T) {
	var changes []bool
	c := &Checker{Check: Check{Rise: 2, Fall: 3}, OnChange: func(up bool, _ error) { changes = append(changes, up) }}
	c.up = true
	fail, ok := errors.New("x"), error(nil)
	for _, e := range []error{fail, fail, ok, fail, fail, fail, fail, ok, fail, ok, ok, ok} {
		c.record(e)
	}
	if len(changes) != 2 || changes[0] != false || changes[1] != true {
		t.Fatalf("changes %v, want [false true]", changes)
	}
}

func TestProbes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.Write([]byte("all ok"))
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	ctx := context.Background()
	c := Check{Type: "tcp", Status: 200, Path: "/healthz", Interval: 2 * time.Second, Rise: 2, Fall: 3}
	c.Timeout = time.Second
	cases := []struct {
		check Check
		addr  string
		ok    bool
	}{
		{with(c, "tcp", ""), addr, true},
		{with(c, "tcp", ""), dead, false},
		{with(c, "http", ""), addr, true},
		{with(c, "http", "all ok"), addr, true},
		{with(c, "http", "nope"), addr, false},
		{func() Check { x := with(c, "http", ""); x.Path = "/missing"; return x }(), addr, false},
		{func() Check { x := with(c, "exec", ""); x.Command = []string{"true"}; return x }(), addr, true},
		{func() Check { x := with(c, "http", "all ok"); x.Port = port(addr); return x }(), dead, true},
		{func() Check { x := with(c, "tcp", ""); x.Port = port(dead); return x }(), addr, false},
		{func() Check { x := with(c, "exec", ""); x.Command = []string{"false"}; return x }(), addr, false},
	}
	for i, tc := range cases {
		if err := Probe(ctx, tc.check, tc.addr); (err == nil) != tc.ok {
			t.Errorf("case %d (%s): %v", i, tc.check.Type, err)
		}
	}
}

func with(c Check, typ, body string) Check {
	c.Type, c.BodyMatch = typ, body
	return c
}

func port(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// fakeClock hands out one ticker whose ticks the test sends.
type fakeClock struct{ t *fakeTicker }

type fakeTicker struct {
	c        chan time.Time
	interval time.Duration
}

func (f *fakeClock) NewTicker(d time.Duration) Ticker {
	f.t.interval = d
	return f.t
}
func (t *fakeTicker) C() <-chan time.Time { return t.c }
func (t *fakeTicker) Stop()               {}

// TestCheckerPacedByClock runs a Checker on a fake clock and fake probes:
// fall failures take the server out, rise successes bring it back, and
// nothing sleeps.
func TestCheckerPacedByClock(t *testing.T) {
	clock := &fakeClock{t: &fakeTicker{c: make(chan time.Time)}}
	results := make(chan error)
	changes := make(chan bool, 10)
	c := &Checker{Check: Check{Type: "tcp", Interval: time.Hour, Timeout: time.Hour, Rise: 2, Fall: 3}, Addr: "x:1", Clock: clock,
		Probe:    func(ctx context.Context, _ Check, _ string) error { return <-results },
		OnChange: func(up bool, _ error) { changes <- up }}
	c.Start()
	defer c.Stop()
	fail := errors.New("refused")
	// step answers one probe and waits until the checker has recorded it
	// (it then waits for the next tick).
	step := func(err error) {
		results <- err
		clock.t.c <- time.Time{}
	}
	step(fail)
	step(fail)
	if up, _ := c.State(); !up || len(changes) != 0 {
		t.Fatalf("down after 2 failures with fall=3")
	}
	step(fail)
	if up, _ := c.State(); up || <-changes != false {
		t.Fatalf("still up after 3 failures")
	}
	step(nil)
	if up, _ := c.State(); up {
		t.Fatalf("up after 1 success with rise=2")
	}
	step(nil)
	if up, _ := c.State(); !up || <-changes != true {
		t.Fatalf("still down after 2 successes")
	}
	if clock.t.interval != time.Hour {
		t.Fatalf("ticker interval %v", clock.t.interval)
	}
	go func() { results <- nil }() // the probe in flight when Stop comes
}

// TestCheckerStartsDown: with Down the server starts down and comes up
// after Rise successes (the director carries a down server's state into
// a new checker when its check is edited).
func TestCheckerStartsDown(t *testing.T) {
	clock := &fakeClock{t: &fakeTicker{c: make(chan time.Time)}}
	results := make(chan error)
	changes := make(chan bool, 4)
	c := &Checker{Check: Check{Type: "tcp", Interval: time.Hour, Rise: 2, Fall: 1}, Addr: "x", Clock: clock, Down: true,
		Probe: func(ctx context.Context, _ Check, _ string) error {
			select {
			case err := <-results:
				return err
			case <-ctx.Done(): // Stop, also when the test fails
				return ctx.Err()
			}
		},
		OnChange: func(up bool, _ error) { changes <- up }}
	c.Start()
	defer c.Stop()
	if up, _ := c.State(); up {
		t.Fatal("up before any probe with Down")
	}
	step := func(err error) {
		results <- err
		clock.t.c <- time.Time{}
	}
	step(nil)
	if up, _ := c.State(); up || len(changes) != 0 {
		t.Fatal("up after 1 success with rise=2")
	}
	step(nil)
	if up, _ := c.State(); !up || <-changes != true {
		t.Fatal("still down after 2 successes")
	}
}

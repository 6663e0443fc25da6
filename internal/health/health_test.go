package health

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/config"
)

func TestRiseFall(t *testing.T) {
	var changes []bool
	c := &Checker{Check: config.Check{Rise: 2, Fall: 3}, OnChange: func(up bool, _ error) { changes = append(changes, up) }}
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
	c := config.DefaultCheck()
	c.Timeout = time.Second
	cases := []struct {
		check config.Check
		addr  string
		ok    bool
	}{
		{with(c, "tcp", ""), addr, true},
		{with(c, "tcp", ""), dead, false},
		{with(c, "http", ""), addr, true},
		{with(c, "http", "all ok"), addr, true},
		{with(c, "http", "nope"), addr, false},
		{func() config.Check { x := with(c, "http", ""); x.Path = "/missing"; return x }(), addr, false},
		{func() config.Check { x := with(c, "exec", ""); x.Command = []string{"true"}; return x }(), addr, true},
		{func() config.Check { x := with(c, "exec", ""); x.Command = []string{"false"}; return x }(), addr, false},
	}
	for i, tc := range cases {
		if err := Probe(ctx, tc.check, tc.addr); (err == nil) != tc.ok {
			t.Errorf("case %d (%s): %v", i, tc.check.Type, err)
		}
	}
}

func with(c config.Check, typ, body string) config.Check {
	c.Type, c.BodyMatch = typ, body
	return c
}

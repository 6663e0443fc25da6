package node

import (
	"context"
	"net"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// TestDefaultAdminNotWildcard: without --admin, a node on the wildcard
// address keeps its unauthenticated /load and /metrics on loopback; it
// used to listen on the wildcard (":9080").
func TestDefaultAdminNotWildcard(t *testing.T) {
	for listen, want := range map[string]string{
		":8080":           "127.0.0.1:9080",
		"0.0.0.0:8080":    "127.0.0.1:9080",
		"[::]:8080":       "[::1]:9080",
		":0":              "127.0.0.1:0",
		"127.0.0.21:8080": "127.0.0.21:9080",
		"10.0.0.5:80":     "10.0.0.5:9080",
	} {
		if got, err := DefaultAdminAddr(listen); err != nil || got != want {
			t.Errorf("DefaultAdminAddr(%q) = %q, %v; want %q", listen, got, err, want)
		}
	}
	fsys := pfstest.Start(t, 1)
	s := New(Config{Meta: fsys.Meta.Addr})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan string, 1)
	go func() { done <- s.Serve(ctx, ":0", func(a string) { ready <- a }) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	host, _, err := net.SplitHostPort(s.AdminAddr())
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Fatalf("a node on :0 without --admin has its admin listener on %s, not on loopback", s.AdminAddr())
	}
}

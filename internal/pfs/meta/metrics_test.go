package meta

import (
	"context"
	"net"
	"strings"
	"testing"
)

// Healthy tells the truth: ok while the store answers, an error once it
// cannot.
func TestHealthyFollowsTheStore(t *testing.T) {
	s, err := Open(Config{Data: t.TempDir(), Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Healthy(context.Background()); err != nil {
		t.Fatalf("open store: %v", err)
	}
	s.Close()
	if err := s.Healthy(context.Background()); err == nil {
		t.Fatal("closed store reported healthy")
	}
}

// An HTTP address that was asked for and cannot be bound stops the start;
// one derived from --listen only costs the metrics (logged), not the service.
func TestHTTPAddressTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	run := func(derived bool) error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ready := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, "127.0.0.1:0", Config{Data: t.TempDir(), Log: quiet, HTTP: taken.Addr().String(), HTTPDerived: derived},
				func(string) { close(ready) })
		}()
		select {
		case <-ready:
			cancel()
			return <-done
		case err := <-done:
			return err
		}
	}
	if err := run(false); err == nil || !strings.Contains(err.Error(), "metrics, health") {
		t.Errorf("asked-for address taken: %v, want an error naming the HTTP listener", err)
	}
	if err := run(true); err != nil {
		t.Errorf("derived address taken: %v, want the server to run without it", err)
	}
}

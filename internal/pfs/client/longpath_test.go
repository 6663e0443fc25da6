package client_test

import (
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// TestLongPathKeepsSharedConnection: a path over PATH_MAX is refused by the
// client (ENAMETOOLONG) without a round trip, and one that reaches the
// metadata server anyway (sent raw) gets an error reply; either way other
// requests sharing the connection carry on. It used to make meta close the
// connection, failing every request in flight on it (a node's other
// clients).
func TestLongPathKeepsSharedConnection(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	if err := cl.MkdirAll(ctx, "/www/a.test", 0o755); err != nil {
		t.Fatal(err)
	}
	long := "/www/a.test/" + strings.Repeat("x/", 2100)
	if _, err := cl.Stat(ctx, long); !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Fatalf("stat of a %d-byte path: %v, want ENAMETOOLONG", len(long), err)
	}
	if _, err := cl.Stat(ctx, "/www/"+strings.Repeat("n", 256)); !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Fatalf("stat of a 256-byte name: %v, want ENAMETOOLONG", err)
	}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 100)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := cl.Stat(ctx, "/www/a.test"); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range 20 {
		// Straight to the pool: what a client without the local check
		// (or another program) would send.
		_, err := cl.Pool().Call(ctx, fsys.Meta.Addr, &proto.Walk{Path: long})
		if !errors.Is(err, syscall.ENAMETOOLONG) {
			t.Errorf("raw walk of a %d-byte path: %v, want ENAMETOOLONG", len(long), err)
			break
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a good request on the shared connection failed: %v", err)
	}
}

package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// BenchmarkCreateWatched measures what cache invalidation costs a writer:
// empty-file creates (create + close) while 0 or 2 other clients cache
// metadata (each change then waits for their acknowledgements).
func BenchmarkCreateWatched(b *testing.B) {
	fsys := pfstest.Start(b, 2)
	for _, watchers := range []int{0, 2} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) {
			for range watchers {
				w := client.New(fsys.Meta.Addr, client.WithCache())
				b.Cleanup(w.Close)
				if _, err := w.GetAttr(context.Background(), 1); err != nil { // starts its watch
					b.Fatal(err)
				}
			}
			w := client.New(fsys.Meta.Addr)
			b.Cleanup(w.Close)
			ctx := context.Background()
			dir := fmt.Sprintf("/w%d", watchers)
			if err := w.MkdirAll(ctx, dir, 0o755); err != nil {
				b.Fatal(err)
			}
			time.Sleep(3 * time.Second) // past the young leader's wait
			b.ResetTimer()
			for i := range b.N {
				f, err := w.CreatePath(ctx, fmt.Sprintf("%s/f%d", dir, i), 0o644, client.CreateOpts{})
				if err != nil {
					b.Fatal(err)
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package meta

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// BenchmarkCreate: creates through Handle from parallel callers, the path
// group commit serves (one fsync for many creates).
func BenchmarkCreate(b *testing.B) {
	s, err := Open(Config{Data: b.TempDir(), Log: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, addr := range []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"} {
		if _, err := s.Handle(ctx, &proto.Register{Addr: addr}); err != nil {
			b.Fatal(err)
		}
	}
	var n atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			if _, err := s.Handle(ctx, &proto.Create{Parent: RootIno, Name: fmt.Sprintf("f%d", i), Mode: 0o644, Excl: true}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
}

package proto

import (
	"context"
	"sync"
	"testing"
)

type nopHandler struct{}

func (nopHandler) Handle(context.Context, Msg) (Msg, error) { return nil, nil }

// BenchmarkWrite4M is the data path's request side without a disk: 4 MiB
// Writes, 8 in flight, through the handshake, the budget and payload reads.
func BenchmarkWrite4M(b *testing.B) {
	addr, _ := startWith(b, &Server{Handler: nopHandler{}})
	p := Pool{Security: testSec}
	defer p.Close()
	data := make([]byte, 4<<20)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := 0; i < b.N; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := p.Call(context.Background(), addr, &Write{Handle: 1, Data: data}); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
}

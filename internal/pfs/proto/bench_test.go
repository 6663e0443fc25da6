package proto

import (
	"context"
	"sync"
	"testing"
)

type nopHandler struct{}

func (nopHandler) Handle(context.Context, Msg) (Msg, error) { return nil, nil }

// BenchmarkWrite4M is the data path's request side without a disk: 4 MiB
// Writes, 8 in flight, through the handshake, the budget and payload reads;
// over TLS (the default) and in plain text, for the cost of encryption.
func BenchmarkWrite4M(b *testing.B) {
	plain := testSec
	plain.Insecure = true
	b.Run("tls", func(b *testing.B) { benchWrite(b, testSec) })
	b.Run("plain", func(b *testing.B) { benchWrite(b, plain) })
}

// BenchmarkDial is a new connection: TCP, TLS (or not) and the handshake.
func BenchmarkDial(b *testing.B) {
	plain := testSec
	plain.Insecure = true
	for _, c := range []struct {
		name string
		sec  Security
	}{{"tls", testSec}, {"plain", plain}} {
		b.Run(c.name, func(b *testing.B) {
			addr, _ := startWith(b, &Server{Handler: nopHandler{}, Security: c.sec})
			for i := 0; i < b.N; i++ {
				cn, err := Dial(context.Background(), addr, c.sec)
				if err != nil {
					b.Fatal(err)
				}
				cn.Close()
			}
		})
	}
}

func benchWrite(b *testing.B, sec Security) {
	addr, _ := startWith(b, &Server{Handler: nopHandler{}, Security: sec})
	p := Pool{Security: sec}
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

package proto

import (
	"context"
	"testing"
	"time"
)

// pollHandler holds every Watch until release is closed, and every GetAttr
// until a Watch was answered: as a metadata leader holds a mutation until
// the watchers have heard of it.
type pollHandler struct {
	release  chan struct{}
	answered chan struct{}
	stop     chan struct{} // closed when the test ends: no handler outlives it
}

func (h *pollHandler) Handle(ctx context.Context, req Msg) (Msg, error) {
	switch req.(type) {
	case *Watch:
		select {
		case <-h.release:
		case <-h.stop:
		}
		defer close(h.answered)
		return &ChangesReply{Index: 1}, nil
	case *GetAttr:
		select {
		case <-h.answered:
		case <-h.stop:
		}
	}
	return &AttrReply{}, nil
}

// Replies on a connection are not held back by a long poll in flight, and
// a long poll's answer is not held back by the requests in flight.
func TestLongPollFlushes(t *testing.T) {
	h := &pollHandler{release: make(chan struct{}), answered: make(chan struct{}), stop: make(chan struct{})}
	addr, _ := startWith(t, &Server{Handler: h})
	t.Cleanup(func() { close(h.stop) })
	p := Pool{Security: testSec, PerServer: 1}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	watched := make(chan error, 1)
	go func() {
		_, err := p.Call(ctx, addr, &Watch{Client: 1})
		watched <- err
	}()
	// Overtakes the held poll on the same connection.
	if _, err := p.Call(ctx, addr, &Lookup{Parent: 1, Name: "a"}); err != nil {
		t.Fatalf("lookup while a watch is held: %v", err)
	}
	held := make(chan error, 1)
	go func() {
		_, err := p.Call(ctx, addr, &GetAttr{Ino: 1})
		held <- err
	}()
	close(h.release)
	if err := <-watched; err != nil {
		t.Fatalf("watch answered while a request is in flight: %v", err)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
}

package proto

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestLiveness: a server silent to requests and probes is given up after
// Patience (ErrSilent); one that answers probes but completes nothing,
// after Stall (ErrStalled); one that keeps replying, however slowly, never;
// and while the gate is open nothing is given up.
func TestLiveness(t *testing.T) {
	var probesAnswer atomic.Bool
	l := &Liveness{Patience: 300 * time.Millisecond, Stall: time.Second, Probe: func(ctx context.Context, addr string) error {
		if addr == "alive" && probesAnswer.Load() {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}}
	probesAnswer.Store(true)
	wait := func(ctx context.Context, within time.Duration) (time.Duration, error) {
		start := time.Now()
		select {
		case <-ctx.Done():
			return time.Since(start), context.Cause(ctx)
		case <-time.After(within):
			return within, nil
		}
	}

	// Silent: no replies, no probe answers.
	ctx, cancel := l.Bound(context.Background(), "dead", nil)
	d, err := wait(ctx, 3*time.Second)
	cancel()
	if !errors.Is(err, ErrSilent) || d > 2*time.Second {
		t.Fatalf("silent server: ended after %v with %v, want ErrSilent after about 300ms", d, err)
	}

	// Alive (probes answer) but completing nothing: Stall.
	ctx, cancel = l.Bound(context.Background(), "alive", nil)
	d, err = wait(ctx, 5*time.Second)
	cancel()
	if !errors.Is(err, ErrStalled) || d < 900*time.Millisecond || d > 3*time.Second {
		t.Fatalf("wedged server: ended after %v with %v, want ErrStalled after about 1s", d, err)
	}

	// Slow progress: a reply every 200 ms, each request taking far longer
	// than Patience: never given up.
	ctx, cancel = l.Bound(context.Background(), "alive", nil)
	stop := make(chan struct{})
	go func() {
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				l.Replied("alive")
			}
		}
	}()
	d, err = wait(ctx, 2500*time.Millisecond)
	close(stop)
	cancel()
	if err != nil {
		t.Fatalf("server making progress given up after %v: %v", d, err)
	}

	// Gate open: a silent server is not given up for silence (only after
	// Stall) until the gate closes; then at once (it has been silent for
	// longer than Patience).
	gate := make(chan struct{})
	ctx, cancel = l.Bound(context.Background(), "dead", gate)
	if _, err := wait(ctx, 600*time.Millisecond); err != nil {
		t.Fatalf("given up with the gate open: %v", err)
	}
	close(gate)
	d, err = wait(ctx, 2*time.Second)
	cancel()
	if !errors.Is(err, ErrSilent) || d > 300*time.Millisecond {
		t.Fatalf("after the gate closed: ended after %v with %v, want ErrSilent at once", d, err)
	}
	// Gate never closing: given up after Stall all the same.
	ctx, cancel = l.Bound(context.Background(), "dead", make(chan struct{}))
	d, err = wait(ctx, 5*time.Second)
	cancel()
	if !errors.Is(err, ErrStalled) || d > 3*time.Second {
		t.Fatalf("gate open for good: ended after %v with %v, want ErrStalled after about Stall", d, err)
	}
	if w := Why(ctx, errors.New("server unavailable")); !strings.Contains(w.Error(), ErrStalled.Error()) {
		t.Fatalf("Why did not add the verdict: %v", w)
	}
}

package proto

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Liveness tells a server that is slow from one that is gone
// (docs/pfs-protocol.md, "How absence and slowness are told apart"). A
// request's wait is bounded by signs of life, not by a deadline from its
// size: a reply to any request to that server is progress; an answer to a
// probe (Identify, on a connection of its own, so it never queues behind
// bulk data) is life. A server is given up when it shows neither for
// Patience (stopped, crashed, cut off), or no progress for Stall though it
// answers probes (wedged). A busy server behind a saturated link answers
// probes and, however slowly, requests: it is waited for.
//
// The zero value is not usable: set Patience, Stall and Probe.
type Liveness struct {
	// Patience is the silence (no reply, no probe answer) after which a
	// server counts as gone.
	Patience time.Duration
	// Stall is how long a server that answers probes may complete none of
	// the requests sent to it before it counts as wedged.
	Stall time.Duration
	// Probe asks the server at addr whether it runs, on a path not queued
	// behind bulk data; nil or a *RemoteError: it answered.
	Probe func(ctx context.Context, addr string) error

	mu      sync.Mutex
	replied map[string]time.Time // last reply to a request, by address
	alive   map[string]time.Time // last answer to a probe, by address
	probing map[string]bool
}

// ErrSilent is the cause of a request given up because its server showed
// no sign of life for Patience; ErrStalled, because it completed nothing
// for Stall while answering probes.
var (
	ErrSilent  = errors.New("no reply and no answer to liveness probes")
	ErrStalled = errors.New("answers liveness probes but completed no request")
)

// Replied records a reply (or an error reply: the server runs) from addr.
func (l *Liveness) Replied(addr string) {
	if l == nil {
		return // a caller with no judge of liveness (tests' bare values)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.replied == nil {
		l.replied = map[string]time.Time{}
	}
	l.replied[addr] = time.Now()
}

// signs are the last reply and the last sign of life (reply or probe
// answer) of addr, none before since.
func (l *Liveness) signs(addr string, since time.Time) (reply, life time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	reply = l.replied[addr]
	if reply.Before(since) {
		reply = since
	}
	life = l.alive[addr]
	if life.Before(reply) {
		life = reply
	}
	return reply, life
}

// probe sends one probe to addr unless one is on its way.
func (l *Liveness) probe(addr string) {
	l.mu.Lock()
	if l.probing == nil {
		l.probing = map[string]bool{}
	}
	if l.probing[addr] || l.Probe == nil {
		l.mu.Unlock()
		return
	}
	l.probing[addr] = true
	l.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.Patience)
		err := l.Probe(ctx, addr)
		cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.probing, addr)
		var re *RemoteError
		if err == nil || errors.As(err, &re) { // any answer: it runs
			if l.alive == nil {
				l.alive = map[string]time.Time{}
			}
			l.alive[addr] = time.Now()
		}
	}()
}

// Bound returns ctx, also cancelled (context.Cause: ErrSilent or
// ErrStalled, wrapped with the figures) once the server at addr is gone or
// wedged by the rules above, counted from now. While gate is open (not
// closed; nil: closed) silence alone does not give the server up, only
// Stall without a reply: a caller waits for it until something else
// (another copy answering) says it may move on, but never without bound.
func (l *Liveness) Bound(ctx context.Context, addr string, gate <-chan struct{}) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithCancelCause(ctx)
	sent := time.Now()
	tick := max(l.Patience/6, 10*time.Millisecond)
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
			}
			open := false
			if gate != nil {
				select {
				case <-gate:
				default:
					open = true
				}
			}
			reply, life := l.signs(addr, sent)
			now := time.Now()
			switch {
			case !open && now.Sub(life) >= l.Patience:
				cancel(fmt.Errorf("%w for %v", ErrSilent, now.Sub(life).Round(time.Millisecond)))
				return
			case now.Sub(reply) >= l.Stall:
				cancel(fmt.Errorf("%w for %v", ErrStalled, now.Sub(reply).Round(time.Millisecond)))
				return
			}
			if now.Sub(life) >= l.Patience/3 {
				l.probe(addr)
			}
		}
	}()
	return cctx, func() { cancel(nil) }
}

// Why is err, with the liveness verdict that ended ctx when there is one:
// "server unavailable: context canceled" says less than "no reply and no
// answer to liveness probes for 3s".
func Why(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if c := context.Cause(ctx); c != nil && (errors.Is(c, ErrSilent) || errors.Is(c, ErrStalled)) && !errors.Is(err, c) {
		return fmt.Errorf("%w (%v)", err, c)
	}
	return err
}

package iod

import (
	"context"
	"sync"
)

// rangeLocks orders the writes and heals of one object: a request waits
// for every earlier request of the same object whose byte range overlaps
// its own, so overlapping ones run one at a time in arrival order and
// disjoint ones in parallel. This is what keeps the copies of a replicated
// object identical: the head applies and forwards overlapping writes in
// one order, and a heal never lays older bytes over a newer write.
type rangeLocks struct {
	mu   sync.Mutex
	objs map[objKey][]*rangeHold
}

// rangeHold is one request holding, or waiting for, [off, end) of an
// object; done closes when it lets go.
type rangeHold struct {
	off, end uint64
	done     chan struct{}
}

// toEnd is the end of a range that runs to the end of the object.
const toEnd = ^uint64(0)

// lock waits for [off, end) of object k (end toEnd: to the object's end;
// an empty range still orders with the ranges that contain off) and
// returns the function that releases it. When ctx ends first it returns
// ctx's error holding nothing; requests that arrived later still wait for
// the earlier ones it waited for.
func (l *rangeLocks) lock(ctx context.Context, k objKey, off, end uint64) (func(), error) {
	if end <= off {
		end = off + 1
	}
	h := &rangeHold{off: off, end: end, done: make(chan struct{})}
	l.mu.Lock()
	if l.objs == nil {
		l.objs = map[objKey][]*rangeHold{}
	}
	var wait []chan struct{}
	for _, o := range l.objs[k] {
		if o.off < end && off < o.end {
			wait = append(wait, o.done)
		}
	}
	l.objs[k] = append(l.objs[k], h)
	l.mu.Unlock()
	release := func() { l.release(k, h) }
	for _, w := range wait {
		select {
		case <-w:
		case <-ctx.Done():
			release()
			return nil, ctx.Err()
		}
	}
	return release, nil
}

func (l *rangeLocks) release(k objKey, h *rangeHold) {
	l.mu.Lock()
	defer l.mu.Unlock()
	hs := l.objs[k]
	for i, o := range hs {
		if o == h {
			hs = append(hs[:i:i], hs[i+1:]...)
			break
		}
	}
	if len(hs) == 0 {
		delete(l.objs, k)
	} else {
		l.objs[k] = hs
	}
	close(h.done)
}

package qos

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Admission limits the requests in flight to the nodes, globally and per
// class, and decides who waits and who is shed:
//
//   - a class's own rate (token bucket) applies first: over it, a queue
//     class waits for its token if that comes within its deadline, a
//     reject class is shed at once;
//   - then a request runs if the global limit and its class's concurrency
//     allow and no request of its class or a higher one waits for a slot
//     it could take (no overtaking);
//   - else it waits in its class's queue (capped: memory is bounded), or
//     is shed at once if its class rejects or its queue is full;
//   - a slot that frees goes to the first waiter of the highest class
//     that may run; a waiter still waiting at its deadline is shed.
//
// A shed request gets 503 with its class's Retry-After (the caller's
// part).
type Admission struct {
	mu       sync.Mutex
	limit    int // 0: no global limit
	reserve  int // of limit, the slots only the top class may take
	inflight int
	cls      []*classState // priority order, highest first
	byName   map[string]*classState
	def      *classState

	now   func() time.Time
	after func(time.Duration) <-chan time.Time
	// OnWait, if set, is told each queued request's wait as it ends
	// (admitted or shed); called with the lock held: keep it cheap.
	OnWait func(class string, wait time.Duration, admitted bool)
}

// Shed reasons.
const (
	ShedRate      = "rate"       // over the class's rate
	ShedBusy      = "busy"       // over a limit, class rejects
	ShedQueueFull = "queue-full" // over a limit, the class's queue is full
	ShedDeadline  = "deadline"   // waited its deadline
	ShedGone      = "gone"       // the client went away while waiting, or its class was removed
)

// ShedReasons are every reason, for metrics.
var ShedReasons = []string{ShedRate, ShedBusy, ShedQueueFull, ShedDeadline, ShedGone}

type classState struct {
	c        *Class
	bucket   *Bucket
	inflight int
	queue    []*waiter
	admitted uint64
	queued   uint64
	shed     map[string]uint64
}

type waiter struct {
	cs      *classState
	ready   chan struct{} // closed when granted or dropped
	granted bool
	since   time.Time
}

// Shed is a request refused admission.
type Shed struct {
	Class      string
	Reason     string
	RetryAfter int // seconds
}

func (e *Shed) Error() string {
	return fmt.Sprintf("qos: class %s shed (%s), retry after %ds", e.Class, e.Reason, e.RetryAfter)
}

// Ticket is an admitted request's slot; Release it when the request ends.
type Ticket struct {
	a    *Admission
	cs   *classState
	once sync.Once
}

// NewAdmission is an admission controller for c's classes with a global
// limit of requests in flight (0: none). now and after are the clock
// (nil: the real one; tests pass a fake).
func NewAdmission(c *Classifier, limit int, now func() time.Time, after func(time.Duration) <-chan time.Time) *Admission {
	if now == nil {
		now = time.Now
	}
	if after == nil {
		after = time.After
	}
	a := &Admission{now: now, after: after, byName: map[string]*classState{}}
	a.Reconfigure(c, limit)
	return a
}

// Reconfigure takes new classes and limit, keeping the counts of classes
// that stay (by name): requests in flight stay counted, waiters keep
// their place. Waiters of a removed class are shed.
func (a *Admission) Reconfigure(c *Classifier, limit int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.limit = max(0, limit)
	a.reserve = max(0, min(a.reserve, a.limit-1))
	now := a.now()
	old := a.byName
	a.byName = map[string]*classState{}
	a.cls = a.cls[:0:0]
	for _, k := range c.Classes() {
		cs := old[k.Name]
		if cs == nil {
			cs = &classState{shed: map[string]uint64{}}
		}
		if cs.c == nil || cs.c.Rate != k.Rate || cs.c.Burst != k.Burst {
			cs.bucket = nil
			if k.Rate > 0 {
				cs.bucket = NewBucket(k.Rate, k.Burst, now)
			}
		}
		cs.c = k
		delete(old, k.Name)
		a.byName[k.Name] = cs
		a.cls = append(a.cls, cs)
	}
	a.def = a.byName[c.Default().Name]
	for _, cs := range old {
		for _, w := range cs.queue {
			cs.shed[ShedGone]++
			close(w.ready)
		}
		cs.queue = nil
	}
	a.dispatchLocked()
}

// Acquire admits a request of class k, waiting if its class queues, or
// returns a *Shed. The class is looked up by name (a request classified
// before a reload still finds its class, or the default one).
func (a *Admission) Acquire(ctx context.Context, k *Class) (*Ticket, error) {
	a.mu.Lock()
	cs := a.byName[k.Name]
	if cs == nil {
		cs = a.def
	}
	c := cs.c
	deadline := c.Deadline
	if cs.bucket != nil {
		if c.Overload == Reject {
			if !cs.bucket.Take(a.now()) {
				return nil, a.shedLocked(cs, ShedRate)
			}
		} else {
			wait, ok := cs.bucket.Reserve(a.now(), deadline)
			if !ok {
				return nil, a.shedLocked(cs, ShedRate)
			}
			if wait > 0 {
				// Its token comes within the deadline: wait for it, then
				// for a slot with what is left of the deadline.
				a.mu.Unlock()
				select {
				case <-a.after(wait):
				case <-ctx.Done():
					a.mu.Lock()
					return nil, a.shedLocked(cs, ShedGone)
				}
				deadline -= wait
				a.mu.Lock()
				if a.byName[c.Name] != cs {
					return nil, a.shedLocked(cs, ShedGone)
				}
			}
		}
	}
	if a.mayRunLocked(cs) {
		t := a.grantLocked(cs)
		a.mu.Unlock()
		return t, nil
	}
	if c.Overload == Reject {
		return nil, a.shedLocked(cs, ShedBusy)
	}
	qmax := c.QueueMax
	if qmax == 0 {
		qmax = DefaultQueue
	}
	if len(cs.queue) >= qmax {
		return nil, a.shedLocked(cs, ShedQueueFull)
	}
	w := &waiter{cs: cs, ready: make(chan struct{}), since: a.now()}
	cs.queue = append(cs.queue, w)
	cs.queued++
	a.mu.Unlock()

	reason := ShedDeadline
	select {
	case <-w.ready:
	case <-a.after(deadline):
	case <-ctx.Done():
		reason = ShedGone
	}
	a.mu.Lock()
	if w.granted {
		a.mu.Unlock()
		return &Ticket{a: a, cs: cs}, nil
	}
	if i := slices.Index(cs.queue, w); i >= 0 {
		cs.queue = slices.Delete(cs.queue, i, i+1)
	} else {
		reason = ShedGone // dropped by Reconfigure
	}
	if a.OnWait != nil {
		a.OnWait(c.Name, a.now().Sub(w.since), false)
	}
	return nil, a.shedLocked(cs, reason)
}

// shedLocked counts a shed request and unlocks.
func (a *Admission) shedLocked(cs *classState, reason string) error {
	cs.shed[reason]++
	c := cs.c
	a.mu.Unlock()
	return &Shed{Class: c.Name, Reason: reason, RetryAfter: c.RetryAfter}
}

func (a *Admission) slotFreeLocked(cs *classState) bool {
	limit := a.limit
	if a.reserve > 0 && !a.topLocked(cs) {
		limit -= a.reserve
	}
	return (a.limit == 0 || a.inflight < limit) && (cs.c.Concurrency == 0 || cs.inflight < cs.c.Concurrency)
}

// topLocked: cs is of the highest priority (the default class only if it
// is the only one).
func (a *Admission) topLocked(cs *classState) bool {
	return cs == a.cls[0] || cs != a.def && cs.c.Priority == a.cls[0].c.Priority
}

// SetReserve keeps the last n slots of the global limit for the top
// class (by priority): a lower class is not admitted while fewer than
// n+1 are free, so a top-class request never waits for a slot behind
// lower classes' requests in flight (as long as fewer than n top-class
// requests are in flight). At most limit-1 (a lower class keeps one
// slot); 0, or no global limit: no reserve.
func (a *Admission) SetReserve(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reserve = max(0, min(n, a.limit-1))
	a.dispatchLocked()
}

// mayRunLocked: a slot is free for cs and no waiter of cs's priority or
// higher could take it first.
func (a *Admission) mayRunLocked(cs *classState) bool {
	if !a.slotFreeLocked(cs) {
		return false
	}
	for _, o := range a.cls {
		if o.c.Priority < cs.c.Priority {
			break
		}
		if len(o.queue) > 0 && a.slotFreeLocked(o) {
			return false
		}
	}
	return true
}

func (a *Admission) grantLocked(cs *classState) *Ticket {
	a.inflight++
	cs.inflight++
	cs.admitted++
	return &Ticket{a: a, cs: cs}
}

// dispatchLocked gives free slots to waiters, highest class first.
func (a *Admission) dispatchLocked() {
	for a.limit == 0 || a.inflight < a.limit {
		var next *classState
		for _, cs := range a.cls {
			if len(cs.queue) > 0 && a.slotFreeLocked(cs) {
				next = cs
				break
			}
		}
		if next == nil {
			return
		}
		w := next.queue[0]
		next.queue = slices.Delete(next.queue, 0, 1)
		a.grantLocked(next)
		w.granted = true
		if a.OnWait != nil {
			a.OnWait(next.c.Name, a.now().Sub(w.since), true)
		}
		close(w.ready)
	}
}

// Release frees the ticket's slot (once; later calls do nothing).
func (t *Ticket) Release() {
	t.once.Do(func() {
		a := t.a
		a.mu.Lock()
		a.inflight--
		t.cs.inflight--
		a.dispatchLocked()
		a.mu.Unlock()
	})
}

// Class is the ticket's class name.
func (t *Ticket) Class() string { return t.cs.c.Name }

// Stats are one class's counts.
type Stats struct {
	Name     string
	Priority int
	InFlight int
	Waiting  int
	Admitted uint64
	Queued   uint64
	Shed     map[string]uint64 // by reason
}

// Reserve is the slots of the limit kept for the top class.
func (a *Admission) Reserve() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reserve
}

// Stats are every class's counts, in priority order, and the global
// limit and requests in flight.
func (a *Admission) Stats() (classes []Stats, limit, inflight int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, cs := range a.cls {
		s := Stats{Name: cs.c.Name, Priority: cs.c.Priority, InFlight: cs.inflight, Waiting: len(cs.queue),
			Admitted: cs.admitted, Queued: cs.queued, Shed: map[string]uint64{}}
		for k, v := range cs.shed {
			s.Shed[k] = v
		}
		classes = append(classes, s)
	}
	return classes, a.limit, a.inflight
}

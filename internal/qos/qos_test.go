package qos

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"
)

func mustCompile(t testing.TB, specs ...Spec) *Classifier {
	t.Helper()
	c, err := Compile(specs)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func spec(name string, prio int, f func(*Spec)) Spec {
	s := NewSpec(name)
	s.Priority = prio
	if f != nil {
		f(&s)
	}
	return s
}

// TestClassify: every match kind, first match in priority order wins,
// the default class takes the rest.
func TestClassify(t *testing.T) {
	c := mustCompile(t,
		spec("net", 50, func(s *Spec) { s.Networks = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} }),
		spec("shop", 40, func(s *Spec) { s.Prefixes = []string{"/shop"} }),
		spec("api", 30, func(s *Spec) { s.Regex = `^/api/v[0-9]+/` }),
		spec("img", 20, func(s *Spec) { s.Paths = []string{"/img/", "/logo.png"} }),
		spec("vip", 60, func(s *Spec) { s.Users = []string{"alice"} }),
		spec("dom", 15, func(s *Spec) { s.Domains = []string{"Gold.Example.org"} }),
		spec("hdr", 10, func(s *Spec) { s.Header = "x-tier: gold" }),
		spec("both", 70, func(s *Spec) {
			s.Networks = []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")}
			s.Prefixes = []string{"/admin"}
		}),
	)
	basic := func(u string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":pw")) }
	cases := []struct {
		src, host, path string
		hdr             map[string]string
		want            string
	}{
		{"10.1.2.3", "x", "/", nil, "net"},
		{"::ffff:10.1.2.3", "x", "/", nil, "net"},
		{"11.1.2.3", "x", "/", nil, "default"},
		{"1.1.1.1", "x", "/shop/cart", nil, "shop"},
		{"10.1.1.1", "x", "/shop/cart", nil, "net"}, // both match: the higher priority wins
		{"1.1.1.1", "x", "/api/v2/items", nil, "api"},
		{"1.1.1.1", "x", "/api/vx/items", nil, "default"},
		{"1.1.1.1", "x", "/img/a.png", nil, "img"},
		{"1.1.1.1", "x", "/img", nil, "img"},
		{"1.1.1.1", "x", "/images/a.png", nil, "default"},
		{"1.1.1.1", "x", "/logo.png", nil, "img"},
		{"1.1.1.1", "x", "/logo.png.bak", nil, "default"},
		{"1.1.1.1", "x", "/", map[string]string{"Authorization": basic("alice")}, "vip"},
		{"1.1.1.1", "x", "/", map[string]string{"Authorization": basic("bob")}, "default"},
		{"1.1.1.1", "x", "/", map[string]string{"Authorization": "Basic !!!"}, "default"},
		{"1.1.1.1", "gold.example.org:8080", "/", nil, "dom"},
		{"1.1.1.1", "GOLD.example.org.", "/", nil, "dom"},
		{"1.1.1.1", "silver.example.org", "/", nil, "default"},
		{"1.1.1.1", "x", "/", map[string]string{"X-Tier": "gold"}, "hdr"},
		{"1.1.1.1", "x", "/", map[string]string{"X-Tier": "golden"}, "default"},
		{"192.168.1.1", "x", "/admin/x", nil, "both"},
		{"192.168.1.1", "x", "/other", nil, "default"}, // every kind given must hold
		{"1.1.1.1", "x", "/admin/x", nil, "default"},
	}
	for _, tc := range cases {
		req := httptest.NewRequest("GET", "http://"+tc.host+tc.path, nil)
		req.Host = tc.host
		for k, v := range tc.hdr {
			req.Header.Set(k, v)
		}
		got := c.Classify(req, netip.MustParseAddr(tc.src))
		if got.Name != tc.want {
			t.Errorf("%s %s%s %v: class %s, want %s", tc.src, tc.host, tc.path, tc.hdr, got.Name, tc.want)
		}
	}
	// Order and nice: priority descending, default last and nicest.
	var names []string
	for _, k := range c.Classes() {
		names = append(names, k.Name)
	}
	want := []string{"both", "vip", "net", "shop", "api", "img", "dom", "hdr", "default"}
	if len(names) != len(want) {
		t.Fatalf("order %v", names)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("order %v, want %v", names, want)
		}
	}
	if c.Classes()[0].Nice != 0 || c.Default().Nice != 19 || c.Class("vip").Nice != 5 {
		t.Errorf("nice: %d %d %d", c.Classes()[0].Nice, c.Default().Nice, c.Class("vip").Nice)
	}
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		s    Spec
		want string
	}{
		{spec("a", 1, func(s *Spec) { s.Regex = "(" }), "qos a: regex"},
		{spec("a", 1, func(s *Spec) { s.Header = "NoColon" }), "qos a: header"},
		{spec("a", 1, func(s *Spec) { s.Overload = "drop" }), "qos a: overload"},
		{spec("a b", 1, nil), "qos \"a b\""},
		{spec("default", 1, func(s *Spec) { s.Prefixes = []string{"/"} }), "qos default: the default class"},
	} {
		_, err := Compile([]Spec{tc.s})
		if err == nil || len(err.Error()) < len(tc.want) || err.Error()[:len(tc.want)] != tc.want {
			t.Errorf("%+v: got %v, want %s...", tc.s, err, tc.want)
		}
	}
	if _, err := Compile([]Spec{spec("a", 1, nil), spec("a", 2, nil)}); err == nil {
		t.Error("a class defined twice was accepted")
	}
}

func TestBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBucket(10, 2, t0) // 10/s, burst 2
	if !b.Take(t0) || !b.Take(t0) || b.Take(t0) {
		t.Fatal("burst of 2 not honoured")
	}
	if b.Take(t0.Add(50 * time.Millisecond)) {
		t.Fatal("a token before 100ms")
	}
	if !b.Take(t0.Add(100 * time.Millisecond)) {
		t.Fatal("no token after 100ms")
	}
	// Long idle: at most the burst saved.
	t1 := t0.Add(time.Hour)
	n := 0
	for b.Take(t1) {
		n++
	}
	if n != 2 {
		t.Fatalf("%d tokens after an hour, want the burst 2", n)
	}
	// Reserve: the next token is 100ms away, the one after 200ms.
	if w, ok := b.Reserve(t1, time.Second); !ok || w != 100*time.Millisecond {
		t.Fatalf("reserve: %v %v", w, ok)
	}
	if w, ok := b.Reserve(t1, time.Second); !ok || w != 200*time.Millisecond {
		t.Fatalf("reserve 2: %v %v", w, ok)
	}
	if _, ok := b.Reserve(t1, 250*time.Millisecond); ok {
		t.Fatal("a reservation past the deadline")
	}
}

// fakeTimers is a clock whose timers fire when the test says.
type fakeTimers struct {
	mu  sync.Mutex
	now time.Time
	chs []chan time.Time
}

func (f *fakeTimers) Now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
func (f *fakeTimers) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	f.chs = append(f.chs, ch)
	return ch
}

// fire fires every timer made so far.
func (f *fakeTimers) fire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.chs {
		ch <- f.now
	}
	f.chs = nil
}

func (f *fakeTimers) timers() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.chs) }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 2000; i++ {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

type result struct {
	t   *Ticket
	err error
}

func acquire(a *Admission, k *Class) chan result {
	ch := make(chan result, 1)
	go func() {
		t, err := a.Acquire(context.Background(), k)
		ch <- result{t, err}
	}()
	return ch
}

// TestAdmissionPriority: at the global limit, waiters are served highest
// class first; a reject class is shed at once; a waiter at its deadline
// is shed with its class's Retry-After.
func TestAdmissionPriority(t *testing.T) {
	c := mustCompile(t,
		spec("gold", 10, func(s *Spec) { s.Prefixes = []string{"/g"} }),
		spec("bulk", 1, func(s *Spec) { s.Prefixes = []string{"/b"}; s.Overload = Reject; s.RetryAfter = 7 }),
		spec("default", 0, func(s *Spec) { s.RetryAfter = 3 }),
	)
	ft := &fakeTimers{now: time.Unix(0, 0)}
	a := NewAdmission(c, 2, ft.Now, ft.After)
	gold, bulk, def := c.Class("gold"), c.Class("bulk"), c.Default()
	t1, err := a.Acquire(context.Background(), def)
	if err != nil {
		t.Fatal(err)
	}
	t2, err := a.Acquire(context.Background(), def)
	if err != nil {
		t.Fatal(err)
	}
	// Full: bulk rejects at once.
	_, err = a.Acquire(context.Background(), bulk)
	var shed *Shed
	if !errors.As(err, &shed) || shed.Reason != ShedBusy || shed.RetryAfter != 7 {
		t.Fatalf("bulk at the limit: %v", err)
	}
	d1 := acquire(a, def)
	waitFor(t, "default waiting", func() bool { return ft.timers() == 1 })
	g1 := acquire(a, gold)
	waitFor(t, "gold waiting", func() bool { return ft.timers() == 2 })
	t1.Release() // the slot goes to gold, though default waited longer
	r := <-g1
	if r.err != nil {
		t.Fatalf("gold: %v", r.err)
	}
	select {
	case r := <-d1:
		t.Fatalf("default admitted before gold released: %+v", r)
	default:
	}
	// A new default arrival does not overtake the default waiter.
	d2 := acquire(a, def)
	waitFor(t, "second default waiting", func() bool { return ft.timers() == 3 })
	t2.Release()
	if r := <-d1; r.err != nil {
		t.Fatalf("first default: %v", r.err)
	}
	ft.fire() // d2's deadline
	r = <-d2
	if !errors.As(r.err, &shed) || shed.Reason != ShedDeadline || shed.RetryAfter != 3 {
		t.Fatalf("second default at its deadline: %+v", r)
	}
	st, limit, inflight := a.Stats()
	if limit != 2 || inflight != 2 {
		t.Fatalf("limit %d inflight %d", limit, inflight)
	}
	for _, s := range st {
		switch s.Name {
		case "gold":
			if s.Admitted != 1 || s.Queued != 1 || s.InFlight != 1 {
				t.Errorf("gold %+v", s)
			}
		case "bulk":
			if s.Shed[ShedBusy] != 1 || s.Admitted != 0 {
				t.Errorf("bulk %+v", s)
			}
		case "default":
			if s.Admitted != 3 || s.Queued != 2 || s.Shed[ShedDeadline] != 1 || s.Waiting != 0 {
				t.Errorf("default %+v", s)
			}
		}
	}
}

// TestAdmissionClassLimits: a class's concurrency and rate apply before
// the global limit; the queue is capped.
func TestAdmissionClassLimits(t *testing.T) {
	c := mustCompile(t,
		spec("two", 10, func(s *Spec) { s.Concurrency = 2; s.QueueMax = 1 }),
		spec("slow", 5, func(s *Spec) { s.Rate = 10; s.Burst = 1; s.Deadline = 150 * time.Millisecond }),
		spec("slowrej", 4, func(s *Spec) { s.Rate = 1; s.Overload = Reject }),
	)
	ft := &fakeTimers{now: time.Unix(0, 0)}
	a := NewAdmission(c, 0, ft.Now, ft.After)
	two := c.Class("two")
	var held []*Ticket
	for i := 0; i < 2; i++ {
		tk, err := a.Acquire(context.Background(), two)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, tk)
	}
	w := acquire(a, two) // waits (queue of 1)
	waitFor(t, "waiter", func() bool { return ft.timers() == 1 })
	_, err := a.Acquire(context.Background(), two)
	var shed *Shed
	if !errors.As(err, &shed) || shed.Reason != ShedQueueFull {
		t.Fatalf("over the queue cap: %v", err)
	}
	// Other classes are not held back by "two"'s own limit.
	if tk, err := a.Acquire(context.Background(), c.Default()); err != nil {
		t.Fatalf("default blocked by another class's concurrency: %v", err)
	} else {
		tk.Release()
	}
	held[0].Release()
	if r := <-w; r.err != nil {
		t.Fatal(r.err)
	}
	held[0].Release() // twice: nothing more freed
	if _, _, n := a.Stats(); n != 2 {
		t.Fatalf("in flight %d after a double release, want 2", n)
	}

	// Rate, queue: the first is free, the second waits 100ms for its
	// token, the third's would come at 200ms, past its 150ms deadline.
	ft.fire() // the stale deadline timer of the waiter admitted above
	slow := c.Class("slow")
	if _, err := a.Acquire(context.Background(), slow); err != nil {
		t.Fatal(err)
	}
	s2 := acquire(a, slow)
	waitFor(t, "token wait", func() bool { return ft.timers() == 1 })
	if _, err := a.Acquire(context.Background(), slow); !errors.As(err, &shed) || shed.Reason != ShedRate {
		t.Fatalf("third within 100ms: %v", err)
	}
	ft.fire()
	if r := <-s2; r.err != nil {
		t.Fatal(r.err)
	}
	// Rate, reject.
	rej := c.Class("slowrej")
	if _, err := a.Acquire(context.Background(), rej); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Acquire(context.Background(), rej); !errors.As(err, &shed) || shed.Reason != ShedRate {
		t.Fatalf("reject over rate: %v", err)
	}
}

// TestAdmissionReal: many goroutines, real timers, the race detector:
// the global limit is never exceeded and every slot comes back.
func TestAdmissionReal(t *testing.T) {
	c := mustCompile(t, spec("gold", 10, func(s *Spec) { s.Prefixes = []string{"/g"}; s.Deadline = 5 * time.Second }),
		spec("default", 0, func(s *Spec) { s.Deadline = 20 * time.Millisecond }))
	a := NewAdmission(c, 3, nil, nil)
	var mu sync.Mutex
	in, peak := 0, 0
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		k := c.Default()
		if i%5 == 0 {
			k = c.Class("gold")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk, err := a.Acquire(context.Background(), k)
			if err != nil {
				if k.Name == "gold" {
					t.Errorf("gold shed: %v", err)
				}
				return
			}
			mu.Lock()
			in++
			peak = max(peak, in)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			in--
			mu.Unlock()
			tk.Release()
		}()
	}
	wg.Wait()
	if peak > 3 {
		t.Fatalf("%d in flight at once, limit 3", peak)
	}
	if _, _, n := a.Stats(); n != 0 {
		t.Fatalf("%d still counted in flight", n)
	}
}

func TestReconfigure(t *testing.T) {
	c := mustCompile(t, spec("gold", 10, func(s *Spec) { s.Prefixes = []string{"/g"} }))
	ft := &fakeTimers{now: time.Unix(0, 0)}
	a := NewAdmission(c, 1, ft.Now, ft.After)
	tk, _ := a.Acquire(context.Background(), c.Class("gold"))
	w := acquire(a, c.Class("gold"))
	waitFor(t, "waiter", func() bool { return ft.timers() == 1 })
	// gold goes away: its waiter is shed; its request in flight still counts.
	c2 := mustCompile(t, spec("silver", 10, func(s *Spec) { s.Prefixes = []string{"/s"} }))
	a.Reconfigure(c2, 1)
	var shed *Shed
	if r := <-w; !errors.As(r.err, &shed) || shed.Reason != ShedGone {
		t.Fatalf("waiter of a removed class: %+v", r)
	}
	if _, _, n := a.Stats(); n != 1 {
		t.Fatalf("in flight %d", n)
	}
	tk.Release()
	if _, _, n := a.Stats(); n != 0 {
		t.Fatalf("in flight %d after release", n)
	}
}

func TestTag(t *testing.T) {
	c := mustCompile(t, spec("gold", 10, nil))
	tag := c.Class("gold").Tag()
	got, err := ParseTag(tag.String())
	if err != nil || got != tag {
		t.Fatalf("%q: %+v %v", tag.String(), got, err)
	}
	for _, bad := range []string{"", "gold", "gold; priority=1", "gold; priority=1; nice=20", "gold; nice=1; nice=2",
		"go ld; priority=1; nice=1", "gold; priority=x; nice=1", "gold; prio=1; nice=1"} {
		if _, err := ParseTag(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if got, err := ParseTag(" gold ;nice=3; priority=-2 "); err != nil || got != (Tag{"gold", -2, 3}) {
		t.Errorf("reordered: %+v %v", got, err)
	}
}

func FuzzParseTag(f *testing.F) {
	f.Add("gold; priority=10; nice=0")
	f.Add("x;nice=19;priority=-5")
	f.Fuzz(func(t *testing.T, v string) {
		tag, err := ParseTag(v)
		if err != nil {
			return
		}
		if !ValidName(tag.Name) || tag.Nice < 0 || tag.Nice > 19 {
			t.Fatalf("accepted %q as %+v", v, tag)
		}
		again, err := ParseTag(tag.String())
		if err != nil || again != tag {
			t.Fatalf("%q -> %+v does not round-trip: %v", v, tag, err)
		}
	})
}

func FuzzBasicUser(f *testing.F) {
	f.Add("Basic YWxpY2U6cHc=")
	f.Fuzz(func(t *testing.T, v string) {
		BasicUser(v)
		r := &http.Request{Header: http.Header{"Authorization": {v}}}
		if u, _, ok := r.BasicAuth(); ok {
			if got, ok2 := BasicUser(v); !ok2 || got != u {
				t.Fatalf("%q: net/http says %q, BasicUser %q %v", v, u, got, ok2)
			}
		}
	})
}

// TestAdmissionReserve: with a reserve, lower classes leave the last
// slots of the limit free, so the top class is admitted at once while
// they wait; a slot that frees goes to a lower waiter only down to the
// reserve. The cases are a table: limit, reserve, the lower requests
// already in flight, whether one more lower and then a gold are admitted
// at once.
func TestAdmissionReserve(t *testing.T) {
	c := mustCompile(t,
		spec("gold", 10, func(s *Spec) { s.Prefixes = []string{"/g"} }),
		spec("bulk", 1, func(s *Spec) { s.Prefixes = []string{"/b"} }),
		spec("default", 0, nil),
	)
	gold, bulk, def := c.Class("gold"), c.Class("bulk"), c.Default()
	for _, tc := range []struct {
		limit, reserve, lower int
		lowerNow, goldNow     bool
		wantReserve           int
	}{
		{limit: 4, reserve: 0, lower: 3, lowerNow: true, goldNow: false, wantReserve: 0}, // no reserve: the last slot goes to a lower class
		{limit: 4, reserve: 1, lower: 3, lowerNow: false, goldNow: true, wantReserve: 1},
		{limit: 4, reserve: 1, lower: 2, lowerNow: true, goldNow: true, wantReserve: 1},
		{limit: 4, reserve: 2, lower: 2, lowerNow: false, goldNow: true, wantReserve: 2},
		{limit: 2, reserve: 5, lower: 1, lowerNow: false, goldNow: true, wantReserve: 1}, // clamped to limit-1
		{limit: 0, reserve: 3, lower: 50, lowerNow: true, goldNow: true, wantReserve: 0}, // no limit: nothing to reserve
	} {
		name := fmt.Sprintf("limit %d reserve %d lower %d", tc.limit, tc.reserve, tc.lower)
		ft := &fakeTimers{now: time.Unix(0, 0)}
		a := NewAdmission(c, tc.limit, ft.Now, ft.After)
		a.SetReserve(tc.reserve)
		if got := a.Reserve(); got != tc.wantReserve {
			t.Errorf("%s: reserve %d, want %d", name, got, tc.wantReserve)
		}
		var held []*Ticket
		for i := 0; i < tc.lower; i++ {
			k := def
			if i%2 == 1 {
				k = bulk
			}
			tk, err := a.Acquire(context.Background(), k)
			if err != nil {
				t.Fatalf("%s: lower request %d: %v", name, i, err)
			}
			held = append(held, tk)
		}
		timers := ft.timers()
		l := acquire(a, bulk)
		lowerAdmitted := false
		select {
		case r := <-l:
			lowerAdmitted = r.err == nil
		case <-time.After(50 * time.Millisecond):
		}
		if lowerAdmitted != tc.lowerNow {
			t.Errorf("%s: one more lower admitted at once: %v, want %v", name, lowerAdmitted, tc.lowerNow)
		}
		if !lowerAdmitted {
			waitFor(t, "bulk waiting", func() bool { return ft.timers() == timers+1 })
		}
		g := acquire(a, gold)
		goldAdmitted := false
		select {
		case r := <-g:
			goldAdmitted = r.err == nil
			if goldAdmitted {
				r.t.Release()
			}
		case <-time.After(50 * time.Millisecond):
		}
		if goldAdmitted != tc.goldNow {
			t.Errorf("%s: gold admitted at once: %v, want %v", name, goldAdmitted, tc.goldNow)
		}
		if !lowerAdmitted && goldAdmitted && len(held) > 0 {
			// The gold slot freed: still reserved, the bulk waiter waits;
			// a lower slot freeing lets it in.
			select {
			case r := <-l:
				t.Errorf("%s: bulk took a reserved slot: %+v", name, r)
			case <-time.After(20 * time.Millisecond):
			}
			held[0].Release()
			held = held[1:]
			if r := <-l; r.err != nil {
				t.Errorf("%s: bulk after a lower slot freed: %v", name, r.err)
			}
		}
		ft.fire() // unblock anything left waiting
		for _, tk := range held {
			tk.Release()
		}
	}
}

package node

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/qos"
)

// threadNice is the calling thread's nice, from /proc (field 19 of stat).
func threadNice(t *testing.T) int {
	b, err := os.ReadFile("/proc/thread-self/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // after the command name
	n, err := strconv.Atoi(f[16])                            // field 19 counted from 1, 3 fields before f[0]
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestQoSThreadNice: a class's request runs on a thread with its nice;
// the thread serving a nice-0 class is not nice.
func TestQoSThreadNice(t *testing.T) {
	q := newNodeQoS(nil, 4, slog.Default())
	var mu sync.Mutex
	seen := map[int]int{} // nice asked -> nice of the thread that ran the job
	for _, nice := range []int{0, 5, 19, 5} {
		q.run(nice, func() {
			n := threadNice(t)
			mu.Lock()
			seen[nice] = n
			mu.Unlock()
		})
	}
	for nice, got := range seen {
		if want := min(19, q.base+nice); got != want {
			t.Errorf("class nice %d ran on a thread with nice %d, want %d", nice, got, want)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("seen %v", seen)
	}
	// This goroutine's own thread is untouched.
	if n := threadNice(t); n != q.base {
		t.Errorf("the caller's thread has nice %d, want %d", n, q.base)
	}
}

// TestQoSTrust: only a trusted peer's tag counts, and only a well-formed one.
func TestQoSTrust(t *testing.T) {
	q := newNodeQoS([]netip.Prefix{netip.MustParsePrefix("127.0.0.5/32")}, 1, slog.Default())
	for _, tc := range []struct {
		peer, hdr string
		ok        bool
	}{
		{"127.0.0.5:1234", "gold; priority=10; nice=0", true},
		{"127.0.0.6:1234", "gold; priority=10; nice=0", false},
		{"127.0.0.5:1234", "gold; priority=10", false},
		{"127.0.0.5:1234", "", false},
		{"[::ffff:127.0.0.5]:1234", "gold; priority=10; nice=0", true},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.peer
		if tc.hdr != "" {
			r.Header.Set(qos.Header, tc.hdr)
		}
		tag, ok := q.tagOf(r)
		if ok != tc.ok || (ok && tag.Name != "gold") {
			t.Errorf("%s %q: %+v %v", tc.peer, tc.hdr, tag, ok)
		}
	}
}

// TestQoSPriorityOrder: with every worker busy, a higher priority waiter
// gets the next slot though a lower one waited longer.
func TestQoSPriorityOrder(t *testing.T) {
	q := newNodeQoS(nil, 1, slog.Default())
	if err := q.acquire(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 3)
	var wg sync.WaitGroup
	waiting := func(n int) {
		for i := 0; i < 2000; i++ {
			q.mu.Lock()
			l := len(q.waiting)
			q.mu.Unlock()
			if l == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatalf("never %d waiting", n)
	}
	for i, p := range []int{1, 1, 10} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := q.acquire(context.Background(), p); err != nil {
				t.Error(err)
				return
			}
			order <- p*10 + i
			q.release()
		}()
		waiting(i + 1)
	}
	q.release()
	wg.Wait()
	close(order)
	var got []int
	for v := range order {
		got = append(got, v)
	}
	if len(got) != 3 || got[0] != 102 || got[1] != 10 || got[2] != 11 {
		t.Fatalf("order %v, want [102 10 11] (priority 10 first, then 1s in arrival order)", got)
	}
	// A waiter whose client left gives up its place.
	if err := q.acquire(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.acquire(ctx, 5); err == nil {
		t.Fatal("a canceled waiter was admitted")
	}
	q.release()
	if q.running != 0 || len(q.waiting) != 0 {
		t.Fatalf("running %d waiting %d", q.running, len(q.waiting))
	}
}

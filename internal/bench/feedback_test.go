package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
)

// httperf 0.9's output with -v -v (abridged), as the scenario reads it.
const httperfOut = `httperf --verbose --timeout=2 --client=0/1 --server=127.0.87.5 --port=18098 --uri=/ --rate=50 --send-buffer=4096 --recv-buffer=16384 --num-conns=100 --num-calls=1
Maximum connect burst length: 1
Connection lifetime histogram (time in ms):
             :
             1.5 48
             2.5 15
             3.5 18
             4.5 8
             5.5 5
             6.5 2
             7.5 1
             8.5 1
             :
            10.5 1
             :
            13.5 1

Total: connections 100 requests 100 replies 100 test-duration 1.982 s

Connection rate: 50.4 conn/s (19.8 ms/conn, <=1 concurrent connections)
Connection time [ms]: min 1.1 avg 2.9 max 13.4 median 2.5 stddev 2.0
Reply status: 1xx=0 2xx=98 3xx=0 4xx=2 5xx=0
Errors: total 3 client-timo 3 socket-timo 0 connrefused 0 connreset 0
Errors: fd-unavail 0 addrunavail 0 ftab-full 0 other 0
`

func TestParseHTTPerf(t *testing.T) {
	r, err := parseHTTPerf(httperfOut, 50)
	if err != nil {
		t.Fatal(err)
	}
	if r.Conns != 100 || r.Errors != 3 || r.Mean != 2.9 || math.Abs(r.Throughput-98/1.982) > 1e-9 {
		t.Errorf("totals: %+v", r)
	}
	// 100 lifetimes: the 50th is in the 2.5 bin, the 90th in 5.5 (48+15+18+8 = 89 before it), the 99th in 10.5.
	if r.Note != "" {
		t.Errorf("no fd-unavail errors, yet a note: %q", r.Note)
	}
	if r.P50 != 2.5 || r.P90 != 5.5 || r.P99 != 10.5 {
		t.Errorf("percentiles %v %v %v, want 2.5 5.5 10.5", r.P50, r.P90, r.P99)
	}
	capped := strings.Replace(httperfOut, "Errors: fd-unavail 0", "Errors: fd-unavail 981", 1)
	if r, err := parseHTTPerf(capped, 50); err != nil || !strings.Contains(r.Note, "981 of them httperf's fd-unavail") {
		t.Errorf("fd-unavail: %q %v", r.Note, err)
	}
	if _, err := parseHTTPerf("httperf: connection refused\n", 10); err == nil {
		t.Error("no totals: no error")
	}
}

func TestReconvergence(t *testing.T) {
	var tr []FBPoint
	for i := 0; i < 40; i++ {
		w := 100
		switch {
		case i >= 10 && i < 14:
			w = 100 - (i-9)*15
		case i >= 14:
			w = 30
		}
		tr = append(tr, FBPoint{T: float64(i) / 4, Weights: map[string]int{"node1": w}})
	}
	// The step at 2.5 s; the weight is 30 (±3) from i=14, 3.5 s: 1 s after.
	if got, before, final, rev := reconvergence(tr, "node1", 2.5); got != 1 || before != 100 || final != 30 || rev != 0 {
		t.Errorf("reconvergence %v (before %v final %v reversals %d), want 1 s, 100, 30, 0", got, before, final, rev)
	}
	// An oscillation after the step: 100 -> 40 -> 70 -> 40 -> 60 -> 50,
	// each leg more than the band (5): four reversals, and it settles only
	// when it stays within ±5 of 50 (from 4.0 s, 1.5 s after the step).
	osc := []FBPoint{}
	for i, w := range []int{100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 40, 70, 40, 60, 50, 52, 50, 49, 50, 50, 51, 50, 50, 50} {
		osc = append(osc, FBPoint{T: float64(i) / 4, Weights: map[string]int{"node1": w}})
	}
	if got, _, _, rev := reconvergence(osc, "node1", 2.5); got != 1 || rev != 4 {
		t.Errorf("oscillation: settled %v with %d reversals, want 1 s and 4", got, rev)
	}
	flat := []FBPoint{}
	for i := 0; i < 20; i++ {
		flat = append(flat, FBPoint{T: float64(i), Weights: map[string]int{"node1": 100}})
	}
	if got, _, _, _ := reconvergence(flat, "node1", 5); got != -2 {
		t.Errorf("no move: %v, want -2", got)
	}
}

// TestRampCapacity: the capacity is the highest throughput of a rate that
// was followed. The ramp used to take the throughput of the first rate not
// followed too (1482/s at 1600 offered with a p99 of 537 ms, on the bed,
// 2026-11-27 21:40), so the loads were fractions of an overload.
func TestRampCapacity(t *testing.T) {
	// Replies follow up to 1200/s; above, 1480/s at most with a long tail.
	measure := func(rate float64) (FBRow, error) {
		row := FBRow{Offered: rate, Throughput: rate, Conns: int(rate * 5), P99: 40}
		if rate > 1200 {
			row.Throughput, row.P99 = math.Min(rate*0.93, 1482), 537
		}
		return row, nil
	}
	c, ramp, err := rampCapacity(measure, false)
	if err != nil {
		t.Fatal(err)
	}
	// 25..800 followed, 1600 not, then 1200 followed, 1400 not.
	if c != 1200 || len(ramp) != 9 {
		t.Errorf("capacity %v after %d steps, want 1200 after 9", c, len(ramp))
	}
	// Sessions of many calls: a session's p99 is all its calls (here 900
	// ms unloaded, 3 s in overload); the bound follows the lightest step.
	// With the one-request bound of 500 ms the ramp measured nothing.
	sessions := func(rate float64) (FBRow, error) {
		row := FBRow{Offered: rate, Throughput: rate, Conns: int(rate / 10), P99: 900}
		if rate > 400 {
			row.Throughput, row.P99 = math.Min(rate*0.9, 500), 3000
		}
		return row, nil
	}
	if c, _, err = rampCapacity(sessions, true); err != nil || c != 400 {
		t.Errorf("sessions: capacity %v (%v), want 400", c, err)
	}
	if c, _, _ = rampCapacity(sessions, false); c != 0 {
		t.Errorf("sessions with the one-request bound: capacity %v, want 0", c)
	}
}

// TestClientPorts: on a network namespace of its own (the client host's
// settings are per namespace), clientPorts widens the ephemeral ports and
// turns on TIME_WAIT reuse: the bench's one-request connections came close
// to running the client out of ports in test 2 (see clientPorts).
func TestClientPorts(t *testing.T) {
	lab.Need(t, lab.Netns)
	const ns = "fb3-ports-test"
	exec.Command("ip", "netns", "del", ns).Run()
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		lab.Need(t, lab.Err("ip netns add", fmt.Errorf("%v: %s", err, out)))
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	wrap := []string{"nsenter", "--net=/run/netns/" + ns, "--"} // as testbed.Bed.Wrap
	read := func(k string) string {
		out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-n", k).Output()
		if err != nil {
			t.Fatalf("sysctl %s: %v", k, err)
		}
		return strings.Join(strings.Fields(string(out)), " ")
	}
	if got := read("net.ipv4.ip_local_port_range"); got == "1024 65535" {
		t.Fatalf("a new namespace already has the range %q: test too weak", got)
	}
	if err := clientPorts(wrap); err != nil {
		t.Fatal(err)
	}
	if got := read("net.ipv4.ip_local_port_range"); got != "1024 65535" {
		t.Errorf("port range %q, want 1024 65535", got)
	}
	if got := read("net.ipv4.tcp_tw_reuse"); got != "1" {
		t.Errorf("tcp_tw_reuse %q, want 1", got)
	}
}

// TestGoalCountsFailures: a row whose requests failed fast (httperf's
// fd-unavail) must not win goal (a) with the p99 of its few answered
// requests; a failure counts as the timeout.
func TestGoalCountsFailures(t *testing.T) {
	r := &FeedbackResult{Rows: []FBRow{
		{Scheduler: "rr", LoadPct: 90, P99: 189.5, Errors: 4035, Conns: 12500},
		{Scheduler: "wlc", LoadPct: 90, P99: 1400, Errors: 0, Conns: 12500},
		{Scheduler: "feedback", LoadPct: 90, P99: 541.5, Errors: 10, Conns: 12500},
	}}
	r.goals()
	if len(r.Goals) == 0 || !strings.HasPrefix(r.Goals[0], "(a)") || !strings.HasSuffix(r.Goals[0], ": met") {
		t.Fatalf("goal (a): %q", r.Goals)
	}
	if !strings.Contains(r.Goals[0], "rr's 2000.0 ms") {
		t.Errorf("rr's p99 should be the timeout: %q", r.Goals[0])
	}
	if got := p99All(FBRow{P99: 50, Errors: 1, Conns: 1000}); got != 50 {
		t.Errorf("0.1 %% failed: p99 %v, want the answered one", got)
	}
}

// TestGoalBound: when lc already answers more than 1/1.3 of the most the
// cluster answered in any run, goal (b) says no scheduler can reach 1.3x
// lc on that run.
func TestGoalBound(t *testing.T) {
	rows := func(lc float64) []FBRow {
		return []FBRow{
			{Scheduler: "rr", LoadPct: 110, Throughput: 400, Conns: 1000},
			{Scheduler: "lc", LoadPct: 110, Throughput: lc, Conns: 1000},
			{Scheduler: "feedback", LoadPct: 110, Throughput: 950, Conns: 1000},
		}
	}
	r := &FeedbackResult{Capacity: 1000, Rows: rows(900)}
	r.goals()
	if !strings.Contains(r.Goals[1], "was 1000/s, 1.11x lc's: 1.3x lc is out of reach") || !strings.Contains(r.Goals[1], "NOT met") {
		t.Errorf("bound: %q", r.Goals[1])
	}
	r = &FeedbackResult{Capacity: 1000, Rows: rows(500)}
	r.goals()
	if strings.Contains(r.Goals[1], "no scheduler") || !strings.HasSuffix(r.Goals[1], ": met") {
		t.Errorf("reachable: %q", r.Goals[1])
	}
}

// TestLoadGen: the open-loop generator against a real server on loopback:
// every session of 3 calls answered; a server slower than the timeout
// fails the sessions; bad settings are refused.
func TestLoadGen(t *testing.T) {
	var slow atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			time.Sleep(300 * time.Millisecond)
		}
		w.Write([]byte("hello"))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	r, err := LoadGen(context.Background(), LoadGenConfig{Addr: addr, Path: "/x", Rate: 300, Calls: 3, Duration: time.Second, Timeout: time.Second})
	if err != nil || r.Conns != 100 || r.Errors != 0 || r.Replies != 300 || r.P99 <= 0 {
		t.Fatalf("%+v %v", r, err)
	}
	slow.Store(true)
	r, err = LoadGen(context.Background(), LoadGenConfig{Addr: addr, Path: "/x", Rate: 20, Calls: 1, Duration: 500 * time.Millisecond, Timeout: 100 * time.Millisecond})
	if err != nil || r.Conns != 10 || r.Errors != 10 || r.Replies != 0 {
		t.Fatalf("slow server: %+v %v", r, err)
	}
	for _, c := range []LoadGenConfig{
		{Addr: addr, Path: "/", Rate: 0, Calls: 1, Duration: time.Second, Timeout: time.Second},
		{Addr: "nowhere", Path: "/", Rate: 1, Calls: 1, Duration: time.Second, Timeout: time.Second},
		{Addr: addr, Path: "/a\r\nX: y", Rate: 1, Calls: 1, Duration: time.Second, Timeout: time.Second},
	} {
		if _, err := LoadGen(context.Background(), c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

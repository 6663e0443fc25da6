package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// LoadGenConfig is one open-loop run of sessions (`corral bench loadgen`,
// run inside the client host): connections open at Rate/Calls a second
// whatever the answers, each sends Calls requests one after the other on
// its own TCP connection, as httperf --num-calls does, without httperf's
// limit of FD_SETSIZE (1024) open sockets.
type LoadGenConfig struct {
	Addr     string        // host:port to connect to
	Path     string        // request path
	Rate     float64       // requests/s
	Calls    int           // requests per connection
	Duration time.Duration // how long connections are opened
	Timeout  time.Duration // per call (connect, write, read), as httperf --timeout
	// MaxOpen bounds the connections open at once; over it a new one
	// fails at once (counted, as httperf's fd-unavail).
	MaxOpen int
}

// LoadGenMaxOpen is the default bound of connections open at once.
const LoadGenMaxOpen = 16384

// LoadGenResult is what a run measured: per connection (its lifetime,
// from its scheduled start, so a generator falling behind shows as
// latency, not as a lower offer).
type LoadGenResult struct {
	Conns   int     `json:"conns"`   // connections scheduled
	Errors  int     `json:"errors"`  // connections with a failed or timed-out call
	Capped  int     `json:"capped"`  // of those, refused by MaxOpen
	Replies int     `json:"replies"` // 200 answers
	Elapsed float64 `json:"elapsed_s"`
	Mean    float64 `json:"mean_ms"`
	P50     float64 `json:"p50_ms"`
	P90     float64 `json:"p90_ms"`
	P99     float64 `json:"p99_ms"`
	Late    float64 `json:"late_ms"` // how far behind schedule the last connection started
}

// LoadGen runs one open-loop session run.
func LoadGen(ctx context.Context, c LoadGenConfig) (LoadGenResult, error) {
	var r LoadGenResult
	if c.Rate <= 0 || c.Calls <= 0 || c.Duration <= 0 || c.Timeout <= 0 {
		return r, fmt.Errorf("loadgen: rate %v calls %d duration %v timeout %v: want all > 0", c.Rate, c.Calls, c.Duration, c.Timeout)
	}
	if _, err := netip.ParseAddrPort(c.Addr); err != nil {
		return r, fmt.Errorf("loadgen: address %q: %v", c.Addr, err)
	}
	if c.Path == "" || c.Path[0] != '/' || strings.ContainsAny(c.Path, " \r\n") {
		return r, fmt.Errorf("loadgen: path %q: want /..., no spaces or line breaks", c.Path)
	}
	if c.MaxOpen <= 0 {
		c.MaxOpen = LoadGenMaxOpen
	}
	raiseNoFile(uint64(c.MaxOpen) + 256)
	crate := c.Rate / float64(c.Calls)
	r.Conns = max(int(crate*c.Duration.Seconds()), 1)
	interval := time.Duration(float64(time.Second) / crate)
	req := []byte("GET " + c.Path + " HTTP/1.1\r\nHost: " + c.Addr + "\r\nUser-Agent: corral-loadgen\r\n\r\n")
	var (
		mu      sync.Mutex
		lat     []float64
		open    atomic.Int64
		wg      sync.WaitGroup
		replies atomic.Int64
	)
	start := time.Now()
	for i := 0; i < r.Conns && ctx.Err() == nil; i++ {
		at := start.Add(time.Duration(i) * interval)
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		} else if i == r.Conns-1 {
			r.Late = float64(-w) / float64(time.Millisecond)
		}
		if open.Load() >= int64(c.MaxOpen) {
			mu.Lock()
			r.Errors++
			r.Capped++
			mu.Unlock()
			continue
		}
		open.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer open.Add(-1)
			n, err := session(ctx, c, req)
			replies.Add(int64(n))
			ms := float64(time.Since(at).Microseconds()) / 1000
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.Errors++
				return
			}
			lat = append(lat, ms)
		}()
	}
	wg.Wait()
	r.Elapsed = time.Since(start).Seconds()
	r.Replies = int(replies.Load())
	slices.Sort(lat)
	sum := 0.0
	for _, x := range lat {
		sum += x
	}
	if len(lat) > 0 {
		r.Mean = sum / float64(len(lat))
	}
	r.P50, r.P90, r.P99 = quantile(lat, 0.5), quantile(lat, 0.9), quantile(lat, 0.99)
	return r, ctx.Err()
}

// session opens one connection and makes c.Calls requests on it, one
// after the other; it returns the 200 answers it got.
func session(ctx context.Context, c LoadGenConfig, req []byte) (int, error) {
	d := net.Dialer{Timeout: c.Timeout}
	conn, err := d.DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	ok := 0
	for i := 0; i < c.Calls; i++ {
		conn.SetDeadline(time.Now().Add(c.Timeout))
		if _, err := conn.Write(req); err != nil {
			return ok, err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return ok, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return ok, err
		}
		if resp.StatusCode != http.StatusOK {
			return ok, fmt.Errorf("status %s", resp.Status)
		}
		ok++
		if resp.Close {
			if i < c.Calls-1 {
				return ok, errors.New("the server closed the connection before the last call")
			}
		}
	}
	return ok, nil
}

// raiseNoFile lifts the soft limit of open files to n (at most the hard
// limit; root may lift that too).
func raiseNoFile(n uint64) {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil || l.Cur >= n {
		return
	}
	if l.Max < n {
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}) == nil {
			return
		}
		n = l.Max
	}
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: l.Max})
}

// loadgenRun runs `bin bench loadgen` inside the client host (wrap) and
// turns its result into a row like httperf's.
func loadgenRun(ctx context.Context, bin string, wrap []string, vip netip.AddrPort, path string, rate float64, calls int, d time.Duration) (FBRow, error) {
	calls = max(calls, 1)
	args := append(append([]string{}, wrap[1:]...), bin, "bench", "loadgen", "--addr", vip.String(), "--path", path,
		"--rate", strconv.FormatFloat(rate, 'f', 2, 64), "--calls", strconv.Itoa(calls), "--duration", d.String(), "--timeout", httperfTimeout.String())
	cctx, cancel := context.WithTimeout(ctx, 3*d+60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, wrap[0], args...).Output()
	if err != nil {
		var ee *exec.ExitError
		msg := ""
		if errors.As(err, &ee) {
			msg = string(ee.Stderr)
		}
		return FBRow{}, fmt.Errorf("bench loadgen: %v: %.500s", err, msg)
	}
	var g LoadGenResult
	if err := json.Unmarshal(out, &g); err != nil {
		return FBRow{}, fmt.Errorf("bench loadgen: %v: %.500s", err, out)
	}
	row := FBRow{Offered: rate, Conns: g.Conns, Errors: g.Errors, Mean: g.Mean, P50: g.P50, P90: g.P90, P99: g.P99}
	if g.Elapsed > 0 {
		row.Throughput = float64(g.Replies) / g.Elapsed
	}
	if g.Capped > 0 {
		row.Note = fmt.Sprintf("%d of them over the generator's %d open connections", g.Capped, LoadGenMaxOpen)
	}
	if g.Late > 1000 {
		row.Note += fmt.Sprintf("; the generator ran %.1f s behind schedule", g.Late/1000)
	}
	return row, nil
}

package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Dialer opens a TCP connection from a client host (testbed.Bed.DialContext).
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// rateBucket is the resolution of the byte-rate series.
const rateBucket = 10 * time.Millisecond

// ByteSeries counts bytes received per 10 ms bucket from its start, for at most
// a fixed span (bounded memory).
type ByteSeries struct {
	start   time.Time
	buckets []atomic.Int64
}

// NewByteSeries makes a series of span from now.
func NewByteSeries(span time.Duration) *ByteSeries {
	return &ByteSeries{start: time.Now(), buckets: make([]atomic.Int64, int(span/rateBucket)+1)}
}

// Add counts n bytes received now.
func (s *ByteSeries) Add(n int) {
	i := int(time.Since(s.start) / rateBucket)
	if i >= 0 && i < len(s.buckets) {
		s.buckets[i].Add(int64(n))
	}
}

func (s *ByteSeries) at(t time.Time) int {
	return int(t.Sub(s.start) / rateBucket)
}

// Rate is the mean bytes per second in [from, to).
func (s *ByteSeries) Rate(from, to time.Time) float64 {
	a, b := max(s.at(from), 0), min(s.at(to), len(s.buckets))
	if b <= a {
		return 0
	}
	var sum int64
	for i := a; i < b; i++ {
		sum += s.buckets[i].Load()
	}
	return float64(sum) / (float64(b-a) * rateBucket.Seconds())
}

// Stall measures an event at t whose takeover came at first: base is the
// rate over the 2 s before t; gap the longest run of 10 ms buckets with no
// byte in [t, first+2s); stalled the bytes not received in that window
// compared with base (net: with direct routing, replies already on their
// way keep arriving after t, and a backlog served after the takeover
// counts against the deficit); recovered how long after t the rate over
// 200 ms was back to 90 % of base, looking from first on.
func (s *ByteSeries) Stall(t, first time.Time) (base float64, gap time.Duration, stalled float64, recovered time.Duration) {
	base = s.Rate(t.Add(-2*time.Second), t)
	end := first.Add(2 * time.Second)
	a, b := max(s.at(t), 0), min(s.at(end), len(s.buckets))
	run, best := 0, 0
	var got int64
	for i := a; i < b; i++ {
		v := s.buckets[i].Load()
		got += v
		if v == 0 {
			run++
			best = max(best, run)
		} else {
			run = 0
		}
	}
	gap = time.Duration(best) * rateBucket
	stalled = max(0, base*end.Sub(t).Seconds()-float64(got))
	per := base * rateBucket.Seconds()
	const win = 20 // 200 ms
	recovered = end.Sub(t)
	for i := max(s.at(first), a) + win; i < min(b+2*win, len(s.buckets)); i++ {
		var sum int64
		for k := i - win; k < i; k++ {
			sum += s.buckets[k].Load()
		}
		if float64(sum) >= 0.9*per*win {
			recovered = time.Duration(i-a) * rateBucket
			break
		}
	}
	return base, gap, stalled, recovered
}

// Fleet is a set of long-lived keep-alive HTTP connections, each
// requesting a byte range of a file in a loop with a pause between
// requests. Each is one TCP connection for its whole life (raw HTTP/1.1 on
// a net.Conn, never redialled), so "it kept transferring after the event"
// means the same connection survived.
type Fleet struct {
	conns  []*fleetConn
	Bytes  *ByteSeries
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type fleetConn struct {
	id     int
	lastOK atomic.Int64 // unix ns a response was last completed
	failed atomic.Int64 // unix ns it failed, 0 while alive
	reqs   atomic.Int64
	mu     sync.Mutex
	err    error
	server string
}

// FleetConfig sizes a fleet.
type FleetConfig struct {
	Dial      Dialer
	Target    string // VIP:port
	Path      string // e.g. /big.bin
	Host      string // Host header
	Conns     int
	Chunk     int           // bytes per request (a Range)
	Interval  time.Duration // pause between a connection's requests
	Timeout   time.Duration // per request
	Span      time.Duration // the fleet ends by itself after this
	OpenEvery time.Duration // pause between opening connections (spreads the SYNs)
	// Pad adds a header of this many bytes to each request: requests that
	// load the director's link (direct routing carries only what clients
	// send through it).
	Pad int
}

// StartFleet opens cfg.Conns connections (each verified with one request)
// and keeps them transferring until Stop or cfg.Span.
func StartFleet(ctx context.Context, cfg FleetConfig) (*Fleet, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Span)
	f := &Fleet{Bytes: NewByteSeries(cfg.Span + time.Second), cancel: cancel}
	// The loops start once every connection is open: a loaded link
	// (active-active at its rate) would otherwise drop the later SYNs.
	gate := make(chan struct{})
	defer close(gate)
	pad := ""
	if cfg.Pad > 0 {
		pad = "X-Pad: " + strings.Repeat("p", cfg.Pad) + "\r\n"
	}
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nRange: bytes=0-%d\r\nUser-Agent: corral-bench-failover\r\n%s\r\n", cfg.Path, cfg.Host, cfg.Chunk-1, pad)
	for i := range cfg.Conns {
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := cfg.Dial(dctx, "tcp", cfg.Target)
		dcancel()
		if err != nil {
			f.Stop()
			return nil, fmt.Errorf("fleet connection %d of %d to %s: %w", i+1, cfg.Conns, cfg.Target, err)
		}
		fc := &fleetConn{id: i}
		br := bufio.NewReaderSize(c, 32<<10)
		// The first request before the next connection: a fleet that
		// cannot start is an error, not a figure.
		if err := f.request(c, br, fc, req, cfg.Timeout); err != nil {
			c.Close()
			f.Stop()
			return nil, fmt.Errorf("fleet connection %d of %d to %s: first request: %w", i+1, cfg.Conns, cfg.Target, err)
		}
		f.conns = append(f.conns, fc)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer c.Close()
			select {
			case <-gate:
			case <-ctx.Done():
				return
			}
			// Bounded by the context (cfg.Span) and a count.
			for k := 0; k < 10_000_000; k++ {
				t := time.NewTimer(cfg.Interval)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				if err := f.request(c, br, fc, req, cfg.Timeout); err != nil {
					if ctx.Err() != nil {
						return // stopped mid-request: not a failure
					}
					fc.mu.Lock()
					fc.err = err
					fc.mu.Unlock()
					fc.failed.Store(time.Now().UnixNano())
					return
				}
			}
		}()
		if cfg.OpenEvery > 0 {
			time.Sleep(cfg.OpenEvery)
		}
	}
	return f, nil
}

func (f *Fleet) request(c net.Conn, br *bufio.Reader, fc *fleetConn, req string, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, req); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	buf := make([]byte, 16<<10)
	for {
		n, err := resp.Body.Read(buf)
		f.Bytes.Add(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			resp.Body.Close()
			return err
		}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	if resp.Close {
		return fmt.Errorf("the server closed the keep-alive connection")
	}
	fc.mu.Lock()
	if s := resp.Header.Get("X-Served-By"); s != "" {
		fc.server = s
	}
	fc.mu.Unlock()
	fc.reqs.Add(1)
	fc.lastOK.Store(time.Now().UnixNano())
	return nil
}

// Stop ends every connection and waits for them.
func (f *Fleet) Stop() {
	f.cancel()
	f.wg.Wait()
}

// Survival is what became of the fleet's connections over an event.
type Survival struct {
	Established int      // alive when the event began
	Survived    int      // of those: alive, with a response completed after settled
	Failed      int      // of those: broke (error, reset, timeout)
	Idle        int      // of those: alive but no response since settled
	Errors      []string // the first few errors
}

// Pct is the share of established connections that survived, in %.
func (s Survival) Pct() float64 {
	if s.Established == 0 {
		return 0
	}
	return 100 * float64(s.Survived) / float64(s.Established)
}

// Survival judges the event at t, the takeover complete at settled: a
// connection survived if it was alive at t, is alive now and completed a
// response after settled.
func (f *Fleet) Survival(t, settled time.Time) Survival {
	var s Survival
	for _, c := range f.conns {
		fail := c.failed.Load()
		if fail != 0 && fail < t.UnixNano() {
			continue
		}
		s.Established++
		switch {
		case fail != 0:
			s.Failed++
			if len(s.Errors) < 5 {
				c.mu.Lock()
				s.Errors = append(s.Errors, fmt.Sprintf("connection %d: %v", c.id, c.err))
				c.mu.Unlock()
			}
		case c.lastOK.Load() > settled.UnixNano():
			s.Survived++
		default:
			s.Idle++
		}
	}
	return s
}

// Servers counts the fleet's connections per real server (X-Served-By).
func (f *Fleet) Servers() map[string]int {
	out := map[string]int{}
	for _, c := range f.conns {
		c.mu.Lock()
		out[c.server]++
		c.mu.Unlock()
	}
	return out
}

// Requests is how many responses the fleet has completed.
func (f *Fleet) Requests() int64 {
	var n int64
	for _, c := range f.conns {
		n += c.reqs.Load()
	}
	return n
}

// Alive is how many connections have not failed.
func (f *Fleet) Alive() int {
	n := 0
	for _, c := range f.conns {
		if c.failed.Load() == 0 {
			n++
		}
	}
	return n
}

// OpenLoop opens new connections at a fixed rate whatever the answers
// (open loop: a slow target does not slow the offered load), one request
// each, and records every attempt.
type OpenLoop struct {
	mu       sync.Mutex
	attempts []attempt
	dropped  int
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	done     chan struct{}
}

type attempt struct {
	start time.Time
	took  time.Duration
	err   error
}

// maxAttempts bounds the record.
const maxAttempts = 1 << 20

// StartOpenLoop offers rate new connections per second to target (path
// with Host) for at most span, each with timeout for the whole exchange.
// At most rate*timeout attempts are in flight; an attempt past that is
// counted as a failure (the generator would otherwise grow without bound).
func StartOpenLoop(ctx context.Context, dial Dialer, target, host, path string, rate int, timeout, span time.Duration) *OpenLoop {
	ctx, cancel := context.WithTimeout(ctx, span)
	o := &OpenLoop{cancel: cancel, done: make(chan struct{})}
	limit := max(1, int(float64(rate)*timeout.Seconds())+1)
	sem := make(chan struct{}, limit)
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nUser-Agent: corral-bench-failover\r\n\r\n", path, host)
	go func() {
		defer close(o.done)
		tick := time.NewTicker(time.Second / time.Duration(max(rate, 1)))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			start := time.Now()
			select {
			case sem <- struct{}{}:
			default:
				o.record(attempt{start: start, err: fmt.Errorf("more than %d attempts in flight", limit)})
				continue
			}
			o.wg.Add(1)
			go func() {
				defer o.wg.Done()
				defer func() { <-sem }()
				err := oneShot(dial, target, req, timeout)
				o.record(attempt{start: start, took: time.Since(start), err: err})
			}()
		}
	}()
	return o
}

func oneShot(dial Dialer, target, req string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := dial(ctx, "tcp", target)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, req); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 16<<20)); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

func (o *OpenLoop) record(a attempt) {
	o.mu.Lock()
	if len(o.attempts) < maxAttempts {
		o.attempts = append(o.attempts, a)
	} else {
		o.dropped++
	}
	o.mu.Unlock()
}

// Stop ends the generator and waits for the attempts in flight.
func (o *OpenLoop) Stop() {
	o.cancel()
	<-o.done
	o.wg.Wait()
}

// NewConns is what became of new connections started in a time span.
type NewConns struct {
	Tried, Failed int
	// Slow are those that succeeded after more than 1 s (a SYN resent).
	Slow   int
	P99ms  float64
	Errors []string
}

// Count reports the attempts started in [from, to).
func (o *OpenLoop) Count(from, to time.Time) NewConns {
	o.mu.Lock()
	defer o.mu.Unlock()
	var n NewConns
	var took []float64
	for _, a := range o.attempts {
		if a.start.Before(from) || !a.start.Before(to) {
			continue
		}
		n.Tried++
		if a.err != nil {
			n.Failed++
			if len(n.Errors) < 5 {
				n.Errors = append(n.Errors, a.err.Error())
			}
			continue
		}
		if a.took > time.Second {
			n.Slow++
		}
		took = append(took, float64(a.took)/1e6)
	}
	if len(took) > 0 {
		sort.Float64s(took)
		n.P99ms = took[min(len(took)-1, len(took)*99/100)]
	}
	return n
}

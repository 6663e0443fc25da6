// Package health runs a real server's health check and applies rise and
// fall: a server leaves its pool after Fall failures in a row and returns
// after Rise successes in a row (keepalived's and HAProxy's rule).
package health

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Check is what to probe and how often. Its fields are config.Check's, in
// the same order, so the director converts one to the other; health does
// not depend on the configuration language.
type Check struct {
	Type      string   // tcp, http, exec or none
	Path      string   // http: request path
	Status    int      // http: expected status
	BodyMatch string   // http: substring the body must contain
	Command   []string // exec: program and arguments; the address is appended
	Interval  time.Duration
	Timeout   time.Duration
	Port      int // if set, probe this port of the server's address
	Rise      int // successes in a row that bring a server back
	Fall      int // failures in a row that take it out
}

// Target is the address a check probes: addr, or its host on c.Port.
func Target(c Check, addr string) string {
	if c.Port == 0 {
		return addr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return net.JoinHostPort(host, strconv.Itoa(c.Port))
}

// Probe performs one check of addr (on c.Port, if set).
func Probe(ctx context.Context, c Check, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	addr = Target(c, addr)
	switch c.Type {
	case "none":
		return nil
	case "tcp":
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	case "http":
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+c.Path, nil)
		if err != nil {
			return err
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode != c.Status {
			return fmt.Errorf("status %d, want %d", resp.StatusCode, c.Status)
		}
		if c.BodyMatch != "" && !strings.Contains(string(body), c.BodyMatch) {
			return fmt.Errorf("body lacks %q", c.BodyMatch)
		}
		return nil
	case "exec":
		args := append(append([]string{}, c.Command[1:]...), addr)
		out, err := exec.CommandContext(ctx, c.Command[0], args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", c.Command[0], err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	return fmt.Errorf("unknown check type %q", c.Type)
}

var probeClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// Clock makes the tickers a Checker waits on; tests drive their own
// instead of sleeping.
type Clock interface {
	NewTicker(d time.Duration) Ticker
}

// Ticker is time.Ticker's interface.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

type realClock struct{}

type realTicker struct{ *time.Ticker }

func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }
func (t realTicker) C() <-chan time.Time           { return t.Ticker.C }

// Checker checks one server at an interval and reports changes of state.
type Checker struct {
	Check Check
	Addr  string
	// OnChange is called with the new state and the last probe's error.
	OnChange func(up bool, err error)
	// Clock paces the probes (nil: real time); Probe performs one (nil:
	// the package's Probe).
	Clock Clock
	Probe func(ctx context.Context, c Check, addr string) error
	// Down starts the server as down, to come up after Rise successes (a
	// server already known to be down whose check is replaced).
	Down bool

	mu      sync.Mutex
	up      bool
	streak  int // successes (>0) or failures (<0) in a row
	lastErr error
	stop    chan struct{}
	done    chan struct{}
}

// Start begins checking; the server counts as up until Fall failures
// (with Down: as down until Rise successes).
func (c *Checker) Start() {
	c.up = !c.Down
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	go c.loop()
}

// Stop ends checking and waits.
func (c *Checker) Stop() {
	close(c.stop)
	<-c.done
}

// State is the current verdict and the last probe's error.
func (c *Checker) State() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up, c.lastErr
}

func (c *Checker) loop() {
	defer close(c.done)
	if c.Check.Type == "none" {
		<-c.stop
		return
	}
	clock, probe := c.Clock, c.Probe
	if clock == nil {
		clock = realClock{}
	}
	if probe == nil {
		probe = Probe
	}
	t := clock.NewTicker(c.Check.Interval)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-c.stop; cancel() }()
	for {
		err := probe(ctx, c.Check, c.Addr)
		if ctx.Err() != nil {
			return
		}
		c.record(err)
		select {
		case <-c.stop:
			return
		case <-t.C():
		}
	}
}

// record applies one probe's outcome.
func (c *Checker) record(err error) {
	c.mu.Lock()
	c.lastErr = err
	if err == nil {
		c.streak = max(c.streak, 0) + 1
	} else {
		c.streak = min(c.streak, 0) - 1
	}
	changed := false
	if c.up && c.streak <= -c.Check.Fall {
		c.up, changed = false, true
	} else if !c.up && c.streak >= c.Check.Rise {
		c.up, changed = true, true
	}
	up := c.up
	c.mu.Unlock()
	if changed && c.OnChange != nil {
		c.OnChange(up, err)
	}
}

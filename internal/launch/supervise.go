package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Backoff is the delay before restarting a role that died: it starts at Min,
// doubles with every death up to Max, and starts over once the role has run
// for Reset (a role that crashes at once is not restarted in a tight loop;
// one that ran well for a while comes back at once).
type Backoff struct {
	Min, Max, Reset time.Duration
	next            time.Duration
}

// DefaultBackoff is what `corral up` uses: 100 ms doubling to 10 s, reset
// after 30 s of good running.
func DefaultBackoff() Backoff {
	return Backoff{Min: 100 * time.Millisecond, Max: 10 * time.Second, Reset: 30 * time.Second}
}

// Next is the delay before the restart of a role that ran for ran before it
// died.
func (b *Backoff) Next(ran time.Duration) time.Duration {
	if b.next == 0 || ran >= b.Reset {
		b.next = b.Min
	}
	d := b.next
	b.next = min(2*b.next, b.Max)
	return d
}

// ExitStatus says how a process that has exited ended: "exit status 2",
// "killed by signal 9 (killed)".
func (p *Proc) ExitStatus() string {
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
		}
		return fmt.Sprintf("exit status %d", ee.ExitCode())
	}
	if p.err != nil {
		return p.err.Error()
	}
	return "exit status 0"
}

// Event is something the supervisor reports: a role died, is restarting,
// is back, or could not be restarted.
type Event struct {
	Role string
	Kind string // "died", "restarted", "failed"
	// Status is how the process ended (died), Delay the wait before the
	// restart (died), Addr where it serves again (restarted), Err why a
	// restart failed (failed: the next try follows with a longer delay).
	Status string
	Delay  time.Duration
	Addr   string
	Err    error
	Log    string
	// Last is what the process that exited by itself (died) wrote
	// about why: lastWords.
	Last string
}

func (e Event) String() string {
	switch e.Kind {
	case "died":
		why := ""
		if e.Last != "" {
			why = ": " + e.Last
		}
		return fmt.Sprintf("%s died (%s%s); restarting in %v; log %s", e.Role, e.Status, why, e.Delay, e.Log)
	case "restarted":
		return fmt.Sprintf("%s is back on %s", e.Role, e.Addr)
	default:
		return fmt.Sprintf("%s: restart failed (%v); trying again in %v", e.Role, e.Err, e.Delay)
	}
}

// slot is one supervised role: where its current process is kept and how
// to start it again (at the address it announced, with the same data).
type slot struct {
	get     func() *Proc
	set     func(*Proc)
	restart func(ctx context.Context, addr string) (*Proc, error)
}

// Supervise keeps every role of the cluster running until ctx ends: a role
// that dies is reported and restarted (same address, same data) after a
// Backoff delay while the others keep serving. When ctx ends it stops
// restarting, waits for any restart under way, and stops the whole cluster;
// it returns once everything has exited. The cluster's Proc fields change
// as roles restart: read them with Procs while Supervise runs.
func (c *Cluster) Supervise(ctx context.Context, backoff Backoff, report func(Event)) {
	var slots []slot
	field := func(p **Proc) (func() *Proc, func(*Proc)) {
		return func() *Proc { c.mu.Lock(); defer c.mu.Unlock(); return *p },
			func(np *Proc) { c.mu.Lock(); defer c.mu.Unlock(); *p = np }
	}
	if c.Station != nil {
		get, set := field(&c.Station)
		slots = append(slots, slot{get, set, func(ctx context.Context, _ string) (*Proc, error) { return c.startStation(ctx) }})
	}
	if len(c.Metas) <= 1 {
		get, set := field(&c.Meta)
		slots = append(slots, slot{get, set, func(ctx context.Context, addr string) (*Proc, error) { return c.StartMeta(ctx, addr) }})
	} else {
		for i := range c.Metas {
			get, _ := field(&c.Metas[i])
			set := func(np *Proc) {
				c.mu.Lock()
				defer c.mu.Unlock()
				c.Metas[i] = np
				if i == 0 {
					c.Meta = np
				}
			}
			slots = append(slots, slot{get, set, func(ctx context.Context, addr string) (*Proc, error) { return c.StartMetaMember(ctx, i, addr) }})
		}
	}
	for i := range c.IODs {
		get, set := field(&c.IODs[i])
		slots = append(slots, slot{get, set, func(ctx context.Context, addr string) (*Proc, error) { return c.StartIOD(ctx, i, addr) }})
	}
	for i := range c.Nodes {
		get, set := field(&c.Nodes[i])
		slots = append(slots, slot{get, set, func(ctx context.Context, addr string) (*Proc, error) { return c.StartNode(ctx, i, addr) }})
	}
	if c.Director != nil {
		get, set := field(&c.Director)
		slots = append(slots, slot{get, set, func(ctx context.Context, _ string) (*Proc, error) { return c.startDirector(ctx) }})
	}
	var wg sync.WaitGroup
	for _, s := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			supervise(ctx, s, backoff, report)
		}()
	}
	<-ctx.Done()
	wg.Wait()
	c.Stop()
}

// supervise watches one role until ctx ends.
func supervise(ctx context.Context, s slot, b Backoff, report func(Event)) {
	p := s.get()
	name, addr := p.Name, p.Addr
	started := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.Done():
		}
		if ctx.Err() != nil {
			return // stopping: not a death to restart from
		}
		d := b.Next(time.Since(started))
		ev := Event{Role: name, Kind: "died", Status: p.ExitStatus(), Delay: d, Log: p.Log}
		if !strings.HasPrefix(ev.Status, "killed") {
			ev.Last = p.lastWords()
		}
		report(ev)
		for {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			np, err := s.restart(ctx, addr)
			if err == nil {
				p, started = np, time.Now()
				s.set(np)
				report(Event{Role: name, Kind: "restarted", Addr: np.Addr, Log: np.Log})
				break
			}
			if ctx.Err() != nil {
				return
			}
			d = b.Next(0)
			report(Event{Role: name, Kind: "failed", Err: err, Delay: d, Log: p.Log})
		}
	}
}

// Procs is every role's current process: the station (managed clusters),
// the metadata members, the iods, the nodes, the director.
func (c *Cluster) Procs() []*Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	metas := []*Proc{c.Meta}
	if len(c.Metas) > 1 {
		metas = c.Metas
	}
	var all []*Proc
	if c.Station != nil {
		all = append(all, c.Station)
	}
	all = append(append(append(all, metas...), c.IODs...), c.Nodes...)
	if c.Director != nil {
		all = append(all, c.Director)
	}
	return all
}

// Proc is the current process of role (meta, iod1, node2, director), or nil.
func (c *Cluster) Proc(role string) *Proc {
	for _, p := range c.Procs() {
		if p != nil && p.Name == role {
			return p
		}
	}
	return nil
}

// lastWords is what p wrote about why it ended: from its own part of the
// log (not an earlier process's of the same role), a Go panic's line, else
// the command's error it exited with, else its last error records (at
// most 2), else its last line other than its readiness line; "" if it
// wrote nothing more.
func (p *Proc) lastWords() string {
	f, err := os.Open(p.Log)
	if err != nil {
		return ""
	}
	defer f.Close()
	const window = 64 << 10 // the end of a long log suffices
	start := p.logStart
	if fi, err := f.Stat(); err == nil && fi.Size()-start > window {
		start = fi.Size() - window
	}
	b, err := io.ReadAll(io.NewSectionReader(f, start, window))
	if err != nil {
		return ""
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && readyAddr(l) == "" {
			lines = append(lines, l)
		}
	}
	clip := func(s string) string {
		if len(s) > 300 {
			return s[:300] + "..."
		}
		return s
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			return clip(l)
		}
	}
	// The command's own error, printed last as it exits ("corral iod:
	// ..."), is why; a log record last is not necessarily.
	if n := len(lines); n > 0 && strings.HasPrefix(lines[n-1], "corral ") {
		return clip(lines[n-1])
	}
	var errs []string
	for _, l := range lines {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=error") {
			errs = append(errs, l)
		}
	}
	if len(errs) > 2 {
		errs = errs[len(errs)-2:]
	}
	if len(errs) > 0 {
		return clip(strings.Join(errs, " | "))
	}
	if len(lines) > 0 {
		return clip(lines[len(lines)-1])
	}
	return ""
}

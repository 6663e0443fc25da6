package agent

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// The saved credential is 0600 whatever lay in the way: a temporary file
// left readable by an earlier crash (or another hand) does not pass its
// mode on to member.json.
func TestSavedCredentialMode(t *testing.T) {
	fast(t)
	f := newFakeStation(t, "127.0.62.61")
	state := t.TempDir()
	p := filepath.Join(state, StateFile)
	if err := os.WriteFile(p+".tmp", []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p+".tmp", 0o644); err != nil { // past the umask
		t.Fatal(err)
	}
	if _, _, err := Join(context.Background(), opts(f, state, f.token("t1", ""), &applier{})); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v, want mode 0600", p, fi.Mode(), err)
	}
	// The write goes through a temporary file of its own (safefile), gone
	// once renamed; the stale one is not reused.
	if m, _ := filepath.Glob(filepath.Join(state, "."+StateFile+".tmp-*")); len(m) > 0 {
		t.Fatalf("temporary files stay: %v", m)
	}
}

// A member restarted while the station is away runs the configuration it
// last applied (kept in State), not nothing: a director would otherwise
// serve no service until the station is back.
func TestRestartStationAway(t *testing.T) {
	fast(t)
	f := newFakeStation(t, "127.0.62.62")
	f.set(3, doc("three"), "web9")
	state := t.TempDir()
	a, _, err := Join(context.Background(), opts(f, state, f.token("t1", ""), &applier{}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, a)
	waitFor(t, "version 3", reported(f, 3, ""))
	stop()
	f.down()

	p := &applier{}
	a2, _, err := Join(context.Background(), opts(f, state, "", p))
	if err != nil {
		t.Fatalf("restart on the saved credential, station away: %v", err)
	}
	run(t, a2)
	waitFor(t, "the kept version 3 applied", func() bool { n, v := p.state(); return n == "three" && v == 3 })
	p.mu.Lock()
	drained := p.drained
	p.mu.Unlock()
	if v, e := a2.Applied(); v != 3 || e != "" || len(drained) != 1 || drained[0] != "web9" {
		t.Fatalf("applied %d %q, drained %v; want 3, no error, [web9]", v, e, drained)
	}
	// The station back with the same version: not applied again.
	f.up()
	waitFor(t, "a report of version 3", reported(f, 3, ""))
	p.mu.Lock()
	calls := p.calls
	p.mu.Unlock()
	if calls != 1 {
		t.Fatalf("%d applies, want 1", calls)
	}
}

// Run leaves no goroutine behind once stopped: its loops end and its
// connections to the station are closed.
func TestRunNoLeak(t *testing.T) {
	fast(t)
	f := newFakeStation(t, "127.0.62.63")
	f.set(1, doc("one"))
	before := runtime.NumGoroutine()
	a, _, err := Join(context.Background(), opts(f, t.TempDir(), f.token("t1", ""), &applier{}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, a)
	waitFor(t, "version 1", reported(f, 1, ""))
	stop()
	waitFor(t, fmt.Sprintf("goroutines back to %d", before), func() bool { return runtime.NumGoroutine() <= before })
}

// Of several stations, one that shows another CA is skipped, not a reason
// to throw away the credential the right one then hands over (a
// single-use token would be spent for nothing).
func TestJoinSkipsForeignStation(t *testing.T) {
	fast(t)
	foreign := newFakeStation(t, "127.0.62.64")
	f := newFakeStation(t, "127.0.62.65")
	o := opts(f, t.TempDir(), f.token("t1", ""), &applier{})
	o.Stations = []string{foreign.url(), f.url()}
	if _, _, err := Join(context.Background(), o); err != nil {
		t.Fatalf("join past a foreign station: %v", err)
	}
	if foreign.joined() != 0 || f.joined() != 1 {
		t.Fatalf("joins: foreign %d, right %d", foreign.joined(), f.joined())
	}
	// The foreign station alone: refused, and said why.
	o = opts(f, t.TempDir(), f.token("t2", ""), &applier{})
	o.Stations = []string{foreign.url()}
	if _, _, err := Join(context.Background(), o); err == nil || !strings.Contains(err.Error(), "does not match the token's hash") {
		t.Fatalf("foreign station alone: %v", err)
	}
}

// A station made anew (another CA) refuses nothing but is not trusted
// with the saved CA: a member restarted with a token from it joins it,
// rather than waiting for the old station for ever.
func TestRejoinNewStation(t *testing.T) {
	fast(t)
	f := newFakeStation(t, "127.0.62.66")
	state := t.TempDir()
	if _, _, err := Join(context.Background(), opts(f, state, f.token("t1", ""), &applier{})); err != nil {
		t.Fatal(err)
	}
	f.down()
	g := newFakeStation(t, "127.0.62.67")
	g.set(1, doc("new"))
	p := &applier{}
	o := opts(g, state, g.token("t2", ""), p)
	a, _, err := Join(context.Background(), o)
	if err != nil {
		t.Fatalf("restart with a token of a new station: %v", err)
	}
	if g.joined() != 1 {
		t.Fatalf("the new station saw %d joins, want 1", g.joined())
	}
	run(t, a)
	waitFor(t, "the new station's version", func() bool { n, v := p.state(); return n == "new" && v == 1 })
	// Both away: the token fails, the saved credential serves.
	g.down()
	if _, _, err := Join(context.Background(), opts(g, state, g.token("t3", ""), &applier{})); err != nil {
		t.Fatalf("restart, stations away, a token: %v", err)
	}
}

// A version refused for a passing cause is tried again while the station
// is away too: here the kept one, at a restart.
func TestKeptRetriedStationAway(t *testing.T) {
	fast(t)
	f := newFakeStation(t, "127.0.62.68")
	f.set(2, doc("two"))
	state := t.TempDir()
	a, _, err := Join(context.Background(), opts(f, state, f.token("t1", ""), &applier{}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, a)
	waitFor(t, "version 2", reported(f, 2, ""))
	stop()
	f.down()
	p := &applier{failFor: 1}
	a2, _, err := Join(context.Background(), opts(f, state, "", p))
	if err != nil {
		t.Fatal(err)
	}
	run(t, a2)
	waitFor(t, "the kept version applied at the second try", func() bool { n, v := p.state(); return n == "two" && v == 2 })
	if v, e := a2.Applied(); v != 2 || e != "" {
		t.Fatalf("applied %d %q", v, e)
	}
}

// A damaged member.json: with a token the member joins again (the join
// replaces it); without one the error says what to do.
func TestDamagedState(t *testing.T) {
	fast(t)
	f := newFakeStation(t, "127.0.62.69")
	state := t.TempDir()
	if err := os.WriteFile(filepath.Join(state, StateFile), nil, 0o600); err != nil { // a crash's empty file
		t.Fatal(err)
	}
	if _, _, err := Join(context.Background(), opts(f, state, "", &applier{})); err == nil || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "--token") {
		t.Fatalf("damaged, no token: %v", err)
	}
	if _, _, err := Join(context.Background(), opts(f, state, f.token("t1", ""), &applier{})); err != nil || f.joined() != 1 {
		t.Fatalf("damaged, a token: %v (joins %d)", err, f.joined())
	}
	if _, _, err := Join(context.Background(), opts(f, state, "", &applier{})); err != nil {
		t.Fatalf("after the join, no token: %v", err)
	}
}

// A credential revoked while the member runs: it keeps running, and the
// log says the station refuses it (not that the station is away).
func TestRevokedWhileRunning(t *testing.T) {
	fast(t)
	f := newFakeStation(t, "127.0.62.70")
	f.set(1, doc("one"))
	var logBuf syncBuffer
	o := opts(f, t.TempDir(), f.token("t1", ""), &applier{})
	o.Log = slog.New(slog.NewTextHandler(&logBuf, nil))
	a, _, err := Join(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	run(t, a)
	waitFor(t, "version 1", reported(f, 1, ""))
	f.revoke()
	waitFor(t, "the refusal logged", func() bool { return strings.Contains(logBuf.String(), "refuses this member's credential") })
	if strings.Contains(logBuf.String(), "not reachable") {
		t.Fatalf("a refused credential logged as a station away:\n%s", logBuf.String())
	}
	if v, _ := a.Applied(); v != 1 {
		t.Fatalf("applied %d after the revocation, want 1", v)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A station that takes the connection and never answers (a hung host)
// costs a call a few seconds, not the whole call: the next station
// serves the join, the polls and the reports.
func TestHungStationSkipped(t *testing.T) {
	fast(t)
	d := dialTimeout
	dialTimeout = 300 * time.Millisecond
	t.Cleanup(func() { dialTimeout = d })
	hung, err := net.Listen("tcp", "127.0.62.71:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		hung.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	f := newFakeStation(t, "127.0.62.72")
	f.set(1, doc("one"))
	p := &applier{}
	o := opts(f, t.TempDir(), f.token("t1", ""), p)
	o.Stations = []string{"https://" + hung.Addr().String(), f.url()}
	a, _, err := Join(context.Background(), o)
	if err != nil {
		t.Fatalf("join past a hung station: %v", err)
	}
	run(t, a)
	waitFor(t, "version 1 applied and reported past the hung station", reported(f, 1, ""))
}

// A saved credential its group or others may read is refused, as ssh
// refuses such a key, with the chmod that fixes it (it was used as is).
func TestSavedCredentialExposed(t *testing.T) {
	fast(t)
	f := newFakeStation(t, "127.0.62.69")
	f.set(1, doc("one"))
	state := t.TempDir()
	if _, _, err := Join(context.Background(), opts(f, state, f.token("t1", ""), &applier{})); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(state, StateFile)
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := Join(context.Background(), opts(f, state, "", &applier{}))
	if err == nil || !strings.Contains(err.Error(), "chmod 600 "+p) {
		t.Fatalf("join with a 0644 saved credential: %v, want a refusal naming chmod 600 %s", err, p)
	}
	if _, err := LoadHAState(state); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("LoadHAState of a 0644 member.json: %v", err)
	}
}

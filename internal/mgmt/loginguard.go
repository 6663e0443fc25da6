package mgmt

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"
)

// Login guard: a password check is a bcrypt compare (tens of
// milliseconds of CPU), so the station bounds how many run at once and
// refuses guesses for a user or from a source that failed too often,
// without a compare, until its backoff ends. The tables are bounded; an
// entry that is locked out is the last to be forgotten, and the
// configuration's users have their own table that junk names never
// touch, so no flood erases a real user's lockout.

const (
	loginUserFree   = 5                // failures for one user name before lockouts start
	loginSourceFree = 20               // failures from one source before lockouts start
	loginLockBase   = time.Second      // the first lockout; each further failure doubles it
	loginLockMax    = 5 * time.Minute  // the longest lockout
	loginFailWindow = 15 * time.Minute // a key with no failure for this long starts afresh
	loginTableMax   = 4096             // entries kept for junk names, and for sources
	loginKeyMax     = 128              // bytes of a user name used as a key
	loginQueue      = 16               // logins that may wait for a check slot
	loginQueueWait  = 2 * time.Second  // how long one waits before 429
	loginPerSource  = 2                // checks one source may have running or waiting
)

// failEntry is one key's failed logins.
type failEntry struct {
	fails int
	last  time.Time // last failure
	until time.Time // refused until then
}

func (e *failEntry) stale(now time.Time) bool {
	return !now.Before(e.until) && now.Sub(e.last) > loginFailWindow
}

// failTable counts failures per key. With max > 0 it keeps at most max
// keys: a new key first evicts a stale one, else the one with the oldest
// failure among those not locked out, else the locked one whose lockout
// ends first.
type failTable struct {
	max  int
	free int // failures before lockouts start
	m    map[string]*failEntry
}

func newFailTable(max, free int) failTable {
	return failTable{max: max, free: free, m: map[string]*failEntry{}}
}

// lockedFor is how long key is still locked out (0: not).
func (t *failTable) lockedFor(key string, now time.Time) time.Duration {
	e := t.m[key]
	if e == nil {
		return 0
	}
	if e.stale(now) {
		delete(t.m, key)
		return 0
	}
	return max(0, e.until.Sub(now))
}

// fail counts a failure of key; lock > 0 when it starts a lockout.
func (t *failTable) fail(key string, now time.Time) (lock time.Duration, fails int) {
	e := t.m[key]
	if e != nil && e.stale(now) {
		e = nil
	}
	if e == nil {
		if t.max > 0 && len(t.m) >= t.max {
			t.evict(now)
		}
		e = &failEntry{}
		t.m[key] = e
	}
	e.fails++
	e.last = now
	if over := e.fails - t.free; over > 0 {
		lock = min(loginLockBase<<min(over-1, 20), loginLockMax)
		e.until = now.Add(lock)
	}
	return lock, e.fails
}

func (t *failTable) reset(key string) { delete(t.m, key) }

// evict forgets one key (see failTable).
func (t *failTable) evict(now time.Time) {
	var open, locked string
	var openLast, lockedUntil time.Time
	for k, e := range t.m {
		if e.stale(now) {
			delete(t.m, k)
			return
		}
		if !now.Before(e.until) {
			if open == "" || e.last.Before(openLast) {
				open, openLast = k, e.last
			}
		} else if locked == "" || e.until.Before(lockedUntil) {
			locked, lockedUntil = k, e.until
		}
	}
	if open != "" {
		delete(t.m, open)
	} else if locked != "" {
		delete(t.m, locked)
	}
}

// loginGuard bounds password checks and keeps the failure tables.
type loginGuard struct {
	slots chan struct{} // one per password check running
	now   func() time.Time

	mu      sync.Mutex
	users   failTable // the configuration's users (bounded by it)
	names   failTable // every other name tried
	sources failTable // client addresses
	tickets int       // logins running or waiting for a slot
	busyKey map[string]bool
	busySrc map[string]int
}

func newLoginGuard() *loginGuard {
	// Half the CPUs at most: the API, etcd and the dashboard keep the rest.
	return &loginGuard{slots: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2)), now: time.Now,
		users: newFailTable(0, loginUserFree), names: newFailTable(loginTableMax, loginUserFree),
		sources: newFailTable(loginTableMax, loginSourceFree), busyKey: map[string]bool{}, busySrc: map[string]int{}}
}

// loginKey is the key of a claimed user name (bounded).
func loginKey(user string) string {
	if len(user) > loginKeyMax {
		return user[:loginKeyMax]
	}
	return user
}

// loginSource is the key of a client address: the IP, or an IPv6
// address's /64 (one host's whole network, usually).
func loginSource(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}

// retryAfter rounds a wait up to whole seconds, at least 1.
func retryAfter(d time.Duration) time.Duration {
	return max(time.Second, (d + time.Second - 1).Truncate(time.Second))
}

// loginTicket is one admitted login: it holds a check slot until release.
type loginTicket struct {
	g        *loginGuard
	key, src string
	released bool // release is idempotent (one goroutine owns a ticket)
}

// admit lets a login for user from src check its password, or refuses
// it with a *tooManyError: the user or the source is locked out, a check
// for that user is already running, the source has loginPerSource
// running, or all slots and the queue are taken (then it waits at most
// loginQueueWait for a slot). reason is "locked" or "busy" for the
// metrics.
func (g *loginGuard) admit(ctx context.Context, user, src string) (tk *loginTicket, reason string, err error) {
	key := loginKey(user)
	g.mu.Lock()
	now := g.now()
	if d := max(g.users.lockedFor(key, now), g.names.lockedFor(key, now)); d > 0 {
		g.mu.Unlock()
		return nil, "locked", &tooManyError{msg: fmt.Sprintf("login: too many failed logins for this user; try again in %v", retryAfter(d)), retry: retryAfter(d)}
	}
	if d := g.sources.lockedFor(src, now); d > 0 {
		g.mu.Unlock()
		return nil, "locked", &tooManyError{msg: fmt.Sprintf("login: too many failed logins from %s; try again in %v", src, retryAfter(d)), retry: retryAfter(d)}
	}
	switch {
	case g.busyKey[key]:
		g.mu.Unlock()
		return nil, "busy", &tooManyError{msg: "login: a password for this user is being checked; one at a time", retry: time.Second}
	case g.busySrc[src] >= loginPerSource:
		g.mu.Unlock()
		return nil, "busy", &tooManyError{msg: fmt.Sprintf("login: %s already has %d logins being checked", src, loginPerSource), retry: time.Second}
	case g.tickets >= cap(g.slots)+loginQueue:
		g.mu.Unlock()
		return nil, "busy", &tooManyError{msg: "login: the station is busy checking passwords", retry: time.Second}
	}
	g.tickets++
	g.busyKey[key] = true
	g.busySrc[src]++
	g.mu.Unlock()
	tk = &loginTicket{g: g, key: key, src: src}
	t := time.NewTimer(loginQueueWait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return tk, "", nil
	case <-t.C:
		tk.leave()
		return nil, "busy", &tooManyError{msg: "login: the station is busy checking passwords", retry: time.Second}
	case <-ctx.Done():
		tk.leave()
		return nil, "", ctx.Err()
	}
}

func (tk *loginTicket) leave() {
	g := tk.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tickets--
	delete(g.busyKey, tk.key)
	if g.busySrc[tk.src]--; g.busySrc[tk.src] <= 0 {
		delete(g.busySrc, tk.src)
	}
}

// release frees the ticket's slot.
func (tk *loginTicket) release() {
	if tk.released {
		return
	}
	tk.released = true
	<-tk.g.slots
	tk.leave()
}

// lockout is a lockout a failure started (for the audit log).
type lockout struct {
	what  string // "user NAME" or "source ADDR"
	fails int
	d     time.Duration
}

// failed counts a failed login (real: the name is a configured user)
// and says which lockouts it started.
func (tk *loginTicket) failed(real bool) []lockout {
	g := tk.g
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	t := &g.names
	if real {
		t = &g.users
	}
	var out []lockout
	if d, n := t.fail(tk.key, now); d > 0 {
		out = append(out, lockout{what: fmt.Sprintf("user %q", tk.key), fails: n, d: d})
	}
	if d, n := g.sources.fail(tk.src, now); d > 0 {
		out = append(out, lockout{what: "source " + tk.src, fails: n, d: d})
	}
	return out
}

// succeeded forgets the user's failures (not the source's: a user of
// their own account must not wipe the count of guesses at others').
func (tk *loginTicket) succeeded() {
	tk.g.mu.Lock()
	defer tk.g.mu.Unlock()
	tk.g.users.reset(tk.key)
}

// sizes is the entries of the tables (tests).
func (g *loginGuard) sizes() (users, names, sources int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.users.m), len(g.names.m), len(g.sources.m)
}

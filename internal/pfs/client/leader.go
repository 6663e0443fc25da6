package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// DefaultTimeout bounds one metadata operation, retries included, when the
// caller's context allows longer: long enough for an election, short
// enough that two members down of three is an error, not a hang.
const DefaultTimeout = 10 * time.Second

// attemptTimeout bounds one try at one member when there are others to
// try: a member that stopped answering (SIGSTOP, partition) costs this,
// not the whole operation. With one member there is nobody else to ask.
const attemptTimeout = 3 * time.Second

// Backoff between rounds in which no member could serve (no quorum, an
// election, members restarting): doubled each round, jittered.
const (
	backoffMin = 10 * time.Millisecond
	backoffMax = 200 * time.Millisecond
)

// SplitMembers parses a comma-separated list of metadata members'
// addresses ("a:7400,b:7401"), dropping blanks and repeats.
func SplitMembers(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// Leader sends metadata requests to whichever member leads, following
// not-leader answers, trying the other members when one is unreachable and
// waiting out elections and lost quorums until the deadline. The library
// Client uses it; so do I/O servers for their registration. It is safe for
// concurrent use.
type Leader struct {
	pool    *proto.Pool
	timeout time.Duration

	mu      sync.Mutex
	members []string // as configured, plus leaders learned from hints
	cur     string   // the member believed to lead
}

// NewLeader returns a Leader of the members in list (comma-separated) that
// calls through pool. timeout bounds one call, retries included (0:
// DefaultTimeout).
func NewLeader(pool *proto.Pool, list string, timeout time.Duration) *Leader {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	l := &Leader{pool: pool, timeout: timeout, members: SplitMembers(list)}
	if len(l.members) > 0 {
		l.cur = l.members[0]
	}
	return l
}

// Members lists the members' addresses, leaders learned at run time
// included.
func (l *Leader) Members() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.members)
}

// count is how many members there are (no copy: it is on every call).
func (l *Leader) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.members)
}

// IsMember reports whether addr is one of the members.
func (l *Leader) IsMember(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.members, addr)
}

// Current is the member believed to lead.
func (l *Leader) Current() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

// follow makes addr the believed leader, adding it to the members when a
// hint names one added at run time.
func (l *Leader) follow(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Contains(l.members, addr) {
		l.members = append(l.members, addr)
	}
	l.cur = addr
}

// skip moves on from failed to the next member, unless another call has
// already moved on (so a burst of failures does not spin past the leader).
func (l *Leader) skip(failed string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != failed || len(l.members) == 0 {
		return
	}
	i := slices.Index(l.members, failed)
	l.cur = l.members[(i+1)%len(l.members)]
}

// retryable reports whether req may be sent again after an attempt whose
// fate is unknown (the connection dropped after sending, or the leader
// lost its quorum while committing): Idem requests apply once however often
// they come, the others are reads or idempotent.
func retryable(req proto.Msg) bool {
	op := req.Op()
	return op == proto.OpIdem || proto.Idempotent(op) || op == proto.OpRefCheck
}

// Call sends req to the leader and returns its answer. An application
// error (ENOENT, EEXIST...) comes back as the member sent it; when no
// member could serve before ctx or the Leader's timeout ends, the error is
// a *NoLeaderError (errno ETIMEDOUT).
//
// The timeout bounds the search for a leader. One attempt at a member is
// capped by attemptTimeout only when there are others to ask; a single
// member is waited for as long as ctx allows (it may legitimately take a
// while, e.g. waiting for I/O servers after its start), as before replication.
func (l *Leader) Call(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	deadline := time.Now().Add(l.timeout)
	var ending error // what ends the search at deadline, if the caller's
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline, ending = d, context.DeadlineExceeded
	}
	last := map[string]error{}
	backoff := backoffMin
	misses := 0 // failed attempts since the last pause
	for {
		addr := l.Current()
		if addr == "" {
			return nil, errors.New("metadata: no member addresses given (--meta or CORRAL_META)")
		}
		actx, acancel := ctx, context.CancelFunc(func() {})
		bound := attemptTimeout // what a silent answer is reported against
		if l.count() > 1 {
			ad := time.Now().Add(attemptTimeout)
			if deadline.Before(ad) {
				ad, bound = deadline, time.Until(deadline).Round(time.Millisecond)
			}
			actx, acancel = context.WithDeadline(ctx, ad)
		}
		m, err := l.pool.Call(actx, addr, req)
		silent := err != nil && actx.Err() != nil && ctx.Err() == nil
		acancel()
		if err == nil {
			return m, nil
		}
		pause := false
		var re *proto.RemoteError
		hint, notLeader := proto.LeaderHint(err)
		switch {
		case notLeader:
			// Nothing was applied: following is always safe.
			last[addr] = err
			if hint != "" && hint != addr {
				l.follow(hint)
			} else {
				l.skip(addr) // an election: ask around, then wait
			}
		case errors.As(err, &re) && re.Errno == proto.ErrnoNoQuorum:
			last[addr] = err
			if !retryable(req) {
				return nil, l.giveUp(last, nil)
			}
			l.skip(addr) // a leader cut off from the others: maybe another leads
			pause = true
		case errors.Is(err, proto.ErrAuth):
			return nil, err // a wrong secret does not heal by waiting
		case ctx.Err() != nil:
			last[addr] = err
			return nil, l.giveUp(last, ctx.Err())
		case errors.Is(err, proto.ErrUnavailable) || silent:
			if silent {
				err = fmt.Errorf("%w: %s did not answer within %v", proto.ErrUnavailable, addr, bound)
			}
			last[addr] = err
			// A request that never left (the member is down) may go to
			// another member whatever it is: membership changes and
			// backups too, or a dead first member would stop them all.
			if !retryable(req) && !proto.NotSent(err) {
				return nil, err
			}
			l.skip(addr)
		default:
			return nil, err // the member's answer
		}
		misses++
		if n := l.count(); misses >= n || pause {
			misses = 0
			d := backoff/2 + mrand.N(backoff/2+1)
			backoff = min(backoff*2, backoffMax)
			t := time.NewTimer(min(d, time.Until(deadline)))
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		if ctx.Err() != nil {
			return nil, l.giveUp(last, ctx.Err())
		}
		if !time.Now().Before(deadline) {
			return nil, l.giveUp(last, ending)
		}
	}
}

// giveUp builds the error of a call no member could serve.
func (l *Leader) giveUp(last map[string]error, cause error) error {
	return &NoLeaderError{Members: l.Members(), Last: last, Cause: cause}
}

// NoLeaderError is a metadata call no member could serve in time: too few
// members up for a quorum, or none reachable. It is errno ETIMEDOUT and
// counts as proto.ErrUnavailable (the service is unavailable), never one
// of the members' own not-leader or no-quorum errnos.
type NoLeaderError struct {
	Members []string
	Last    map[string]error // each member's last answer
	Cause   error            // the caller's context error, if it ended first
}

func (e *NoLeaderError) Error() string {
	// "no quorum" when some member answered (it could not lead or reach a
	// majority), "no member reachable" when none did.
	what := "no member reachable"
	for _, err := range e.Last {
		if !errors.Is(err, proto.ErrUnavailable) {
			what = "no quorum"
		}
	}
	var b strings.Builder
	b.WriteString("metadata: " + what + ": members ")
	b.WriteString(strings.Join(e.Members, ","))
	for i, m := range e.Members {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(m + ": ")
		if err := e.Last[m]; err != nil {
			// The member is named already: not again in its error.
			msg := strings.TrimPrefix(err.Error(), proto.ErrUnavailable.Error()+": ")
			b.WriteString(strings.TrimPrefix(msg, m+": "))
		} else {
			b.WriteString("not tried")
		}
	}
	return b.String()
}

func (e *NoLeaderError) Unwrap() []error {
	errs := []error{syscall.ETIMEDOUT, proto.ErrUnavailable}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

// reqIDs numbers a client's mutating requests (proto.Idem): a random
// client ID, a counter, and the requests still awaiting their reply, whose
// lowest number is Done (the member forgets the replies below it).
type reqIDs struct {
	client uint64

	mu          sync.Mutex
	next        uint64
	outstanding map[uint64]struct{}
}

func newReqIDs() *reqIDs {
	var b [8]byte
	var id uint64
	for id == 0 {
		rand.Read(b[:])
		id = binary.LittleEndian.Uint64(b[:])
	}
	return &reqIDs{client: id, next: 1, outstanding: map[uint64]struct{}{}}
}

// wrap numbers req; done must be called once its reply (or the decision to
// give up on it) is in.
func (r *reqIDs) wrap(req proto.Msg) (m *proto.Idem, done func()) {
	r.mu.Lock()
	seq := r.next
	r.next++
	r.outstanding[seq] = struct{}{}
	low := seq
	for s := range r.outstanding {
		low = min(low, s)
	}
	r.mu.Unlock()
	return &proto.Idem{Client: r.client, Seq: seq, Done: low, Req: req}, func() {
		r.mu.Lock()
		delete(r.outstanding, seq)
		r.mu.Unlock()
	}
}

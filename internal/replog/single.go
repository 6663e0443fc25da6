package replog

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Single is the one-process engine: commands queued while the previous
// batch was being applied go into the next one, so many callers share one
// Apply (one store transaction and fsync). A command is durable when Apply
// returns.
type Single struct {
	sm   StateMachine
	addr string
	in   chan *proposal
	done chan struct{}
	gone chan struct{} // closed when the loop has exited: nothing more applies
	wg   sync.WaitGroup
	mu   sync.Mutex // held while applying: Status reads a stable index
	// halted: Apply failed; nothing applies any more, every proposal and
	// barrier gets this error (a state machine that cannot apply a
	// command must not skip it).
	halted error
}

type proposal struct {
	cmd []byte
	res chan result
	at  time.Time // queued (Raft: for corral_replog_propose_wait_seconds)
}

type result struct {
	out []byte
	err error
}

// maxBatch bounds one group commit.
const maxBatch = 256

// NewSingle starts a one-member engine over sm; addr is reported as the
// member's (and leader's) address.
func NewSingle(sm StateMachine, addr string) *Single {
	s := &Single{sm: sm, addr: addr, in: make(chan *proposal, 1024), done: make(chan struct{}), gone: make(chan struct{})}
	s.wg.Add(1)
	go s.loop()
	return s
}

func (s *Single) loop() {
	defer s.wg.Done()
	defer close(s.gone)
	for {
		var batch []*proposal
		select {
		case p := <-s.in:
			batch = append(batch, p)
		case <-s.done:
			return
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case p := <-s.in:
				batch = append(batch, p)
			default:
				break drain
			}
		}
		cmds := make([][]byte, len(batch))
		for i, p := range batch {
			cmds[i] = p.cmd
		}
		s.mu.Lock()
		err := s.halted
		var outs [][]byte
		if err == nil {
			t := time.Now()
			outs, err = s.sm.Apply(s.sm.Applied()+1, cmds)
			applyTime.Observe(since(t))
			applied.Add(float64(len(cmds)))
			if err != nil {
				s.halted = fmt.Errorf("replicated log halted: %w", err)
			}
		}
		s.mu.Unlock()
		for i, p := range batch {
			if err != nil {
				p.res <- result{err: err}
				continue
			}
			p.res <- result{out: outs[i]}
		}
	}
}

// Propose implements Engine.
func (s *Single) Propose(ctx context.Context, cmd []byte) ([]byte, error) {
	p := &proposal{cmd: cmd, res: make(chan result, 1)}
	select {
	case s.in <- p:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
		return nil, ErrStopped
	}
	// Once queued the command will be applied; wait for its outcome even
	// if the caller gives up, so a reply never precedes durability.
	select {
	case r := <-p.res:
		return r.out, r.err
	case <-s.gone:
		select { // answered just before the loop ended
		case r := <-p.res:
			return r.out, r.err
		default:
			return nil, ErrStopped
		}
	}
}

// ReadBarrier implements Engine: one member always holds every command it
// acknowledged.
func (s *Single) ReadBarrier(ctx context.Context) error {
	s.mu.Lock()
	halted := s.halted
	s.mu.Unlock()
	if halted != nil {
		return halted
	}
	select {
	case <-s.done:
		return ErrStopped
	default:
		return ctx.Err()
	}
}

// Status implements Engine.
func (s *Single) Status() Status {
	s.mu.Lock()
	a := s.sm.Applied()
	s.mu.Unlock()
	return Status{ID: 1, Leader: 1, Term: 1, Commit: a, Applied: a,
		Members: []Member{{ID: 1, Addr: s.addr, Match: a, Active: true}}}
}

// ChangeMember implements Engine: a single-process store has no members
// to change.
func (s *Single) ChangeMember(context.Context, MemberChange) error {
	return errSingle
}

var errSingle = &singleError{}

type singleError struct{}

func (*singleError) Error() string {
	return "this metadata server runs alone (no --peers): membership cannot change; start the members with --peers to replicate"
}

// Close implements Engine. Queued proposals that did not start fail with
// ErrStopped through the caller's select; a batch being applied finishes.
func (s *Single) Close() error {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	s.wg.Wait()
	return nil
}

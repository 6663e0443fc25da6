// Package replog is the replicated log under the metadata server: an Engine
// orders commands and hands them, once durable, to a deterministic
// StateMachine. Two engines: Single (one process, group commit) and the
// Raft engine (go.etcd.io/raft/v3; a command counts once a quorum of
// members has it durably).
//
// The state machine never decides anything: the caller puts every decision
// (time, chosen servers, request ID) into the command, so every member
// applying the same log reaches the same state and the same replies.
package replog

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// StateMachine is the deterministic state a log drives.
type StateMachine interface {
	// Apply applies committed commands in log order; first is the log
	// index of cmds[0]. It returns one result per command and persists the
	// state together with the index of the last command, atomically, so
	// a crash never applies a command twice or loses one it reported.
	// A refused command (EEXIST...) is a result, not an error: an error
	// means the state machine cannot go on (a failing disk).
	Apply(first uint64, cmds [][]byte) ([][]byte, error)
	// Applied is the index of the last command applied (0: none).
	Applied() uint64
	// Snapshot writes a consistent image of the state, Applied included,
	// while Apply may go on.
	Snapshot(w io.Writer) error
	// Restore replaces the state with an image Snapshot wrote.
	Restore(r io.Reader) error
}

// Engine orders and replicates commands.
type Engine interface {
	// Propose appends cmd to the log and returns its result once the
	// command is durable (on a quorum, for Raft) and applied here. On a
	// member that is not the leader it fails with *NotLeaderError at
	// once; without a quorum it fails with ErrNoQuorum, never hangs past
	// ctx.
	Propose(ctx context.Context, cmd []byte) ([]byte, error)
	// ReadBarrier returns once the local state holds every command
	// acknowledged anywhere before the call (Raft's ReadIndex), so a read
	// after it is linearizable. Same errors as Propose.
	ReadBarrier(ctx context.Context) error
	// Status reports this member's view of the group.
	Status() Status
	// ChangeMember adds, removes or replaces a member (leader only).
	ChangeMember(ctx context.Context, c MemberChange) error
	// Close stops the engine; it does not close the state machine.
	Close() error
}

// Status is one member's view of the group.
type Status struct {
	ID      uint64 // this member
	Leader  uint64 // 0: none known
	Term    uint64
	Commit  uint64 // highest index known committed
	Applied uint64 // highest index applied here
	Members []Member
}

// IsLeader reports whether this member leads.
func (s Status) IsLeader() bool { return s.Leader != 0 && s.Leader == s.ID }

// LeaderAddr is the leader's address, "" when none is known.
func (s Status) LeaderAddr() string {
	for _, m := range s.Members {
		if m.ID == s.Leader {
			return m.Addr
		}
	}
	return ""
}

// Member is one member of the group as the reporting member sees it.
type Member struct {
	ID      uint64
	Addr    string // the member's metadata-protocol address
	Learner bool   // catching up, not yet voting
	// Match is the highest log index the leader knows this member holds
	// (leader's view only; 0 elsewhere). Lag = Status.Commit - Match.
	Match uint64
	// Active: the leader heard from it within an election timeout.
	Active bool
}

// MemberChange is one membership change.
type MemberChange struct {
	Op   MemberOp
	ID   uint64
	Addr string // add and replace: the new member's address
}

// MemberOp is what a MemberChange does.
type MemberOp uint8

const (
	AddMember    MemberOp = 1
	RemoveMember MemberOp = 2
)

// ErrNoQuorum: the group cannot commit or confirm leadership because too
// few members answer.
var ErrNoQuorum = errors.New("no quorum: too few metadata members answer to commit or confirm a leader")

// ErrStopped: the engine is closed.
var ErrStopped = errors.New("replicated log stopped")

// NotLeaderError: this member does not lead; Leader/Addr name the one it
// believes does (0/"" when it knows none, e.g. during an election).
type NotLeaderError struct {
	Leader uint64
	Addr   string
}

func (e *NotLeaderError) Error() string {
	if e.Addr == "" {
		return "not the metadata leader (no leader known: election in progress?)"
	}
	return fmt.Sprintf("not the metadata leader; the leader is member %d at %s", e.Leader, e.Addr)
}

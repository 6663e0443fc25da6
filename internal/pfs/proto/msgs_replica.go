package proto

import (
	"strings"
	"syscall"
)

// Replicated metadata (docs/meta.md): errors members answer with, and the
// ops they add. Ops 60-69 and replies 18-19 and 70-79 are reserved here:
//
//	60      Idem (client request IDs)                  msgs_idem.go
//	61-65   members, member change, backup, raft       msgs_members.go
//	66-67   watch (cache invalidation)                  msgs_watch.go
//	18, 70-72  replies of 61-65; 19, 73-74 replies of 66-67

// Errors a metadata member answers with that are not Linux errnos: the
// client acts on them (follows the leader, retries) and never passes them
// to an application.
const (
	// ErrnoNotLeader: this member does not lead. Msg is
	// NotLeaderPrefix followed by the leader's address ("" if unknown).
	ErrnoNotLeader syscall.Errno = 0x10001
	// ErrnoNoQuorum: too few members answer to commit or to confirm the
	// leader; the client retries until its deadline.
	ErrnoNoQuorum syscall.Errno = 0x10002
)

// NotLeaderPrefix starts the message of an ErrnoNotLeader error.
const NotLeaderPrefix = "not the metadata leader; leader: "

// NotLeader is the error a member that does not lead answers with; addr is
// the leader it knows ("" during an election).
func NotLeader(addr string) error {
	return &RemoteError{Errno: ErrnoNotLeader, Msg: NotLeaderPrefix + addr}
}

// LeaderHint reports whether err is a not-leader answer and, if so, the
// leader's address it names ("" when the member knows none).
func LeaderHint(err error) (addr string, ok bool) {
	re, isRemote := err.(*RemoteError)
	if !isRemote || re.Errno != ErrnoNotLeader {
		return "", false
	}
	return strings.TrimPrefix(re.Msg, NotLeaderPrefix), true
}

// newReplica returns an empty message for one of the replication ops, or
// nil. Each file named above adds its ops through its own constructor.
func newReplica(op Op) Msg {
	if m := newIdem(op); m != nil {
		return m
	}
	if m := newMembers(op); m != nil {
		return m
	}
	return newWatch(op)
}

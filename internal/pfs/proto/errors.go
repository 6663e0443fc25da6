package proto

import (
	"errors"
	"io/fs"
	"syscall"
)

// RemoteError is an error reported by a server. It unwraps to its errno, so
// errors.Is(err, fs.ErrNotExist) and errors.Is(err, syscall.ENOTEMPTY) work.
type RemoteError struct {
	Errno syscall.Errno
	Msg   string
}

func (e *RemoteError) Error() string { return e.Msg }
func (e *RemoteError) Unwrap() error { return e.Errno }

// Errorf builds the error a handler returns for errno with a message.
func Errorf(errno syscall.Errno, msg string) error { return &RemoteError{Errno: errno, Msg: msg} }

// ErrorReply turns a handler's error into a wire Error, keeping its errno
// where one can be found (EIO otherwise).
func ErrorReply(err error) *Error {
	var re *RemoteError
	if errors.As(err, &re) {
		return &Error{Errno: uint32(re.Errno), Msg: re.Msg}
	}
	errno := syscall.EIO
	var en syscall.Errno
	switch {
	case errors.As(err, &en):
		errno = en
	case errors.Is(err, fs.ErrNotExist):
		errno = syscall.ENOENT
	case errors.Is(err, fs.ErrExist):
		errno = syscall.EEXIST
	case errors.Is(err, fs.ErrPermission):
		errno = syscall.EACCES
	case errors.Is(err, fs.ErrInvalid):
		errno = syscall.EINVAL
	}
	msg := err.Error()
	if len(msg) > MaxString {
		msg = msg[:MaxString]
	}
	return &Error{Errno: uint32(errno), Msg: msg}
}

// Err converts a wire Error back into a Go error.
func (m *Error) Err() error {
	errno := syscall.Errno(m.Errno)
	if errno == 0 {
		errno = syscall.EIO
	}
	return &RemoteError{Errno: errno, Msg: m.Msg}
}

// ErrnoMissing answers a Read whose object the client says must exist
// (Read.Held) but that the I/O server does not have: removed, or lost with
// a directory entry a crash dropped. Never a hole: the client reads another
// copy, marks this one stale, or fails with EIO.
const ErrnoMissing syscall.Errno = 0x10003

// IsMissing reports whether err is an ErrnoMissing answer.
func IsMissing(err error) bool {
	var re *RemoteError
	return errors.As(err, &re) && re.Errno == ErrnoMissing
}

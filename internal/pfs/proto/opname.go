package proto

import (
	"errors"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// OpName is op's short name ("lookup", "read", "unlink-open"), for logs
// and metric labels: one word, no spaces. A table made once, so naming an
// operation per request costs nothing.
func OpName(op Op) string { return opLabels[op] }

var opLabels [256]string

func init() {
	for i := range opLabels {
		n, ok := moreOpNames[Op(i)]
		if !ok {
			n = opName(Op(i))
		}
		opLabels[i] = strings.ReplaceAll(n, " ", "-")
	}
}

// moreOpNames names the requests opNames leaves out.
var moreOpNames = map[Op]string{OpReplace: "replace", OpRefCheck: "refcheck", OpList: "list-objects", OpIdentify: "identify", OpIdem: "idem",
	OpWatch: "watch", OpUnwatch: "unwatch", OpChanges: "changes",
	OpReplWrite: "repl-write", OpReplReply: "repl-reply", OpScrub: "scrub", OpScrubReply: "scrub-reply", OpHeal: "heal",
	OpHealReply: "heal-reply", OpMarkStale: "mark-stale", OpGetStale: "get-stale", OpStaleReply: "stale", OpLoseServer: "lose-server",
	OpReserve: "reserve", OpReserveR: "reserved"}

// ErrnoOf is the errno a handler's error goes on the wire as (EIO when it
// has none); 0 for nil.
func ErrnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var re *RemoteError
	if errors.As(err, &re) {
		return re.Errno
	}
	return syscall.Errno(ErrorReply(err).Errno)
}

// ResultLabel names the outcome of a request for a metric label: "ok", or
// the errno's name in lower case ("enoent"); a bounded set.
func ResultLabel(err error) string {
	if err == nil {
		return "ok"
	}
	if ErrnoOf(err) == ErrnoMissing {
		return "missing"
	}
	if n := unix.ErrnoName(ErrnoOf(err)); n != "" {
		return strings.ToLower(n)
	}
	return "error"
}

package meta

import (
	"context"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Interim wiring of watch.go, until the state machine calls notify from
// apply and the mutating handlers call awaitInvalidated before replying
// (the merge deletes this file and the call in handleWatch): each mutating
// request is run through Handle again, then the inodes it changed are
// notified under a local counter, and the reply waits for the watchers.
// handlePosix serves its requests before handleWatch sees them, so Mknod,
// UnlinkOpen, orphan renames and xattrs are not notified here (apply will).

type shimKey struct{}

// shimMutation runs a mutating request and notifies what it changed; ok is
// false for other requests (and for the inner run).
func (s *Service) shimMutation(ctx context.Context, req proto.Msg) (proto.Msg, error, bool) {
	if ctx.Value(shimKey{}) != nil {
		return nil, nil, false
	}
	var inos []uint64
	child := func(parent uint64, name string) {
		s.view(func(t tx) error {
			if ino, ok := t.child(parent, name); ok {
				inos = append(inos, ino)
			}
			return nil
		})
	}
	switch m := req.(type) {
	case *proto.SetAttr:
		inos = []uint64{m.Ino}
	case *proto.SetLayout:
		inos = []uint64{m.Ino}
	case *proto.Link:
		inos = []uint64{m.Ino, m.Parent}
	case *proto.Create:
		inos = []uint64{m.Parent}
	case *proto.Mkdir:
		inos = []uint64{m.Parent}
	case *proto.Symlink:
		inos = []uint64{m.Parent}
	case *proto.Unlink:
		inos = []uint64{m.Parent}
		child(m.Parent, m.Name)
	case *proto.Rmdir:
		inos = []uint64{m.Parent}
		child(m.Parent, m.Name)
	case *proto.Rename:
		inos = []uint64{m.OldParent, m.NewParent}
		child(m.OldParent, m.OldName)
		child(m.NewParent, m.NewName)
	default:
		return nil, nil, false
	}
	r, err := s.Handle(context.WithValue(ctx, shimKey{}, true), req)
	if err != nil {
		return r, err, true
	}
	if ar, ok := r.(*proto.AttrReply); ok {
		inos = append(inos, ar.Attr.Ino)
	}
	w := &s.watchState
	w.wmu.Lock()
	w.initWatch()
	index := w.last + 1
	s.notifyLocked(index, inos)
	watched := w.watched
	w.wmu.Unlock()
	// Until a client watches, nothing is cached anywhere and no request
	// pays for the young leader's wait (tests that never cache).
	if watched {
		s.awaitInvalidated(ctx, index)
	}
	return r, nil, true
}

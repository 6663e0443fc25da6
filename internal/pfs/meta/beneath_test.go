package meta

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// TestWalkBeneath: links resolve inside the root, never out of it (EXDEV),
// the last component's included; a linked root is followed.
func TestWalkBeneath(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		mkdir := func(parent uint64, name string) uint64 {
			return call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: parent, Name: name, Mode: 0o755}).Attr.Ino
		}
		link := func(parent uint64, name, target string) {
			call[*proto.AttrReply](t, s, &proto.Symlink{Parent: parent, Name: name, Target: target})
		}
		www := mkdir(RootIno, "www")
		a := mkdir(www, "a")
		sub := mkdir(a, "sub")
		mkdir(www, "b")
		link(a, "abs", "/www/a/sub")
		link(a, "up", "../b")
		link(a, "in", "sub/../sub")
		link(sub, "back", "../sub")
		link(a, "loop", "loop")
		link(www, "alias", "a")
		link(www, "absalias", "/www/a")
		link(www, "aliasalias", "alias")
		link(www, "upalias", "..")
		link(www, "rootalias", "/")
		link(www, "deep", "a/../..")
		link(www, "via", "upalias/www/a")
		walk := func(root, p string) (uint64, error) {
			r, err := s.Handle(t.Context(), &proto.WalkBeneath{Root: root, Path: p})
			if err != nil {
				return 0, err
			}
			return r.(*proto.AttrReply).Attr.Ino, nil
		}
		for _, c := range []struct {
			root, path string
			ino        uint64
			errno      syscall.Errno
		}{
			{"/www/a", "/sub", sub, 0},
			{"/www/a", "/in", sub, 0},
			{"/www/a", "/sub/back/back", sub, 0},
			{"/www/a", "/sub/..", a, 0},
			{"/www/alias", "/sub", sub, 0},
			{"/www/a", "/", a, 0},
			{"/www/absalias", "/sub", sub, 0},
			{"/www/aliasalias", "/sub", sub, 0},
			// A domain that is a link resolves beneath the docroot only.
			{"/www/upalias", "/www/a", 0, syscall.EXDEV},
			{"/www/rootalias", "/www/a", 0, syscall.EXDEV},
			{"/www/deep", "/", 0, syscall.EXDEV},
			{"/www/via", "/", 0, syscall.EXDEV},
			{"/www/a", "/abs", 0, syscall.EXDEV},
			{"/www/a", "/up", 0, syscall.EXDEV},
			{"/www/a", "/..", 0, syscall.EXDEV},
			{"/www/a", "/sub/../../b", 0, syscall.EXDEV},
			{"/www/a", "/loop", 0, syscall.ELOOP},
			{"/www/a", "/nope", 0, syscall.ENOENT},
			{"/www/nope", "/x", 0, syscall.ENOENT},
			{"/www/a", "/" + strings.Repeat("x", 256), 0, syscall.ENAMETOOLONG},
		} {
			ino, err := walk(c.root, c.path)
			var got syscall.Errno
			if err != nil && !errors.As(err, &got) {
				t.Fatalf("%s %s: %v", c.root, c.path, err)
			}
			if got != c.errno || ino != c.ino {
				t.Errorf("%s beneath %s: ino %d err %v, want ino %d err %v", c.path, c.root, ino, err, c.ino, c.errno)
			}
		}
	})
}

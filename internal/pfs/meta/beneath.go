package meta

import (
	"errors"
	"path"
	"strings"
	"syscall"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// walkBeneath serves proto.WalkBeneath: Path resolved inside Root, links
// followed (the last one too) but never out of Root.
func (s *Service) walkBeneath(m *proto.WalkBeneath) (proto.Msg, error) {
	var r proto.Msg
	err := s.view(func(t tx) error {
		n, err := t.walkBeneath(m.Root, m.Path)
		if err == nil {
			r = attrReply(n)
		}
		return err
	})
	return r, err
}

func (t tx) walkBeneath(root, p string) (*inode, error) {
	top, err := t.walk(root)
	if err == nil && top.isLink() {
		// Root itself a link (an alias domain, /www/alias.test -> a.test):
		// it is resolved beneath its own directory (the docroot), never out
		// of it: /www/up.test -> .. or -> / must not serve the whole tree.
		base := path.Dir(path.Clean(root))
		target := top.Target
		if strings.HasPrefix(target, "/") {
			rel, ok := strings.CutPrefix(path.Clean(target), strings.TrimSuffix(base, "/")+"/")
			if !ok {
				return nil, proto.Errorf(syscall.EXDEV, root+": links outside "+base)
			}
			target = rel
		}
		top, err = t.walkBeneathFrom(base, target)
		if errors.Is(err, syscall.EXDEV) {
			return nil, proto.Errorf(syscall.EXDEV, root+": links outside "+base)
		}
	}
	if err != nil {
		return nil, err
	}
	return t.beneath(top, root, p)
}

// walkBeneathFrom resolves p beneath the directory root, whose own links
// (above the point of confinement) are followed as Walk does.
func (t tx) walkBeneathFrom(root, p string) (*inode, error) {
	top, err := t.walk(root)
	for links := 0; err == nil && top.isLink(); links++ {
		if links >= maxSymlinks {
			return nil, proto.Errorf(syscall.ELOOP, root+": too many levels of symbolic links")
		}
		if strings.HasPrefix(top.Target, "/") {
			root = top.Target
		} else {
			root = path.Join(path.Dir(path.Clean(root)), top.Target)
		}
		top, err = t.walk(root)
	}
	if err != nil {
		return nil, err
	}
	return t.beneath(top, root, p)
}

// beneath resolves p inside the directory top (named root in errors),
// links followed, the last one too, but never out of top.
func (t tx) beneath(top *inode, root, p string) (*inode, error) {
	escape := func() error {
		return proto.Errorf(syscall.EXDEV, path.Join(root, p)+": resolves outside "+root)
	}
	if !top.isDir() {
		return nil, proto.Errorf(syscall.ENOTDIR, root+": not a directory")
	}
	// stack holds the directories from the root down to the current one:
	// ".." pops, and popping the root is an escape.
	stack := []*inode{top}
	comps := strings.Split(p, "/")
	links := 0
	for i := 0; i < len(comps); i++ {
		c := comps[i]
		if c == "" || c == "." {
			continue
		}
		if len(c) > maxName {
			return nil, checkName(c)
		}
		cur := stack[len(stack)-1]
		if !cur.isDir() {
			return nil, proto.Errorf(syscall.ENOTDIR, root+p+": not a directory")
		}
		if c == ".." {
			if len(stack) == 1 {
				return nil, escape()
			}
			stack = stack[:len(stack)-1]
			continue
		}
		ino, ok := t.child(cur.Ino, c)
		if !ok {
			return nil, proto.Errorf(syscall.ENOENT, root+p+": no such file or directory")
		}
		n, err := t.inode(ino)
		if err != nil {
			return nil, err
		}
		if n.isLink() {
			if links++; links > maxSymlinks {
				return nil, proto.Errorf(syscall.ELOOP, root+p+": too many levels of symbolic links")
			}
			if strings.HasPrefix(n.Target, "/") {
				return nil, escape()
			}
			comps, i = append(strings.Split(n.Target, "/"), comps[i+1:]...), -1
			continue
		}
		stack = append(stack, n)
	}
	return stack[len(stack)-1], nil
}

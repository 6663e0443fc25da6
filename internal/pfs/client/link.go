package client

import (
	"context"
	"errors"
	"io/fs"
	"syscall"
)

// LinkPath makes p a hard link to the file at target (a final symbolic link
// is linked itself, as ln -P does).
func (c *Client) LinkPath(ctx context.Context, target, p string) error {
	a, err := c.Lstat(ctx, target)
	if err != nil {
		return err
	}
	if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return &fs.PathError{Op: "link", Path: target, Err: errors.New("is a directory: directories cannot be hard-linked")}
	}
	parent, name, err := c.parent(ctx, "link", p)
	if err != nil {
		return err
	}
	_, err = c.Link(ctx, a.Ino, parent, name)
	return pathErr("link", p, err)
}

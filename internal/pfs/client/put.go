package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// putBuf is the size of one write of WriteFile: several stripes, so each
// call feeds every I/O server.
const putBuf = 8 << 20

// WriteFile creates or replaces regular file p with the bytes of r. It
// writes them under a temporary name in p's directory (".NAME.corral-put-N")
// and renames that over p once they are on disk, so p is either the old
// file or the whole new one. On any failure, cancellation included, the
// temporary is removed (the metadata server then reclaims its objects): a
// failed write leaves nothing behind. progress, if not nil, is called with
// the bytes written so far. With o.Excl, an existing p is never replaced,
// also one created while the bytes were being written: the last step fails
// with EEXIST (fs.ErrExist) instead.
func (c *Client) WriteFile(ctx context.Context, p string, r io.Reader, mode uint32, o CreateOpts, progress func(int64)) (err error) {
	q := clean(p)
	base := path.Base(q)
	if len(base) > 200 {
		base = base[:200] // the temporary name must fit 255 bytes too
	}
	tmp := path.Join(path.Dir(q), fmt.Sprintf(".%s.corral-put-%d", base, time.Now().UnixNano()))
	if o.StripeSize == 0 && o.StripeCount == 0 && o.Replicas == 0 {
		// A small file is created with its bytes in one commit.
		head := make([]byte, SmallFileMax+1)
		n, rerr := io.ReadFull(r, head)
		switch {
		case rerr == io.EOF || rerr == io.ErrUnexpectedEOF:
			return c.writeSmall(ctx, p, tmp, head[:n], mode, o, progress)
		case rerr != nil:
			return rerr
		}
		r = io.MultiReader(bytes.NewReader(head), r)
	}
	noReplace := o.Excl
	o.Excl = true
	f, err := c.CreatePath(ctx, tmp, mode, o)
	if err != nil {
		if ctx.Err() != nil {
			// Cancelled while the create was in flight: meta may have
			// made it all the same.
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			c.Remove(cctx, tmp)
			cancel()
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			pe.Path = p // the temporary name means nothing to the caller
		}
		return err
	}
	closed := false
	defer func() {
		if err == nil {
			return
		}
		if !closed {
			f.Close()
		}
		// ctx may be what failed (Ctrl-C): clean up with a fresh one.
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if rerr := c.Remove(cctx, tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = fmt.Errorf("%w (and the partial copy %s could not be removed: %v)", err, tmp, rerr)
		}
	}()
	buf := make([]byte, putBuf)
	var off int64
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			if _, err := f.WriteAt(buf[:n], off); err != nil {
				return &fs.PathError{Op: "write", Path: p, Err: err}
			}
			off += int64(n)
			if progress != nil {
				progress(off)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return rerr
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	closed = true
	if err := f.Close(); err != nil {
		return &fs.PathError{Op: "close", Path: p, Err: err}
	}
	var flags uint32
	if noReplace {
		flags = proto.RenameNoReplace
	}
	dir, tname, err := c.parent(ctx, "rename", tmp)
	if err != nil {
		return err
	}
	return pathErr("rename", p, c.Rename(ctx, dir, tname, dir, path.Base(q), flags))
}

// writeSmall is WriteFile of data, at most SmallFileMax bytes: an exclusive
// one is created under p with its bytes (one commit: p appears whole or not
// at all); a replacing one under the temporary name tmp, renamed over p.
func (c *Client) writeSmall(ctx context.Context, p, tmp string, data []byte, mode uint32, o CreateOpts, progress func(int64)) error {
	dir, name, err := c.parent(ctx, "create", p)
	if err != nil {
		return err
	}
	if o.Excl {
		if _, err := c.CreateFile(ctx, dir, name, mode, data, o); err != nil {
			return pathErr("create", p, err)
		}
	} else {
		tname := path.Base(tmp)
		if _, err := c.CreateFile(ctx, dir, tname, mode, data, o); err != nil {
			if ctx.Err() != nil {
				// Cancelled while the create was in flight: meta may
				// have made it all the same.
				cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				c.Unlink(cctx, dir, tname)
				cancel()
			}
			return pathErr("create", p, err)
		}
		if err := c.Rename(ctx, dir, tname, dir, name, 0); err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if rerr := c.Unlink(cctx, dir, tname); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = fmt.Errorf("%w (and the copy %s could not be removed: %v)", err, tmp, rerr)
			}
			return pathErr("rename", p, err)
		}
	}
	if progress != nil {
		progress(int64(len(data)))
	}
	return nil
}

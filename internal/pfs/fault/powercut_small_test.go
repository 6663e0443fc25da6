package fault

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// smallLayout gives the root directory r copies per file (CreateFile's
// one-commit path takes the directory's policy, not per-file options).
func (c *pcluster) smallLayout(ctx context.Context, cl *client.Client, r int) error {
	_, err := cl.SetLayoutPolicy(ctx, &proto.SetLayout{Ino: 1, Replicas: uint32(r)})
	return err
}

// Small files created in one commit with their bytes written beside it
// (reserved inodes): a cut of everything, of the I/O servers, of meta, of
// one copy's server and of a Raft group loses no acknowledged file.
func TestPowerCutSmallCreates(t *testing.T) {
	for _, r := range []int{1, 2} {
		t.Run(fmt.Sprintf("replicas=%d", r), func(t *testing.T) {
			c := newPCluster(t, 1, 2)
			c.small = true
			c.rounds(r, 4, func(round int) []*pnode {
				switch round % 4 {
				case 0:
					return c.all()
				case 1:
					return c.iods
				case 2:
					return c.metas
				}
				return []*pnode{c.iods[round%2]}
			})
		})
	}
	t.Run("raft", func(t *testing.T) {
		c := newPCluster(t, 3, 2)
		c.small = true
		c.rounds(2, 2, func(round int) []*pnode {
			if round%2 == 1 {
				return c.metas[:1]
			}
			return c.all()
		})
	})
}

// verifyCopies reads every copy of every acknowledged small file straight
// from its server (a read through the library takes one copy, and moves
// to another when one lacks the bytes: a copy that lost them would go
// unseen) and counts the files some copy of which differs. Files with
// stale records are left out: a copy that missed a write is marked so.
func (c *pcluster) verifyCopies() (bad int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := client.New(c.list)
	defer cl.Close()
	servers, err := cl.Servers(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	addr := map[uint32]string{}
	for _, si := range servers {
		addr[si.ID] = si.Addr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, want := range c.files {
		a, err := cl.Stat(ctx, p)
		if err != nil {
			c.t.Fatal(err)
		}
		if a.Stale > 0 {
			continue
		}
		lay := client.AttrLayout(a)
		for k := range lay.Servers {
			n := lay.ObjectSize(k, int64(len(want)))
			if n == 0 {
				continue
			}
			exp := make([]byte, n)
			for off := int64(0); off < int64(len(want)); {
				kk, oo := lay.Locate(off)
				run := min(int64(lay.StripeSize)-off%int64(lay.StripeSize), int64(len(want))-off)
				if kk == k {
					copy(exp[oo:], want[off:off+run])
				}
				off += run
			}
			for _, id := range lay.Column(k) {
				r, err := cl.Pool().Call(ctx, addr[id], &proto.Read{Handle: a.Ino, Index: uint32(k), Len: uint32(n), Held: uint64(n)})
				var got []byte
				if dr, ok := r.(*proto.DataReply); ok {
					got = dr.Data
				}
				if err != nil || !bytes.Equal(got, exp) {
					bad++
					if bad <= 5 {
						c.t.Errorf("acknowledged %s: copy on server %d of column %d: %d bytes (%v), want the %d acknowledged", p, id, k, len(got), err, n)
					}
				}
			}
		}
	}
	return bad
}

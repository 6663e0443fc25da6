package fault

import (
	"context"
	"fmt"
	"testing"

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

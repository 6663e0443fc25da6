package bench

import (
	"context"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/testbed"
)

// bedCluster builds test bed name (removing one an interrupted run left)
// for a cluster of nodes nodes and 3 I/O servers, each host's link shaped to
// rate(host), and starts the cluster on it with the l4 director and wlc.
// The machine itself is the unshaped client. stop tears everything down.
func bedCluster(ctx context.Context, name, bin, data string, nodes int, rate func(host string) string) (*launch.Cluster, *client.Client, func(), error) {
	if err := testbed.CheckRoot(); err != nil {
		return nil, nil, nil, err
	}
	spec := testbed.NewSpec(name, launch.ClusterHosts(nodes, 3), "")
	for i := range spec.Hosts {
		spec.Hosts[i].Rate = rate(spec.Hosts[i].Name)
	}
	testbed.Down(name)
	bed, err := testbed.Up(spec)
	if err != nil {
		return nil, nil, nil, err
	}
	cc := launch.ClusterConfig{Bin: bin, Data: data, Admin: "127.0.0.1:7500", Dataplane: "l4", Scheduler: "wlc"}
	if err := cc.OnTestbed(bed, nodes, 3); err != nil {
		testbed.Down(name)
		return nil, nil, nil, err
	}
	cl, err := launch.StartCluster(ctx, cc)
	if err != nil {
		testbed.Down(name)
		return nil, nil, nil, err
	}
	fsc := client.New(cl.Meta.Addr)
	return cl, fsc, func() { fsc.Close(); cl.Stop(); testbed.Down(name) }, nil
}

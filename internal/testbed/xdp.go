package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"

	"github.com/vishvananda/netns"
)

// Ethtool runs ethtool OP on host h's link (ethtool OP DEV ARGS...): its eth0 inside the host, or with
// rootSide the veth end on the bridge. Direct routing through XDP needs two
// settings the bed leaves off by default: GRO on the director's bridge-side
// end (a veth drops frames XDP_TX sends it unless its peer has GRO or an XDP
// program) and no transmit checksum offload on clients (a frame XDP forwards
// loses its pending checksum). Both cost throughput elsewhere, so only the
// DR set-ups turn them on.
func (b *Bed) Ethtool(h string, rootSide bool, op string, args ...string) error {
	for i, x := range b.Hosts {
		if x.Name != h {
			continue
		}
		if rootSide {
			return run(append([]string{"ethtool", op, b.veth(i)}, args...)...)
		}
		return run(append([]string{"ip", "netns", "exec", b.Netns(h), "ethtool", op, "eth0"}, args...)...)
	}
	_, err := b.Host(h)
	return err
}

// PrepareDR makes the bed carry direct routing through an XDP director.
// Two settings the bed leaves off by default, as they cost throughput
// elsewhere: an XDP program that passes everything on the director's
// bridge-side veth end (a veth silently drops the frames XDP_TX sends it
// unless its peer runs XDP; GRO on the peer did not do it on kernel 6.18),
// and no transmit checksum offload on the clients (a frame XDP forwards
// loses the checksum the sender left for the hardware, and the real server
// drops it). attachPass attaches that program to a device (xdp.AttachPass:
// passed in, so that the lab does not depend on the dataplane it hosts).
func (b *Bed) PrepareDR(attachPass func(dev string) error, director string, clients ...string) error {
	for i, x := range b.Hosts {
		if x.Name == director {
			if err := attachPass(b.veth(i)); err != nil {
				return err
			}
		}
	}
	for _, c := range clients {
		if err := b.Ethtool(c, false, "-K", "tx", "off"); err != nil {
			return err
		}
	}
	return nil
}

// DialContext dials from inside host h (for HTTP clients in tests and
// benchmarks): the socket is made on a thread moved into h's namespace and
// keeps that namespace for its life.
func (b *Bed) DialContext(h string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return inHost(b, h, func() (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		})
	}
}

// inHost runs f on a thread moved into host h's namespace (a socket made
// there keeps the namespace for its life) and moves the thread back.
func inHost[T any](b *Bed, h string, f func() (T, error)) (T, error) {
	v, err := inNetns(b.Netns(h), f)
	if err != nil && errors.Is(err, errNoNetns) {
		err = fmt.Errorf("host %s: %w", h, err)
	}
	return v, err
}

var errNoNetns = errors.New("no such network namespace")

// inNetns runs f on a thread moved into the named namespace.
func inNetns[T any](ns string, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var zero T
		runtime.LockOSThread()
		// The thread is not unlocked if switching back fails: it then dies
		// with the goroutine rather than serve others in h.
		orig, err := netns.Get()
		if err != nil {
			ch <- result{zero, err}
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(ns)
		if err != nil {
			ch <- result{zero, fmt.Errorf("%w: %s: %v", errNoNetns, ns, err)}
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			ch <- result{zero, err}
			return
		}
		v, err := f()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}

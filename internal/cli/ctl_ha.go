package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/ha"
)

// ctlHACmds are `corral ctl ha` and `corral ctl handover`; listing and
// client are ctl's (director.go).
func ctlHACmds(listing func(fetch func(context.Context, director.Client) (any, func() error, error)) func(*cobra.Command, []string) error,
	client func(need bool) (director.Client, error), asJSON *bool) []*cobra.Command {
	haCmd := &cobra.Command{Use: "ha", Short: "High availability: this director's group, its state, the active director and the peers' connection sync",
		Long: `High availability: several directors share a group of VIPs (the 'ha { }' block
of director.conf). In active-standby mode one of them, elected through an etcd
lease on the management station, forwards; its XDP program stops by itself
(the fence) when the lease is not renewed in time, so two directors never
forward for one VIP. The active streams its connection table to the others,
so established connections survive a kill, a fail-back or a handover. In
active-active mode every director forwards and a router spreads flows by
ECMP. See docs/ha.md.

The first lines are this director: group and mode, its state (starting,
syncing, standby, active or fenced), the active director, the lease TTL, how
long it may still forward without a renewal (fence left), the last transition
(how long ago, and why) and how many there were. Then one line per peer:

  STATE     the peer's state as this director sees it
  OUT       this director's stream to the peer: changes sent / acknowledged,
            and the lag (age of the oldest change not yet acknowledged)
  IN        the peer's stream to this director: whether a full table came
            (synced), and the changes applied and skipped (naming a service
            or real server this director does not have)`,
		Example: `  corral ctl ha
  corral ctl ha --json | jq '.peers[] | {name, state, lag}'`,
		Args: cobra.NoArgs,
		RunE: listing(func(cx context.Context, a director.Client) (any, func() error, error) {
			v, err := a.HA(cx)
			return v, func() error { return printHA(os.Stdout, v, time.Now()) }, err
		})}
	var to string
	handover := &cobra.Command{Use: "handover [--to NAME]", Short: "Hand the VIPs from the active director to another, without losing a connection",
		Long: `Hand the VIPs from the active director (the one --admin names) to another
director of its group, for maintenance: the active sends its last changes,
stops forwarding, and passes the election to the target, which announces
the VIPs (gratuitous ARP) and forwards with the same connection table.
Without --to the in-sync director with the highest priority takes over.
Only the active director hands over; the others say which one is. Needs the
admin token. Prints who took over and how long it took. See docs/ha.md.`,
		Example: `  corral ctl handover
  corral ctl --admin 10.0.0.11:7500 handover --to d2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := client(true)
			if err != nil {
				return err
			}
			cx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			res, err := a.Handover(cx, to)
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSONTo(os.Stdout, res)
			}
			printHandover(os.Stdout, res)
			return nil
		}}
	handover.Flags().StringVar(&to, "to", "", "the director to hand over to (default: the in-sync one with the highest priority)")
	return []*cobra.Command{haCmd, handover}
}

// printHandover says who took over and how long it took.
func printHandover(w io.Writer, r director.HandoverResult) {
	if r.To == "" {
		fmt.Fprintf(w, "%s handed over after %s; no new active showed yet (see corral ctl ha)\n", r.From, fmtDur(r.Took))
		return
	}
	fmt.Fprintf(w, "%s took over from %s in %s\n", r.To, r.From, fmtDur(r.Took))
}

// printHA shows the group as this director sees it: itself, then its
// peers in a table.
func printHA(w io.Writer, st ha.Status, now time.Time) error {
	active := st.Active
	if active == "" {
		active = "none"
		if st.Mode == ha.ActiveActive {
			active = "all (active-active)"
		}
	}
	fmt.Fprintf(w, "group:           %s (%s)\n", st.Group, st.Mode)
	fmt.Fprintf(w, "this director:   %s, %s, priority %d\n", st.Name, strings.ToUpper(st.State), st.Priority)
	fmt.Fprintf(w, "active:          %s\n", active)
	fmt.Fprintf(w, "lease TTL:       %s\n", fmtDur(st.LeaseTTL))
	fence := "closed"
	if st.FenceLeft > 0 {
		fence = fmtDur(st.FenceLeft) + " left"
	}
	if st.Mode == ha.ActiveActive {
		fence = "none (active-active)"
	}
	fmt.Fprintf(w, "fence:           %s\n", fence)
	last := "none yet"
	if !st.LastTransition.IsZero() {
		last = fmtDur(now.Sub(st.LastTransition).Round(time.Second)) + " ago"
		if st.LastReason != "" {
			last += " (" + st.LastReason + ")"
		}
	}
	fmt.Fprintf(w, "last transition: %s\n", last)
	fmt.Fprintf(w, "transitions:     %d; sync errors %d, resyncs %d\n", st.Transitions, st.SyncErrors, st.Resyncs)
	if len(st.Peers) == 0 {
		fmt.Fprintln(w, "\npeers:           none (no other director registered in the group)")
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tSTATE\tPRIORITY\tSYNC ADDRESS\tOUT sent/acked\tLAG\tIN synced\tAPPLIED\tSKIPPED")
	for _, p := range st.Peers {
		out, lag := "down", "-"
		if p.OutConnected {
			out, lag = fmt.Sprintf("%d/%d", p.OutSent, p.OutAcked), fmtDur(p.Lag)
		}
		in := "down"
		if p.InConnected {
			in = "no"
			if p.InSynced {
				in = "yes"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\n", p.Name, p.State, p.Priority, p.Sync, out, lag, in, p.InApplied, p.InSkipped)
	}
	return tw.Flush()
}

// fmtDur is a duration as an operator reads it: 3ms, 1.2s, 1m30s.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

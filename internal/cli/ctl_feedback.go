package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/corral-cluster/corral/internal/director"
	"github.com/spf13/cobra"
)

// ctlFeedbackCmd is `corral ctl feedback`: the feedback monitor's latest
// decisions (docs/feedback.md).
func ctlFeedbackCmd(listing func(fetch func(context.Context, director.Client) (any, func() error, error)) func(*cobra.Command, []string) error) *cobra.Command {
	return &cobra.Command{Use: "feedback", Short: "The feedback monitor: per server every load term (paper 003, equations 1-8), the load and the weight it gave",
		Long: `The feedback monitor's latest round, for each service with 'weights feedback':
per real server every term of paper 003's equations 1-8 (in percent: Ethernet
utilisation, swap, load average or CPU busy, disk, their sums), the aggregate
load, the weight the controller gave and the one before, and the reason in
words. Terms come from the latest round that had a fresh load ('terms at'):
snmpd refreshes its counters only every few seconds. A director joined to
a station whose configuration has a feedback section shows the station's
publication ('source station'; STALE once the station is silent and the
weights decay). 404 when neither runs. docs/feedback.md explains the rule.`,
		Example: `  corral ctl feedback
  corral ctl feedback --json | jq '.services[].servers[] | {node, weight, aggregate}'`,
		Args: cobra.NoArgs,
		RunE: listing(func(cx context.Context, a director.Client) (any, func() error, error) {
			v, err := a.Feedback(cx)
			return v, func() error { return printFeedback(os.Stdout, v, time.Now()) }, err
		})}
}

func printFeedback(w io.Writer, st director.FeedbackStatus, now time.Time) error {
	fmt.Fprintf(w, "source %s, every %s\n", st.Source, st.Interval)
	if st.Seq > 0 {
		// A station's publication (corral cfg feedback, or a director it feeds).
		poll := ""
		if st.Poll != "" {
			poll = ", polling " + st.Poll
		}
		fmt.Fprintf(w, "station publication %d at %s (%.1fs ago)%s\n", st.Seq, st.Time.Format("15:04:05.0"), now.Sub(st.Time).Seconds(), poll)
	}
	if st.Stale != "" {
		fmt.Fprintf(w, "STALE: %s\n", st.Stale)
	}
	if len(st.Services) == 0 {
		fmt.Fprintln(w, "no service has 'weights feedback' (or no round has run yet)")
		return nil
	}
	for _, s := range st.Services {
		ago := "never"
		if !s.Polled.IsZero() {
			ago = fmt.Sprintf("%.1fs ago (took %.0f ms)", now.Sub(s.Polled).Seconds(), s.TookSec*1000)
		}
		fmt.Fprintf(w, "\nservice %s: polled %s\n", s.Name, ago)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "server\tweight\twas\tload\teth%\tswap%\tcpu%\tdsk%\tsys%\ttotal%\tmemReal%\tmissed\tterms at")
		for _, n := range s.Nodes {
			cols, at := "-\t-\t-\t-\t-\t-\t-\t-", "-"
			if t := n.Terms; t != nil {
				cpu := t.LaLoad
				if t.CPUFrom == "cpuraw" {
					cpu = t.CPUBusy
				}
				cols = fmt.Sprintf("%.3f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f", n.Aggregate, t.EthernetUtil, t.MemSwapLoad, cpu, t.DskLoad, t.SysUtil, t.TotalLoad, t.MemRealLoad)
				at = n.TermsAt.Format("15:04:05.0")
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\n", n.Node, n.Weight, n.Previous, cols, n.Missed, at)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, n := range s.Nodes {
			fmt.Fprintf(w, "  %s: %s\n", n.Node, n.Reason)
		}
	}
	return nil
}

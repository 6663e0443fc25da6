package cli

import (
	"net/http"
	"os"
	"time"

	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/spf13/cobra"
)

// cfgFeedbackCmd is `corral cfg feedback`: the station's feedback monitor
// (the cluster configuration's feedback section), printed as `corral ctl
// feedback` prints a director's.
func cfgFeedbackCmd(sf *stationFlags) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "feedback [--json]",
		Short: "The station's feedback monitor: per server every load term (paper 003, equations 1-8), the load and the weight it gave",
		Long: `The station's feedback monitor's latest round, for each service with
'weights: feedback' in the current version: per real server every term of
paper 003's equations 1-8, the aggregate load, the weight the controller gave
and the one before, and the reason in words. The directors apply these
weights ('corral ctl feedback' on a director says source station). 404 when
the current version has no feedback section. docs/feedback.md.`,
		Example: "  corral cfg feedback\n  corral cfg feedback --json | jq '.services[].servers[] | {node, weight}'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := sf.client(true)
			if err != nil {
				return err
			}
			ctx, cancel := mgmtCtx()
			defer cancel()
			var st director.FeedbackStatus
			if err := cl.Do(ctx, http.MethodGet, api.RouteFeedback, nil, &st); err != nil {
				return stationError(cmd.CommandPath(), "", 0, err)
			}
			if asJSON {
				return printJSONTo(os.Stdout, st)
			}
			return printFeedback(os.Stdout, st, time.Now())
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the publication as JSON")
	return c
}

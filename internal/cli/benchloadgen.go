package cli

import (
	"encoding/json"
	"os"
	"time"

	"github.com/corral-cluster/corral/internal/bench"
	"github.com/spf13/cobra"
)

// loadgenCmd is bench feedback's open-loop generator (--generator go), run
// inside the client host; it prints its result as JSON.
func loadgenCmd() *cobra.Command {
	var c bench.LoadGenConfig
	cmd := &cobra.Command{Use: "loadgen", Short: "Open-loop HTTP sessions at a rate (bench feedback's generator; JSON on stdout)", Hidden: true, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := bench.LoadGen(cmd.Context(), c)
			if err != nil {
				return err
			}
			return json.NewEncoder(os.Stdout).Encode(r)
		}}
	f := cmd.Flags()
	f.StringVar(&c.Addr, "addr", "", "IP:port to connect to")
	f.StringVar(&c.Path, "path", "/", "request path")
	f.Float64Var(&c.Rate, "rate", 0, "requests per second")
	f.IntVar(&c.Calls, "calls", 1, "requests per connection")
	f.DurationVar(&c.Duration, "duration", 10*time.Second, "how long connections are opened")
	f.DurationVar(&c.Timeout, "timeout", 2*time.Second, "per call (connect, write, read)")
	f.IntVar(&c.MaxOpen, "max-open", bench.LoadGenMaxOpen, "connections open at once at most")
	return cmd
}

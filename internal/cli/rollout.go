package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/clientcfg"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/safefile"
	"github.com/spf13/cobra"
)

// roStation holds the station client flags of rollout and upload (the
// conventions of every station client: --station, --token-file, --ca).
type roStation struct {
	station, tokenFile, ca string
}

func (s *roStation) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.station, "station", clientcfg.Station.Value(), "station API URL(s), comma-separated (env CORRAL_STATION; else the client configuration's station)")
	cmd.Flags().StringVar(&s.tokenFile, "token-file", clientcfg.StationToken.Value(), "file holding your API token (env CORRAL_MGMT_TOKEN_FILE; else ./corral-data/mgmt/admin.token, else the client configuration's station-token-file)")
	cmd.Flags().StringVar(&s.ca, "ca", clientcfg.StationCA.Value(), "the station's CA certificate (env CORRAL_STATION_CA; else ./corral-data/mgmt/tls/ca.pem, else the client configuration's station-ca)")
}

func (s *roStation) client() (*api.Client, error) {
	if s.tokenFile == "" {
		return nil, clientcfg.StationToken.Missing()
	}
	b, err := safefile.ReadSecret(s.tokenFile)
	if err != nil {
		return nil, fmt.Errorf("--token-file: %w", err)
	}
	var stations []string
	for _, u := range strings.Split(s.station, ",") {
		if u = strings.TrimSpace(u); u != "" {
			stations = append(stations, u)
		}
	}
	return api.NewClientCAFile(stations, strings.TrimSpace(string(b)), s.ca)
}

// rolloutCmd is `corral mgmt rollout --binary PATH` (a subcommand of mgmt).
func rolloutCmd() *cobra.Command {
	var (
		st      roStation
		binary  string
		members []string
		check   time.Duration
		drain   time.Duration
		status  bool
	)
	cmd := &cobra.Command{
		Use:   "rollout --binary PATH",
		Short: "replace the corral binary on the members, one at a time, rolling back on a failed check",
		Long: `Rollout uploads a corral binary to the station and has it replace the running
one on the members one at a time: a node is drained first (its connections
finish), the member runs the new binary in place (same process), and it must
report itself healthy on the new build within --check. Then the node is
undrained and the next member goes. A member that fails its check is ordered
back to its old binary and the rollout stops there: the members after it are
not touched.

Default order: nodes, I/O servers, meta followers, the meta leader, directors
last; --members gives your own. Progress goes to standard error, one line per
step. Exit status: 0 done, 1 failed (the member and the reason are printed).
Interrupting only stops following; the station carries on (see --status).`,
		Example: `  corral mgmt rollout --binary ./corral
  corral mgmt rollout --binary ./corral --members node1,node2 --check 1m
  corral mgmt rollout --status`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !status && binary == "" {
				return usageError{errors.New("give --binary PATH (or --status)")}
			}
			c, err := st.client()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if status {
				var ro api.Rollout
				if err := c.Do(ctx, "GET", api.RouteRollout, nil, &ro); err != nil {
					return err
				}
				roPrint(cmd.OutOrStdout(), &ro)
				return nil
			}
			return runRollout(ctx, c, cmd.ErrOrStderr(), binary, members, check, drain)
		},
	}
	st.flags(cmd)
	cmd.Flags().StringVar(&binary, "binary", "", "the new corral binary (this machine's file)")
	cmd.Flags().StringSliceVar(&members, "members", nil, "members to upgrade, in this order (default: every member that is up)")
	cmd.Flags().DurationVar(&check, "check", 30*time.Second, "time a member has to come back healthy on the new build")
	cmd.Flags().DurationVar(&drain, "drain", 10*time.Second, "time a drained node has to finish its connections")
	cmd.Flags().BoolVar(&status, "status", false, "print the running or last rollout and exit")
	return cmd
}

func roPrint(w io.Writer, ro *api.Rollout) {
	fmt.Fprintf(w, "rollout %s of %s: %s", ro.ID, ro.SHA256, ro.State)
	if ro.Error != "" {
		fmt.Fprintf(w, ": %s", ro.Error)
	}
	fmt.Fprintln(w)
	for _, s := range ro.Steps {
		fmt.Fprintf(w, "  %-20s %s", s.Member, s.State)
		if s.Error != "" {
			fmt.Fprintf(w, ": %s", s.Error)
		}
		fmt.Fprintln(w)
	}
}

// runRollout uploads the binary, starts the rollout and follows it.
func runRollout(ctx context.Context, c *api.Client, log io.Writer, binary string, members []string, check, drain time.Duration) error {
	fi, err := os.Stat(binary)
	if err != nil {
		return fmt.Errorf("--binary: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("--binary %s: not an executable file", binary)
	}
	sha, err := api.FileSHA256(binary)
	if err != nil {
		return fmt.Errorf("--binary: %w", err)
	}
	fmt.Fprintf(log, "uploading %s (%d bytes, sha256 %s)\n", binary, fi.Size(), sha[:12])
	if err := c.DoFile(ctx, "PUT", api.RouteBinary+sha, binary, nil); err != nil {
		return fmt.Errorf("uploading the binary: %w", err)
	}
	var ro api.Rollout
	if err := c.Do(ctx, "POST", api.RouteRollout, api.RolloutRequest{SHA256: sha, Members: members, Check: check, Drain: drain}, &ro); err != nil {
		if api.IsConflict(err) {
			return fmt.Errorf("%w (see corral mgmt rollout --status)", err)
		}
		return err
	}
	var names []string
	for _, s := range ro.Steps {
		names = append(names, s.Member)
	}
	fmt.Fprintf(log, "rollout %s started: %s\n", ro.ID, strings.Join(names, ", "))
	seen := map[string]string{}
	// Bounded: each member takes at most its drain and two checks.
	bound := time.Duration(len(ro.Steps))*(drain+2*check+time.Minute) + time.Minute
	end := time.Now().Add(bound)
	for {
		for _, s := range ro.Steps {
			if seen[s.Member] == s.State || s.State == "waiting" {
				continue
			}
			seen[s.Member] = s.State
			line := fmt.Sprintf("%s: %s", s.Member, s.State)
			if s.Error != "" {
				line += ": " + s.Error
			}
			fmt.Fprintln(log, line)
		}
		switch ro.State {
		case "done":
			fmt.Fprintf(log, "rollout %s done: %d members run %s\n", ro.ID, len(ro.Steps), sha[:12])
			return nil
		case "failed":
			fmt.Fprintf(log, "rollout %s failed: %s\n", ro.ID, ro.Error)
			return exitError{1}
		}
		if time.Now().After(end) {
			return fmt.Errorf("rollout %s still %s after %v; see corral mgmt rollout --status", ro.ID, ro.State, bound)
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(log, "stopped following; rollout %s goes on at the station (corral mgmt rollout --status)\n", ro.ID)
			return exitError{1}
		case <-time.After(500 * time.Millisecond):
		}
		var next api.Rollout
		if err := c.Do(ctx, "GET", api.RouteRollout, nil, &next); err != nil {
			if ctx.Err() != nil {
				continue
			}
			fmt.Fprintf(log, "station: %v (retrying)\n", err)
			continue
		}
		if next.ID == ro.ID {
			ro = next
		}
	}
}

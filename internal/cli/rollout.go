package cli

import "github.com/spf13/cobra"

// rolloutCmd is `corral mgmt rollout --binary PATH` (a subcommand of mgmt).
func rolloutCmd() *cobra.Command {
	return &cobra.Command{Use: "rollout", Short: "replace the binary on the members one at a time (not built yet)", Hidden: true}
}

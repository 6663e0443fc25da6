package cli

import "github.com/spf13/cobra"

// uploadCmd is `corral mgmt upload` (a subcommand of mgmt): a webmaster's
// upload into their domain through the station.
func uploadCmd() *cobra.Command {
	return &cobra.Command{Use: "upload", Short: "upload files into your domain through the station (not built yet)", Hidden: true}
}
